# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind the llama_server role, the head: the workers' manifests and their lockstep,
llama.cpp's device order and split, the model's shards and access, and
llama-server's command line and memory options.

The RPC worker is in rpc_worker.py, the services' wrapper and unit lines in llama_service.py and
the endpoint rule in endpoint_rule.py. Nothing here runs a command or reads a file: the modules stat
the model files and hand sizes and texts in, so every rule is unit-tested with plain values.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import math
import re

from ansible_collections.gpulab.inference.plugins.module_utils.llama_build_info import (
    BUILD_ID_PATTERN,
    LlamaCppError,
    check_lockstep_summary,
    lockstep_problem,
)
# --cache-type-k/-v values llama.cpp accepts (common/arg.cpp kv_cache_types), one table for both plans
from ansible_collections.gpulab.inference.plugins.module_utils.llama_layers import CACHE_TYPES, assign_layers
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import format_endpoint, port_number, whole_number
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import LlamaServerError

# llama.cpp's llama_max_devices() is 16 and common/arg.cpp rejects a --tensor-split
# with `split_arg.size() >= llama_max_devices()`, so at most 15 entries are accepted.
LLAMA_MAX_DEVICES = 16
MAX_TENSOR_SPLIT_ENTRIES = LLAMA_MAX_DEVICES - 1

# gguf-split names: <stem>-00001-of-00006.gguf
SHARD_PATTERN = re.compile(r"\A(?P<stem>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf\Z")

MIB = 1024 * 1024


# --- Head side ---------------------------------------------------------------

# What a worker's servers.json may hold. The head renders these values into its wrapper script
# and its service manager's calls, so each one is checked against a strict shape, not merely quoted.
# \A...\Z, not ^...$: `$` also matches before a trailing newline, which would give a value a line
# of its own in the head's script (a comment line, where quoting does not help).
DEVICE_PATTERN = re.compile(r"\A[A-Za-z][A-Za-z0-9_]{0,31}\Z")
UNIT_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# An inventory host name: a DNS name or an IP address (IPv6 with its colons, a zone after %).
HOST_PATTERN = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.:%-]{0,252}\Z")


def worker_manifest(manifest, source="a worker"):
    """Check a worker's servers.json (as llama_rpc_server writes it) before the head uses it.

    Returns a normalised copy: host, address (ipaddress-checked), unit, build_id, endpoints
    (instance, port, device, memory_mib). source names the worker in messages.
    """
    if not isinstance(manifest, dict):
        raise LlamaServerError("%s: servers.json must hold a JSON object, not %s" % (source, type(manifest).__name__))
    host = manifest.get("host")
    if host is None or host == "":
        host = source
    elif not isinstance(host, str) or not HOST_PATTERN.match(host):
        raise LlamaServerError(
            "%s: servers.json field host %r is not a host name (letters, digits, . _ : - only); run "
            "llama_rpc_server on that worker again and check its inventory_hostname" % (source, host))
    where = "worker %s" % host
    try:
        address = str(ipaddress.ip_address(str(manifest.get("address") or "").strip()))
    except ValueError:
        raise LlamaServerError(
            "%s: address %r is not an IP address; set gpulab_fabric_address for it and run llama_rpc_server there"
            % (where, manifest.get("address")))
    unit = str(manifest.get("unit") or "gpulab-rpc-server")
    if not UNIT_PATTERN.match(unit):
        raise LlamaServerError("%s: unit %r is not a systemd unit name" % (where, unit))
    build_id = manifest.get("build_id")
    if build_id is not None and not (isinstance(build_id, str) and BUILD_ID_PATTERN.match(build_id)):
        raise LlamaServerError("%s: build_id %r is not a 12-digit hex build id" % (where, build_id))
    build_info = manifest.get("build_info")
    if build_info is not None and not isinstance(build_info, dict):
        raise LlamaServerError("%s: build_info must be an object (lockstep_summary of its BUILD_INFO.json)" % where)
    if build_info:
        try:
            check_lockstep_summary(build_info, "%s: servers.json build_info" % where)
        except LlamaCppError as exc:
            raise LlamaServerError(str(exc))
    items = manifest.get("endpoints")
    if not isinstance(items, list) or not items:
        raise LlamaServerError("%s exposes no RPC endpoint; run the llama_rpc_server role on it first" % where)
    endpoints = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise LlamaServerError("%s: endpoints entry %d is not an object" % (where, position))
        port = port_number(item.get("port"), "%s: endpoints entry %d port" % (where, position), LlamaServerError)
        instance = whole_number(item.get("instance", position), "%s: endpoints entry %d instance" % (where, position),
                                LlamaServerError)
        device = item.get("device") or ""
        if not isinstance(device, str) or not DEVICE_PATTERN.match(device):
            raise LlamaServerError("%s: endpoints entry %d device %r is not a ggml device name" % (where, position, device))
        memory = item.get("memory_mib")
        if memory is not None:
            memory = whole_number(memory, "%s: endpoints entry %d memory_mib" % (where, position), LlamaServerError)
        endpoints.append({"instance": instance, "port": port, "device": device, "memory_mib": memory})
    return {"host": host, "address": address, "unit": unit, "build_id": build_id, "build_info": build_info,
            "endpoints": endpoints}


