# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What llama.cpp's services share (llama_service): the deployed build, the head's wrapper, sandbox and
unit lines, and the restart directives per systemd version."""

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    LlamaServerError,
    deployed_build,
    head_unit,
    head_unit_sandbox,
    head_wrapper_lines,
    read_deployed_build,
    restart_directives,
)
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import parse_version

RDMA = {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"}
ORDER = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID",
         "why": "nvidia-smi numbers GPUs by PCI bus; make CUDA use the same order."}


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


HEAD = {"user": "gpulab-llama", "group": "gpulab-llama", "unit": "gpulab-llama-server", "bin_dir": "/opt/gpulab/bin"}


def test_head_unit_carries_the_restart_fabric_and_sandbox_lines_in_their_places():
    unit = head_unit(HEAD, DEVICES, [["StartLimitIntervalSec", "0"]],
                     [["Restart", "always"], ["RestartSec", "5"], ["LimitMEMLOCK", "infinity"]],
                     ["NoNewPrivileges=yes", "DeviceAllow=char-nvidia rw"])
    assert unit == {
        "comments": [
            "llama-server: runs /opt/gpulab/bin/gpulab-llama-server; layers on RPC0, CUDA0.",
            "It restarts forever with no start limit: the wrapper waits for the workers before each start and",
            "exits when a worker connection is lost, so the head comes back by itself after a worker outage or a",
            "cluster reboot in any order."],
        "unit": ["Description=llama-server inference head (gpulab.inference)", "Wants=network-online.target",
                 "After=network-online.target", "StartLimitIntervalSec=0"],
        "service": [
            "Type=simple", "User=gpulab-llama", "Group=gpulab-llama", "ExecStart=/opt/gpulab/bin/gpulab-llama-server",
            "Restart=always", "RestartSec=5", "LimitMEMLOCK=infinity",
            "# The wrapper stops llama-server and its own probes and sleeps on SIGTERM, waits for them and exits",
            "# 0, so a stop ends inactive within seconds (cgroup v1 too) instead of at TimeoutStopSec.",
            "KillMode=mixed",
            "# Hardening: gpulab_service_hardening, with llama_server_hardening_overrides applied.",
            "NoNewPrivileges=yes", "DeviceAllow=char-nvidia rw"],
        "install": ["WantedBy=multi-user.target"],
    }


def test_head_unit_group_defaults_to_the_user_and_no_user_means_no_account_lines():
    service = head_unit(dict(HEAD, group=""), [], [], [], [])["service"]
    assert service[1:3] == ["User=gpulab-llama", "Group=gpulab-llama"]
    service = head_unit(dict(HEAD, user="", group=""), [], [], [], [])["service"]
    assert not [line for line in service if line.startswith(("User=", "Group="))]


@pytest.mark.parametrize("settings, unit_directives, variable", [
    (dict(HEAD, bin_dir="/opt/gpulab/bin\nExecStartPre=/bin/sh"), [], "llama_server_bin_dir"),
    (dict(HEAD, user="gpulab-llama\n"), [], "llama_server_user"),
    (dict(HEAD, unit="gpulab-llama-server\r"), [], "llama_server_unit_name"),
    (HEAD, [["Start Limit", "0"]], "the restart directives"),
])
def test_head_unit_refuses_a_value_that_would_break_the_unit(settings, unit_directives, variable):
    with pytest.raises(LlamaServerError, match="^" + variable):
        head_unit(settings, DEVICES, unit_directives, [], [])


@pytest.mark.parametrize("text, version", [
    ("systemd 252 (252.30-1~deb12u2)\n+PAM +AUDIT +SELINUX", 252),
    ("systemd 255 (255.4-1ubuntu8)\n+PAM", 255),
    ("", 0),
    ("not systemd", 0),
])
def test_systemd_version(text, version):
    # role common's gpulab_service_manager_version, asked by module service_manager
    assert parse_version("systemd", text) == version
    assert parse_version("supervisor", text) == 0


def test_restart_forever_without_backoff_on_debian_12():
    assert restart_directives(252, 5, 30) == (
        [("StartLimitIntervalSec", "0")], [("Restart", "always"), ("RestartSec", "5")])


def test_restart_with_backoff_from_systemd_254():
    unit, service = restart_directives(254, 5, 30)
    assert unit == [("StartLimitIntervalSec", "0")]
    assert service == [("Restart", "always"), ("RestartSec", "5"), ("RestartSteps", "5"), ("RestartMaxDelaySec", "30")]


def test_restart_settings_refused():
    with pytest.raises(LlamaServerError, match="restart_sec is 0"):
        restart_directives(252, 0, 30)
    with pytest.raises(LlamaServerError, match=re.escape("restart_max_delay_s (2 s) is below restart_sec (5 s)")):
        restart_directives(252, 5, 2)


# --- deployed build --------------------------------------------------------------

def test_deployed_build_reads_what_serving_needs():
    text = b'{"build_id": "0123456789ab", "cuda": true, "rpc_server_binary": "ggml-rpc-server", "compiler": "gcc 12"}'
    assert deployed_build("/opt/gpulab/llama.cpp/current", "/opt/gpulab/llama.cpp/0123456789ab", text) == {
        "build_id": "0123456789ab", "build_dir": "/opt/gpulab/llama.cpp/0123456789ab", "cuda": True,
        "rpc_server_binary": "ggml-rpc-server",
        "lockstep": {"build_id": "0123456789ab", "source": None, "cpu_arch": None, "glibc_version": None, "cuda": True,
                     "nvcc_version": None}}


def test_deployed_build_of_older_llama_cpp_names_rpc_server():
    assert deployed_build("/b", "/b", '{"build_id": "0123456789ab"}')["rpc_server_binary"] == "rpc-server"


@pytest.mark.parametrize("text, message", [
    (b'{"build_id": "0123456789ab", "compiler": "\xe9"}', "BUILD_INFO.json is not UTF-8 text"),
    (b"{", "BUILD_INFO.json is not valid JSON"),
    (b"[]", "BUILD_INFO.json must hold a JSON object"),
    (b'{"build_id": "current"}', "build_id 'current' is not a 12-digit hex build id"),
    (b'{"build_id": "0123456789ab", "rpc_server_binary": "../sh"}', "rpc_server_binary '../sh' is not a file name"),
    (b'{"build_id": "0123456789ab\\n"}', "build_id '0123456789ab\\n' is not a 12-digit hex build id"),
    (b'{"build_id": 123456789012}', "build_id 123456789012 is not a 12-digit hex build id"),
    (b'{"build_id": "0123456789ab", "rpc_server_binary": "rpc-server\\nid"}', "is not a file name"),
    (b'{"build_id": "0123456789ab", "rpc_server_binary": ["rpc-server"]}', "is not a file name"),
])
def test_deployed_build_refuses_bad_build_info(text, message):
    with pytest.raises(LlamaServerError, match=re.escape("/b/BUILD_INFO.json")):
        deployed_build("/b", "/b", text)
    with pytest.raises(LlamaServerError, match=re.escape(message)):
        deployed_build("/b", "/b", text)


def test_read_deployed_build_follows_the_link(tmp_path):
    target = tmp_path / "0123456789ab"
    target.mkdir()
    (target / "BUILD_INFO.json").write_text('{"build_id": "0123456789ab", "cuda": false}')
    (tmp_path / "current").symlink_to(target)
    assert read_deployed_build(str(tmp_path / "current"))["build_dir"] == str(target)


def test_read_deployed_build_names_what_is_missing(tmp_path):
    with pytest.raises(LlamaServerError, match="current does not exist: deploy a llama.cpp build first"):
        read_deployed_build(str(tmp_path / "current"))
    with pytest.raises(LlamaServerError, match=re.escape("cannot read %s/BUILD_INFO.json" % tmp_path)):
        read_deployed_build(str(tmp_path))
