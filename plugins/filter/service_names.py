# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: service_names
short_description: The systemd unit or supervisord program names of a service's instances
version_added: 0.3.0
description:
  - For a list of instance numbers O(_input) of the service O(base), returns C(<base>@<i>.service) per
    instance under systemd (instances of a template unit) and C(<base>-<i>) under supervisord.
  - With O(_input) null, the one service C(<base>.service) or C(<base>).
  - The rule lives in C(plugins/module_utils/service_manager.py) (C(service_names)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: Instance numbers (whole numbers >= 0), or null for a service with one instance.
    type: list
    elements: int
    required: true
  base:
    description: The unit's or program's name without instance and suffix (C(gpulab-rpc-server)).
    type: str
    required: true
  manager:
    description: C(systemd) or C(supervisor).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Restart every RPC server
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: restarted
  loop: "{{ [0, 1] | gpulab.inference.service_names('gpulab-rpc-server', 'systemd') }}"
"""

RETURN = r"""
_value:
  description: The names, in the order of the instances.
  type: list
  elements: str
  sample: [gpulab-rpc-server@0.service, gpulab-rpc-server@1.service]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    service_names,
)


def _service_names(instances, base, manager):
    try:
        return service_names(None if instances is None else list(instances), base, manager)
    except ServiceManagerError as exc:
        raise AnsibleFilterError("gpulab.inference.service_names: %s" % exc)


class FilterModule:
    """Unit and program names of the collection's services."""

    def filters(self):
        return {"service_names": _service_names}
