# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ranked tables of model_plan: the seed shapes on their hardware and on hardware they do not fit."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from pathlib import Path

import model_tables
import pytest
from test_gguf_plan import MINIMAX_M2, ShapedModel

from ansible_collections.gpulab.inference.plugins.module_utils import model_header as mh
from ansible_collections.gpulab.inference.plugins.module_utils import model_plan as mp
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm"
OPTIONS = {"parallel": 1, "ctx_size": "auto", "margin_mib": 1024, "cuda_context_mib": 720}


@pytest.fixture(scope="module")
def minimax():
    return ShapedModel(MINIMAX_M2, 200064)


def seed_nodes():
    return mh.parse_hardware([{"name": "node-a", "gpus": [{"memory_mib": 97248, "kept_gib": 5}, {"memory_mib": 97248}]},
                              {"name": "node-b", "gpus": [{"memory_mib": 97248, "kept_gib": 10}]}])


def test_devices_are_the_workers_gpus_then_the_heads():
    devices = mp.llama_devices(seed_nodes())
    assert [(d["name"], d["host"], d["free_mib"]) for d in devices] == [
        ("RPC0", "node-b", 97248 - 10240), ("CUDA0", "node-a", 97248 - 5120), ("CUDA1", "node-a", 97248)]


def test_seed_gguf_fits_only_over_both_nodes(minimax):
    table = mp.llama_table(minimax, seed_nodes(), OPTIONS)
    rows = table["rows"]
    assert [r["layout"] for r in rows][0] == "all 2 nodes"
    assert rows[0]["fits"] is True and rows[0]["hardware"] == "3 x 95 GiB over 2 nodes"
    assert sum(rows[0]["tensor_split"]) == 63 and 32768 < rows[0]["ctx_size"] < 196608
    assert [r["fits"] for r in rows[1:]] == [False, False]
    assert table["smallest_fitting"] is None
    lines = mp.table_lines(table)
    assert lines[1].split()[:3] == ["all", "2", "nodes"] and "fits" in lines[1]
    assert any(line.strip().startswith("RPC0") and "node-b" in line for line in lines)


def test_a_gpu_left_without_layers_shows_its_idle_cuda_context(minimax):
    """The idle figure reaches the plan: node-b's small GPU gets no layer yet its RPC server runs."""
    nodes = mh.parse_hardware([{"name": "node-a", "gpus": [{"memory_mib": 143771}, {"memory_mib": 143771}]},
                               {"name": "node-b", "gpus": [{"memory_mib": 1800}]}])
    options = dict(OPTIONS, ctx_size=8192, cuda_idle_context_mib=518)
    row = mp.llama_row(minimax, None, nodes, options, "all 2 nodes")
    assert row["tensor_split"][0] == 0.0 and row["fits"] is True
    assert [(d["name"], d["context_mib"]) for d in row["devices"]] == [("RPC0", 518.0), ("CUDA0", 720.0), ("CUDA1", 720.0)]
    assert row["devices"][0]["total_mib"] == 518.0 and row["smallest_headroom_mib"] == pytest.approx(258, abs=0.01)
    without = mp.llama_row(minimax, None, nodes, dict(options, cuda_idle_context_mib=0), "all 2 nodes")
    assert without["devices"][0]["total_mib"] == 0.0


def test_a_model_that_fits_nowhere_names_the_smallest_hardware(minimax):
    nodes = mh.parse_hardware([{"name": "box", "gpus": 2, "memory_gib": 80}])
    table = mp.llama_table(minimax, nodes, OPTIONS)
    assert not any(r["fits"] for r in table["rows"])
    assert table["smallest_fitting"] == "3 x 80 GiB over 2 nodes (at 4096 tokens of context)"
    assert mp.table_lines(table)[-1] == ("fits nowhere here; the smallest that would: "
                                         "3 x 80 GiB over 2 nodes (at 4096 tokens of context)")


def seed_checkpoint():
    config = json.loads((FIXTURES / "minimax-m2.5-config.json").read_text())
    shape = hf.model_shape(config)
    tensors = dict((n, (dt, dims, hf.tensor_nbytes(dt, dims))) for n, dt, dims in hf.checkpoint_tensors(shape))
    return config, tensors


