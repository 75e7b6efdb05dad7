#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: service_account
short_description: A service's system account - its group, its user and the GPU device groups the node has - in one module run
version_added: 0.1.0
description:
  - Makes O(group) a system group and O(user) a system user in it, with O(shell), O(home) (not created) and, added to
    the groups it is in already, those of O(device_groups) that exist on the node (a node without a C(render) group
    still gets the account).
  - What M(ansible.builtin.group), M(ansible.builtin.getent) and M(ansible.builtin.user) did in three module runs; the
    commands come from C(plugins/module_utils/service_account.py) (C(groupadd), C(useradd), C(usermod)), and none run
    when the account is right.
author:
  - gpulab.inference contributors (@gpulab)
options:
  user:
    description: The account the service runs as.
    type: str
    required: true
  group:
    description: Its primary group.
    type: str
    required: true
  device_groups:
    description: Groups of the GPU device nodes to join where they exist (C(video), C(render)).
    type: list
    elements: str
    default: []
  home:
    description: The account's home directory, not created.
    type: path
    default: /nonexistent
  shell:
    description: Its login shell.
    type: path
    default: /usr/sbin/nologin
attributes:
  check_mode:
    support: full
    description: Reports the commands it would run and runs none.
  diff_mode:
    support: none
    description: The commands are returned instead.
"""

EXAMPLES = r"""
- name: Create the RPC servers' account
  gpulab.inference.service_account:
    user: gpulab-rpc
    group: gpulab-rpc
    device_groups: [video, render]
"""

RETURN = r"""
commands:
  description: The commands run (in check mode, that would run), in order; empty when the account was right.
  returned: success
  type: list
  elements: list
  sample: [[groupadd, --system, gpulab-rpc], [useradd, --system, --gid, gpulab-rpc, --shell, /usr/sbin/nologin,
            --home-dir, /nonexistent, --no-create-home, --groups, "video,render", gpulab-rpc]]
device_groups:
  description: The device groups of O(device_groups) the node has, which the user is (or would be) in.
  returned: success
  type: list
  elements: str
  sample: [video, render]
"""

import grp
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.service_account import (
    ServiceAccountError, account_commands)
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError, device_groups)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            user=dict(type='str', required=True),
            group=dict(type='str', required=True),
            device_groups=dict(type='list', elements='str', default=[]),
            home=dict(type='path', default='/nonexistent'),
            shell=dict(type='path', default='/usr/sbin/nologin'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    groups = grp.getgrall()
    names = set(group.gr_name for group in groups)
    try:
        joined = device_groups(params['device_groups'], names)
    except ServiceManagerError as error:
        module.fail_json(msg='service_account: %s' % error)
    try:
        entry = pwd.getpwnam(params['user'])
    except KeyError:
        entry = None
    current = None
    if entry is not None:
        primary = [group.gr_name for group in groups if group.gr_gid == entry.pw_gid]
        current = {'group': primary[0] if primary else None, 'home': entry.pw_dir, 'shell': entry.pw_shell}
    member_of = set(group.gr_name for group in groups if params['user'] in group.gr_mem)
    try:
        commands = account_commands(params['user'], params['group'], joined, params['home'], params['shell'],
                                    params['group'] in names, current, member_of)
    except ServiceAccountError as error:
        module.fail_json(msg='service_account: %s' % error)
    if not module.check_mode:
        for command in commands:
            rc, out, err = module.run_command([module.get_bin_path(command[0], required=True)] + command[1:])
            if rc != 0:
                module.fail_json(msg='service_account: %s failed: %s' % (' '.join(command), (err or out).strip()),
                                 rc=rc, commands=commands)
    module.exit_json(changed=bool(commands), commands=commands, device_groups=joined)


if __name__ == '__main__':
    main()
