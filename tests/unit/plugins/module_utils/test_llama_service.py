# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What llama.cpp's services share (llama_service): the head's wrapper and sandbox lines, the restart
directives per systemd version, and a unit's state while the head loads."""

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import LlamaServerError
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    head_unit_sandbox,
    head_wrapper_lines,
    parse_unit_properties,
    restart_directives,
    unit_failure,
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


SHOW_RUNNING = "ActiveState=active\nSubState=running\nNRestarts=2\nResult=success\nExecMainStatus=0\n"


def test_unit_properties():
    assert parse_unit_properties(SHOW_RUNNING)["NRestarts"] == "2"


@pytest.mark.parametrize("text, restarts_before, reason", [
    (SHOW_RUNNING, 2, None),
    ("ActiveState=activating\nSubState=auto-restart\nNRestarts=2\nResult=exit-code\nExecMainStatus=69", 2,
     "the service exited and waits to be restarted (result exit-code, exit status 69)"),
    ("ActiveState=failed\nSubState=failed\nNRestarts=0\nResult=exit-code\nExecMainStatus=1", 0,
     "the unit failed (result exit-code, exit status 1)"),
    (SHOW_RUNNING, 1, "the service was restarted 1 time(s) while loading"),
    ("ActiveState=inactive\nSubState=dead\nNRestarts=0", 0, "the unit is inactive"),
])
def test_unit_failure(text, restarts_before, reason):
    found = unit_failure(parse_unit_properties(text), restarts_before)
    if reason is None:
        assert found is None
    else:
        assert found.startswith(reason)
