# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: device_groups
short_description: The wanted device groups that exist on the node
version_added: 0.3.0
description:
  - Returns the groups of O(_input) that O(present) holds, in the order of O(_input), each once;
    a group missing on the node is left out, not an error.
  - The rule lives in C(plugins/module_utils/service_manager.py) (C(device_groups)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The device groups the service account should be in.
    type: list
    elements: str
    required: true
  present:
    description:
      - The node's groups as C(ansible.builtin.getent) with C(database=group) returns them (a
        mapping by name), or a list of names.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: The service user's device groups
  ansible.builtin.debug:
    msg: "{{ ['video', 'render'] | gpulab.inference.device_groups(ansible_facts.getent_group) }}"
"""

RETURN = r"""
_value:
  description: Group names, in the order of O(_input).
  type: list
  elements: str
  sample: [video]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    device_groups,
)


def _device_groups(wanted, present):
    try:
        return device_groups(list(wanted or []), present)
    except ServiceManagerError as exc:
        raise AnsibleFilterError("gpulab.inference.device_groups: %s" % exc)


class FilterModule:
    """Device groups present on the node."""

    def filters(self):
        return {"device_groups": _device_groups}
