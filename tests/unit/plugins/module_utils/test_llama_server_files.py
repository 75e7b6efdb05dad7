# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC servers' and the head's wrappers and units as the plans decide them (llama_server.rpc_server_wrapper,
rpc_server_unit, head_wrapper_lines, head_unit_sandbox): the templates only render these lists."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    LlamaServerError,
    head_unit_sandbox,
    head_wrapper_lines,
    rpc_guard_wrapper,
    rpc_server_unit,
    rpc_server_wrapper,
)

BUILD = {"build_id": "0123456789ab", "rpc_server_binary": "/opt/gpulab/llama.cpp/0123456789ab/bin/rpc-server"}
CPU = {"instance": 0, "device": "CPU", "gpu_index": None, "port": 50052}
GPU = {"instance": 1, "device": "CUDA0", "gpu_index": 3, "port": 50053}
RDMA = {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"}
FIREWALL_UNIT = "gpulab-rpc-server-firewall.service"
ORDER = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID",
         "why": "nvidia-smi numbers GPUs by PCI bus; make CUDA use the same order."}


def settings(**changes):
    base = {"host": "node-b", "user": "gpulab-rpc", "group": "gpulab-rpc", "unit": "gpulab-rpc-server",
            "bin_dir": "/opt/gpulab/bin", "threads": 0, "cache_dir": "", "firewall_unit": "",
            "hardening": {"NoNewPrivileges": "yes", "PrivateTmp": None, "CapabilityBoundingSet": ""},
            "cuda_devices": ["char-nvidia", "char-nvidia-uvm"]}
    base.update(changes)
    return base


def test_cpu_server_without_cache_or_threads():
    wrapper = rpc_server_wrapper(CPU, BUILD, "10.231.77.11", settings())
    assert wrapper == {
        "instance": 0,
        "name": "gpulab-rpc-server-0",
        "comments": [
            "ggml RPC server 0 of node-b, build 0123456789ab:",
            "device CPU, listening on 10.231.77.11:50052.",
            "The service manager runs it as gpulab-rpc (gpulab-rpc-server@0.service under systemd);",
            "to run it by hand, stop the unit and: sudo -u gpulab-rpc /opt/gpulab/bin/gpulab-rpc-server-0",
        ],
        "environment": [ORDER],
        "file_environment": [],
        "preludes": [],
        "argv_lines": [[BUILD["rpc_server_binary"]], ["--host", "10.231.77.11"], ["--port", "50052"],
                       ["--device", "CPU"]],
        "argv": [BUILD["rpc_server_binary"], "--host", "10.231.77.11", "--port", "50052", "--device", "CPU"],
    }


def test_gpu_server_with_cache_threads_and_rdma():
    wrapper = rpc_server_wrapper(GPU, BUILD, "fd00::11", settings(threads=8, cache_dir="/var/cache/gpulab/rpc"), RDMA)
    assert wrapper["comments"][1] == "device CUDA0 = nvidia-smi GPU 3, listening on [fd00::11]:50053."
    assert wrapper["environment"] == [
        ORDER,
        {"name": "CUDA_VISIBLE_DEVICES", "value": "3", "why": "This server sees only its own GPU, as CUDA0."},
        {"name": "GGML_RDMA_DEV", "value": "mlx5_0",
         "why": "RDMA transport of llama.cpp RPC (role roce, fabric.json): the verbs device and RoCE v2 GID."},
        {"name": "GGML_RDMA_GID", "value": "3", "why": ""},
        {"name": "LLAMA_CACHE", "value": "/var/cache/gpulab/rpc", "why": "-c keeps received tensors under $LLAMA_CACHE/rpc."},
    ]
    assert wrapper["argv_lines"] == [[BUILD["rpc_server_binary"]], ["--host", "fd00::11"], ["--port", "50053"],
                                     ["--device", "CUDA0"], ["--threads", "8"], ["--cache"]]
    assert wrapper["name"] == "gpulab-rpc-server-1"


