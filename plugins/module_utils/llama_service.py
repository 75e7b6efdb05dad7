# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the services of llama.cpp (the head and the RPC servers) share beyond service_files: their
error, the deployed build both serve, the exports every wrapper gets (CUDA order, RDMA), the head's
wrapper, sandbox and unit lines, and the restart directives the installed systemd knows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.gpulab.inference.plugins.module_utils import service_files
from ansible_collections.gpulab.inference.plugins.module_utils.llama_build_info import BUILD_ID_PATTERN, lockstep_summary

# What a deployed build's BUILD_INFO.json may name as its RPC server binary.
FILE_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,254}\Z")


class LlamaServerError(ValueError):
    """Bad input: the message names the offending value and what to do."""


# --- The deployed build --------------------------------------------------------

def deployed_build(link, target, build_info_text):
    """What the serving roles need of the deployed build, read once for both.

    link: the `current` link (or a build directory); target: where it resolves; build_info_text:
    the bytes or text of its BUILD_INFO.json. Returns build_id, build_dir, cuda and the
    rpc_server_binary name (ggml-rpc-server in current llama.cpp, rpc-server in older ones).
    """
    if isinstance(build_info_text, bytes):
        try:
            build_info_text = build_info_text.decode("utf-8")
        except UnicodeDecodeError:
            raise LlamaServerError("%s/BUILD_INFO.json is not UTF-8 text; rebuild or redeploy the build" % link)
    try:
        info = json.loads(build_info_text)
    except ValueError as exc:
        raise LlamaServerError("%s/BUILD_INFO.json is not valid JSON (%s); rebuild or redeploy the build" % (link, exc))
    if not isinstance(info, dict):
        raise LlamaServerError("%s/BUILD_INFO.json must hold a JSON object" % link)
    build_id = info.get("build_id")
    if not isinstance(build_id, str) or not BUILD_ID_PATTERN.match(build_id):
        raise LlamaServerError("%s/BUILD_INFO.json build_id %r is not a 12-digit hex build id" % (link, build_id))
    binary = info.get("rpc_server_binary") or "rpc-server"
    if not isinstance(binary, str) or not FILE_NAME_PATTERN.match(binary):
        raise LlamaServerError("%s/BUILD_INFO.json rpc_server_binary %r is not a file name" % (link, binary))
    return {"build_id": build_id, "build_dir": str(target), "cuda": bool(info.get("cuda")),
            "rpc_server_binary": binary, "lockstep": lockstep_summary(info)}


def read_deployed_build(link):
    """deployed_build of the build behind link (the `current` link), read from disk.

    The one place both serving modules read the deployed build from; raises LlamaServerError
    naming the path when it is missing or unreadable.
    """
    info_path = os.path.join(link, "BUILD_INFO.json")
    if not os.path.exists(link):
        raise LlamaServerError("%s does not exist: deploy a llama.cpp build first (roles llama_cpp_build and "
                               "llama_cpp_distribute)" % link)
    try:
        with open(info_path, "rb") as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        raise LlamaServerError("cannot read %s (%s): redeploy the build" % (info_path, exc.strerror or exc))
    return deployed_build(link, os.path.realpath(link), text)


# --- Wrappers and units ----------------------------------------------------------

CUDA_ORDER_WHY = "nvidia-smi numbers GPUs by PCI bus; make CUDA use the same order."
RDMA_WHY = "RDMA transport of llama.cpp RPC (role roce, fabric.json): the verbs device and RoCE v2 GID."


def rdma_exports(environment, variable):
    """The GGML_RDMA_* exports of a wrapper, the comment above the first."""
    return [service_files.env(name, value, variable, LlamaServerError, RDMA_WHY if position == 0 else "")
            for position, (name, value) in enumerate((environment or {}).items())]


def head_wrapper_lines(devices, split, rdma_environment=None, backend_sampling=None):
    """What the head's wrapper renders besides its fixed script: `devices`, a comment line per device in
    llama.cpp's order with its split; `sampling`, the backend-sampling choice (none without one);
    `environment`, the exports (CUDA order, RDMA)."""
    error = LlamaServerError
    lines = []
    for device, share in zip(devices, split):
        where = "%s (%s)" % (device["endpoint"], device["host"]) if device["kind"] == "rpc" else "local GPU"
        lines.append(service_files.checked("  %s: %s, split %s" % (device["name"], where, share),
                                           "a device of the workers' servers.json", error))
    sampling = []
    if backend_sampling:
        sampling.append(service_files.checked(
            "Backend sampling: %s (%s)." % ("on" if backend_sampling["enabled"] else "off",
                                            " ".join(str(backend_sampling["reason"]).split("\n"))),
            "the backend-sampling reason", error))
    environment = [service_files.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "CUDA_DEVICE_ORDER", error, CUDA_ORDER_WHY)]
    return {"devices": lines, "sampling": sampling,
            "environment": environment + rdma_exports(rdma_environment, "fabric.json")}


