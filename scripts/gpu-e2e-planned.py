#!/usr/bin/env python3
"""Planned against measured on a GPU host, for the GPU end-to-end harness (scripts/gpu-e2e.sh).

  gpu-e2e-planned.py llama [MEMORY_PLAN]        /var/lib/gpulab/memory-plan.json by default
  gpu-e2e-planned.py vllm [PLAN [VLLM_LOG]]     /etc/gpulab/vllm/plan.json, /var/log/gpulab/gpulab-vllm.log

llama: the head's argv in the process list (-ngl, --tensor-split, -c, --fit) against the plan's
resolved values, and each process's GPU memory (nvidia-smi) against the plan's total of its
devices (RPC devices: the RPC servers; CUDA devices: llama-server), per GPU.
vllm: the serve argv (--kv-cache-memory-bytes, parallel sizes) against plan.json, vLLM's KV cache
("GPU KV cache size: N tokens" x the plan's bytes per token) against the pinned bytes, and the
GPU memory of vLLM's processes against the plan's budget (weights + pinned KV + reserve).
Prints one line per check and a JSON document on the last line; exits 1 when a check is off its
bound (2% memory per process, 1% KV cache, argv equal).
"""

import json
import os
import re
import subprocess
import sys

MIB = 1024 * 1024
MEMORY_BOUND = 0.02
KV_BOUND = 0.01