def test_seed_checkpoint_on_eight_gpus_ranks_tp8_ep_first():
    config, tensors = seed_checkpoint()
    nodes = mh.parse_hardware([{"name": "box", "gpus": 8, "memory_mib": 97887}])
    table = mp.vllm_table(config, tensors, nodes, {"gpu_memory_utilization": 0.9, "max_model_len": 196608,
                                                   "kv_cache_dtype": "auto", "reserve_mib": 4096})
    assert table["error"] is None
    assert (table["rows"][0]["layout"], table["rows"][0]["verdict"]) == ("TP=8+EP", "chosen")
    verdicts = dict((r["layout"], r) for r in table["rows"])
    assert verdicts["TP=8"]["verdict"] == "rejected" and "1536 / 8 = 192" in verdicts["TP=8"]["reason"]
    assert verdicts["TP=4"]["verdict"] == "rejected" and "4 GPUs stay idle" in verdicts["TP=4"]["reason"]
    assert verdicts["TP=4+DP=2+EP"]["verdict"] == "valid, ranked lower"
    assert mp.table_lines(table)[0] == "vLLM on 1 node(s) x 8 GPUs of 97887 MiB at max_model_len 196608:"


def test_a_checkpoint_too_large_names_the_smallest_hardware():
    config, tensors = seed_checkpoint()
    nodes = mh.parse_hardware([{"name": "box", "gpus": 2, "memory_mib": 97887}])
    table = mp.vllm_table(config, tensors, nodes, {"gpu_memory_utilization": 0.9, "max_model_len": 8192,
                                                   "kv_cache_dtype": "auto", "reserve_mib": 4096})
    assert table["rows"] == [] and table["error"].startswith("no layout of 1 node(s) x 2 GPUs")
    assert table["smallest_fitting"] == "It would run on 2 node(s) x 2 GPUs of 97887 MiB as TP=4."


def test_nodes_vllm_cannot_span_are_named():
    config, tensors = seed_checkpoint()
    nodes = mh.parse_hardware([{"name": "a", "gpus": 2, "memory_gib": 96}, {"name": "b", "gpus": 1, "memory_gib": 96}])
    table = mp.vllm_table(config, tensors, nodes, {"gpu_memory_utilization": 0.9, "max_model_len": 8192,
                                                   "kv_cache_dtype": "auto", "reserve_mib": 4096})
    assert "different GPU counts (a 2, b 1)" in table["error"]
    assert mp.table_lines(table)[0].startswith("vLLM: the nodes have different GPU counts")


def test_beyond_llama_cpps_devices_the_hint_says_none(minimax):
    nodes = mh.parse_hardware([{"name": "box", "gpus": 1, "memory_gib": 8}])
    table = mp.llama_table(minimax, nodes, OPTIONS)
    assert table["smallest_fitting"] == "none: more than 16 GPUs of 8.0 GiB, the most llama.cpp splits over"


def test_the_labs_nodes_from_residency_count_what_others_hold_as_kept():
    residency = {
        "node-b": {"gpus": [{"index": 0, "memory_total_mib": 97887, "memory_free_mib": 80000}],
                   "processes": [{"gpu_index": 0, "used_memory_mib": 7000, "systemd_unit": "gpulab-rpc-server@0.service"},
                                 {"gpu_index": 0, "used_memory_mib": 10887, "systemd_unit": "embeddings.service"}]},
        "node-a": {"gpus": [{"index": 1, "memory_total_mib": 97887, "memory_free_mib": 97000},
                            {"index": 0, "memory_total_mib": 97887, "memory_free_mib": 92767}], "processes": []},
    }
    nodes = mp.nodes_from_residency("node-a", residency, ["gpulab-rpc-server@*.service"])
    assert nodes == [
        {"name": "node-a", "gpus": [{"index": 0, "memory_total_mib": 97887, "kept_mib": 5120},
                                    {"index": 1, "memory_total_mib": 97887, "kept_mib": 887}]},
        {"name": "node-b", "gpus": [{"index": 0, "memory_total_mib": 97887, "kept_mib": 10887}]}]


