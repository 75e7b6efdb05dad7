# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the services of llama.cpp (the head and the RPC servers) share beyond service_files: the
exports every wrapper gets (CUDA order, RDMA), the head's wrapper and sandbox lines, the restart
directives the installed systemd knows, and reading a unit's state while the head loads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gpulab.inference.plugins.module_utils import service_files
from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import LlamaServerError
from ansible_collections.gpulab.inference.plugins.module_utils.service_status import show_properties


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


# A unit's properties as systemd shows them (-p A -p B) -> {A: value, B: value}: service_status's one parser of them.
parse_unit_properties = show_properties


def unit_failure(props, restarts_before=0):
    """Why a unit that should be loading a model is not, or None while it may still come up.

    props: parse_unit_properties of ActiveState, SubState, NRestarts, Result, ExecMainStatus.
    A unit that failed, sits in auto-restart, or restarted since the wait began has failed.
    """
    state = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    try:
        restarts = int(props.get("NRestarts") or 0)
    except ValueError:
        restarts = 0
    detail = "result %s, exit status %s" % (props.get("Result", "?"), props.get("ExecMainStatus", "?"))
    if state == "failed":
        return "the unit failed (%s)" % detail
    if sub == "auto-restart":
        return "the service exited and waits to be restarted (%s)" % detail
    if restarts > restarts_before:
        return "the service was restarted %d time(s) while loading (%s)" % (restarts - restarts_before, detail)
    if state in ("inactive", "deactivating"):
        return "the unit is %s (%s)" % (state, detail)
    return None
