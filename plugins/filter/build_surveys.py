# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: build_surveys
short_description: The surveys of the nodes a llama.cpp build is for, each node's own where it ran one
version_added: 0.4.0
description:
  - Role C(llama_cpp_build)'s entry point C(survey) runs on every node of the play at once and registers
    C(__llama_cpp_build_self_survey) there (C(playbooks/build.yml)); the build host then surveys, one by one, only
    the nodes without one.
  - With O(missing=true), the names of O(_input) without a survey of their own (the build host's loop).
  - Otherwise each node's survey (M(gpulab.inference.llama_cpp_toolchain)'s RV(gpulab.inference.llama_cpp_toolchain#module:node)),
    in the order of O(_input), its own or from O(surveyed_here); a node with neither fails, naming it.
  - The rule is C(plugins/module_utils/llama_cpp.py)'s C(node_surveys).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The nodes the build is for (C(llama_cpp_build_nodes)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars), where each node's own survey is.
    type: dict
    required: true
  surveyed_here:
    description: The results of the build host's loop over the nodes without a survey of their own.
    type: list
    elements: dict
    default: []
  missing:
    description: Return the names of the nodes without a survey of their own instead.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Survey the nodes that did not survey themselves
  gpulab.inference.llama_cpp_toolchain:
    host: "{{ item }}"
  delegate_to: "{{ item }}"
  loop: "{{ llama_cpp_build_nodes | gpulab.inference.build_surveys(hostvars, missing=true) }}"
  register: surveyed_here

- name: Plan the build for every node
  gpulab.inference.llama_cpp_build_plan:
    source_id: archive:sha256:00
    toolchain: "{{ toolchain.toolchain }}"
    nodes: "{{ llama_cpp_build_nodes | gpulab.inference.build_surveys(hostvars, surveyed_here.results) }}"
"""

RETURN = r"""
_value:
  description: The surveys in the order of O(_input), or with O(missing=true) the names without one.
  type: list
  elements: raw
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import LlamaCppError, node_surveys, unsurveyed

SELF_SURVEY = "__llama_cpp_build_self_survey"


def build_surveys(nodes, hostvars, surveyed_here=None, missing=False):
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(node, str) for node in nodes):
        raise AnsibleFilterError("gpulab.inference.build_surveys: the input must be a list of node names, got %r" % (nodes,))
    own = {}
    for node in nodes:
        node_vars = hostvars[node] if node in hostvars else {}
        own[node] = node_vars.get(SELF_SURVEY) if hasattr(node_vars, "get") else None
    if missing:
        return unsurveyed(list(nodes), own)
    try:
        return node_surveys(list(nodes), own, surveyed_here or [])
    except LlamaCppError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """The surveys of a llama.cpp build's nodes."""

    def filters(self):
        return {"build_surveys": build_surveys}
