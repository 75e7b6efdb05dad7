#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_fabric_check
short_description: Check one node's side of the RoCE fabric
version_added: 0.2.0
description:
  - Pings every peer's fabric address with full-MTU packets and Don't Fragment set
    (C(ping -M do -s MTU-28)), so a hop with a smaller MTU shows up as a failure instead of as slow
    RDMA later.
  - With O(check_rdma), reads the RDMA devices from sysfs (as C(gpulab.inference.roce_facts)) and
    checks that the fabric interface has a RoCE v2 GID with an IPv4 address on an ACTIVE port, and
    that the RDMA MTU is 4096.
  - Does not fail by itself; returns C(problems), each naming the host, the peer or device, and
    what to fix, for the playbook to report all nodes at once.
  - Reads only; never changes the host.
author:
  - gpulab.inference contributors (@gpulab)
options:
  host:
    description: This node's inventory name, used in the messages.
    type: str
    required: true
  interface:
    description: The fabric interface.
    type: str
    required: true
  address:
    description: This node's fabric address (picks its GID).
    type: str
  mtu:
    description: The fabric MTU the pings must get through with.
    type: int
    required: true
  peers:
    description: The other nodes' fabric addresses, by inventory name.
    type: dict
    default: {}
  check_rdma:
    description: Check the RDMA port and GID too (off for a fabric without RDMA devices, like the container lab).
    type: bool
    default: true
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
extends_documentation_fragment:
  - gpulab.inference.read_only
seealso:
  - module: gpulab.inference.roce_facts
"""

EXAMPLES = r"""
- name: Check this node's side of the fabric
  gpulab.inference.roce_fabric_check:
    host: "{{ inventory_hostname }}"
    interface: ens1f0np0
    address: 10.231.77.10
    mtu: 9000
    peers:
      node-b: 10.231.77.11
  register: fabric_check
"""

RETURN = r"""
problems:
  description: What failed, one message each, naming the host, the peer or device and the fix; empty when all passed.
  returned: success
  type: list
  elements: str
  sample: []
pings:
  description: One entry per peer with C(peer), C(address), C(rc) and C(ok).
  returned: success
  type: list
  elements: dict
rdma:
  description: The fabric interface's RDMA facts (C(gpulab_roce_fabric) of C(gpulab.inference.roce_facts)); V(null) without O(check_rdma).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner

from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    RoceError,
    fabric_facts,
    ping_command,
    ping_mtu_problem,
    ping_verdict,
    rdma_problems,
    read_devices,
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            host=dict(type='str', required=True),
            interface=dict(type='str', required=True),
            address=dict(type='str'),
            mtu=dict(type='int', required=True),
            peers=dict(type='dict', default={}),
            check_rdma=dict(type='bool', default=True),
            sysfs_root=dict(type='path', default='/sys'),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    params = module.params
    ping = module.get_bin_path('ping')
    if ping is None:
        module.fail_json(msg='%s: ping not found; install iputils-ping (the roce role installs it with '
                             'roce_packages)' % params['host'])
    problem = ping_mtu_problem(params['mtu'])
    if problem:
        module.fail_json(msg='%s: %s' % (params['host'], problem))
    problems = []
    pings = []
    for peer, address in sorted(params['peers'].items()):
        try:
            command = ping_command(address, params['mtu'])
        except ValueError:
            module.fail_json(msg='peer %s has fabric address %r, not an IPv4 address' % (peer, address))
        command[0] = ping
        # ping ends by itself (-c, -W); the limit is for a ping that does not
        rc, stdout, stderr = BoundedRunner(module).run(command)
        verdict = ping_verdict(params['host'], peer, address, params['mtu'], rc, stdout + '\n' + stderr)
        pings.append({'peer': peer, 'address': address, 'rc': rc, 'ok': not verdict})
        if verdict:
            problems.append(verdict)
    rdma = None
    if params['check_rdma']:
        try:
            rdma = fabric_facts(read_devices(params['sysfs_root']), params['interface'], params['address'])
        except RoceError as exc:
            module.fail_json(msg='%s (under %s)' % (exc, params['sysfs_root']))
        problems.extend(rdma_problems(params['host'], rdma))
    module.exit_json(changed=False, problems=problems, pings=pings, rdma=rdma)


if __name__ == '__main__':
    main()
