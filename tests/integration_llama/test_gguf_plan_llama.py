# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gguf_plan's prediction against what llama.cpp itself allocates, per device.

Two RPC servers (CPU devices) on 127.0.0.1 and llama-server with --rpc and a --tensor-split load
synthetic models of several shapes; llama.cpp logs every device's model buffer
(`load_tensors: RPC0[127.0.0.1:port] model buffer size = X MiB`) and KV buffer
(`llama_kv_cache: RPC0[...] KV buffer size = X MiB`). The planner's weights per device must
match within 2%, its KV cache exactly (to the logged 0.01 MiB), its compute buffers (`sched_reserve:
... compute buffer size`) within 1%.

Needs the binaries and the qwen2 vocabulary (`make integration-llama` sets both):

    GPULAB_LLAMA_BIN_DIR=.build/llama.cpp-bin/bin \
    GPULAB_LLAMA_VOCAB_GGUF=.build/llama.cpp-bin/ggml-vocab-qwen2.gguf \
    python -m pytest -v tests/integration_llama/test_gguf_plan_llama.py

Without them it fails rather than skips. Everything listens on 127.0.0.1 only; every process
started here is stopped here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import subprocess
import time

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

from llama_processes import free_port, stop

BIN_DIR = os.environ.get("GPULAB_LLAMA_BIN_DIR", "")
VOCAB_GGUF = os.environ.get("GPULAB_LLAMA_VOCAB_GGUF", "")
THREADS = os.environ.get("GPULAB_LLAMA_THREADS", "2")
LOAD_TIMEOUT_S = 60

MODEL_BUFFER = re.compile(r"load_tensors: +(?P<buf>\S+) model buffer size = +(?P<mib>[0-9.]+) MiB")
KV_BUFFER = re.compile(r"llama_kv_cache: +(?P<buf>\S+) KV buffer size = +(?P<mib>[0-9.]+) MiB")
COMPUTE_BUFFER = re.compile(r": +(?P<buf>\S+) compute buffer size = +(?P<mib>[0-9.]+) MiB")
LOADED = re.compile(r"model loaded|server is listening|main: HTTP server is listening")


def binary(*names):
    for name in names:
        path = os.path.join(BIN_DIR, name)
        if os.access(path, os.X_OK):
            return path
    raise AssertionError("none of %s in GPULAB_LLAMA_BIN_DIR=%r; run `make integration-llama` (it extracts the lab's "
                         "llama.cpp build there)" % (", ".join(names), BIN_DIR))


def test_the_binaries_and_the_vocabulary_are_given():
    assert BIN_DIR and os.path.isdir(BIN_DIR), "set GPULAB_LLAMA_BIN_DIR to a llama.cpp bin/ directory"
    assert VOCAB_GGUF and os.path.isfile(VOCAB_GGUF), "set GPULAB_LLAMA_VOCAB_GGUF to llama.cpp's ggml-vocab-qwen2.gguf"


def write_model(directory, name, **options):
    opts = sm.validate_options(dict(options, vocab_gguf=VOCAB_GGUF))
    plan = sm.ModelPlan(opts, str(directory / name), sm.load_vocab(VOCAB_GGUF), sm.file_sha256(VOCAB_GGUF))
    sm.write_model(plan, opts["seed"])
    return plan.paths[0]


