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
  - One of the engines of role common's C(gpulab_engines). A set C(gpulab_engine) is kept; C(auto) takes the
    first engine that serves the model's format (GGUF or Hugging Face checkpoint), read from the head's inventory
    variables only (C(vllm_server_model_path), C(llama_server_model_path), C(model_source), C(model_path),
    C(model_synthetic)), so every host and every play resolves it alike before anything is read on a node; with
    no model named, the table's first engine.
  - A value that is not an engine of the table fails naming the variable.
  - The rule lives in C(plugins/module_utils/engines.py) (C(engine_from_inventory)); role common's
    C(gpulab_engine_resolved) is this filter on C(gpulab_engine).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The value of C(gpulab_engine) (an engine of the table, or C(auto)).
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
  engines:
    description: Role common's engine table, C(gpulab_engines).
    type: dict
    required: true
  detail:
    description: Return C(engine) and C(reason) (why) instead of the engine's name.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Say which engine and why
  ansible.builtin.debug:
    msg: "{{ (gpulab_engine | gpulab.inference.engine(hostvars, groups['inference_head'], gpulab_engines, detail=true)).reason }}"
"""

RETURN = r"""
_value:
  description: The engine's name; with O(detail), a dict of C(engine) and C(reason).
  type: raw
  sample: llama_cpp
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.engines import (
    MODEL_VARIABLES,
    EngineError,
    engine_from_inventory,
    is_auto,
    unit_patterns,
)


def engine(setting, hostvars, head, engines, detail=False):
    try:
        variables = {}
        if is_auto(setting) and head:
            found = hostvars[head[0]]
            # only the variables the rule reads: templating every host variable would be slow
            variables = dict((name, found[name]) for name in MODEL_VARIABLES if name in found)
        chosen = engine_from_inventory(setting, variables, engines)
    except EngineError as exc:
        raise AnsibleFilterError(str(exc))
    return chosen if detail else chosen["engine"]


def engine_units(engines, only=None):
    """The serving unit patterns of the engines named in only (every engine by default), in stop order."""
    try:
        return unit_patterns(engines, only)
    except EngineError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """The engine table's questions: which engine, and the engines' units."""

    def filters(self):
        return {"engine": engine, "engine_units": engine_units}
