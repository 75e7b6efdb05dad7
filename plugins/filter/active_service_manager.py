# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: active_service_manager
short_description: The service manager that runs the collection's services on a host
version_added: 0.3.0
description:
  - From O(_input), the operator's C(gpulab_service_manager) (C(auto), C(systemd) or C(supervisor)),
    and Ansible's C(service_mgr) fact, returns C(systemd) or C(supervisor).
  - C(auto) means C(systemd) when the fact says systemd or was not gathered, else C(supervisor).
  - The rule lives in C(plugins/module_utils/service_manager.py) (C(active_manager)); role C(common)'s
    C(gpulab_service_manager_active) and role C(gpu_drain) use it.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: C(auto), C(systemd) or C(supervisor).
    type: str
    required: true
  service_mgr:
    description: Ansible's C(service_mgr) fact of the host, or null when facts were not gathered.
    type: str
"""

EXAMPLES = r"""
- name: Name the manager of a node the play is not running on
  ansible.builtin.debug:
    msg: >-
      {{ hostvars[node].gpulab_service_manager | default('auto')
         | gpulab.inference.active_service_manager(hostvars[node].ansible_facts.service_mgr | default(none)) }}
"""

RETURN = r"""
_value:
  description: C(systemd) or C(supervisor).
  type: str
  sample: supervisor
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    active_manager,
)


def _active_service_manager(requested, service_mgr=None):
    try:
        return active_manager(requested, service_mgr)
    except ServiceManagerError as exc:
        raise AnsibleFilterError("gpulab.inference.active_service_manager: %s" % exc)


class FilterModule:
    """The service manager in use."""

    def filters(self):
        return {"active_service_manager": _active_service_manager}
