# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""monitoring_unit: the unit of each of role monitoring's services, line by line; bad values named."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.monitoring_service import MonitoringError, monitoring_unit

HARDENING = {"NoNewPrivileges": "yes", "PrivateTmp": "yes", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
             "CapabilityBoundingSet": ""}
NFT = "/etc/nftables.d/gpulab-monitoring.nft"
EXPORTER = {"name": "gpulab-node-exporter", "description": "Prometheus node exporter (gpulab.inference)",
            "user": "gpulab-metrics", "firewall": True, "writable": [], "device_groups": [],
            "hardening": {"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK"}}
COLLECTOR = {"name": "gpulab-metrics", "description": "GPU metrics (gpulab.inference)", "user": "", "firewall": False,
             "writable": ["/var/lib/gpulab/metrics"], "device_groups": ["char-nvidia", "char-nvidia-uvm"],
             "hardening": {"CapabilityBoundingSet": "CAP_NET_ADMIN", "PrivateTmp": None}}


def test_the_exporter_loads_its_table_before_every_start_and_runs_as_its_account():
    assert monitoring_unit(EXPORTER, "/opt/gpulab/bin", NFT, HARDENING) == {
        "comments": ["Runs /opt/gpulab/bin/gpulab-node-exporter (role monitoring); restarts forever, without a start limit."],
        "unit": ["Description=Prometheus node exporter (gpulab.inference)", "Wants=network-online.target",
                 "After=network-online.target", "StartLimitIntervalSec=0"],
        "service": [
            "Type=simple",
            "# The table that admits only the Prometheus host is loaded (replaced whole) before every start, as",
            "# root: without it the exporter does not start.",
            "ExecStartPre=+/usr/sbin/nft -f /etc/nftables.d/gpulab-monitoring.nft",
            "ExecStart=/opt/gpulab/bin/gpulab-node-exporter",
            "User=gpulab-metrics", "Group=gpulab-metrics",
            "Restart=always", "RestartSec=5",
            # the service's own value replaces the shared one in its place
            "NoNewPrivileges=yes", "PrivateTmp=yes", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK",
            "CapabilityBoundingSet="],
        "install": ["WantedBy=multi-user.target"],
    }


def test_the_collector_runs_as_root_opens_the_gpus_and_writes_its_textfiles():
    service = monitoring_unit(COLLECTOR, "/opt/gpulab/bin", NFT, HARDENING)["service"]
    assert service == ["Type=simple", "ExecStart=/opt/gpulab/bin/gpulab-metrics", "Restart=always", "RestartSec=5",
                       "NoNewPrivileges=yes", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
                       "CapabilityBoundingSet=CAP_NET_ADMIN",
                       "DeviceAllow=char-nvidia rw", "DeviceAllow=char-nvidia-uvm rw",
                       "ReadWritePaths=/var/lib/gpulab/metrics"]


@pytest.mark.parametrize("firewall", [False, "false", "no", None])
def test_no_table_without_the_firewall(firewall):
    service = monitoring_unit(dict(EXPORTER, firewall=firewall), "/opt/gpulab/bin", NFT, HARDENING)["service"]
    assert not [line for line in service if "nft" in line]


@pytest.mark.parametrize("service, bin_dir, hardening, variable", [
    (EXPORTER, "/opt/gpulab/bin\nExecStartPre=/bin/sh", HARDENING, "monitoring_bin_dir"),
    (dict(COLLECTOR, writable=["/var/lib/x\n"]), "/opt/gpulab/bin", HARDENING, "monitoring_data_dir"),
    (dict(COLLECTOR, device_groups=["char-nvidia\r"]), "/opt/gpulab/bin", HARDENING, "gpulab_cuda_device_groups"),
    (EXPORTER, "/opt/gpulab/bin", {"ProtectHome": "yes\n"}, "gpulab_service_hardening"),
    (EXPORTER, "/opt/gpulab/bin", {"Bad key": "yes"}, "gpulab_service_hardening"),
])
def test_a_value_that_would_break_the_unit_is_refused_by_its_variable(service, bin_dir, hardening, variable):
    with pytest.raises(MonitoringError, match="^" + variable):
        monitoring_unit(service, bin_dir, NFT, hardening)


def test_a_hardening_that_is_no_mapping_is_refused():
    with pytest.raises(MonitoringError, match="gpulab_service_hardening"):
        monitoring_unit(EXPORTER, "/opt/gpulab/bin", NFT, ["NoNewPrivileges=yes"])
