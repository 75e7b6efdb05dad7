# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's wrapper, environment file and unit as the plan decides them (vllm_service.service_files_of):
the vllm_server templates only render these lists."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.vllm_plan import VllmPlanError
from ansible_collections.gpulab.inference.plugins.module_utils.vllm_service import service_files_of

VLLM = ["/opt/gpulab/vllm/venv-0.24.0/bin/vllm"]
RAY = ["/opt/gpulab/vllm/venv-0.24.0/bin/ray"]
SERVE = ["serve", "/srv/m", "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "2", "--enforce-eager"]
INFO = {"label": "TP2 x PP1 x DP1", "nodes": 1, "model_path": "/srv/m",
        "estimate": {"weights_gib": 12.5, "kv_cache_gib": 3.0, "kv_tokens_per_gpu": 1000}}
HARDENING = {"NoNewPrivileges": "yes", "PrivateTmp": None, "CapabilityBoundingSet": ""}


def service(**changes):
    base = {"node_name": "node-a", "install": "pip", "service_manager": "systemd", "vllm_command": VLLM,
            "ray_command": RAY, "ray_port": 6379, "fabric_address": "", "user": "gpulab-vllm", "group": "gpulab-vllm",
            "unit": "gpulab-vllm", "bin_dir": "/opt/gpulab/bin", "env_file": "/etc/gpulab/vllm/environment",
            "rdma_env_file": "/etc/gpulab/rdma.env", "api_key_file": "", "cache_dir": "/var/cache/gpulab/vllm",
            "environment": {}, "hardening": HARDENING, "cuda_devices": ["char-nvidia", "char-nvidia-uvm"],
            "restart_sec": 30, "start_limit_burst": 3, "start_limit_interval_s": 1800, "master_addr": None,
            "distributed_backend": "mp"}
    base.update(changes)
    return base


def env(*pairs):
    return [{"name": name, "value": value, "why": ""} for name, value in pairs]


BASE_ENV = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("HOME", "/var/cache/gpulab/vllm"), ("HF_HUB_OFFLINE", "1"),
            ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))


def test_one_node_head_under_systemd():
    files = service_files_of(service(), INFO, "head", SERVE)
    assert files["wrapper"] == {
        "comments": [
            "vLLM on node-a, head of 1 node(s): TP2 x PP1 x DP1 of /srv/m",
            "planned per GPU: 12.5 GiB of weights, 3.0 GiB of KV cache (1000 tokens)",
            "systemd runs it as gpulab-vllm (gpulab-vllm.service) with /etc/gpulab/vllm/environment;",
            "to run it by hand, stop the unit and: sudo -u gpulab-vllm env $(grep -v '^#' /etc/gpulab/vllm/environment) "
            "/opt/gpulab/bin/gpulab-vllm",
        ],
        "environment": [],
        "file_environment": [],
        "preludes": [],
        "argv_lines": [VLLM, ["serve", "/srv/m"], ["--host", "127.0.0.1"], ["--port", "8000"],
                       ["--tensor-parallel-size", "2"], ["--enforce-eager"]],
        "argv": VLLM + SERVE,
        "name": "gpulab-vllm",
    }
    assert files["environment"] == env(*BASE_ENV)
    assert files["program_user"] == "gpulab-vllm"
    assert files["unit_file"] == {
        "comments": ["vLLM (TP2 x PP1 x DP1, head): runs /opt/gpulab/bin/gpulab-vllm."],
        "unit": ["Description=vLLM head (gpulab.inference)", "Wants=network-online.target", "After=network-online.target",
                 "StartLimitIntervalSec=1800", "StartLimitBurst=3"],
        "service": ["Type=simple", "User=gpulab-vllm", "Group=gpulab-vllm",
                    "EnvironmentFile=/etc/gpulab/vllm/environment", "EnvironmentFile=-/etc/gpulab/rdma.env",
                    "ExecStart=/opt/gpulab/bin/gpulab-vllm", "Restart=on-failure", "RestartSec=30",
                    "# vLLM's engine cores and workers are child processes: stop them all, give them time to free the GPUs.",
                    "KillMode=mixed", "TimeoutStopSec=120",
                    "# Hardening: gpulab_service_hardening with vllm_server_hardening_overrides applied.",
                    "NoNewPrivileges=yes", "CapabilityBoundingSet=", "ReadWritePaths=/var/cache/gpulab/vllm",
                    "DeviceAllow=char-nvidia rw", "DeviceAllow=char-nvidia-uvm rw"],
        "install": ["WantedBy=multi-user.target"],
    }


def test_supervisor_api_key_fabric_address_and_more_environment():
    files = service_files_of(service(service_manager="supervisor", api_key_file="/etc/gpulab/vllm/api-key",
                                     fabric_address="10.231.77.10", environment={"VLLM_USE_DEEP_GEMM": "0", "A": "x y"}),
                             INFO, "head", SERVE)
    assert files["wrapper"]["comments"][2:] == [
        "supervisord runs it as gpulab-vllm (program gpulab-vllm) with the environment of /etc/gpulab/vllm/environment;",
        "to run it by hand, stop the program and: sudo -u gpulab-vllm env $(grep -v '^#' /etc/gpulab/vllm/environment) "
        "/opt/gpulab/bin/gpulab-vllm"]
    assert files["wrapper"]["file_environment"] == [{"name": "VLLM_API_KEY", "path": "/etc/gpulab/vllm/api-key", "why": ""}]
    assert files["environment"] == env(*BASE_ENV + (("VLLM_HOST_IP", "10.231.77.10"), ("A", "x y"),
                                                    ("VLLM_USE_DEEP_GEMM", "0")))


