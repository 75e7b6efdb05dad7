# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind the llama_rpc_server and llama_server roles.

Nothing here runs a command or touches a file: the plan module stats the model
files and hands sizes in, so every rule is unit-tested with plain values.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import math
import re

# llama.cpp's llama_max_devices() is 16 and common/arg.cpp rejects a --tensor-split
# with `split_arg.size() >= llama_max_devices()`, so at most 15 entries are accepted.
LLAMA_MAX_DEVICES = 16
MAX_TENSOR_SPLIT_ENTRIES = LLAMA_MAX_DEVICES - 1

# gguf-split names: <stem>-00001-of-00006.gguf
SHARD_PATTERN = re.compile(r"^(?P<stem>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")

MIB = 1024 * 1024


class LlamaServerError(ValueError):
    """Bad input: the message names the offending value and what to do."""


# --- RPC worker side ---------------------------------------------------------

def rpc_devices(cuda, gpus, gpu_indices=None):
    """Devices a worker exposes, one RPC server each.

    cuda: whether the build has CUDA. gpus: gpulab_gpus facts (dicts with index and
    memory_mib). gpu_indices: optional subset of nvidia-smi indices to expose.
    A CUDA build exposes one server per GPU (CUDA_VISIBLE_DEVICES=<index>, the
    server then sees it as CUDA0); a CPU build exposes the CPU device once.
    Returns a list of dicts: instance (0..n-1, the port offset), device (the
    rpc-server --device name), gpu_index (or None), memory_mib (or None).
    """
    if not cuda:
        return [{"instance": 0, "device": "CPU", "gpu_index": None, "memory_mib": None}]
    by_index = {}
    for gpu in gpus or []:
        by_index[int(gpu["index"])] = gpu
    if not by_index:
        raise LlamaServerError(
            "the llama.cpp build has CUDA but no GPU was found on this node (gpulab_gpus is empty); "
            "run gpu_preflight first or deploy a CPU build here")
    if gpu_indices:
        missing = [i for i in gpu_indices if int(i) not in by_index]
        if missing:
            raise LlamaServerError(
                "GPU indices %s are not present on this node (found %s); fix llama_rpc_server_gpu_indices"
                % (missing, sorted(by_index)))
        selected = [int(i) for i in gpu_indices]
    else:
        selected = sorted(by_index)
    devices = []
    for instance, index in enumerate(selected):
        devices.append({
            "instance": instance,
            "device": "CUDA0",
            "gpu_index": index,
            "memory_mib": by_index[index].get("memory_total_mib"),
        })
    return devices


def check_bind_address(address, allow_any=False):
    """Refuse a wildcard bind unless explicitly allowed: the RPC protocol has no authentication."""
    if address in (None, ""):
        raise LlamaServerError(
            "no bind address: set gpulab_fabric_address for this host (the node's fabric address)")
    try:
        parsed = ipaddress.ip_address(str(address))
    except ValueError:
        raise LlamaServerError(
            "bind address %r is not an IP address; use the node's fabric address" % (address,))
    if parsed.is_unspecified and not allow_any:
        raise LlamaServerError(
            "refusing to bind the RPC server to %s: the ggml RPC protocol has no authentication and "
            "anyone who reaches the port can run code on the device; bind to the fabric address, or set "
            "llama_rpc_server_allow_any_address: true if a firewall protects every interface"
            % (address,))
    return str(parsed)


# --- Head side ---------------------------------------------------------------

def rpc_endpoints(workers):
    """Flatten workers into endpoints in inventory order and refuse duplicates.

    workers: list of dicts host, address, endpoints (list of dicts port,
    device, memory_mib, instance) and unit, as published by llama_rpc_server on
    each worker. Returns a list of dicts host, address, port, endpoint
    ('addr:port', IPv6 in brackets), device, memory_mib, unit, instance.
    """
    flat = []
    seen = {}
    for worker in workers:
        address = str(worker.get("address") or "")
        if not address:
            raise LlamaServerError(
                "worker %s has no fabric address; set gpulab_fabric_address for it" % worker.get("host"))
        if not worker.get("endpoints"):
            raise LlamaServerError(
                "worker %s exposes no RPC endpoint; run the llama_rpc_server role on it first"
                % worker.get("host"))
        for item in worker["endpoints"]:
            port = int(item["port"])
            if not 0 < port < 65536:
                raise LlamaServerError("worker %s: port %r is out of range" % (worker.get("host"), port))
            key = (address, port)
            if key in seen:
                raise LlamaServerError(
                    "workers %s and %s both use %s:%d; give each worker its own fabric address "
                    "(gpulab_fabric_address) or port base (llama_rpc_server_port_base)"
                    % (seen[key], worker.get("host"), address, port))
            seen[key] = worker.get("host")
            host_part = "[%s]" % address if ":" in address else address
            flat.append({
                "host": worker.get("host"),
                "address": address,
                "port": port,
                "endpoint": "%s:%d" % (host_part, port),
                "device": item.get("device"),
                "memory_mib": item.get("memory_mib"),
                "unit": worker.get("unit"),
                "instance": item.get("instance"),
            })
    return flat


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