def head_unit_sandbox(hardening, cuda_access, cuda_devices):
    """The head's hardening lines (None leaves a directive out) and DeviceAllow= where it uses CUDA."""
    error = LlamaServerError
    lines = service_files.hardening(hardening or {}, "llama_server_hardening_overrides", error)
    if cuda_access:
        lines += service_files.device_allow(cuda_devices, "llama_server_cuda_devices", error)
    return lines


def head_unit(settings, devices, unit_directives, service_directives, sandbox):
    """The head's unit <unit>.service (service_files.unit_file).

    settings: user (empty: no User= and Group=), group (empty: the user's), unit, bin_dir; devices:
    llama.cpp's order (their names go in the first comment); *_directives: [key, value] pairs (the
    restart directives, the fabric's with the service's); sandbox: head_unit_sandbox's lines.
    """
    error = LlamaServerError
    user = service_files.checked(settings.get("user"), "llama_server_user", error)
    group = service_files.checked(settings.get("group") or user, "llama_server_group", error)
    unit = service_files.checked(settings["unit"], "llama_server_unit_name", error)
    bin_dir = service_files.checked(settings["bin_dir"], "llama_server_bin_dir", error)
    names = ", ".join(service_files.checked(device["name"], "a device of the workers' servers.json", error)
                      for device in devices)
    comments = ["llama-server: runs %s/%s; layers on %s." % (bin_dir, unit, names),
                "It restarts forever with no start limit: the wrapper waits for the workers before each start and",
                "exits when a worker connection is lost, so the head comes back by itself after a worker outage or a",
                "cluster reboot in any order."]
    section_unit = ["Description=llama-server inference head (gpulab.inference)",
                    "Wants=network-online.target", "After=network-online.target"]
    section_unit += service_files.directives(unit_directives, "the restart directives", error)
    section_service = ["Type=simple"]
    if user:
        section_service += ["User=%s" % user, "Group=%s" % group]
    section_service.append("ExecStart=%s/%s" % (bin_dir, unit))
    section_service += service_files.directives(service_directives, "the restart and fabric directives", error)
    section_service += [
        "# The wrapper stops llama-server and its own probes and sleeps on SIGTERM, waits for them and exits",
        "# 0, so a stop ends inactive within seconds (cgroup v1 too) instead of at TimeoutStopSec.",
        "KillMode=mixed",
        "# Hardening: gpulab_service_hardening, with llama_server_hardening_overrides applied."]
    section_service += [service_files.checked(line, "llama_server_hardening_overrides", error) for line in sandbox]
    return service_files.unit_file(comments, section_unit, section_service, ["WantedBy=multi-user.target"], error)


# --- Restarts and unit state -------------------------------------------------------

# RestartSteps= and RestartMaxDelaySec= appeared in systemd 254 (NEWS of v254); Debian 12 has 252,
# where they would be unknown keys (a warning at every load and in systemd-analyze verify).
RESTART_BACKOFF_SYSTEMD = 254


def restart_directives(systemd_version, restart_sec, max_delay_s, steps=5):
    """systemd directives that restart a service forever, with backoff where systemd has it.

    Returns (unit, service): lists of (key, value). StartLimitIntervalSec=0 turns the start
    limit off, so a long outage never leaves the unit failed for good.
    """
    if restart_sec <= 0:
        raise LlamaServerError("restart_sec is %r; give the first restart delay in seconds, > 0" % (restart_sec,))
    if max_delay_s < restart_sec:
        raise LlamaServerError("restart_max_delay_s (%r s) is below restart_sec (%r s): the largest restart delay "
                               "cannot be shorter than the first" % (max_delay_s, restart_sec))
    unit = [("StartLimitIntervalSec", "0")]
    service = [("Restart", "always"), ("RestartSec", str(restart_sec))]
    if systemd_version >= RESTART_BACKOFF_SYSTEMD and max_delay_s > restart_sec:
        service += [("RestartSteps", str(steps)), ("RestartMaxDelaySec", str(max_delay_s))]
    return unit, service