def wait_for_port(port, proc, log_path, timeout_s=20):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, "rpc-server exited:\n" + open(log_path).read()[-3000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except (OSError, socket.timeout):
            time.sleep(0.1)
    raise AssertionError("rpc-server did not listen on 127.0.0.1:%d:\n%s" % (port, open(log_path).read()[-3000:]))


@pytest.fixture(scope="module")
def rpc_endpoints(tmp_path_factory):
    """Two RPC servers exposing the CPU device, on loopback ports."""
    rpc = binary("ggml-rpc-server", "rpc-server")
    logs = tmp_path_factory.mktemp("rpc")
    procs = []
    endpoints = []
    try:
        for i in range(2):
            port = free_port()
            log_path = str(logs / ("rpc-%d.log" % i))
            with open(log_path, "w") as log:
                procs.append(subprocess.Popen([rpc, "--host", "127.0.0.1", "--port", str(port), "--device", "CPU",
                                               "--threads", "1"], stdout=log, stderr=subprocess.STDOUT))
            wait_for_port(port, procs[-1], log_path)
            endpoints.append("127.0.0.1:%d" % port)
        yield endpoints
    finally:
        for proc in procs:
            stop(proc, timeout_s=10)


def load_and_read_buffers(model_path, endpoints, split, extra, log_path):
    """Start llama-server until the model and context are loaded; return {buffer name: MiB} for
    the model, KV and compute buffers, summed per buffer name."""
    port = free_port()
    cmd = [binary("llama-server"), "-m", model_path, "--host", "127.0.0.1", "--port", str(port),
           "--rpc", ",".join(endpoints), "--tensor-split", split, "-t", THREADS, "--no-warmup",
           # verbosity 4: llama.cpp logs the library's info messages (the buffers) only there (common/log.cpp)
           "--verbosity", "4"] + extra
    with open(log_path, "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + LOAD_TIMEOUT_S
        text = ""
        while time.time() < deadline:
            text = open(log_path).read()
            if LOADED.search(text) or server.poll() is not None:
                break
            time.sleep(0.2)
        assert LOADED.search(text), "llama-server did not load the model (%s):\n%s" % (" ".join(cmd), text[-4000:])
    finally:
        stop(server, timeout_s=10)
    found = {"model": {}, "kv": {}, "compute": {}}
    for kind, pattern in (("model", MODEL_BUFFER), ("kv", KV_BUFFER), ("compute", COMPUTE_BUFFER)):
        for match in pattern.finditer(text):
            found[kind][match.group("buf")] = found[kind].get(match.group("buf"), 0.0) + float(match.group("mib"))
    return found, text


CASES = [
    # (id, model options, --tensor-split, llama-server options, planner options)
    ("lab-model-equal", {"shards": 2}, "1,1", ["-ngl", "all", "-c", "2048", "--parallel", "1"],
     dict(n_gpu_layers="all", ctx_size=2048, parallel=1)),
    # -ngl 3 of 4 layers + output: layers 0-1 stay on the CPU; layer 3 sits at 1/3, exactly on the split
    # point of 1,2, and std::upper_bound sends it to the second device
    ("lab-model-1-2-partial-offload-q8-cache", {"shards": 2}, "1,2",
     ["-ngl", "3", "-c", "4096", "--parallel", "2", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
     dict(n_gpu_layers=3, ctx_size=4096, parallel=2, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")),
    ("six-layer-f16-1-2", {"layers": 6, "quantization": "F16", "hidden_size": 256, "attention_heads": 4,
                           "kv_heads": 1, "head_dim": 64, "experts": 4, "experts_used": 1, "expert_ffn_size": 128},
     "1,2", ["-ngl", "all", "-c", "1000", "--parallel", "3"], dict(n_gpu_layers="all", ctx_size=1000, parallel=3)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_predicted_device_buffers_match_llama_cpp(case, rpc_endpoints, tmp_path):
    name, model_options, split, server_args, plan_options = case
    model_path = write_model(tmp_path, "model.gguf", **model_options)
    model = gguf.read_gguf_model(model_path)
    devices = [{"name": "RPC%d[%s]" % (0, ep), "free_mib": 1 << 20, "host": ep} for ep in rpc_endpoints]
    plan = gguf_plan.plan_layout(model, devices, split=split, margin_mib=0, **plan_options)

    found, log = load_and_read_buffers(model_path, rpc_endpoints, split, server_args, str(tmp_path / "server.log"))
    report = []
    for row in plan["devices"]:
        logged_weights = found["model"].get(row["name"], 0.0)
        logged_kv = found["kv"].get(row["name"], 0.0)
        report.append("%s %s: weights predicted %.2f logged %.2f MiB; KV predicted %.2f logged %.2f MiB; compute "
                      "estimate %.2f logged %.2f MiB" % (name, row["name"], row["weights_mib"], logged_weights,
                                                         row["kv_cache_mib"], logged_kv, row["compute_mib_estimate"],
                                                         found["compute"].get(row["name"], 0.0)))
    print("\n".join(report))
    for row in plan["devices"]:
        logged_weights = found["model"].get(row["name"], 0.0)
        assert row["weights_mib"] == pytest.approx(logged_weights, rel=0.02, abs=0.01), "\n".join(report) + log[-3000:]
        assert row["kv_cache_mib"] == pytest.approx(found["kv"].get(row["name"], 0.0), abs=0.01), "\n".join(report)
    # the compute buffers, each device's and the head's CPU buffer, within 1% of what sched_reserve logged
    for row in plan["devices"]:
        assert row["compute_modelled"]
        assert row["compute_mib_estimate"] == pytest.approx(found["compute"].get(row["name"], 0.0), rel=0.01,
                                                            abs=0.01), "\n".join(report)
    assert plan["cpu"]["compute_mib"] == pytest.approx(found["compute"].get("CPU", 0.0), rel=0.01, abs=0.01), \
        (plan["cpu"], found["compute"])
    # every device llama.cpp put weights on is one the planner predicted weights for
    rpc_buffers = set(b for b in found["model"] if b.startswith("RPC"))
    assert rpc_buffers == set(r["name"] for r in plan["devices"] if r["weights_mib"] > 0), (rpc_buffers, report)
    # what stayed on the head (the token embeddings, layers not offloaded) is the CPU's part
    cpu_logged = sum(mib for b, mib in found["model"].items() if b.startswith("CPU"))
    assert plan["cpu"]["weights_mib"] == pytest.approx(cpu_logged, rel=0.02, abs=0.05), (found["model"], plan["cpu"])