def lockstep_problems(head_build, workers):
    """Messages for every worker that may not serve beside the head's build ([] = in lockstep).

    head_build: deployed_build of the head (its `lockstep` summary); workers: checked manifests.
    The rule is the collection's one lockstep rule, llama_build_info.lockstep_problem, which distribution
    applies too: the same build id, or a local build from the same source that had to be local.
    A manifest without build_info (written by an older llama_rpc_server) passes only with the
    head's build id.
    """
    reference = head_build.get("lockstep") or {"build_id": head_build.get("build_id")}
    problems = []
    for worker in workers:
        host = "worker %s" % worker.get("host")
        if worker.get("build_info"):
            problem = lockstep_problem(reference, worker["build_info"], host)
        elif worker.get("build_id") != reference.get("build_id"):
            problem = ("%s runs llama.cpp build %s but the head has build %s, and its servers.json has no build_info "
                       "to judge whether that build may serve beside it: deploy one build to every node "
                       "(playbooks/build.yml) and run llama_rpc_server again"
                       % (host, worker.get("build_id"), reference.get("build_id")))
        else:
            problem = None
        if problem:
            problems.append(problem)
    return problems


def rpc_endpoints(workers):
    """Flatten workers into endpoints in inventory order and refuse duplicates.

    workers: list of servers.json manifests as published by llama_rpc_server on each worker
    (host, address, unit, endpoints with port, device, memory_mib, instance); each is checked
    by worker_manifest first. Returns a list of dicts host, address, port, endpoint
    ('addr:port', IPv6 in brackets), device, memory_mib, unit, instance.
    """
    flat = []
    seen = {}
    for position, raw in enumerate(workers):
        worker = worker_manifest(raw, "workers entry %d" % position)
        address = worker["address"]
        for item in worker["endpoints"]:
            port = item["port"]
            key = (address, port)
            if key in seen:
                raise LlamaServerError(
                    "workers %s and %s both use %s:%d; give each worker its own fabric address "
                    "(gpulab_fabric_address) or port base (llama_rpc_server_port_base)"
                    % (seen[key], worker["host"], address, port))
            seen[key] = worker["host"]
            flat.append({
                "host": worker["host"],
                "address": address,
                "port": port,
                "endpoint": format_endpoint(address, port),
                "device": item["device"],
                "memory_mib": item["memory_mib"],
                "unit": worker["unit"],
                "instance": item["instance"],
            })
    return flat


def cuda_device_access(build, local_gpus):
    """Whether the head's unit opens the NVIDIA device groups (DeviceAllow): a CUDA build on a node
    with GPUs. A CPU build, or a node without GPUs, keeps DevicePolicy=closed with none."""
    return bool((build or {}).get("cuda")) and bool(local_gpus)


