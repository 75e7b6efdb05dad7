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
  - Resolves O(requested) (role C(common)'s C(gpulab_service_manager)) on the node. V(auto) is V(systemd) where
    systemd is the init system (C(/run/systemd/system) is a directory, sd_booted(3)), else V(supervisor).
  - The one rule for V(auto) (C(plugins/module_utils/service_manager.py), C(active_manager)). Role C(common) runs
    it once per play and node and sets C(gpulab_service_manager_resolved); everything downstream reads
    C(gpulab_service_manager_active).
  - Under systemd, also its major version (C(--version)), which the plan modules take as role C(common)'s
    C(gpulab_service_manager_version) to choose the restart directives that version knows; 0 where it is unknown or
    no version matters.
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
version:
  description: The manager's major version (systemd's), 0 where it is unknown or no version matters.
  returned: success
  type: int
  sample: 252
ansible_facts:
  description: C(gpulab_service_manager_resolved), V(requested), the V(manager) it resolved to and its V(version).
  returned: success
  type: dict
  sample: {gpulab_service_manager_resolved: {requested: auto, manager: supervisor, version: 0}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    active_manager,
    parse_version,
    systemd_booted,
    version_argv,
)


def main():
    module = AnsibleModule(argument_spec=dict(requested=dict(type="str", required=True)), supports_check_mode=True)
    requested = module.params["requested"]
    try:
        manager = active_manager(requested, systemd_booted())
    except ServiceManagerError as exc:
        module.fail_json(msg=str(exc))
    version = 0
    argv = version_argv(manager)
    binary = module.get_bin_path(argv[0]) if argv else None
    if binary:
        rc, out, unused = BoundedRunner(module).run([binary] + argv[1:])
        version = parse_version(manager, out) if rc == 0 else 0
    module.exit_json(changed=False, manager=manager, version=version,
                     ansible_facts={"gpulab_service_manager_resolved": {"requested": requested, "manager": manager,
                                                                        "version": version}})


if __name__ == "__main__":
    main()
