# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: drain_restore_report
short_description: What playbooks/restore.yml restored on each node, and what it could not
version_added: 0.3.0
description:
  - From each node's restore result (role C(gpu_drain)'s entry point C(restore), as playbooks/restore.yml records
    it in C(restore_node_result), and C(restore_node_error) when it failed), one line per node - the collection's
    services stopped and the drained services started again, or why the node was not restored (it did not answer,
    the restore failed, it never ran) - and the list of the nodes not restored.
  - The rule lives in C(plugins/module_utils/gpu_drain.py) (C(restore_report)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The nodes, in inventory order.
    type: list
    elements: str
    required: true
  node_vars:
    description: Each node's variables (C(hostvars)), holding C(restore_node_result) and C(restore_node_error).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say per node what was restored
  ansible.builtin.debug:
    msg: "{{ (groups['gpu_nodes'] | gpulab.inference.drain_restore_report(hostvars)).lines }}"
"""

RETURN = r"""
_value:
  description: C(lines), one per node, and C(not_restored), the nodes that were not restored.
  type: dict
  sample: {lines: ["node-a: stopped gpulab-llama-server.service; started again systemd:gpu-embed.service"], not_restored: []}
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.gpu_drain import restore_report


def drain_restore_report(nodes, node_vars):
    if not isinstance(nodes, (list, tuple)) or not isinstance(node_vars, Mapping):
        raise AnsibleFilterError("gpulab.inference.drain_restore_report: give a list of nodes and hostvars")
    found = []
    for node in nodes:
        own = node_vars.get(node) or {}
        found.append((node, own.get("restore_node_result"), own.get("restore_node_error")))
    return restore_report(found)


class FilterModule:
    """restore.yml's per-node summary."""

    def filters(self):
        return {"drain_restore_report": drain_restore_report}