def test_a_kept_service_down_now_is_kept_with_what_it_last_held():
    residency = {"node-a": {"gpus": [{"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97000}],
                            "processes": []}}
    nodes = mp.nodes_from_residency("node-a", residency, (), {"node-a": {"0": 40960}})
    assert nodes[0]["gpus"][0]["kept_mib"] == 887 + 40960
    # never more than the card
    assert mp.nodes_from_residency("node-a", residency, (), {"node-a": {"0": 99999}})[0]["gpus"][0]["kept_mib"] == 97887


def test_a_head_without_gpus_is_named():
    with pytest.raises(mp.gp.PlanError, match="the head node-a has no GPU to plan on"):
        mp.nodes_from_residency("node-a", {"node-a": {"gpus": []}, "node-b": {"gpus": [
            {"index": 0, "memory_total_mib": 10, "memory_free_mib": 10}]}})
    with pytest.raises(mp.gp.PlanError, match="the head node-a did not report its GPUs"):
        mp.nodes_from_residency("node-a", {})


def test_vllm_spans_the_head_and_the_vllm_nodes_only():
    nodes = [{"name": "node-a", "gpus": [1, 2]}, {"name": "node-b", "gpus": [1]}, {"name": "node-c", "gpus": [1, 2]}]
    assert [n["name"] for n in mp.vllm_nodes(nodes, [])] == ["node-a"]
    assert [n["name"] for n in mp.vllm_nodes(nodes, ["node-c"])] == ["node-a", "node-c"]


def test_vllm_table_names_the_family_structure():
    from test_hf_checkpoint import DEEPSEEK_V3
    shape = mp.vp.model_shape(DEEPSEEK_V3)
    line = mp.vllm_structure_line(shape, {"kv_cache_dtype": "auto"})
    # 61 layers x 576 latent values x 2 bytes
    assert line == "DeepseekV3ForCausalLM: mla attention (61 full layers): 70272 bytes of cache per token"
    table = {"engine": "vllm", "error": None, "structure": line, "hardware": "h", "max_model_len": 4096, "rows": []}
    assert mp.table_lines(table)[-1] == "model: " + line


def full_size(family, **overrides):
    from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
    plan = sh.ModelPlan(sh.validate_options(sh.family_options(family, **overrides)))
    return plan.config, dict((n, (dt, dims, hf.tensor_nbytes(dt, dims))) for n, dt, dims in plan.tensors)


def test_deepseek_v3_on_three_96_gb_gpus_does_not_fit_and_says_what_would():
    config, tensors = full_size("deepseek-v3")
    nodes = mh.parse_hardware([{"name": "lab", "gpus": 3, "memory_gib": 96}])
    table = mp.vllm_table(config, tensors, nodes, {"gpu_memory_utilization": 0.9, "max_model_len": 163840,
                                                   "kv_cache_dtype": "auto", "reserve_mib": 4096})
    assert table["rows"] == [] and table["error"].startswith("no layout of 1 node(s) x 3 GPUs of 98304 MiB")
    # 627 GiB of FP8 weights over three GPUs: 209.7 GiB each at TP=3, beyond the 86.4 GiB vLLM may use
    assert "TP=3 puts 209.7 GiB" in table["error"] and "the 128 attention heads do not divide by TP 3" in table["error"]
    assert table["smallest_fitting"].startswith("It would run on 3 node(s) x 3 GPUs of 98304 MiB")
    lines = mp.table_lines(table)
    assert lines[-1] == "model: DeepseekV3ForCausalLM: mla attention (61 full layers): 70272 bytes of cache per token"


def test_an_unmodelled_family_keeps_its_weights_and_gives_no_token_count():
    config, tensors = full_size("deepseek-v3", layers=4)
    config = dict(config, architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32")
    nodes = mh.parse_hardware([{"name": "box", "gpus": 1, "memory_gib": 96}])
    table = mp.vllm_table(config, tensors, nodes, {"gpu_memory_utilization": 0.9, "max_model_len": 8192,
                                                   "kv_cache_dtype": "auto", "reserve_mib": 4096})
    row = table["rows"][0]
    assert (row["layout"], row["verdict"]) == ("TP=1", "chosen")
    # the headers' bytes (4 layers at DeepSeek-V3's width: 15.8 GiB) are planned all the same
    assert row["weights_gib"] == pytest.approx(sum(nb for _dt, _d, nb in tensors.values()) / 2.0 ** 30, abs=0.01)
    assert row["weights_gib"] > 15
    assert row["kv_tokens"] is None and row["concurrency"] is None
    assert row["reason"].endswith("KV tokens not sized: the family's cache is not modelled")
    lines = mp.table_lines(table)
    assert lines[-1] == ("model: DeepseekV32ForCausalLM: family DeepseekV32ForCausalLM is not modelled: weights only "
                         "(vLLM keeps it in sparse attention with an indexer cache)")
    assert " - " in lines[2]


def test_a_gguf_family_not_modelled_claims_no_context_but_plans_its_weights(minimax):
    v32 = ShapedModel(MINIMAX_M2, 200064)
    v32.metadata = dict((k.replace("minimax-m2.", "deepseek32.", 1), v) for k, v in minimax.metadata.items())
    v32.metadata["general.architecture"] = "deepseek32"
    table = mp.llama_table(v32, seed_nodes(), OPTIONS)
    every = table["rows"][0]
    assert (every["layout"], every["fits"], every["verdict"]) == ("all 2 nodes", True, "weights fit")
    assert every["ctx_size"] is None and every["kv_tokens"] is None
    assert all(d["kv_cache_mib"] is None for d in every["devices"])
    # the same weights as MiniMax-M2's (the family changes the cache, not the tensors)
    m2 = mp.llama_table(minimax, seed_nodes(), OPTIONS)["rows"][0]
    assert [d["weights_mib"] for d in every["devices"]] == [d["weights_mib"] for d in m2["devices"]]
    assert every["reason"].startswith("family deepseek32 is not modelled: weights only (llama.cpp keeps it in "
                                      "llama_kv_cache_dsa")
    lines = mp.table_lines(table)
    assert " weights fit         - " in lines[1] and "kv        -" in lines[2]
    assert lines[-1].startswith("model: deepseek32: family deepseek32 is not modelled: weights only")


def deepseek_v3_gguf(tmp_path):
    """DeepSeek-V3's GGUF in Q2_K (tests/model_tables.py) as a header over a hole, read back."""
    from ansible_collections.gpulab.inference.plugins.module_utils import gguf
    path = str(tmp_path / "DeepSeek-V3-Q2_K.gguf")
    model_tables.write_deepseek_v3_q2_k(path)
    return gguf.read_gguf_model(path)


def test_deepseek_v3_in_q2_k_on_the_seed_labs_three_96_gb_gpus_fits_with_its_context_split_and_headroom(tmp_path):
    model = deepseek_v3_gguf(tmp_path)
    # 671 B weights at 2.625 bits a weight (attn_k_b at 8.5), norms and routers at 32: 205.8 GiB
    assert model.size_bytes / 2.0 ** 30 == pytest.approx(205.8, abs=0.05)
    table = mp.llama_table(model, seed_nodes(), OPTIONS)
    every = table["rows"][0]
    assert (every["layout"], every["fits"], every["verdict"]) == ("all 2 nodes", True, "fits")
    # MLA: 576 values (512 latent + 64 rope) of K per token and layer, no V: 70,272 bytes a token
    assert table["structure"] == "deepseek2: mla attention (61 full layers): 70272 bytes of cache per token"
    assert [d["name"] for d in every["devices"]] == ["RPC0", "CUDA0", "CUDA1"]
    assert sum(d["weights_mib"] for d in every["devices"]) == pytest.approx(205.8 * 1024, rel=0.01)
    # the whole trained context in one slot (163840 x 70272 bytes: 10.7 GiB of cache over the 61 layers),
    # layers 0-20 on node-b's GPU (10 GiB kept there), 21-39 and 40-60 + output on node-a's two
    assert every["ctx_size"] == 163840
    assert every["tensor_split"] == [21, 19, 22]
    assert [d["kv_cache_mib"] for d in every["devices"]] == [3780, 3420, 3780]
    assert every["smallest_headroom_mib"] == pytest.approx(14481, abs=2)
    assert all(d["headroom_mib"] >= 14000 for d in every["devices"])
    # one node alone (two or one GPU) cannot hold it
    assert [r["fits"] for r in table["rows"][1:]] == [False, False]