@pytest.mark.parametrize("changes, variable", [
    ({"cache_dir": "/var/cache\n/x"}, "llama_rpc_server_cache_dir"),
    ({"user": "gpulab-rpc\nExecStartPre=/bin/sh"}, "llama_rpc_server_user"),
    ({"bin_dir": "/opt/gpulab/bin\r"}, "llama_rpc_server_bin_dir"),
    ({"host": "node-b\n"}, "inventory_hostname"),
])
def test_a_newline_in_the_wrapper_is_refused_naming_the_variable(changes, variable):
    with pytest.raises(LlamaServerError) as raised:
        rpc_server_wrapper(CPU, BUILD, "10.231.77.11", settings(**changes))
    assert str(raised.value).startswith(variable + " ")
    assert "set %s without it" % variable in str(raised.value)


def test_negative_threads_are_refused():
    with pytest.raises(LlamaServerError, match="llama_rpc_server_threads -1 is negative"):
        rpc_server_wrapper(CPU, BUILD, "10.231.77.11", settings(threads=-1))


UNIT = [["StartLimitIntervalSec", "0"]]
SERVICE = [["Restart", "always"], ["RestartSec", "5"]]


def test_cpu_unit_without_firewall_or_cache():
    unit = rpc_server_unit(settings(), [CPU], {"ip_address_allow": []}, UNIT, SERVICE)
    assert unit == {
        "comments": ["ggml RPC server %i: runs /opt/gpulab/bin/gpulab-rpc-server-%i (one instance per exposed device)."],
        "unit": ["Description=ggml RPC server %i for the llama-server head (gpulab.inference)",
                 "Wants=network-online.target", "After=network-online.target", "StartLimitIntervalSec=0"],
        "service": ["Type=simple", "User=gpulab-rpc", "Group=gpulab-rpc",
                    "ExecStart=/opt/gpulab/bin/gpulab-rpc-server-%i", "Restart=always", "RestartSec=5",
                    "# Hardening: gpulab_service_hardening, with llama_rpc_server_hardening_overrides applied.",
                    "NoNewPrivileges=yes", "CapabilityBoundingSet="],
        "install": ["WantedBy=multi-user.target"],
    }


def test_gpu_unit_with_firewall_cache_and_a_local_head():
    unit = rpc_server_unit(settings(firewall_unit=FIREWALL_UNIT, cache_dir="/var/cache/gpulab/rpc"), [CPU, GPU],
                           {"ip_address_allow": ["10.231.77.10", "localhost"]}, UNIT, SERVICE)
    assert unit["unit"][3:] == [
        "# No rules, no server: the instance does not start unless the firewall unit loaded its table.",
        "Requires=" + FIREWALL_UNIT, "After=" + FIREWALL_UNIT, "StartLimitIntervalSec=0"]
    assert unit["service"][6:] == [
        "ReadWritePaths=/var/cache/gpulab/rpc",
        "# Second layer, independent of nftables: the kernel drops the servers' packets to and from any",
        "# other address (cgroup BPF; systemd.resource-control(5)).",
        "IPAddressDeny=any",
        "IPAddressAllow=10.231.77.10 localhost",
        "# Hardening: gpulab_service_hardening, with llama_rpc_server_hardening_overrides applied.",
        "NoNewPrivileges=yes", "CapabilityBoundingSet=",
        "DeviceAllow=char-nvidia rw", "DeviceAllow=char-nvidia-uvm rw"]
    assert unit["install"] == ["# Started again with the firewall unit when nftables.service comes back after a stop.",
                               "WantedBy=multi-user.target " + FIREWALL_UNIT]


@pytest.mark.parametrize("changes, variable", [
    ({"hardening": {"ProtectHome": "yes\nExecStartPre=/bin/sh"}}, "llama_rpc_server_hardening_overrides"),
    ({"hardening": {"Protect Home": "yes"}}, "llama_rpc_server_hardening_overrides"),
    ({"cuda_devices": ["char-nvidia\n"]}, "llama_rpc_server_cuda_devices"),
    ({"group": "gpulab\n"}, "llama_rpc_server_group"),
    ({"cache_dir": "/var/cache\n"}, "llama_rpc_server_cache_dir"),
])
def test_a_value_that_breaks_the_unit_is_refused_naming_the_variable(changes, variable):
    with pytest.raises(LlamaServerError) as raised:
        rpc_server_unit(settings(**changes), [GPU], {"ip_address_allow": []}, UNIT, SERVICE)
    assert variable in str(raised.value)


# --- the head ----------------------------------------------------------------------

DEVICES = [{"name": "RPC0", "kind": "rpc", "host": "node-b", "endpoint": "[fd00::2]:50052"},
           {"name": "CUDA0", "kind": "cuda", "host": "node-a", "endpoint": None}]


