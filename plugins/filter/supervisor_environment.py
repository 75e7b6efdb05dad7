# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: supervisor_environment
short_description: A supervisord program's environment= value
version_added: 0.3.0
description:
  - Returns C(NAME="value") pairs of the mapping O(_input), sorted by name and comma-separated, as
    supervisord's C(environment=) reads them; a literal C(%) is doubled (supervisord expands
    C(%(...)s)) and a double quote dropped. An empty mapping gives an empty string.
  - A name that is not a shell variable name, or a value that is a list, a mapping or null, fails naming it.
  - The rule lives in C(plugins/module_utils/service_manager.py) (C(supervisor_environment)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: Variable names and values.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show a program's environment line
  ansible.builtin.debug:
    msg: "environment={{ {'CUDA_VISIBLE_DEVICES': '0'} | gpulab.inference.supervisor_environment }}"
"""

RETURN = r"""
_value:
  description: The value of C(environment=).
  type: str
  sample: CUDA_VISIBLE_DEVICES="0",HF_HUB_OFFLINE="1"
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    supervisor_environment,
)


def _supervisor_environment(environment):
    try:
        return supervisor_environment(dict(environment or {}))
    except (ServiceManagerError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpulab.inference.supervisor_environment: %s" % exc)


class FilterModule:
    """supervisord program values."""

    def filters(self):
        return {"supervisor_environment": _supervisor_environment}
