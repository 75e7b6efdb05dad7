# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: drain_rescue_message
short_description: The message a failed deployment ends with after restoring the drained nodes
version_added: 0.1.0
description:
  - Reads the registered result of the rescue's restore task (a loop over the deployment's nodes)
    and says what failed, which nodes could not be reached and stay drained, which restores
    failed, and which nodes were restored.
  - The rules live in C(plugins/module_utils/drain_rescue.py); role C(gpu_drain)'s C(rescue)
    tasks use this filter.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The restore task's registered result.
    type: dict
    required: true
  loop_var:
    description: The loop variable that names the node in each result.
    type: str
    required: true
  failed_task:
    description: The name of the step that failed on this host, when it failed here.
    type: str
  failed_message:
    description: That step's error message.
    type: str
  restore_on_failure:
    description: Whether the restore ran (C(gpu_drain_restore_on_failure)).
    type: bool
    default: true
  state_file:
    description: The drain's state file, named in the console steps of a node that cannot be reached.
    type: str
    default: /var/lib/gpulab/drain-state.json
  rpc_table:
    description: The RPC firewall's nftables table, named in those steps; empty where there is none.
    type: str
    default: gpulab_rpc
"""

EXAMPLES = r"""
- name: Fail with the error of the step that failed and the nodes not restored
  ansible.builtin.fail:
    msg: "{{ __gpu_drain_rescue | gpulab.inference.drain_rescue_message('__gpu_drain_node', ansible_failed_task.name | default('')) }}"
"""

RETURN = r"""
_value:
  description: One paragraph, each node named.
  type: str
  sample: >-
    The deployment stopped: node-c stopped answering. node-c could not be reached (SSH): its drained services stay
    stopped until it answers. From node-c's console, as root: check that sshd runs; `nft delete table inet
    gpulab_rpc` removes the RPC firewall (deploy.yml loads it again); the services the drain stopped are listed in
    /var/lib/gpulab/drain-state.json. Once node-c answers, run deploy.yml again, or `ansible-playbook
    playbooks/restore.yml -l node-c` to end the deployment. The drained services were restored on node-a, node-b.
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpulab.inference.plugins.module_utils.drain_rescue import (
    RescueError,
    rescue_message,
)


def drain_rescue_message(register, loop_var, failed_task=None, failed_message=None, restore_on_failure=True,
                         state_file="/var/lib/gpulab/drain-state.json", rpc_table="gpulab_rpc"):
    try:
        return rescue_message(register, loop_var, failed_task or None, failed_message,
                              boolean(restore_on_failure, strict=False), state_file, rpc_table)
    except RescueError as exc:
        raise AnsibleFilterError("gpulab.inference.drain_rescue_message: %s" % exc)


class FilterModule:
    """Messages of the deployment's rescue."""

    def filters(self):
        return {"drain_rescue_message": drain_rescue_message}