def test_head_wrapper_lines_name_each_device_the_sampling_and_the_rdma_exports():
    lines = head_wrapper_lines(DEVICES, [3, 1], RDMA, {"enabled": False, "reason": "llama_server_backend_sampling\nis false"})
    assert lines == {
        "devices": ["  RPC0: [fd00::2]:50052 (node-b), split 3", "  CUDA0: local GPU, split 1"],
        "sampling": ["Backend sampling: off (llama_server_backend_sampling is false)."],
        "environment": [
            ORDER,
            {"name": "GGML_RDMA_DEV", "value": "mlx5_0",
             "why": "RDMA transport of llama.cpp RPC (role roce, fabric.json): the verbs device and RoCE v2 GID."},
            {"name": "GGML_RDMA_GID", "value": "3", "why": ""}],
    }


def test_head_wrapper_lines_over_tcp_without_a_server_plan():
    assert head_wrapper_lines([], [], {}, None) == {"devices": [], "sampling": [], "environment": [ORDER]}


def test_head_unit_sandbox_opens_cuda_only_where_the_head_uses_it():
    hardening = {"NoNewPrivileges": "yes", "PrivateTmp": None}
    assert head_unit_sandbox(hardening, True, ["char-nvidia", "char-nvidia-uvm"]) == [
        "NoNewPrivileges=yes", "DeviceAllow=char-nvidia rw", "DeviceAllow=char-nvidia-uvm rw"]
    assert head_unit_sandbox(hardening, False, ["char-nvidia"]) == ["NoNewPrivileges=yes"]
    with pytest.raises(LlamaServerError, match="^llama_server_hardening_overrides 'yes\\\\n' holds a newline"):
        head_unit_sandbox({"ProtectHome": "yes\n"}, False, [])
    with pytest.raises(LlamaServerError, match="^llama_server_cuda_devices"):
        head_unit_sandbox({}, True, ["char-nvidia\nExecStartPre=/bin/sh"])


# --- the RPC guard -------------------------------------------------------------------

GUARD = {"name": "gpulab-rpc-guard", "python": "/usr/bin/python3", "code": "/opt/gpulab/bin/gpulab-rpc-guard.py",
         "table": "gpulab_rpc", "service_manager": "systemd", "supervisor_config": "/etc/gpulab/supervisord.conf",
         "interval_s": 0.5}


def test_guard_wrapper_under_systemd_names_the_instances():
    wrapper = rpc_guard_wrapper(GUARD, [CPU, GPU], "gpulab-rpc-server", FIREWALL_UNIT)
    assert wrapper["name"] == "gpulab-rpc-guard"
    assert wrapper["environment"] == [{"name": "PATH", "value": "/usr/sbin:/usr/bin:/sbin:/bin", "why": ""}]
    assert wrapper["comments"][0] == ("Stops this node's ggml RPC servers while table gpulab_rpc no longer drops their "
                                      "ports from")
    assert wrapper["argv_lines"] == [
        ["/usr/bin/python3", "/opt/gpulab/bin/gpulab-rpc-guard.py"], ["--table", "gpulab_rpc"],
        ["--ports", "50052,50053"], ["--manager", "systemd"], ["--firewall-unit", FIREWALL_UNIT], ["--interval-s", "0.5"],
        ["--units", "gpulab-rpc-server@0.service", "gpulab-rpc-server@1.service"]]


def test_guard_wrapper_under_supervisord_names_the_programs_and_the_config():
    wrapper = rpc_guard_wrapper(dict(GUARD, service_manager="supervisor"), [CPU, GPU], "gpulab-rpc-server", FIREWALL_UNIT)
    assert wrapper["argv_lines"][3:5] == [["--manager", "supervisor"],
                                          ["--supervisor-config", "/etc/gpulab/supervisord.conf"]]
    assert wrapper["argv_lines"][-1] == ["--units", "gpulab-rpc-server-0", "gpulab-rpc-server-1"]


def test_guard_wrapper_refuses_a_table_with_a_newline():
    with pytest.raises(LlamaServerError, match="^llama_rpc_server_nft_table 'gpulab_rpc\\\\n' holds a newline"):
        rpc_guard_wrapper(dict(GUARD, table="gpulab_rpc\n"), [CPU], "gpulab-rpc-server", FIREWALL_UNIT)
