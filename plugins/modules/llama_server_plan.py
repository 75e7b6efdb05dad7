#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_server_plan
short_description: Validate a llama-server deployment and compute its RPC list and tensor split
description:
  - Runs on the inference head before anything is changed. Checks that every shard of the model
    exists on the head, that no two RPC endpoints share an address and port, and that the tensor
    split has one entry per device.
  - Checks every worker manifest (addresses with C(ipaddress), ports 1-65535, device and unit names)
    before any value reaches the head's wrapper script, and that every worker runs the head's build
    (lockstep). Checks that the model is a GGUF file that the service account can read inside the
    unit's sandbox (C(ProtectHome=), C(PrivateTmp=)).
  - Returns the C(--rpc) list, the devices in llama.cpp's order (RPC devices first in C(--rpc)
    order, then the head's local GPUs, as src/llama.cpp C(llama_prepare_model_devices) orders
    them), the C(--tensor-split) value and a C(/health) timeout scaled to the model's size.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
  - gpulab.inference.rpc_fabric
  - gpulab.inference.gpu_inventory
options:
  build_link:
    description:
      - The head's deployed build (C(/opt/gpulab/llama.cpp/current)); its C(BUILD_INFO.json) gives the build id every
        worker must run and whether it has CUDA. Without it, no lockstep check is made.
    type: path
  model_path:
    description:
      - Model file on the head. For a split GGUF, the first shard (C(<stem>-00001-of-00006.gguf));
        every other shard must sit beside it.
    type: path
    required: true
  workers:
    description:
      - RPC workers in C(--rpc) order, the manifests C(/etc/gpulab/rpc-server/servers.json) that the
        C(llama_rpc_server) role publishes on each worker.
      - Each has C(host) (inventory name, used in messages), C(address) (the fabric address its
        servers are bound to), C(unit) (the template unit name) and C(endpoints), one entry per
        RPC server with C(instance), C(port), C(device) and C(memory_mib). Other keys are ignored.
    type: list
    elements: dict
    default: []
  local_gpus:
    description:
      - The head's own GPUs (RV(gpulab.inference.gpu_inventory#module:gpus), as gpu_preflight recorded them) that
        llama-server uses; ignored when the build of O(build_link) has no CUDA.
    type: list
    elements: dict
    default: []
  tensor_split:
    description:
      - V(equal) (one part per device), V(proportional) (memory size per device) or a list of
        numbers, one per device in llama.cpp's order.
      - Proportional uses memory size, not free memory, which shrinks once the model is loaded.
      - V(auto) takes the split the memory plan chose (O(memory_plan)), as does a C(ctx_size) of V(auto) in O(server).
    type: raw
    default: equal
  memory_plan:
    description:
      - The memory plan's record (C(memory-plan.json), role C(memory_plan)), which resolves O(tensor_split) and
        C(ctx_size) left at V(auto); null when there is none.
    type: dict
  memory_plan_path:
    description: Where O(memory_plan) was read, named in errors.
    type: str
    default: memory-plan.json
  serving_intent:
    description:
      - What the lab serves (role C(common)'s C(gpulab_serving_intent)). C(backend_sampling=auto) in O(server) is off
        under V(throughput) and follows the output layer under V(interactive) (or without an intent); C(parallel) at
        V(auto) takes the slots the memory plan set for the intent (O(memory_plan)'s C(intent)).
    type: str
    choices: [interactive, throughput]
  health_timeout_s:
    description:
      - Seconds to wait for C(/health) to answer 200. V(0) computes it from the model's size
        with O(health_timeout_floor_s) and O(health_load_rate_mib_s).
    type: int
    default: 0
  health_timeout_floor_s:
    description: Smallest computed health timeout, for small models and slow starts.
    type: int
    default: 120
  health_load_rate_mib_s:
    description: Assumed load rate (disk read and transfer to the RPC workers) in MiB/s.
    type: int
    default: 100
  host:
    description: llama-server's bind address; the module warns when it is not loopback and no API key is set.
    type: str
    default: 127.0.0.1
  api_key_set:
    description: Whether an API key is configured.
    type: bool
    default: false
  api_key_vaulted:
    description:
      - Whether the API key comes from ansible-vault (C(llama_server_api_key is vault_encrypted)).
        When V(false) with O(api_key_set=true), the module warns that the key looks like plain text.
    type: bool
    default: true
  service_user:
    description:
      - Account llama-server runs as (C(User=) of RV(unit_file)); every shard must be readable by it. An account that
        does not exist yet is judged by the files' C(other) bits. Empty skips the check and leaves C(User=) and
        C(Group=) out of the unit.
    type: str
    default: ""
  service_group:
    description: The head's group (C(Group=) of RV(unit_file)); empty takes O(service_user).
    type: str
    default: ""
  unit:
    description: Name of the head's unit without C(.service), also its wrapper's file name in O(bin_dir).
    type: str
    default: gpulab-llama-server
  bin_dir:
    description: Directory of the wrapper script C(<unit>) the unit runs.
    type: path
    default: /opt/gpulab/bin
  hardening:
    description:
      - The unit's hardening directives (a value of V(null) leaves the directive out, RV(unit_sandbox)); C(ProtectHome=)
        and C(PrivateTmp=) hide paths from the service.
    type: dict
    default: {}
  cuda_devices:
    description: Device groups the unit opens (C(DeviceAllow=)) where RV(cuda_device_access) is true.
    type: list
    elements: str
    default: []
  restart_sec:
    description:
      - First restart delay in seconds. From systemd 254 on (O(manager_version)), restarts back off in steps up to
        O(restart_max_delay_s) (C(RestartSteps=), C(RestartMaxDelaySec=)).
    type: int
    default: 5
  restart_max_delay_s:
    description: Largest restart delay in seconds, reached in steps where systemd supports it.
    type: int
    default: 30
  manager_version:
    description:
      - The service manager's major version, role C(common)'s C(gpulab_service_manager_version) (module
        C(service_manager) asks it once per play); 0 where it is unknown, which leaves the restart backoff out.
    type: int
    default: 0
  server:
    description:
      - llama-server's options, from which the module returns its whole command line as RV(argv) (the wrapper
        renders that list and decides nothing).
      - Keys C(host), C(port), C(gpu_layers), C(ctx_size), C(parallel), C(flash_attn), C(jinja), C(reasoning_format),
        C(reasoning_budget), C(metrics), C(threads), C(log_verbosity), C(api_key_file), C(extra_args) and
        C(backend_sampling) (V(auto), V(true) or V(false)); a key left out takes the llama_server role's default (C(backend_sampling=false)).
      - C(backend_sampling=auto) samples on the GPU where the output layer is on one of the head's own GPUs, and
        on the CPU where it is on an RPC device or the CPU (RV(backend_sampling) says why); under O(serving_intent)
        V(throughput) it is off.
    type: dict
"""

EXAMPLES = r"""
- name: Plan the head with two CPU workers and a synthetic model
  gpulab.inference.llama_server_plan:
    model_path: /var/lib/gpulab/models/synthetic.gguf
    workers:
      - host: node-b
        address: 10.231.77.11
        endpoints: [{port: 50052, device: CPU, memory_mib: 20000}]
  register: plan

- name: Plan the reference lab, three GPUs split 1:1:1 and six shards
  gpulab.inference.llama_server_plan:
    model_path: /srv/models/MiniMax-M2.7-Q8_0/MiniMax-M2.7-Q8_0-00001-of-00006.gguf
    workers: "{{ llama_server_workers }}"
    local_gpus: "{{ head_gpus.gpus }}"
    tensor_split: equal

- name: Split by memory size
  gpulab.inference.llama_server_plan:
    model_path: /srv/models/model.gguf
    workers: "{{ llama_server_workers }}"
    local_gpus: "{{ head_gpus.gpus }}"
    tensor_split: proportional
"""

RETURN = r"""
cuda_device_access:
  description: Whether the unit opens the NVIDIA device groups (a CUDA build on a node with GPUs).
  returned: success
  type: bool
  sample: true
argv:
  description: llama-server's whole command line, with O(server) given; the wrapper runs exactly this list.
  returned: when O(server) is given
  type: list
  elements: str
  sample: [/opt/gpulab/llama.cpp/builds/b1/bin/llama-server, --model, /srv/m.gguf, --host, 127.0.0.1, --port, "8080"]
backend_sampling:
  description: Whether llama-server samples on the device (C(enabled)), why (C(reason)) and where the output layer is.
  returned: when O(server) is given
  type: dict
  sample: {enabled: true, reason: "auto: the output layer is on CUDA0 (a GPU of the head)", output_device: CUDA0 (a GPU of the head)}
rpc:
  description: The C(--rpc) value, endpoints joined by commas (empty without workers).
  returned: success
  type: str
  sample: 10.231.77.11:50052,10.231.77.12:50052
endpoints:
  description: Endpoints in C(--rpc) order with C(host), C(address), C(port), C(endpoint), C(device).
  returned: success
  type: list
  elements: dict
devices:
  description: Devices in llama.cpp's order with C(name) (RPC0.., CUDA0..), C(kind), C(host), C(endpoint).
  returned: success
  type: list
  elements: dict
tensor_split:
  description: One proportion per device.
  returned: success
  type: list
  sample: [1, 1, 1]
tensor_split_arg:
  description: The C(--tensor-split) value.
  returned: success
  type: str
  sample: 1,1,1
shards:
  description: Every file of the model.
  returned: success
  type: list
  elements: str
model_bytes:
  description: Total size of the model's files in bytes.
  returned: success
  type: int
health_timeout_s:
  description: Seconds to wait for C(/health).
  returned: success
  type: int
build:
  description:
    - The head's build, C(build_id), C(build_dir) (resolved), C(cuda) and C(lockstep) (the BUILD_INFO.json fields the
      lockstep rule reads); empty without O(build_link).
  returned: success
  type: dict