def device_order(endpoints, local_gpus):
    """The devices llama.cpp splits layers over, in its own order.

    src/llama.cpp llama_prepare_model_devices() (default device selection) puts the
    RPC devices first ("add RPC servers at the front of the list to minimize network
    transfers"), in the order they were registered, i.e. the --rpc order of
    common/arg.cpp add_rpc_devices(), then the local GPUs in ggml's enumeration order
    (CUDA0, CUDA1, ...). The local CPU is not a device there: layers that do not go
    to a device stay on the CPU. Each of our RPC servers exposes exactly one device,
    named RPC0, RPC1, ... by the client.
    """
    order = []
    for i, endpoint in enumerate(endpoints):
        order.append({
            "name": "RPC%d" % i,
            "kind": "rpc",
            "host": endpoint["host"],
            "endpoint": endpoint["endpoint"],
            "memory_mib": endpoint.get("memory_mib"),
        })
    for i, gpu in enumerate(local_gpus or []):
        order.append({
            "name": "CUDA%d" % i,
            "kind": "local",
            "host": None,
            "endpoint": None,
            "memory_mib": gpu.get("memory_total_mib"),
        })
    return order


def tensor_split(mode, devices):
    """The --tensor-split proportions, one per device in llama.cpp's order.

    mode: 'equal', 'proportional' or a list of numbers. Proportional uses each device's
    memory size, not its free memory: once the model is loaded the free memory shrinks,
    and a split that moved on every run would restart the head every time.
    Returns a list of numbers (ints for equal/proportional).
    """
    names = [d["name"] for d in devices]
    if isinstance(mode, str) and re.search(r"[,/]", mode):
        mode = [v for v in re.split(r"[,/]+", mode) if v.strip()]
    if not devices:
        raise LlamaServerError(
            "no device to split the model over: no RPC worker and no local GPU; "
            "add hosts to rpc_workers or deploy a CUDA build on the head")
    if len(devices) > MAX_TENSOR_SPLIT_ENTRIES:
        raise LlamaServerError(
            "%d devices (%s) but llama.cpp accepts at most %d tensor-split entries"
            % (len(devices), ", ".join(names), MAX_TENSOR_SPLIT_ENTRIES))
    if isinstance(mode, (list, tuple)):
        if len(mode) != len(devices):
            raise LlamaServerError(
                "llama_server_tensor_split has %d entries but there are %d devices in llama.cpp's order "
                "(%s); give one proportion per device, or use equal or proportional"
                % (len(mode), len(devices), ", ".join(names)))
        values = []
        for value in mode:
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise LlamaServerError(
                    "llama_server_tensor_split entry %r is not a number" % (value,))
            if number < 0 or math.isnan(number) or math.isinf(number):
                raise LlamaServerError(
                    "llama_server_tensor_split entry %r must be a finite number >= 0" % (value,))
            values.append(int(number) if number == int(number) else number)
        if not any(values):
            raise LlamaServerError("llama_server_tensor_split %r puts nothing on any device" % (list(mode),))
        return values
    if mode == "equal":
        return [1] * len(devices)
    if mode == "proportional":
        unknown = [d["name"] for d in devices if not d.get("memory_mib")]
        if unknown:
            raise LlamaServerError(
                "memory size is unknown for %s; proportional needs it for every device (use equal or a list)"
                % ", ".join(unknown))
        return [int(d["memory_mib"]) for d in devices]
    raise LlamaServerError(
        "llama_server_tensor_split %r is not equal, proportional or a list of numbers" % (mode,))


def format_tensor_split(values):
    """[1, 1, 1] -> '1,1,1' (common/arg.cpp splits on , and /)."""
    return ",".join(("%g" % v) if isinstance(v, float) else str(v) for v in values)


def model_shards(path):
    """All files of a (possibly split) GGUF model given its first shard.

    'X-00001-of-00003.gguf' -> [X-00001-of-00003.gguf, X-00002-..., X-00003-...];
    a name without the gguf-split suffix is a single file.
    """
    path = str(path)
    if not path.endswith(".gguf"):
        raise LlamaServerError("model path %r does not end with .gguf" % (path,))
    name = path.rpartition("/")[2]
    match = SHARD_PATTERN.match(name)
    if not match:
        return [path]
    index = int(match.group("index"))
    count = int(match.group("count"))
    if count < 1 or index < 1 or index > count:
        raise LlamaServerError("model path %r has an impossible shard number %d of %d" % (path, index, count))
    if index != 1:
        raise LlamaServerError(
            "model path %r is shard %d of %d; give llama-server the first shard (-00001-of-%05d.gguf)"
            % (path, index, count, count))
    prefix = path[:len(path) - len(name)]
    return ["%s%s-%05d-of-%05d.gguf" % (prefix, match.group("stem"), i, count) for i in range(1, count + 1)]


