# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: serving_problems
short_description: What is wrong with the serving variables an operator set, as sentences
version_added: 0.1.0
description:
  - Reads, for every given host, the variables of roles C(llama_cpp_build), C(llama_server),
    C(llama_rpc_server), C(memory_plan) and C(bench) that the inventory or C(-e) set (role defaults are
    not visible here, so only what the user set is checked) and returns one sentence per
    problem, naming the variable, its value, the hosts and what to set instead.
  - Types and ranges (a whole number, a port, a boolean, a choice) and the combinations that
    cannot work (a context below one token per slot, a longest restart delay below the first).
  - The rules live in C(plugins/module_utils/serving_checks.py); this filter only reads the
    variables and hands them over.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The hosts to check, e.g. C(groups['gpu_nodes']).
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The serving variables are usable
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join(' ') }}"
  vars:
    __problems: "{{ groups['gpu_nodes'] | gpulab.inference.serving_problems(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when every set value can work.
  type: list
  elements: str
  sample:
    - "llama_server_ctx_size='abc' on every node is not a whole number: set the context in tokens
      shared by all slots, e.g. 8192 (0: the model's training context)."
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.serving_checks import RULES, serving_problems as check


def _plain(value):
    """Plain Python data (Ansible hands over tagged str and int subclasses)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(entry) for entry in value]
    if isinstance(value, dict):
        return dict((str(key), _plain(entry)) for key, entry in value.items())
    return value


def serving_problems(hosts, hostvars):
    """Read the RULES variables each host has set and return serving_checks' sentences."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpulab.inference.serving_problems: expects a list of hosts, got %s"
                                 % type(hosts).__name__)
    try:
        values_by_host = {}
        for host in hosts:
            variables = hostvars[host] if host in hostvars else {}
            values_by_host[host] = dict((name, _plain(variables[name])) for name in RULES if name in variables)
        return check(values_by_host, list(hosts))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpulab.inference.serving_problems: %s" % exc)


class FilterModule:
    """Serving variable checks of gpulab.inference."""

    def filters(self):
        return {"serving_problems": serving_problems}