unit_directives:
  description: Restart-related directives of the C([Unit]) section, as C([key, value]) pairs.
  returned: success
  type: list
  elements: list
service_directives:
  description: Restart directives of the C([Service]) section, as C([key, value]) pairs.
  returned: success
  type: list
  elements: list
rdma:
  description:
    - C(expected) (the fabric has a RoCE v2 GID for llama.cpp RPC), C(environment) (the C(GGML_RDMA_*) variables for
      the wrapper) and C(service_directives) (already part of RV(service_directives)).
  returned: success
  type: dict
wrapper:
  description:
    - What the wrapper renders of the plan besides RV(argv), C(devices) (a comment line per device in llama.cpp's order
      with its split), C(sampling) (the backend-sampling choice, a comment line where O(server) is given) and
      C(environment) (C(name), C(value), C(why), the comment above the export, may be empty).
  returned: success
  type: dict
unit_sandbox:
  description:
    - The unit's hardening lines (C(Key=value), O(hardening) without the V(null) entries) and C(DeviceAllow=) for
      O(cuda_devices) where RV(cuda_device_access) is true.
  returned: success
  type: list
  elements: str
unit_file:
  description:
    - The head's unit, C(comments) and the lines of its C(unit), C(service) and C(install) sections (C(Key=value) or a
      C(#) comment), with RV(unit_directives), RV(service_directives) and RV(unit_sandbox) in place; role C(service)'s
      one unit template renders it.
  returned: success
  type: dict
"""

import grp
import ipaddress
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GPU_INVENTORY_OPTION, use_gpu_inventory
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto
from ansible_collections.gpulab.inference.plugins.module_utils.roce import RoceError, rpc_rdma_settings
from ansible_collections.gpulab.inference.plugins.module_utils.gguf import GGUFError, read_gguf
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import EndpointError, listen_address
from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    backend_sampling_choice,
    server_argv,
    LlamaServerError,
    access_problem,
    check_health_settings,
    cuda_device_access,
    device_order,
    format_tensor_split,
    gguf_magic_problem,
    health_timeout_s,
    lockstep_problems,
    missing_shards,
    model_shards,
    rpc_endpoints,
    sandbox_problem,
    tensor_split,
    worker_manifest,
)
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    head_unit,
    head_unit_sandbox,
    head_wrapper_lines,
    read_deployed_build,
    restart_directives,
)


def read_build(link):
    """The head's deployed build (BUILD_INFO.json behind the link)."""
    build = read_deployed_build(link)
    build.pop("rpc_server_binary", None)
    return build


def model_layers(path):
    """The model's layer count from its GGUF metadata, None where it does not say."""
    try:
        model = read_gguf(path)
    except GGUFError:
        return None
    value = model.get("%s.block_count" % model.get("general.architecture", ""))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def account(user):
    """(uid, gids) of an account, or (None, ()) when it does not exist yet."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None, ()
    gids = set([entry.pw_gid])
    gids.update(g.gr_gid for g in grp.getgrall() if user in g.gr_mem)
    return entry.pw_uid, gids


def path_chain(path):
    """[(path, st_mode, uid, gid)] from / down to path."""
    parts = []
    current = os.path.abspath(path)
    while True:
        parts.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    chain = []
    for entry in reversed(parts):
        st = os.stat(entry)
        chain.append((entry, st.st_mode, st.st_uid, st.st_gid))
    return chain


class LlamaServerPlan:
    """Validates the inputs and computes the plan; `result` is the return value."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.plan = {}

    def run(self):
        params = self.params
        listen_address(params["host"], "llama_server_host")
        check_health_settings(params["health_timeout_s"], params["health_timeout_floor_s"], params["health_load_rate_mib_s"])
        rdma = rpc_rdma_settings(params["fabric"])
        unit_directives, service_directives = restart_directives(
            params["manager_version"], params["restart_sec"], params["restart_max_delay_s"])
        build = read_build(params["build_link"]) if params["build_link"] else {}
        shards = model_shards(params["model_path"])
        existing = set(s for s in shards if os.path.isfile(s))
        missing = missing_shards(shards, existing)
        if missing:
            raise LlamaServerError(
                "model file(s) missing on the head: %s; copy every shard beside the first one "
                "or fix llama_server_model_path" % ", ".join(missing))
        self.check_model_files(shards)
        model_bytes = sum(os.path.getsize(s) for s in shards)
        workers = [worker_manifest(w, "workers entry %d" % i) for i, w in enumerate(params["workers"])]
        if build:
            problems = lockstep_problems(build, workers)
            if problems:
                raise LlamaServerError(" | ".join(problems))
        endpoints = rpc_endpoints(workers)
        # A CPU build uses no local GPU, whatever the node has.
        local_gpus = params["local_gpus"] if not build or build["cuda"] else []
        devices = device_order(endpoints, local_gpus)
        server = dict(params["server"] or {})
        try:
            given, server_ctx = layout_auto.resolve_from_memory_plan(
                params["tensor_split"], server.get("ctx_size"), params["memory_plan"], params["model_path"],
                params["memory_plan_path"])
            slots = layout_auto.resolve_parallel_from_memory_plan(server.get("parallel"), params["memory_plan"],
                                                                  params["memory_plan_path"])
        except layout_auto.AutoError as exc:
            raise LlamaServerError(str(exc))
        if params["server"] is not None and "ctx_size" in server:
            self.params = dict(params, server=dict(server, ctx_size=server_ctx))
        if params["server"] is not None and "parallel" in server:
            self.params = dict(self.params, server=dict(self.params["server"], parallel=slots))
        split = tensor_split(given, devices)
        timeout_s = params["health_timeout_s"] or health_timeout_s(
            model_bytes, params["health_timeout_floor_s"], params["health_load_rate_mib_s"])
        self.plan = {
            "rpc": ",".join(e["endpoint"] for e in endpoints),
            "endpoints": endpoints,
            "devices": devices,
            "tensor_split": split,
            "tensor_split_arg": format_tensor_split(split),
            "cuda_device_access": cuda_device_access(build, local_gpus),
            "shards": shards,
            "model_bytes": model_bytes,
            "health_timeout_s": timeout_s,
            "build": build,
            "unit_directives": [list(d) for d in unit_directives],
            "service_directives": [list(d) for d in service_directives] + rdma["service_directives"],
            "rdma": rdma,
        }
        if params["server"] is not None:
            self.plan_command(devices, split, shards[0], build)
        self.plan["wrapper"] = head_wrapper_lines(devices, split, rdma["environment"], self.plan.get("backend_sampling"))
        self.plan["unit_sandbox"] = head_unit_sandbox(params["hardening"], self.plan["cuda_device_access"],
                                                      params["cuda_devices"])
        settings = {"user": params["service_user"], "group": params["service_group"], "unit": params["unit"],
                    "bin_dir": params["bin_dir"]}
        self.plan["unit_file"] = head_unit(settings, devices, self.plan["unit_directives"],
                                           self.plan["service_directives"], self.plan["unit_sandbox"])

    def plan_command(self, devices, split, model, build):
        """argv and the backend-sampling decision, from the model's layer count where it reads."""
        server = dict(self.params["server"])
        choice = backend_sampling_choice(
            server.get("backend_sampling", "auto"), devices, split, model_layers(model),
            server.get("gpu_layers", "all"), server.get("extra_args") or [], self.params.get("serving_intent"))
        binary = os.path.join(build.get("build_dir") or self.params["build_link"] or "", "bin", "llama-server")
        self.plan["backend_sampling"] = choice
        self.plan["argv"] = server_argv(binary, model, server, self.plan["rpc"], self.plan["tensor_split_arg"],
                                        choice["enabled"])

    def check_model_files(self, shards):
        """Each shard is a GGUF file the service account reaches inside the unit's sandbox."""
        user = self.params["service_user"]
        uid, gids = account(user) if user else (None, ())
        for shard in shards:
            problem = sandbox_problem(os.path.abspath(shard), self.params["hardening"])
            if problem:
                raise LlamaServerError(problem)
            try:
                with open(shard, "rb") as handle:
                    head = handle.read(4)
            except (IOError, OSError) as exc:
                raise LlamaServerError("cannot read model file %s (%s)" % (shard, exc.strerror or exc))
            problem = gguf_magic_problem(shard, head)
            if problem:
                raise LlamaServerError(problem)
            if user:
                problem = access_problem(path_chain(shard), uid, gids, user)
                if problem:
                    raise LlamaServerError(problem)

    @property
    def warnings(self):
        warnings = []
        if self.params["api_key_set"] and not self.params["api_key_vaulted"]:
            warnings.append(
                "llama_server_api_key is not vault-encrypted: keep it in ansible-vault "
                "(ansible-vault encrypt_string), or set llama_server_api_key_warn_plaintext: false "
                "when its whole variable file is encrypted")
        try:
            loopback = ipaddress.ip_address(self.params["host"]).is_loopback
        except ValueError:
            loopback = self.params["host"] == "localhost"
        if not loopback and not self.params["api_key_set"]:
            warnings.append(
                "llama-server listens on %s without an API key: anyone who reaches it can use it; "
                "set llama_server_api_key" % self.params["host"])
        return warnings

    @property
    def result(self):
        result = dict(changed=False)
        result.update(self.plan)
        return result


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path", required=True),
            workers=dict(type="list", elements="dict", default=[]),
            local_gpus=dict(type="list", elements="dict", default=[]),
            gpu_inventory=GPU_INVENTORY_OPTION,
            tensor_split=dict(type="raw", default="equal"),
            memory_plan=dict(type="dict"),
            memory_plan_path=dict(type="str", default="memory-plan.json"),
            serving_intent=dict(type="str", choices=list(layout_auto.INTENTS)),
            health_timeout_s=dict(type="int", default=0),
            health_timeout_floor_s=dict(type="int", default=120),
            health_load_rate_mib_s=dict(type="int", default=100),
            host=dict(type="str", default="127.0.0.1"),
            api_key_set=dict(type="bool", default=False),
            api_key_vaulted=dict(type="bool", default=True),
            build_link=dict(type="path"),
            service_user=dict(type="str", default=""),
            service_group=dict(type="str", default=""),
            unit=dict(type="str", default="gpulab-llama-server"),
            bin_dir=dict(type="path", default="/opt/gpulab/bin"),
            hardening=dict(type="dict", default={}),
            restart_sec=dict(type="int", default=5),
            fabric=dict(type="dict"),
            restart_max_delay_s=dict(type="int", default=30),
            manager_version=dict(type="int", default=0),
            server=dict(type="dict"),
            cuda_devices=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    use_gpu_inventory(module, "local_gpus")
    plan = LlamaServerPlan(module)
    try:
        plan.run()
    except (LlamaServerError, EndpointError, RoceError) as exc:
        module.fail_json(msg=str(exc))
    for warning in plan.warnings:
        module.warn(warning)
    module.exit_json(**plan.result)


if __name__ == "__main__":
    main()
