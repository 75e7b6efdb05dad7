# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Opt-in proof that real llama.cpp binaries load and run what synthetic_gguf writes.

Run with the directory holding llama-bench (and llama-completion, llama-server when built):

    GPULAB_LLAMA_BIN_DIR=/opt/gpulab/llama.cpp/current/bin \
    GPULAB_LLAMA_VOCAB_GGUF=/path/to/llama.cpp/models/ggml-vocab-qwen2.gguf \
    python -m pytest -v tests/integration_llama

GPULAB_LLAMA_VOCAB_GGUF is optional (without it the built-in byte vocabulary is used).
Everything listens on 127.0.0.1 only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import subprocess
import time

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

from llama_processes import free_port, stop

BIN_DIR = os.environ.get("GPULAB_LLAMA_BIN_DIR")
VOCAB_GGUF = os.environ.get("GPULAB_LLAMA_VOCAB_GGUF") or None
THREADS = os.environ.get("GPULAB_LLAMA_THREADS", "2")

pytestmark = pytest.mark.skipif(
    not BIN_DIR, reason="set GPULAB_LLAMA_BIN_DIR to a llama.cpp bin/ directory to load synthetic models")


def binary(name):
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        pytest.skip("%s is not built in GPULAB_LLAMA_BIN_DIR=%s" % (name, BIN_DIR))
    return path


def write(tmp_path, name, **options):
    """Write a model with the module's defaults plus `options`; return its ModelPlan."""
    opts = sm.validate_options(dict(options, vocab_gguf=VOCAB_GGUF))
    if VOCAB_GGUF:
        vocab, vocab_sha256 = sm.load_vocab(VOCAB_GGUF), sm.file_sha256(VOCAB_GGUF)
    else:
        vocab, vocab_sha256 = sm.builtin_vocab(), None
    plan = sm.ModelPlan(opts, str(tmp_path / name), vocab, vocab_sha256)
    sm.write_model(plan, opts["seed"])
    return plan


def run(cmd, timeout_s=300, stdin=None):
    proc = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, "%s exited %d:\n%s" % (cmd, proc.returncode, proc.stdout[-4000:])
    return proc.stdout


def bench(model_path):
    out = run([binary("llama-bench"), "-m", model_path, "-p", "16", "-n", "8", "-r", "1",
               "-t", THREADS, "-o", "json"])
    rows = json.loads(out[out.index("["):])
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(16, 0), (0, 8)]
    for row in rows:
        assert row["model_type"].startswith("minimax-m2"), row["model_type"]
        assert row["avg_ts"] > 0
    return rows


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return write(tmp_path_factory.mktemp("single"), "synthetic-minimax-m2.gguf")


def test_llama_bench_runs_the_default_model(single):
    rows = bench(single.paths[0])
    assert rows[0]["model_n_params"] == single.n_params


def test_llama_bench_runs_a_three_shard_split(tmp_path):
    plan = write(tmp_path, "split.gguf", shards=3)
    assert [os.path.basename(p) for p in plan.paths] == [
        "split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"]
    rows = bench(plan.paths[0])
    assert rows[0]["model_n_params"] == plan.n_params


def test_llama_bench_runs_f16(tmp_path):
    bench(write(tmp_path, "f16.gguf", quantization="F16", layers=2).paths[0])


def test_llama_cli_generates_tokens(single):
    """One prompt, 8 tokens, no interaction: llama-completion where built, else llama-cli -st."""
    if os.access(os.path.join(BIN_DIR, "llama-completion"), os.X_OK):
        cmd = [binary("llama-completion"), "-no-cnv"]
        done_marker = "eval time"
    else:
        # this llama-cli is a chat client: -st answers one turn (through the chat template) and exits
        cmd = [binary("llama-cli"), "-st"]
        done_marker = "Generation:"
    out = run(cmd + ["-m", single.paths[0], "-p", "Hello", "-n", "8", "--temp", "0", "-t", THREADS],
              stdin=subprocess.DEVNULL)
    assert done_marker in out, out[-4000:]


def _http(port, method, path, body=None, timeout_s=120):
    from http.client import HTTPConnection
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_llama_server_chat_completion_with_jinja(single, tmp_path):
    port = free_port()
    log_path = str(tmp_path / "llama-server.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([binary("llama-server"), "-m", single.paths[0], "--host", "127.0.0.1",
                                   "--port", str(port), "--jinja", "-c", "512", "-t", THREADS],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        status = None
        while time.time() < deadline:
            assert server.poll() is None, open(log_path).read()[-4000:]
            try:
                status, _body = _http(port, "GET", "/health", timeout_s=5)
            except (OSError, socket.timeout):
                status = None
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, open(log_path).read()[-4000:]
        status, body = _http(port, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0})
        assert status == 200, body
        reply = json.loads(body)
        assert reply["choices"][0]["message"]["role"] == "assistant"
        assert reply["usage"]["completion_tokens"] <= 8
        assert reply["usage"]["prompt_tokens"] > 0
    finally:
        stop(server)


def test_gguf_reader_agrees_with_llama_cpp_on_the_file(single):
    parsed = gguf.read_gguf(single.paths[0])
    assert parsed.get("general.architecture") == "minimax-m2"
    assert len(parsed.tensors) == len(single.tensors)