def missing_shards(shards, existing):
    """The shards not in the set of existing paths, in order."""
    return [s for s in shards if s not in existing]


def health_timeout_s(model_bytes, floor_s=120, load_rate_mib_s=100):
    """How long to wait for /health to turn 200: the floor plus the time to move the
    model's bytes at load_rate_mib_s (disk read plus RPC transfer to the workers)."""
    if load_rate_mib_s <= 0:
        raise LlamaServerError("load rate %r MiB/s must be > 0" % (load_rate_mib_s,))
    if model_bytes < 0:
        raise LlamaServerError("model size %r bytes is negative" % (model_bytes,))
    return int(floor_s + math.ceil(model_bytes / float(MIB) / load_rate_mib_s))


def check_health_settings(timeout_s, floor_s, load_rate_mib_s, poll_s=None):
    """Refuse health gate settings that cannot work (negative waits, a zero load rate)."""
    for name, value in (("llama_server_health_timeout_s", timeout_s),
                        ("llama_server_health_timeout_floor_s", floor_s)):
        if value is not None and value < 0:
            raise LlamaServerError("%s is %r; give a number of seconds >= 0 (0: scaled to the model's size)" % (name, value))
    if load_rate_mib_s is not None and load_rate_mib_s <= 0:
        raise LlamaServerError("llama_server_health_load_rate_mib_s is %r; give a rate > 0" % (load_rate_mib_s,))
    if poll_s is not None and poll_s <= 0:
        raise LlamaServerError("llama_server_health_poll_s is %r; give a number of seconds > 0" % (poll_s,))


GGUF_MAGIC = b"GGUF"


def gguf_magic_problem(path, head_bytes):
    """A message when a model file does not start with the GGUF magic (ggml/src/gguf.cpp GGUF_MAGIC)."""
    if head_bytes[:4] != GGUF_MAGIC:
        return ("model file %s is not a GGUF file (it starts with %r, not %r); give llama_server_model_path "
                "a .gguf model" % (path, bytes(head_bytes[:4]), GGUF_MAGIC))
    return None


# --- The head's connections and the model's access -------------------------------

# Directories a unit with these hardening settings does not see (systemd.exec(5)): ProtectHome=yes
# makes /home, /root and /run/user inaccessible, PrivateTmp=yes gives the service its own /tmp, /var/tmp.
SANDBOX_HIDDEN = (
    ("ProtectHome", ("yes", "true", "1", "tmpfs"), ("/home", "/root", "/run/user")),
    ("PrivateTmp", ("yes", "true", "1"), ("/tmp", "/var/tmp")),
)


def sandbox_problem(path, hardening):
    """A message when the unit's sandbox hides the path from the service, else None."""
    for directive, values, roots in SANDBOX_HIDDEN:
        if str((hardening or {}).get(directive) or "").lower() not in values:
            continue
        for root in roots:
            if path == root or path.startswith(root + "/"):
                return ("model file %s is under %s, which %s=%s hides from the service; move the model (e.g. "
                        "to /var/lib/gpulab/models or /srv) or drop %s in llama_server_hardening_overrides"
                        % (path, root, directive, hardening[directive], directive))
    return None


