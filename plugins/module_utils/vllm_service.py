# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's service on a node: the wrapper (the API key read from its file, Ray started where the nodes
meet over Ray, then `vllm serve`), the environment file and the unit, as vllm_plan's plan and
serve_arguments decide them. Errors are vllm_plan's VllmPlanError naming the variable to fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpulab.inference.plugins.module_utils import service_files
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import EndpointError, endpoint, port_number
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import MANAGERS, runs_it_as
from ansible_collections.gpulab.inference.plugins.module_utils.vllm_plan import VllmPlanError


INSTALLS = ("pip", "preinstalled", "container")
# What the service always gets; HOME holds the Hugging Face, torch.compile and Triton caches.
SERVICE_ENVIRONMENT = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("HF_HUB_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"),
                       ("DO_NOT_TRACK", "1"))


def _service_value(service, key, variable):
    return service_files.checked(service.get(key), variable, VllmPlanError)


def service_environment(service):
    """The service's environment, in the environment file's order: the fixed settings, HOME (the cache
    directory, /root inside the container), VLLM_HOST_IP (the node's fabric address, where it has one),
    then vllm_server_environment sorted by name. The service manager reads it from the file or from the
    program (later entries win there, as in the file)."""
    error = VllmPlanError
    home = "/root" if service["install"] == "container" else _service_value(service, "cache_dir", "vllm_server_cache_dir")
    fixed = list(SERVICE_ENVIRONMENT[:1]) + [("HOME", home)] + list(SERVICE_ENVIRONMENT[1:])
    entries = [service_files.env(name, value, "vllm_server_cache_dir", error) for name, value in fixed]
    if service.get("fabric_address"):
        entries.append(service_files.env("VLLM_HOST_IP", service["fabric_address"], "gpulab_fabric_address", error))
    user = service.get("environment") or {}
    entries += [service_files.env(name, user[name], "vllm_server_environment", error) for name in sorted(user)]
    return entries


def _node_address(service, what):
    address = service.get("fabric_address")
    if not address:
        raise VllmPlanError("%s needs this node's address on the fabric: set gpulab_fabric_address for %s"
                            % (what, service.get("node_name") or "this node"))
    return _service_value(service, "fabric_address", "gpulab_fabric_address")


def service_wrapper(service, plan_info, node_role, serve_args):
    """The wrapper (service_files.wrapper): comments, the API key read from its file, Ray's head
    started first where the nodes meet over Ray, and the last command exec'd with "$@": `vllm serve`
    on the head and its followers, `ray start --block` (joining the head's cluster) on a Ray worker.

    service: the module's service option; plan_info: label, nodes, estimate and model_path.
    """
    error = VllmPlanError
    user = _service_value(service, "user", "vllm_server_user")
    unit = _service_value(service, "unit", "vllm_server_unit_name")
    bin_dir = _service_value(service, "bin_dir", "vllm_server_bin_dir")
    env_file = _service_value(service, "env_file", "vllm_server_config_dir")
    key_file = _service_value(service, "api_key_file", "vllm_server_config_dir")
    vllm = [service_files.checked(arg, "the vLLM command of vllm_server_install", error) for arg in service["vllm_command"]]
    ray = [service_files.checked(arg, "the Ray command of vllm_server_install", error) for arg in service["ray_command"]]
    estimate = plan_info.get("estimate") or {}
    node = service.get("node_name") or "this node"
    comments = [
        "vLLM on %s, %s of %s node(s): %s of %s" % (node, node_role, plan_info["nodes"], plan_info["label"], plan_info["model_path"]),
        "planned per GPU: %s GiB of weights, %s GiB of KV cache (%s tokens)"
        % (estimate.get("weights_gib"), estimate.get("kv_cache_gib"), estimate.get("kv_tokens_per_gpu")),
    ]
    by_hand = "sudo -u %s env $(grep -v '^#' %s) %s/%s" % (user, env_file, bin_dir, unit)
    comments += runs_it_as(service["service_manager"], user, unit, env_file, by_hand)
    secrets = [{"name": "VLLM_API_KEY", "path": key_file, "why": ""}] if key_file else []
    preludes = []
    ray_port = str(port_number(service.get("ray_port"), "vllm_server_ray_port"))
    if node_role == "ray-worker":
        head = service.get("master_addr")
        if not head:
            raise VllmPlanError("a Ray worker needs the head's address (master_addr): set gpulab_fabric_address on the head")
        argv = [ray + ["start", "--block", "--disable-usage-stats"], ["--address", endpoint(head, ray_port)],
                ["--node-ip-address", _node_address(service, "a Ray worker")]]
    else:
        if service["distributed_backend"] == "ray" and plan_info["nodes"] > 1:
            preludes.append([ray + ["start", "--head", "--disable-usage-stats"],
                             ["--port", ray_port, "--node-ip-address", _node_address(service, "the Ray head")]])
        argv = [vllm] + service_files.argument_lines(serve_args)
    result = service_files.wrapper(comments, [], argv, error, preludes=preludes, file_environment=secrets)
    result["name"] = unit
    return result


