# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: options_set
short_description: The argument spec of the role options a host's variables set
version_added: 0.1.0
description:
  - Keeps, of the result of filter C(gpulab.inference.role_options), the options the given variables define, as the
    C(argument_spec) of M(ansible.builtin.validate_argument_spec).
  - Given C(hostvars[inventory_hostname]), which hold what the inventory, C(-e) and earlier tasks set but no
    role default, these are the variables the operator set; role defaults are right by construction.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The result of filter C(gpulab.inference.role_options).
    type: dict
    required: true
  host_vars:
    description: The host's variables, C(hostvars[inventory_hostname]).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Validate every role variable this host set
  ansible.builtin.validate_argument_spec:
    argument_spec: "{{ __options | gpulab.inference.options_set(hostvars[inventory_hostname]) }}"
"""

RETURN = r"""
_value:
  description: Option name to its spec, for the options the variables set.
  type: dict
  sample:
    llama_server_port: {type: int, default: 8080}
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks


def options_set(options, host_vars):
    """The argument spec of the options this host's variables set."""
    if not isinstance(options, dict):
        raise AnsibleFilterError("gpulab.inference.options_set: expects role_options' mapping, got %s"
                                 % type(options).__name__)
    try:
        return serving_checks.options_set(options, host_vars)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("gpulab.inference.options_set: %s" % exc)


class FilterModule:
    """The role options a host set, for gpulab.inference's preflight."""

    def filters(self):
        return {"options_set": options_set}