def access_problem(chain, uid, gids, user):
    """A message when the user cannot reach and read the last entry of chain, else None.

    chain: [(path, mode, owner_uid, owner_gid)] from / down to the file (mode as st_mode);
    directories need x, the file needs r. uid None: the account does not exist yet and will get
    a group of its own, so only the 'other' bits count.
    """
    for position, (path, mode, owner, group) in enumerate(chain):
        last = position == len(chain) - 1
        need = 4 if last else 1
        if uid == 0:
            continue
        if uid is not None and owner == uid:
            bits = (mode >> 6) & 7
        elif uid is not None and group in (gids or ()):
            bits = (mode >> 3) & 7
        else:
            bits = mode & 7
        if not bits & need:
            return ("%s cannot %s %s (mode %04o, owner %s, group %s); make it %s for the service account "
                    "(e.g. chmod o+%s %s, or a group the account is in)"
                    % (user, "read" if last else "enter", path, mode & 0o7777, owner, group,
                       "readable" if last else "searchable", "r" if last else "x", path))
    return None


# --- llama-server's command line ---------------------------------------------

BACKEND_SAMPLING_FLAGS = ("-bs", "--backend-sampling")


def output_device(devices, split, n_layer=None, n_gpu_layers="all"):
    """The device that holds the output layer, or None for the CPU.

    llama.cpp places the output layer like a layer of index n_layer (src/llama-model.cpp,
    `dev_output = get_layer_buft_list(n_layer_all)`), which is what llama_layers.assign_layers
    computes. Without the layer count it is the last device with a share of the split, which is
    the same device unless that share is smaller than one layer.
    """
    if not devices:
        return None
    if n_layer:
        index = assign_layers(int(n_layer), [float(v) for v in split], n_gpu_layers)[-1]
        return None if index is None else devices[index]
    shares = [i for i, v in enumerate(split) if float(v) > 0]
    return devices[shares[-1]] if shares else None


def backend_sampling_choice(setting, devices, split, n_layer=None, n_gpu_layers="all", extra_args=(), intent=None):
    """Whether llama-server samples on the device that holds the output layer (--backend-sampling).

    intent (gpulab_serving_intent): under throughput auto is off, since sampling on the device
    serialises the streams' sampling (37% of the aggregate at four streams on an H200,
    docs/benchmarks.md); under interactive, or without an intent, auto is the rule below.
    auto: on when that device is one of the head's own GPUs, where the sampler reads the logits in
    place instead of copying a vocabulary-sized row to the host for every token; off when it is an
    RPC device (every step would read the sampler's state back over the network) or the CPU.
    llama.cpp runs the longest prefix of the chain that has device implementations there (top-k,
    top-p, min-p, temperature, penalties, dist, greedy) and the rest on the CPU; grammars, a
    reasoning budget and n_probs turn it off per request (common/sampling.cpp,
    tools/server/server-context.cpp). A request's own `backend_sampling` field overrides it.
    Returns {"enabled", "reason", "output_device"}.
    """
    device = output_device(devices, split, n_layer, n_gpu_layers)
    where = "the CPU" if device is None else "%s (%s)" % (
        device["name"], "a GPU of the head" if device["kind"] == "local" else "RPC " + str(device["endpoint"]))
    if any(str(a) in BACKEND_SAMPLING_FLAGS for a in extra_args):
        return {"enabled": True, "reason": "given in llama_server_extra_args", "output_device": where}
    if isinstance(setting, str) and setting.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
        setting = setting.strip().lower() in ("true", "yes", "on")
    if setting is True or setting is False:
        return {"enabled": setting, "reason": "llama_server_backend_sampling is %s" % str(setting).lower(),
                "output_device": where}
    if setting not in (None, "auto"):
        raise LlamaServerError(
            "llama_server_backend_sampling is %r; set auto, true or false" % (setting,))
    if intent == "throughput":
        return {"enabled": False, "output_device": where,
                "reason": "auto, serving intent throughput: off, sampling on the device cost 37% of the aggregate "
                          "at four streams (docs/benchmarks.md)"}
    local = device is not None and device["kind"] == "local"
    return {
        "enabled": local,
        "reason": "auto%s: the output layer is on %s" % (
            ", serving intent interactive" if intent == "interactive" else "", where),
        "output_device": where,
    }


