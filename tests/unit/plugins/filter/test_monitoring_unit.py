# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""monitoring_unit (filter): module_utils/monitoring_service.py's unit, a bad value as a filter error."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.monitoring_unit import FilterModule, monitoring_unit

SERVICE = {"name": "gpulab-prometheus", "description": "Prometheus (gpulab.inference)", "user": "gpulab-prometheus",
           "firewall": False, "writable": ["/var/lib/gpulab/prometheus"], "device_groups": [], "hardening": {}}


def test_the_filter_returns_the_unit_lines():
    unit = monitoring_unit(SERVICE, bin_dir="/opt/gpulab/bin", nft_file="/etc/nftables.d/m.nft",
                           hardening={"NoNewPrivileges": "yes"})
    assert unit["service"] == ["Type=simple", "ExecStart=/opt/gpulab/bin/gpulab-prometheus", "User=gpulab-prometheus",
                               "Group=gpulab-prometheus", "Restart=always", "RestartSec=5", "NoNewPrivileges=yes",
                               "ReadWritePaths=/var/lib/gpulab/prometheus"]
    assert unit["install"] == ["WantedBy=multi-user.target"]
    assert FilterModule().filters() == {"monitoring_unit": monitoring_unit}


def test_a_bad_value_is_a_filter_error_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match="^gpulab.inference.monitoring_unit: monitoring_nft_file"):
        monitoring_unit(dict(SERVICE, firewall=True), bin_dir="/opt/gpulab/bin", nft_file="/etc/m.nft\n", hardening={})
