# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gguf_plan against what llama.cpp allocates for each modelled family: MLA (deepseek2),
grouped-query with 4 KV heads (qwen3moe), GLM-4.x MoE with a dense first layer and a shared
expert (glm4moe), sliding window alternating with full attention (gpt-oss), recurrent state
beside full attention (qwen3next) and block-sparse attention with an indexer cache (minimax-m3:
its sparse graph with flash attention and a stream per slot, dense attention without).

Two CPU RPC servers and llama-server load a reduced-depth synthetic GGUF of each family (MiniMax-M2
too) with two slots of an F16 cache; for MLA, the sliding window and the recurrent state also one
slot of a q8_0 cache with flash attention (MiniMax-M3 too) at a context that is not a multiple of 256; and every
family once more without flash attention, three slots, `-c 5000` and a ubatch of 256. The
planner's weights per device must match within 1%, its KV cache to the logged 0.01 MiB, the
recurrent state (`RS buffer size`) likewise, and the compute buffers (`sched_reserve: ... compute
buffer size`, each RPC device's and the head's CPU buffer) within 1%.
Run by `make integration-llama` (GPULAB_LLAMA_BIN_DIR, GPULAB_LLAMA_VOCAB_GGUF); without the
binaries it fails rather than skips.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan

from test_gguf_plan_llama import load_and_read_buffers, rpc_endpoints, write_model  # noqa: F401 pylint: disable=unused-import  # rpc_endpoints: a fixture

RS_BUFFER = re.compile(r"llama_memory_recurrent: +(?P<buf>\S+) RS buffer size = +(?P<mib>[0-9.]+) MiB")

SHAPE = {"layers": 4, "hidden_size": 256, "attention_heads": 4, "kv_heads": 2, "head_dim": 64, "experts": 4,
         "experts_used": 2, "expert_ffn_size": 128, "quantization": "F16"}
SERVER = ["-ngl", "all", "-c", "2048", "--parallel", "2", "--fit", "off"]
PLAN = dict(n_gpu_layers="all", ctx_size=2048, parallel=2)
FAMILIES = ["minimax-m2", "deepseek2", "qwen3moe", "glm4moe", "gpt-oss", "qwen3next", "minimax-m3"]


# a quantised cache with flash attention, one slot, and a context that is not a multiple of 256
Q8_SERVER = ["-ngl", "all", "-c", "3000", "--parallel", "1", "--fit", "off", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]
Q8_PLAN = dict(n_gpu_layers="all", ctx_size=3000, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
# no flash attention (the transposed V cache and the KQ soft-max), three slots, another ubatch
NOFA_SERVER = ["-ngl", "all", "-c", "5000", "--parallel", "3", "-ub", "256", "--fit", "off", "-fa", "off"]
NOFA_PLAN = dict(n_gpu_layers="all", ctx_size=5000, parallel=3, ubatch=256, flash_attn="off")
CASES = ([(arch, SERVER, PLAN, 4) for arch in FAMILIES]
         + [(arch, Q8_SERVER, Q8_PLAN, 4) for arch in ("deepseek2", "gpt-oss", "qwen3next", "minimax-m3")]
         + [(arch, NOFA_SERVER, NOFA_PLAN, 4) for arch in FAMILIES]
         # four layers a device: each MiniMax-M3 sparse layer copies its own inputs into the split
         + [("minimax-m3", SERVER, PLAN, 8)])
CASE_NAMES = {id(SERVER): "f16", id(Q8_SERVER): "q8_0", id(NOFA_SERVER): "nofa-ub256"}


@pytest.mark.parametrize("arch, server, options, layers", CASES,
                         ids=["%s-%s%s" % (c[0], CASE_NAMES[id(c[1])], "" if c[3] == 4 else "-%d-layers" % c[3]) for c in CASES])
def test_family_buffers_match_llama_cpp(arch, server, options, layers, rpc_endpoints, tmp_path):  # noqa: F811
    shape = dict(SHAPE)
    shape["layers"] = layers
    model_path = write_model(tmp_path, "model.gguf", architecture=arch, **shape)
    model = gguf.read_gguf_model(model_path)
    devices = [{"name": "RPC%d[%s]" % (0, ep), "free_mib": 1 << 20, "host": ep} for ep in rpc_endpoints]
    plan = gguf_plan.plan_layout(model, devices, split="1,1", margin_mib=0, **options)
    found, log = load_and_read_buffers(model_path, rpc_endpoints, "1,1", server, str(tmp_path / "server.log"))
    states = {}
    for match in RS_BUFFER.finditer(log):
        states[match.group("buf")] = states.get(match.group("buf"), 0.0) + float(match.group("mib"))
    report = ["%s %s: weights %.2f/%.2f KV %.2f/%.2f state %.2f/%.2f compute %.2f/%.2f MiB (planned/logged)" % (
        arch, r["name"], r["weights_mib"], found["model"].get(r["name"], 0.0), r["kv_cache_mib"],
        found["kv"].get(r["name"], 0.0), r["state_mib"], states.get(r["name"], 0.0), r["compute_mib_estimate"],
        found["compute"].get(r["name"], 0.0)) for r in plan["devices"]]
    report.append("%s CPU compute %.2f/%.2f MiB" % (arch, plan["cpu"]["compute_mib"], found["compute"].get("CPU", 0.0)))
    print("\n".join(report))
    assert plan["kv_note"] is None
    for row in plan["devices"]:
        assert row["weights_mib"] == pytest.approx(found["model"].get(row["name"], 0.0), rel=0.01, abs=0.01), \
            "\n".join(report) + log[-3000:]
        assert row["kv_cache_mib"] == pytest.approx(found["kv"].get(row["name"], 0.0), abs=0.01), "\n".join(report)
        assert row["state_mib"] == pytest.approx(states.get(row["name"], 0.0), abs=0.01), "\n".join(report)
        assert row["compute_modelled"]
        assert row["compute_mib_estimate"] == pytest.approx(found["compute"].get(row["name"], 0.0), rel=0.01, abs=0.01), \
            "\n".join(report)
    assert plan["cpu"]["compute_mib"] == pytest.approx(found["compute"].get("CPU", 0.0), rel=0.01, abs=0.01), \
        "\n".join(report)