SERVER_OPTION_DEFAULTS = {
    "host": "127.0.0.1",
    "port": 8080,
    "gpu_layers": "all",
    "ctx_size": 8192,
    "parallel": 4,
    "flash_attn": "auto",
    "jinja": True,
    "reasoning_format": None,
    "reasoning_budget": None,
    "metrics": True,
    "threads": 0,
    "log_verbosity": None,
    "api_key_file": "",
    "backend_sampling": False,
    "cache_type_k": "f16",
    "cache_type_v": "f16",
    "batch_size": 2048,
    "ubatch_size": 512,
    "extra_args": [],
}

# llama-server flags (common/arg.cpp) that decide what it holds in memory, by the option each
# sets; a flag in extra_args overrides the option, the last one winning as in llama.cpp's parser.
MEMORY_FLAGS = {
    "-ngl": "gpu_layers", "--gpu-layers": "gpu_layers", "--n-gpu-layers": "gpu_layers",
    "-c": "ctx_size", "--ctx-size": "ctx_size",
    "-np": "parallel", "--parallel": "parallel",
    "-fa": "flash_attn", "--flash-attn": "flash_attn",
    "-ctk": "cache_type_k", "--cache-type-k": "cache_type_k",
    "-ctv": "cache_type_v", "--cache-type-v": "cache_type_v",
    "-b": "batch_size", "--batch-size": "batch_size",
    "-ub": "ubatch_size", "--ubatch-size": "ubatch_size",
}
MEMORY_SWITCHES = {
    "-kvu": ("kv_unified", True), "--kv-unified": ("kv_unified", True),
    "-no-kvu": ("kv_unified", False), "--no-kv-unified": ("kv_unified", False),
    "-kvo": ("offload_kqv", True), "--kv-offload": ("offload_kqv", True),
    "-nkvo": ("offload_kqv", False), "--no-kv-offload": ("offload_kqv", False),
}


def _memory_whole(value, name, minimum):
    if isinstance(value, bool) or not re.match(r"\A-?[0-9]+\Z", str(value).strip()):
        raise LlamaServerError("%s %r is not a whole number" % (name, value))
    number = int(str(value).strip())
    if number < minimum:
        raise LlamaServerError("%s %d is below %d" % (name, number, minimum))
    return number


def memory_options(options):
    """What llama-server holds memory for, from the options server_argv renders: the values of
    gguf_plan.plan_layout (n_gpu_layers, ctx_size, parallel, flash_attn, cache_type_k,
    cache_type_v, ubatch, kv_unified, offload_kqv), extra_args applied, so the memory plan
    assumes what the head runs. Errors name the llama_server_* variable (or the extra argument).
    """
    opts = dict(SERVER_OPTION_DEFAULTS)
    opts.update(options or {})
    unknown = sorted(set(opts) - set(SERVER_OPTION_DEFAULTS))
    if unknown:
        raise LlamaServerError("unknown llama-server option(s) %s" % ", ".join(unknown))
    extra = opts["extra_args"] or []
    if not isinstance(extra, (list, tuple)):
        raise LlamaServerError("llama_server_extra_args %r is not a list of strings" % (extra,))
    given = dict((key, (opts[key], "llama_server_" + key)) for key in set(MEMORY_FLAGS.values()))
    switches = {"kv_unified": False, "offload_kqv": True}
    extra = [str(a) for a in extra]
    i = 0
    while i < len(extra):
        flag, equals, inline = extra[i].partition("=") if extra[i].startswith("--") else (extra[i], "", "")
        if flag in MEMORY_FLAGS:
            if equals:
                value = inline
            elif i + 1 < len(extra):
                i += 1
                value = extra[i]
            else:
                raise LlamaServerError("llama_server_extra_args ends with %s but not its value" % flag)
            given[MEMORY_FLAGS[flag]] = (value, "%s in llama_server_extra_args" % flag)
        elif extra[i] in MEMORY_SWITCHES:
            key, value = MEMORY_SWITCHES[extra[i]]
            switches[key] = value
        i += 1
    gpu_layers, name = given["gpu_layers"]
    if str(gpu_layers).strip() not in ("all", "auto"):
        gpu_layers = _memory_whole(gpu_layers, name, -1)
    flash_attn, name = given["flash_attn"]
    if str(flash_attn) not in ("on", "off", "auto"):
        raise LlamaServerError("%s %r is not on, off or auto" % (name, flash_attn))
    cache = {}
    for key in ("cache_type_k", "cache_type_v"):
        value, name = given[key]
        if str(value) not in CACHE_TYPES:
            raise LlamaServerError("%s %r is not a KV cache type llama.cpp accepts; use one of: %s"
                                   % (name, value, ", ".join(sorted(CACHE_TYPES))))
        cache[key] = str(value)
    batch = _memory_whole(*given["batch_size"], minimum=1)
    return {
        "n_gpu_layers": gpu_layers,
        # auto: the memory plan chooses it (layout_llama.choose_ctx_and_split)
        "ctx_size": "auto" if str(given["ctx_size"][0]).strip() == "auto" else _memory_whole(*given["ctx_size"], minimum=0),
        # auto: the memory plan sets it from the serving intent (layout_llama.choose_llama_serving)
        "parallel": "auto" if str(given["parallel"][0]).strip() == "auto" else _memory_whole(*given["parallel"], minimum=1),
        "flash_attn": str(flash_attn),
        "cache_type_k": cache["cache_type_k"],
        "cache_type_v": cache["cache_type_v"],
        # src/llama-context.cpp: the physical batch is at most the logical one
        "ubatch": min(batch, _memory_whole(*given["ubatch_size"], minimum=1)),
        "kv_unified": switches["kv_unified"],
        "offload_kqv": switches["offload_kqv"],
    }


