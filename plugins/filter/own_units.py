# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: own_units
short_description: The collection's own units or supervisord programs among a node's
version_added: 0.3.0
description:
  - Keeps the systemd units (or supervisord programs) of O(_input) that the shell patterns O(patterns)
    match (role C(common)'s C(gpulab_own_units)), ordered by the first pattern each matches, so a list
    that names the head first stops the head first.
  - A program matches as the unit it stands for (C(gpulab-rpc-server-0) as C(gpulab-rpc-server@0.service)),
    the rule of role C(service) (C(plugins/module_utils/service_manager.py)) that the drain uses too.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: Unit names (with C(.service)) or program names.
    type: list
    elements: str
    required: true
  patterns:
    description: Shell patterns (C(fnmatch), case-sensitive).
    type: list
    elements: str
    required: true
  kind:
    description: Whether O(_input) holds systemd units or supervisord programs.
    type: str
    choices: [systemd, supervisor]
    default: systemd
"""

EXAMPLES = r"""
- name: Stop the llama.cpp engine's units on this node, the head first
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: stopped
  loop: "{{ ansible_facts.services | list | gpulab.inference.own_units(gpulab_own_units.llama_cpp) }}"
"""

RETURN = r"""
_value:
  description: The matching names, in the patterns' order.
  type: list
  elements: str
  sample: [gpulab-llama-server.service, gpulab-rpc-server@0.service]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import programs_matching, units_matching


def own_units(names, patterns, kind="systemd"):
    for what, value in (("input", names), ("patterns", patterns)):
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise AnsibleFilterError("gpulab.inference.own_units: the %s must be a list of names, got %r" % (what, value))
    if kind == "systemd":
        return units_matching(list(names), list(patterns))
    if kind == "supervisor":
        return programs_matching(list(names), list(patterns))
    raise AnsibleFilterError("gpulab.inference.own_units: kind %r is not systemd or supervisor" % (kind,))


class FilterModule:
    """The collection's own units among a node's."""

    def filters(self):
        return {"own_units": own_units}
