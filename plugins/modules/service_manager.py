#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: service_manager
short_description: The service manager that runs the collection's services on this node
version_added: 0.4.0
description:
  - Resolves O(requested) (role C(common)'s C(gpulab_service_manager)) on the node: V(auto) is V(systemd) where
    systemd is the init system (C(/run/systemd/system) is a directory, sd_booted(3)), else V(supervisor).
  - The one rule for V(auto) (C(plugins/module_utils/service_manager.py), C(active_manager)). Role C(common) runs
    it once per play and node and sets C(gpulab_service_manager_resolved); everything downstream reads
    C(gpulab_service_manager_active).
  - Reads only; changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
options:
  requested:
    description: V(auto), V(systemd) or V(supervisor).
    type: str
    required: true
attributes:
  check_mode:
    support: full
    description: Reads only, in check mode too.
  diff_mode:
    support: none
    description: Nothing changes.
  facts:
    support: full
    description: Sets C(gpulab_service_manager_resolved).
"""

EXAMPLES = r"""
- name: Resolve the service manager of this node
  gpulab.inference.service_manager:
    requested: "{{ gpulab_service_manager }}"
"""

RETURN = r"""
manager:
  description: V(systemd) or V(supervisor).
  returned: success
  type: str
  sample: supervisor
ansible_facts:
  description: C(gpulab_service_manager_resolved), V(requested) and the V(manager) it resolved to.
  returned: success
  type: dict
  sample: {gpulab_service_manager_resolved: {requested: auto, manager: supervisor}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    active_manager,
    systemd_booted,
)


def main():
    module = AnsibleModule(argument_spec=dict(requested=dict(type="str", required=True)), supports_check_mode=True)
    requested = module.params["requested"]
    try:
        manager = active_manager(requested, systemd_booted())
    except ServiceManagerError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, manager=manager,
                     ansible_facts={"gpulab_service_manager_resolved": {"requested": requested, "manager": manager}})


if __name__ == "__main__":
    main()