def server_argv(binary, model, options, rpc, split_arg, backend_sampling):
    """llama-server's argv, in the order the wrapper runs it (every flag from common/arg.cpp)."""
    opts = dict(SERVER_OPTION_DEFAULTS)
    opts.update(dict((k, v) for k, v in (options or {}).items()))
    unknown = sorted(set(opts) - set(SERVER_OPTION_DEFAULTS))
    if unknown:
        raise LlamaServerError("unknown llama-server option(s) %s" % ", ".join(unknown))
    port = port_number(opts["port"], "llama_server_port", LlamaServerError)
    argv = [binary, "--model", model, "--host", str(opts["host"]), "--port", str(port)]
    if rpc:
        argv += ["--rpc", rpc]
    memory = memory_options(opts)  # the values the memory plan reads, refused here the same way
    for key in ("ctx_size", "parallel"):
        if memory[key] == "auto":
            raise LlamaServerError("llama_server_%s is auto but nothing resolved it: the memory plan "
                                   "(memory-plan.json) gives the head its %s" % (key, "context" if key == "ctx_size"
                                                                                 else "slots"))
    argv += ["--n-gpu-layers", str(opts["gpu_layers"]), "--tensor-split", split_arg,
             "--ctx-size", str(opts["ctx_size"]), "--parallel", str(opts["parallel"]),
             "--flash-attn", str(opts["flash_attn"]),
             "--cache-type-k", str(opts["cache_type_k"]), "--cache-type-v", str(opts["cache_type_v"]),
             "--batch-size", str(opts["batch_size"]), "--ubatch-size", str(opts["ubatch_size"])]
    # The memory plan chose the layers, the split and the context: llama.cpp's own fitting
    # (common/arg.cpp --fit, on by default since 0c1e570's era) must not move anything behind it.
    argv += ["--fit", "off"]
    if opts["jinja"]:
        argv.append("--jinja")
    if opts["reasoning_format"] is not None:
        argv += ["--reasoning-format", str(opts["reasoning_format"])]
    if opts["reasoning_budget"] is not None:
        argv += ["--reasoning-budget", str(opts["reasoning_budget"])]
    if opts["metrics"]:
        argv.append("--metrics")
    if int(opts["threads"] or 0) > 0:
        argv += ["--threads", str(int(opts["threads"]))]
    if opts["log_verbosity"] is not None:
        argv += ["--verbosity", str(opts["log_verbosity"])]
    if opts["api_key_file"]:
        argv += ["--api-key-file", str(opts["api_key_file"])]
    extra = [str(a) for a in opts["extra_args"] or []]
    if backend_sampling and not any(a in BACKEND_SAMPLING_FLAGS for a in extra):
        argv.append("--backend-sampling")
    return argv + extra
