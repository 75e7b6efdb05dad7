# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: engine
short_description: The engine deploy.yml deploys - gpulab_engine with auto resolved from the inventory
version_added: 0.2.0
description:
  - C(llama_cpp) or C(vllm). A set C(gpulab_engine) is kept; C(auto) takes llama.cpp for a GGUF model and
    vLLM for a Hugging Face checkpoint, read from the head's inventory variables only (C(model_synthetic),
    C(model_source), C(model_path), C(vllm_server_model_path), C(llama_server_model_path)), so every host and
    every play resolves it alike before anything is read on a node.
  - A value that is not an engine, or C(auto) without a model named, fails naming the variable.
  - The rule lives in C(plugins/module_utils/layout_auto.py) (C(engine_from_inventory)); role common's
    C(gpulab_engine_resolved) is this filter on C(gpulab_engine).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The value of C(gpulab_engine) (C(llama_cpp), C(vllm) or C(auto)).
    type: str
    required: true
  hostvars:
    description: C(hostvars), from which the head's variables are read.
    type: dict
    required: true
  head:
    description: The head group's hosts (C(groups['inference_head'])); the first is the head.
    type: list
    elements: str
    required: true
  detail:
    description: Return C(engine) and C(reason) (why) instead of the engine's name.
    type: bool
    default: false
"""

EXAMPLES = r"""
# deploy.yml's imports use the same expression in their when: lines.
- name: Stop here unless llama.cpp is the engine
  ansible.builtin.meta: end_play
  when: gpulab_engine | default('llama_cpp') | gpulab.inference.engine(hostvars, groups['inference_head'] | default([])) != 'llama_cpp'

- name: Say which engine and why
  ansible.builtin.debug:
    msg: "{{ (gpulab_engine | gpulab.inference.engine(hostvars, groups['inference_head'], detail=true)).reason }}"
"""

RETURN = r"""
_value:
  description: C(llama_cpp) or C(vllm); with O(detail), a dict of C(engine) and C(reason).
  type: raw
  sample: llama_cpp
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.layout_auto import (
    MODEL_VARIABLES,
    AutoError,
    engine_from_inventory,
    is_auto,
)


def engine(setting, hostvars, head, detail=False):
    try:
        variables = {}
        if is_auto(setting):
            if not head:
                raise AutoError("gpulab_engine is auto but the inventory has no head (group inference_head) whose "
                                "model variables would say which engine")
            found = hostvars[head[0]]
            # only the variables the rule reads: templating every host variable would be slow
            variables = dict((name, found[name]) for name in MODEL_VARIABLES if name in found)
        chosen = engine_from_inventory(setting, variables)
    except AutoError as exc:
        raise AnsibleFilterError(str(exc))
    return chosen if detail else chosen["engine"]


class FilterModule:
    """The engine deploy.yml deploys."""

    def filters(self):
        return {"engine": engine}
