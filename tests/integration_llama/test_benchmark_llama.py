# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm_benchmark against a real llama-server (the lab build `make integration-llama` extracts):
its decode figure agrees with llama-server's own timings within 5 % at every level, and the
concurrent level really ran batched (llama-server's /metrics: more than one busy slot per
decode on average). Whether aggregate throughput then rises is the hardware's answer, not the
benchmark's: on a two-core machine it stays flat, so it is checked on the lab and GPU hosts.

    GPULAB_LLAMA_BIN_DIR=.build/llama.cpp-bin/bin GPULAB_LLAMA_VOCAB_GGUF=.build/llama.cpp-bin/ggml-vocab-qwen2.gguf \
    python -m pytest -v tests/integration_llama/test_benchmark_llama.py

Unlike the other files here it does not skip: without the binaries it fails. Loopback only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import time
from http.client import HTTPConnection
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.modules import llm_benchmark

from llama_processes import free_port, stop

BIN_DIR = os.environ.get("GPULAB_LLAMA_BIN_DIR", "")
VOCAB_GGUF = os.environ.get("GPULAB_LLAMA_VOCAB_GGUF") or None
THREADS = os.environ.get("GPULAB_LLAMA_THREADS", "2")
# Two slots: the lab machines have two CPU cores, beyond which streams only queue.
SLOTS = 2
AGREEMENT = 0.05


class Done(Exception):
    pass


def _raise(_self, **kwargs):
    raise Done(kwargs)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = os.path.join(BIN_DIR, "llama-server")
    assert os.access(binary, os.X_OK), (
        "llama-server not found in GPULAB_LLAMA_BIN_DIR=%r: run `make integration-llama`" % BIN_DIR)
    root = tmp_path_factory.mktemp("bench")
    opts = sm.validate_options(dict(vocab_gguf=VOCAB_GGUF, layers=2))
    vocab = sm.load_vocab(VOCAB_GGUF) if VOCAB_GGUF else sm.builtin_vocab()
    plan = sm.ModelPlan(opts, str(root / "bench.gguf"), vocab, sm.file_sha256(VOCAB_GGUF) if VOCAB_GGUF else None)
    sm.write_model(plan, opts["seed"])
    port = free_port()
    log_path = root / "llama-server.log"
    with open(str(log_path), "w") as log:
        proc = subprocess.Popen([binary, "-m", plan.paths[0], "--host", "127.0.0.1", "--port", str(port), "--jinja",
                                 "-c", str(512 * SLOTS), "--parallel", str(SLOTS), "-t", THREADS, "--metrics"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                conn = HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.5)
        yield {"url": "http://127.0.0.1:%d" % port, "gguf": plan.paths[0], "log": log_path}
    finally:
        stop(proc)


def benchmark(args):
    with patch_module_args(args), mock.patch.object(basic.AnsibleModule, "exit_json", _raise), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _raise), \
            mock.patch.object(basic.AnsibleModule, "warn", lambda self, msg: None):
        with pytest.raises(Done) as done:
            llm_benchmark.main()
    return done.value.args[0]


def busy_slots_per_decode(url):
    conn = HTTPConnection(url.split("//")[1].split(":")[0], int(url.rsplit(":", 1)[1]), timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith("llamacpp:n_busy_slots_per_decode "):
            return float(line.split()[1])
    raise AssertionError("no n_busy_slots_per_decode in /metrics:\n" + text[:2000])


def test_decode_agrees_with_llama_server_at_every_level(server):
    result = benchmark({"base_url": server["url"], "concurrency": [1, SLOTS], "requests_per_level": SLOTS,
                        "prompt_tokens": 32, "max_tokens": 48, "gguf_path": server["gguf"]})
    assert "benchmark" in result, result
    bench = result["benchmark"]
    assert bench["engine"] == "llama.cpp"
    assert bench["prompt"]["sizing"] == "tokenizer" and bench["prompt"]["tokens"] == 32
    assert bench["model_weights"]["architecture"] == "minimax-m2"
    one, many = bench["levels"]
    for level in (one, many):
        assert level["requests_failed"] == 0, level["errors"]
        assert level["output_tokens"] == level["requests"] * 48
        ratio = level["server"]["decode_ratio"]
        assert abs(ratio - 1.0) <= AGREEMENT, (level["concurrency"], level["decode_tok_s"], level["server"])
    assert many["concurrency"] == SLOTS and many["requests_ok"] == SLOTS
    assert busy_slots_per_decode(server["url"]) > 1.0


def test_bad_input_against_the_real_server(server):
    result = benchmark({"base_url": server["url"], "model": "MiniMax-M2"})
    assert result["msg"].startswith("model 'MiniMax-M2' is not served here; the server lists ")
    result = benchmark({"base_url": server["url"], "concurrency": [0]})
    assert result["msg"] == "concurrency: every level must be 1 or more, got 0 in [0]"