def smi(query, kind="gpu"):
    out = subprocess.run(["nvidia-smi", "--query-%s=%s" % (kind, query), "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def processes():
    """(pid, gpu index, MiB, argv) of every compute process nvidia-smi lists."""
    index_of = dict((uuid, int(index)) for index, uuid in smi("index,uuid"))
    return [(int(pid), index_of.get(uuid), float(mib), cmdline(pid))
            for pid, uuid, mib in smi("pid,gpu_uuid,used_memory", "compute-apps")]


def pids_running(pattern):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            argv = cmdline(pid)
            if argv and re.search(pattern, " ".join(argv)):
                found.append((int(pid), argv))
    return found


def option(argv, *names):
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def error(planned, measured):
    return (planned - measured) / measured if measured else None


class Report:
    def __init__(self):
        self.checks = []

    def check(self, what, planned, measured, ok, err=None):
        self.checks.append({"what": what, "planned": planned, "measured": measured, "ok": bool(ok), "error": err})
        suffix = "" if err is None else " (%+.2f%%)" % (100 * err)
        print("%s %s: planned %s, measured %s%s" % ("ok  " if ok else "OFF ", what, planned, measured, suffix))

    def memory(self, what, planned_mib, measured_mib, bound=MEMORY_BOUND):
        err = error(planned_mib, measured_mib)
        self.check(what, round(planned_mib, 1), round(measured_mib, 1), err is not None and abs(err) <= bound, err)

    def done(self, extra):
        print(json.dumps(dict(extra, checks=self.checks), sort_keys=True))
        return 0 if self.checks and all(c["ok"] for c in self.checks) else 1


def proportions(values):
    values = [float(v) for v in values]
    total = sum(values)
    return [round(v / total, 6) for v in values] if total else values


def llama(path="/var/lib/gpulab/memory-plan.json"):
    with open(path) as f:
        plan = json.load(f)
    report = Report()
    heads = pids_running(r"(^|/)llama-server( |$)")
    argv = heads[0][1] if heads else []
    print("llama-server argv: %s" % " ".join(argv))
    ngl = option(argv, "-ngl", "--n-gpu-layers", "--gpu-layers")
    # `all` is llama.cpp's word for every layer and the output layer: the plan's count when that is all of them.
    every = (plan.get("model") or {}).get("layers")
    report.check("-ngl", plan.get("n_gpu_layers"), ngl, str(plan.get("n_gpu_layers")) == ngl
                 or (ngl == "all" and every is not None and plan.get("n_gpu_layers") == every + 1))
    split = option(argv, "-ts", "--tensor-split")
    planned_split = plan.get("tensor_split") or []
    measured_split = [v for v in re.split(r"[,/]", split or "") if v]
    report.check("--tensor-split", ",".join(str(v) for v in planned_split), split,
                 bool(measured_split) and proportions(planned_split) == proportions(measured_split))
    ctx = (plan.get("options") or {}).get("ctx_size")
    report.check("-c", ctx, option(argv, "-c", "--ctx-size"), str(ctx) == option(argv, "-c", "--ctx-size"))
    report.check("--fit", "off", option(argv, "--fit"), option(argv, "--fit") == "off")
    # Per GPU and kind: the head holds the CUDA devices, the RPC servers the RPC devices. A plan
    # without GPU indices is compared per kind over all GPUs.
    devices = plan.get("devices") or []
    by_gpu = all(d.get("gpu_index") is not None for d in devices)
    planned = {}
    for device in devices:
        key = (device.get("gpu_index") if by_gpu else "any", "rpc" if device.get("kind") == "rpc" else "local")
        planned[key] = planned.get(key, 0.0) + float(device.get("total_mib") or 0)
    measured = {}
    for pid, gpu, mib, args in processes():
        text = " ".join(args)
        kind = "rpc" if "rpc-server" in text else "local" if "llama-server" in text else None
        print("process %d on GPU %s: %.0f MiB, %s" % (pid, gpu, mib, text[:200]))
        if kind:
            key = (gpu if by_gpu else "any", kind)
            measured[key] = measured.get(key, 0.0) + mib
    for key in sorted(set(planned) | set(measured), key=str):
        report.memory("GPU %s %s" % key, planned.get(key, 0.0), measured.get(key, 0.0))
    return report.done({"engine": "llama_cpp", "argv": argv, "devices": plan.get("devices"),
                        "choice": plan.get("choice")})


def vllm(path="/etc/gpulab/vllm/plan.json", log="/var/log/gpulab/gpulab-vllm.log"):
    with open(path) as f:
        plan = json.load(f)
    report = Report()
    layout = plan.get("layout") or {}
    estimate = plan.get("estimate") or {}
    pinned = plan.get("kv_cache_memory_bytes")
    servers = [p for p in pids_running(r"vllm.* serve ") if "serve" in p[1]]
    argv = servers[0][1] if servers else []
    print("vllm argv: %s" % " ".join(argv))
    report.check("--kv-cache-memory-bytes", pinned, option(argv, "--kv-cache-memory-bytes"),
                 pinned is not None and str(pinned) == option(argv, "--kv-cache-memory-bytes"))
    for flag, key in (("--tensor-parallel-size", "tensor_parallel_size"),
                      ("--pipeline-parallel-size", "pipeline_parallel_size"),
                      ("--data-parallel-size", "data_parallel_size")):
        report.check(flag, layout.get(key), option(argv, flag), str(layout.get(key)) == option(argv, flag))
    ep = "--enable-expert-parallel" in argv
    report.check("--enable-expert-parallel", bool(layout.get("enable_expert_parallel")), ep,
                 bool(layout.get("enable_expert_parallel")) == ep)
    with open(log, errors="replace") as f:
        text = f.read()
    tokens = re.findall(r"GPU KV cache size: ([\d,]+) tokens", text)
    reserved = re.findall(r"reserved ([\d.]+) GiB memory for KV Cache", text)
    per_token = estimate.get("kv_bytes_per_token")
    if tokens and per_token and pinned:
        measured_bytes = int(tokens[-1].replace(",", "")) * int(per_token)
        err = error(pinned, measured_bytes)
        report.check("KV cache bytes (GPU KV cache size %s tokens x %s bytes)" % (tokens[-1], per_token),
                     pinned, measured_bytes, abs(err) <= KV_BOUND, err)
    else:
        report.check("KV cache bytes", pinned, "no 'GPU KV cache size' line in %s" % log, False)
    if reserved and pinned:
        err = error(pinned / 1024.0 ** 3, float(reserved[-1]))
        report.check("KV cache GiB (vLLM: reserved ... for KV Cache)", round(pinned / 1024.0 ** 3, 2),
                     float(reserved[-1]), abs(err) <= KV_BOUND, err)
    budget_mib = float(estimate.get("weights_bytes", 0) + (pinned or 0)) / MIB + float(estimate.get("reserve_gib", 0)) * 1024
    by_gpu = {}
    for pid, gpu, mib, args in processes():
        print("process %d on GPU %s: %.0f MiB, %s" % (pid, gpu, mib, " ".join(args)[:200]))
        by_gpu[gpu] = by_gpu.get(gpu, 0.0) + mib
    for gpu in sorted(by_gpu, key=str):
        report.memory("GPU %s vLLM (weights + pinned KV + reserve)" % gpu, budget_mib, by_gpu[gpu])
    return report.done({"engine": "vllm", "argv": argv, "layout": layout, "estimate": estimate,
                        "choice": plan.get("choice"), "kv_log": re.findall(r".*(?:KV cache|KV Cache).*", text)[-6:]})


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("llama", "vllm"):
        sys.exit(__doc__)
    sys.exit((llama if sys.argv[1] == "llama" else vllm)(*sys.argv[2:]))
