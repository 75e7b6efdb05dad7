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
    (role defaults are not visible in C(hostvars), so only what the user set is checked) and the errors
    M(ansible.builtin.validate_argument_spec) found in them, and returns one sentence per problem,
    naming the variable, its value, the hosts and what to set instead.
  - Besides Ansible's errors, what an argument spec cannot say - values it accepts by converting them while the
    role uses them as given (text for a list, a boolean for a string, null in place of a default), ranges (a port
    from 1 to 65535) and combinations that cannot work (a context below one token per slot, a longest restart
    delay below the first).
  - The rules live in C(plugins/module_utils/serving_checks.py); this filter only reads the
    variables and hands them over. Filters C(role_options) and C(options_set) give the validation its spec.
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
  result:
    description: The name of the variable each host registered the result of M(ansible.builtin.validate_argument_spec) in.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Validate every role variable this host set against the roles' argument specs
  ansible.builtin.validate_argument_spec:
    argument_spec: "{{ __options | gpulab.inference.options_set(hostvars[inventory_hostname]) }}"
  register: __spec_result
  failed_when: false
  vars:
    __options: "{{ (role_path ~ '/..') | gpulab.inference.role_options }}"

- name: The variables are usable
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('\\n') }}"
  vars:
    __problems: "{{ groups['gpu_nodes'] | gpulab.inference.serving_problems(hostvars, __options, '__spec_result') }}"
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
            # A value built from a role default cannot be read outside the role's play; the
            # validation, which runs in the play, has checked its type.
            continue
    return values


def serving_problems(hosts, hostvars, options, result):
    """Read the options each host set and its validation errors; return serving_checks' sentences."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpulab.inference.serving_problems: expects a list of hosts, got %s"
                                 % type(hosts).__name__)
    try:
        checked = {}
        for host in hosts:
            host_vars = hostvars[host] if host in hostvars else {}
            registered = host_vars[result] if result in host_vars else {}
            checked[host] = {"values": _values(options, host_vars),
                             "errors": [str(error) for error in (registered or {}).get("argument_errors") or []]}
        return serving_checks.serving_problems(checked, options, list(hosts))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpulab.inference.serving_problems: %s" % exc)


class FilterModule:
    """Role variable checks of gpulab.inference."""

    def filters(self):
        return {"serving_problems": serving_problems}