def test_in_a_container_root_runs_it_without_account_or_hardening():
    podman = ["podman", "run", "--rm", "--env", "VLLM_API_KEY", "--entrypoint", "vllm", "docker.io/vllm/vllm-openai:v0.24.0"]
    files = service_files_of(service(install="container", vllm_command=podman), INFO, "head", SERVE)
    assert files["program_user"] == ""
    assert files["environment"][1] == {"name": "HOME", "value": "/root", "why": ""}
    assert files["wrapper"]["argv_lines"][0] == podman
    assert files["unit_file"]["service"] == [
        "Type=simple", "EnvironmentFile=/etc/gpulab/vllm/environment", "EnvironmentFile=-/etc/gpulab/rdma.env",
        "ExecStart=/opt/gpulab/bin/gpulab-vllm", "Restart=on-failure", "RestartSec=30",
        "# vLLM's engine cores and workers are child processes: stop them all, give them time to free the GPUs.",
        "KillMode=mixed", "TimeoutStopSec=120"]


TWO_NODES = dict(INFO, nodes=2)


def test_the_ray_head_starts_ray_before_vllm():
    files = service_files_of(service(distributed_backend="ray", master_addr="10.231.77.10", fabric_address="10.231.77.10"),
                             TWO_NODES, "head", SERVE)
    assert files["wrapper"]["preludes"] == [[RAY + ["start", "--head", "--disable-usage-stats"],
                                             ["--port", "6379", "--node-ip-address", "10.231.77.10"]]]
    assert files["wrapper"]["argv"] == VLLM + SERVE


def test_the_mp_head_of_two_nodes_starts_no_ray():
    files = service_files_of(service(master_addr="10.231.77.10", fabric_address="10.231.77.10"), TWO_NODES, "head", SERVE)
    assert files["wrapper"]["preludes"] == []


def test_a_ray_worker_joins_the_head_and_runs_no_vllm():
    files = service_files_of(service(distributed_backend="ray", master_addr="fd00::10", fabric_address="fd00::11"),
                             TWO_NODES, "ray-worker", [])
    assert files["wrapper"]["preludes"] == []
    assert files["wrapper"]["argv_lines"] == [RAY + ["start", "--block", "--disable-usage-stats"],
                                              ["--address", "[fd00::10]:6379"], ["--node-ip-address", "fd00::11"]]
    assert files["unit_file"]["unit"][0] == "Description=vLLM ray-worker (gpulab.inference)"


@pytest.mark.parametrize("changes, role, message", [
    ({"distributed_backend": "ray", "master_addr": "10.231.77.10"}, "ray-worker",
     "a Ray worker needs this node's address on the fabric: set gpulab_fabric_address for node-a"),
    ({"distributed_backend": "ray", "fabric_address": "10.231.77.11"}, "ray-worker",
     "a Ray worker needs the head's address (master_addr): set gpulab_fabric_address on the head"),
    ({"distributed_backend": "ray", "master_addr": "10.231.77.10"}, "head",
     "the Ray head needs this node's address on the fabric: set gpulab_fabric_address for node-a"),
    ({"ray_port": 70000}, "head", "vllm_server_ray_port 70000 is out of range (1-65535)"),
    ({"restart_sec": -1}, "head", "vllm_server_restart_sec -1 is not a whole number of 0 or more"),
    ({"service_manager": "runit"}, "head", "vllm_server_service_manager is 'runit'; use systemd or supervisor"),
])
def test_settings_that_cannot_work_are_refused(changes, role, message):
    with pytest.raises(VllmPlanError) as raised:
        service_files_of(service(**changes), TWO_NODES, role, SERVE)
    assert str(raised.value) == message


@pytest.mark.parametrize("changes, variable", [
    ({"environment": {"VLLM_X": "1\nLD_PRELOAD=/tmp/x.so"}}, "vllm_server_environment"),
    ({"environment": {"NOT-A-NAME": "1"}}, "vllm_server_environment"),
    ({"fabric_address": "10.0.0.1\n"}, "gpulab_fabric_address"),
    ({"cache_dir": "/var/cache\n"}, "vllm_server_cache_dir"),
    ({"user": "gpulab-vllm\nUser=root"}, "vllm_server_user"),
    ({"hardening": {"ProtectHome": "yes\nExecStartPre=/bin/sh"}}, "vllm_server_hardening_overrides"),
    ({"cuda_devices": ["char-nvidia\r"]}, "vllm_server_cuda_devices"),
    ({"vllm_command": ["/opt/vllm\n"]}, "the vLLM command of vllm_server_install"),
])
def test_a_newline_is_refused_naming_the_variable(changes, variable):
    with pytest.raises(VllmPlanError) as raised:
        service_files_of(service(**changes), INFO, "head", SERVE)
    assert str(raised.value).startswith(variable + " ")
