# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: monitoring_unit
short_description: The systemd unit of one of role monitoring's services
version_added: 0.4.0
description:
  - The unit of the monitoring service O(_input) (an entry of the role's C(__monitoring_services)) as role
    C(gpulab.inference.service)'s one unit template renders it, C(comments) and the lines of its C(unit), C(service)
    and C(install) sections.
  - The rule is C(monitoring_unit) in C(plugins/module_utils/monitoring_service.py); the template only writes the lines.
  - A value holding a newline or another control character fails naming the variable to fix.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description:
      - The service, C(name), C(description), C(user) (empty runs it as root), C(firewall) (load O(nft_file) before every
        start), C(hardening) (directives over O(hardening), a value of V(null) leaves one out), C(device_groups) and
        C(writable).
    type: dict
    required: true
  bin_dir:
    description: Directory of the service's wrapper script (C(monitoring_bin_dir)).
    type: str
    required: true
  nft_file:
    description: The exporter's nftables rule file (C(monitoring_nft_file)).
    type: str
    required: true
  hardening:
    description: The shared hardening directives (C(gpulab_service_hardening)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Run the node exporter under role service
  ansible.builtin.include_role:
    name: gpulab.inference.service
    tasks_from: systemd
  vars:
    service_unit_file: >-
      {{ __monitoring_services.node_exporter | gpulab.inference.monitoring_unit(bin_dir=monitoring_bin_dir,
         nft_file=monitoring_nft_file, hardening=gpulab_service_hardening) }}
"""

RETURN = r"""
_value:
  description: The unit, C(comments), C(unit), C(service) and C(install), each a list of lines without line ends.
  type: dict
  sample:
    comments: ["Runs /opt/gpulab/bin/gpulab-prometheus (role monitoring); restarts forever, without a start limit."]
    unit: [Description=Prometheus for the gpulab.inference lab (gpulab.inference), Wants=network-online.target]
    service: [Type=simple, ExecStart=/opt/gpulab/bin/gpulab-prometheus, Restart=always]
    install: [WantedBy=multi-user.target]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.monitoring_service import MonitoringError
from ansible_collections.gpulab.inference.plugins.module_utils.monitoring_service import monitoring_unit as unit_of


def monitoring_unit(service, bin_dir, nft_file, hardening):
    try:
        return unit_of(service, bin_dir, nft_file, hardening)
    except MonitoringError as exc:
        raise AnsibleFilterError("gpulab.inference.monitoring_unit: %s" % exc)


class FilterModule:
    """The units of role monitoring's services."""

    def filters(self):
        return {"monitoring_unit": monitoring_unit}
