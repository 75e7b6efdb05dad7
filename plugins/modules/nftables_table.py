#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nftables_table
short_description: Keep a table's rule file included in the nftables service's rule file, and say whether it is loaded
version_added: 0.4.0
description:
  - Asks C(nft list table) whether O(table) is loaded (someone may have flushed the ruleset), and returns where C(nft)
    is, or that there is none.
  - With O(include_in), adds C(include "O(rules_file)") at the end of that file when no line of it is that line yet,
    checked with C(nft --check -f) before it replaces the file atomically. C(nftables.service) flushes the whole
    ruleset on restart and reload and then loads that file, so with the include the table comes back in the same
    transaction. A O(include_in) that does not exist is left alone (no nftables service on the node).
  - Never loads the table itself; the caller loads it (its unit, or C(nft -f)).
  - The rules are in C(plugins/module_utils/nftables.py).
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Asks nft in check mode too, and says whether the include would be added without writing it.
  diff_mode:
    support: none
    description: No diff is returned.
options:
  table:
    description: The table's name.
    type: str
    required: true
  family:
    description: The table's family.
    type: str
    default: inet
  rules_file:
    description: The table's own rule file, the one O(include_in) includes.
    type: path
    required: true
  include_in:
    description: The nftables service's rule file; empty adds no include.
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Include the RPC rule set in /etc/nftables.conf and see whether its table is loaded
  gpulab.inference.nftables_table:
    table: gpulab_rpc
    rules_file: /etc/nftables.d/gpulab-rpc.nft
    include_in: /etc/nftables.conf
  register: rpc_table

- name: Load the rule set again when the table is missing
  ansible.builtin.systemd_service:
    name: gpulab-rpc-server-firewall.service
    state: reloaded
  when: not rpc_table.loaded
"""

RETURN = r"""
nft:
  description: The path of C(nft), or V(null) where it is not installed (then nothing else was done).
  returned: always
  type: str
  sample: /usr/sbin/nft
loaded:
  description: Whether O(table) is loaded, before anything the caller does next.
  returned: always
  type: bool
included:
  description: Whether O(include_in) includes O(rules_file) now (in check mode, would).
  returned: always
  type: bool
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import remove_quietly, write_temp
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.nftables import (
    NftablesError,
    include_line,
    list_table_argv,
    with_include,
)


def add_include(module, runner, nft, path, line):
    """(included, changed) after adding line to path where it is missing, checked by nft first."""
    if not os.path.isfile(path):
        return False, False
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    new_text = with_include(text, line)
    if new_text is None:
        return True, False
    if module.check_mode:
        return True, True
    temp = write_temp(path, new_text.encode("utf-8"), mode=stat.S_IMODE(os.stat(path).st_mode))
    try:
        rc, out, err = runner.run([nft, "--check", "-f", temp])
        if rc != 0:
            module.fail_json(msg="%s with %s added does not pass `nft --check -f` (rc %d): %s; fix that file"
                             % (path, line, rc, (err or out).strip()))
        module.atomic_move(temp, path)
    finally:
        remove_quietly(temp)
    return True, True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            table=dict(type="str", required=True),
            family=dict(type="str", default="inet"),
            rules_file=dict(type="path", required=True),
            include_in=dict(type="path", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    nft = module.get_bin_path("nft")
    if not nft:
        module.exit_json(changed=False, nft=None, loaded=False, included=False)
    runner = BoundedRunner(module)
    try:
        argv = list_table_argv(nft, params["family"], params["table"])
        line = include_line(params["rules_file"])
    except NftablesError as exc:
        module.fail_json(msg=str(exc))
    try:
        included, changed = add_include(module, runner, nft, params["include_in"], line) \
            if params["include_in"] else (False, False)
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s cannot be updated: %s" % (params["include_in"], exc))
    rc, unused_out, unused_err = runner.run(argv)
    module.exit_json(changed=changed, nft=nft, loaded=rc == 0, included=included)


if __name__ == "__main__":
    main()
