# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: roce_qos_script
short_description: The lines of the boot script that makes the RoCE fabric lossless
version_added: 0.3.0
description:
  - The shell lines (after the shebang) that the C(gpulab.inference.roce) role's QoS unit runs at
    every boot on the fabric interface O(_input) - the NIC trusts DSCP or PCP, PFC on O(priority)
    only, and with O(ecn) ECN's notification and reaction points on that priority where the NIC
    exposes them in sysfs.
  - The rule is C(qos_script) in C(plugins/module_utils/roce.py); the template only writes the lines.
  - A bad interface name, trust mode, priority or tool path fails naming the variable to fix.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The fabric interface (C(roce_fabric_interface)).
    type: str
    required: true
  tool_path:
    description: The absolute path of the NIC QoS tool (C(mlnx_qos)) as found on the node.
    type: str
    required: true
  trust:
    description: The NIC's trust mode (C(roce_qos_trust)).
    type: str
    choices: [dscp, pcp]
    required: true
  priority:
    description: The priority (0-7) that gets PFC and ECN (C(roce_pfc_priority)).
    type: int
    required: true
  ecn:
    description: Enable ECN on O(priority) (C(roce_ecn_enabled)).
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Render the QoS script
  ansible.builtin.copy:
    dest: /opt/gpulab/bin/gpulab-roce-qos
    mode: "0755"
    content: |
      #!/bin/sh
      {% for line in 'fabric0' | gpulab.inference.roce_qos_script(tool_path='/usr/bin/mlnx_qos', trust='dscp', priority=3, ecn=true) %}
      {{ line }}
      {% endfor %}
"""

RETURN = r"""
_value:
  description: The script's lines, without line ends.
  type: list
  elements: str
  sample:
    - "set -eu"
    - "interface=fabric0"
    - "priority=3"
    - "/usr/bin/mlnx_qos -i \"$interface\" --trust dscp --pfc 0,0,0,1,0,0,0,0"
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.roce import RoceError, qos_script


def roce_qos_script(interface, tool_path, trust, priority, ecn):
    try:
        return qos_script(interface, tool_path, trust, priority, ecn)
    except RoceError as exc:
        raise AnsibleFilterError("gpulab.inference.roce_qos_script: %s" % exc)


class FilterModule:
    """The RoCE QoS boot script."""

    def filters(self):
        return {"roce_qos_script": roce_qos_script}
