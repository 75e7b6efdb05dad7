# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ggml RPC worker (rpc_worker): the devices it exposes, its bind address and firewall, and its servers'
wrappers, unit and guard as the plan decides them (the templates only render these lists)."""

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import LlamaServerError
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import (
    meminfo_total_mib,
    check_bind_address,
    firewall_sources,
    foreign_firewall_problem,
    rpc_devices,
    rpc_guard_wrapper,
    rpc_server_unit,
    rpc_server_wrapper,
    stale_units,
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


def test_guard_wrapper_with_the_watch_probes_each_server_at_its_bind_address():
    guard = dict(GUARD, watch_code="/opt/gpulab/bin/gpulab-rpc-guard-watch.py", watch_hang_after_s=5)
    wrapper = rpc_guard_wrapper(guard, [CPU, GPU], "gpulab-rpc-server", FIREWALL_UNIT, "10.231.78.12")
    assert wrapper["argv_lines"][-3:] == [["--watch-code", "/opt/gpulab/bin/gpulab-rpc-guard-watch.py"],
                                          ["--watch-endpoints", "10.231.78.12:50052,10.231.78.12:50053"],
                                          ["--watch-hang-after-s", "5.0"]]
    # without the address (or the code) the guard runs as before
    assert rpc_guard_wrapper(guard, [CPU], "gpulab-rpc-server", FIREWALL_UNIT)["argv_lines"][-1][0] == "--units"


def test_guard_wrapper_refuses_a_table_with_a_newline():
    with pytest.raises(LlamaServerError, match="^llama_rpc_server_nft_table 'gpulab_rpc\\\\n' holds a newline"):
        rpc_guard_wrapper(dict(GUARD, table="gpulab_rpc\n"), [CPU], "gpulab-rpc-server", FIREWALL_UNIT)


H200 = {"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143156}


RTX_A = {"index": 0, "name": "RTX PRO 6000", "memory_total_mib": 97000}


RTX_B = {"index": 1, "name": "RTX PRO 6000", "memory_total_mib": 96000}


def test_cpu_build_exposes_one_cpu_device_even_with_gpus():
    assert rpc_devices(False, [H200]) == [
        {"instance": 0, "device": "CPU", "gpu_index": None, "memory_mib": None}]


def test_cuda_build_exposes_one_server_per_gpu_each_seeing_cuda0():
    devices = rpc_devices(True, [RTX_B, RTX_A])
    assert [(d["instance"], d["device"], d["gpu_index"]) for d in devices] == [
        (0, "CUDA0", 0), (1, "CUDA0", 1)]
    assert devices[1]["memory_mib"] == 96000


def test_cuda_build_with_selected_indices():
    devices = rpc_devices(True, [RTX_A, RTX_B], [1])
    assert [(d["instance"], d["gpu_index"]) for d in devices] == [(0, 1)]


def test_cuda_build_with_absent_index_names_it():
    with pytest.raises(LlamaServerError, match=r"\[3\] are not present.*\[0, 1\]"):
        rpc_devices(True, [RTX_A, RTX_B], [3])


def test_cuda_build_without_gpus_fails():
    with pytest.raises(LlamaServerError, match="no GPU was found"):
        rpc_devices(True, [])


@pytest.mark.parametrize("address", ["0.0.0.0", "::"])
def test_wildcard_bind_refused_unless_allowed(address):
    with pytest.raises(LlamaServerError, match="no authentication"):
        check_bind_address(address)
    assert check_bind_address(address, allow_any=True) == address


@pytest.mark.parametrize("address", ["255.255.255.255", "224.0.0.251", "ff02::1", "240.0.0.1"])
def test_bind_address_that_nothing_can_listen_on_is_refused(address):
    with pytest.raises(LlamaServerError, match="is a multicast, broadcast or reserved address"):
        check_bind_address(address)


@pytest.mark.parametrize("address", ["10.0.0.1;id", "10.0.0.1 ", "10.0.0.1\n", "$(id)", "`id`", "a|b"])
def test_bind_address_with_shell_metacharacters_is_refused(address):
    with pytest.raises(LlamaServerError, match="is not an IP address"):
        check_bind_address(address)


def test_bind_address_must_be_an_ip():
    with pytest.raises(LlamaServerError, match="'node-b' is not an IP address"):
        check_bind_address("node-b")
    assert check_bind_address("10.231.77.11") == "10.231.77.11"


def test_gpu_entry_without_index_is_named():
    with pytest.raises(LlamaServerError, match=r"gpus entry 1 .* has no index"):
        rpc_devices(True, [RTX_A, {"name": "RTX PRO 6000"}])


def test_gpu_listed_twice_in_facts_is_refused():
    with pytest.raises(LlamaServerError, match="GPU index 0 twice"):
        rpc_devices(True, [RTX_A, dict(RTX_A)])


def test_gpu_indices_twice_are_refused():
    with pytest.raises(LlamaServerError, match="names GPU 0 more than once"):
        rpc_devices(True, [RTX_A, RTX_B], [0, 0])


def test_gpu_index_that_is_not_a_number():
    with pytest.raises(LlamaServerError, match="llama_rpc_server_gpu_indices entry 'x' is not a whole number"):
        rpc_devices(True, [RTX_A], ["x"])


def test_firewall_sources_split_by_family_and_normalised():
    assert firewall_sources(["10.231.77.10", "fd00::10/128", "10.231.77.0/24", "10.231.77.10"]) == {
        "ipv4": ["10.231.77.10", "10.231.77.0/24"], "ipv6": ["fd00::10"],
        "all": ["10.231.77.10", "fd00::10", "10.231.77.0/24"]}


@pytest.mark.parametrize("sources, message", [
    ([], "llama_rpc_server_allowed_sources is empty"),
    (["head.lab"], "entry 'head.lab' is not an IP address or prefix"),
    (["10.0.0.1; accept"], "entry '10.0.0.1; accept' is not an IP address"),
])
def test_firewall_sources_refused(sources, message):
    with pytest.raises(LlamaServerError, match=re.escape(message)):
        firewall_sources(sources)


def test_no_other_firewall_no_problem():
    assert foreign_firewall_problem([], [50052], ["10.0.0.1"]) is None


def test_firewalld_problem_gives_the_commands():
    message = foreign_firewall_problem(["firewalld.service"], [50052, 50053], ["10.0.0.1"])
    assert message.startswith("firewalld.service is active on this node")
    assert ("firewall-cmd --permanent --add-rich-rule='rule family=\"ipv4\" source address=\"10.0.0.1\" "
            "port port=\"50053\" protocol=\"tcp\" accept'") in message
    assert message.count("firewall-cmd --reload") == 1
    assert "llama_rpc_server_other_firewall: opened" in message


def test_ufw_problem_gives_the_commands():
    message = foreign_firewall_problem(["ufw.service"], [50052], ["fd00::10"])
    assert "ufw allow proto tcp from fd00::10 to any port 50052" in message
    assert "firewall-cmd" not in message


def test_stale_units_are_instances_beyond_the_plan():
    names = ["gpulab-rpc-server@2.service", "gpulab-rpc-server@0.service", "gpulab-rpc-server@10.service",
             "gpulab-rpc-server-firewall.service", "gpulab-rpc-server@.service", "other@1.service", "ssh.service"]
    assert stale_units(names, "gpulab-rpc-server", [0, 1]) == ["gpulab-rpc-server@2.service", "gpulab-rpc-server@10.service"]
    assert stale_units(names, "gpulab-rpc-server", [0, 2, 10]) == []


def test_stale_units_escape_the_unit_name():
    assert stale_units(["gpulabXrpc@1.service"], "gpulab.rpc", [0]) == []


def test_meminfo_total_in_mib():
    assert meminfo_total_mib("MemTotal:       16384000 kB\nMemFree:  1 kB\n") == 16000
    assert meminfo_total_mib("MemFree:  1 kB\n") is None
    assert meminfo_total_mib("MemTotal: lots kB\n") is None
