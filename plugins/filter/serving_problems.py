# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: serving_problems
short_description: What is wrong with the role variables an operator set, as sentences
version_added: 0.1.0
description:
  - Reads, for every given host, the variables of every role's argument spec that the inventory or C(-e) set
    (role defaults are not visible in C(hostvars), so only what the user set is checked), validates each alone
    against its spec with Ansible's own validator, and returns one sentence per problem, naming the variable, its
    value, the hosts and what to set instead.
  - Besides the spec's types and choices, what the specs say in words (null only where an option's description
    gives it a meaning, paths absolute), values the validation accepts by converting them while the role uses them
    as given (text for a list, C([1,2]) for a path, a boolean for a string), ranges (a port from 1 to 65535) and
    combinations that cannot work (a context below one token per slot, a longest restart delay below the first).
  - The rules live in C(plugins/module_utils/serving_checks.py); this filter only reads the
    variables and hands them over. Filter C(role_options) reads the specs.
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
  options:
    description: Every role's options, as filter C(gpulab.inference.role_options) returns them.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The variables are usable
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('\\n') }}"
  vars:
    __problems: "{{ groups['gpu_nodes'] | gpulab.inference.serving_problems(hostvars, (role_path ~ '/..') | gpulab.inference.role_options) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when every set value can work.
  type: list
  elements: str
  sample:
    - "llama_server_parallel='0' on every node is below 1: set the number of requests served at once, 1 or more, e.g. 4."
"""

from ansible.errors import AnsibleError, AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks


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


def _values(options, host_vars):
    values = {}
    for name in options:
        if name not in host_vars:
            continue
        try:
            values[name] = _plain(host_vars[name])
        except AnsibleError:
            # A value built from a role default cannot be read outside the role's play; the role
            # validates it when it runs.
            continue
    return values


def serving_problems(hosts, hostvars, options):
    """Read the options each host set; return serving_checks' sentences."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpulab.inference.serving_problems: expects a list of hosts, got %s"
                                 % type(hosts).__name__)
    try:
        checked = dict((host, _values(options, hostvars[host] if host in hostvars else {})) for host in hosts)
        return serving_checks.serving_problems(checked, options, list(hosts))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpulab.inference.serving_problems: %s" % exc)


class FilterModule:
    """Role variable checks of gpulab.inference."""

    def filters(self):
        return {"serving_problems": serving_problems}