def service_unit(service, plan_info, node_role):
    """The unit (service_files.unit_file): restarts after a crash within a start limit, the environment
    files, and outside a container the account, the hardening (None leaves a directive out), the
    cache directory and the NVIDIA devices."""
    error = VllmPlanError
    unit = _service_value(service, "unit", "vllm_server_unit_name")
    bin_dir = _service_value(service, "bin_dir", "vllm_server_bin_dir")
    numbers = {}
    for key, variable in (("start_limit_interval_s", "vllm_server_start_limit_interval_s"),
                          ("start_limit_burst", "vllm_server_start_limit_burst"),
                          ("restart_sec", "vllm_server_restart_sec")):
        value = service.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise VllmPlanError("%s %r is not a whole number of 0 or more" % (variable, value))
        numbers[key] = value
    in_container = service["install"] == "container"
    section_unit = ["Description=vLLM %s (gpulab.inference)" % node_role, "Wants=network-online.target",
                    "After=network-online.target", "StartLimitIntervalSec=%d" % numbers["start_limit_interval_s"],
                    "StartLimitBurst=%d" % numbers["start_limit_burst"]]
    section_service = ["Type=simple"]
    if not in_container:
        section_service += ["User=%s" % _service_value(service, "user", "vllm_server_user"),
                            "Group=%s" % _service_value(service, "group", "vllm_server_group")]
    section_service += [
        "EnvironmentFile=%s" % _service_value(service, "env_file", "vllm_server_config_dir"),
        "EnvironmentFile=-%s" % _service_value(service, "rdma_env_file", "vllm_server_rdma_env_file"),
        "ExecStart=%s/%s" % (bin_dir, unit),
        "Restart=on-failure",
        "RestartSec=%d" % numbers["restart_sec"],
        "# vLLM's engine cores and workers are child processes: stop them all, give them time to free the GPUs.",
        "KillMode=mixed",
        "TimeoutStopSec=120",
    ]
    if not in_container:
        section_service.append("# Hardening: gpulab_service_hardening with vllm_server_hardening_overrides applied.")
        section_service += service_files.hardening(service.get("hardening") or {}, "vllm_server_hardening_overrides", error)
        section_service.append("ReadWritePaths=%s" % _service_value(service, "cache_dir", "vllm_server_cache_dir"))
        section_service += service_files.device_allow(service.get("cuda_devices"), "vllm_server_cuda_devices", error)
    comments = ["vLLM (%s, %s): runs %s/%s." % (plan_info["label"], node_role, bin_dir, unit)]
    return service_files.unit_file(comments, section_unit, section_service, ["WantedBy=multi-user.target"], error)


def service_files_of(service, plan_info, node_role, serve_args):
    """Everything the role renders for this node's service: wrapper, environment (file and program),
    unit, and the account the program runs as under the service manager (none inside the container: root there)."""
    if service.get("service_manager") not in MANAGERS:
        raise VllmPlanError("vllm_server_service_manager is %r; use systemd or supervisor" % (service.get("service_manager"),))
    if service.get("install") not in INSTALLS:
        raise VllmPlanError("vllm_server_install is %r; use pip, preinstalled or container" % (service.get("install"),))
    try:
        return {
            "wrapper": service_wrapper(service, plan_info, node_role, serve_args),
            "environment": service_environment(service),
            "unit_file": service_unit(service, plan_info, node_role),
            "program_user": "" if service["install"] == "container" else _service_value(service, "user", "vllm_server_user"),
        }
    except EndpointError as exc:  # the shared address and port rules
        raise VllmPlanError(str(exc))
