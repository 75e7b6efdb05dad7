# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM autopilot (module_utils/layout_vllm.py): TP, PP, DP and expert parallel on the seed's eight GPUs,
the operator's values, the memory kept services hold."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import layout_vllm as lv
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm"


# ---------------------------------------------------------------- vLLM

def seed_vllm(nodes=None, opts=None):
    config = json.loads((FIXTURES / "minimax-m2.5-config.json").read_text())
    shape = hf.model_shape(config)
    tensors = dict((n, (dt, dims, hf.tensor_nbytes(dt, dims))) for n, dt, dims in hf.checkpoint_tensors(shape))
    hw = vp.hardware(nodes or [{"name": "seed", "gpus": [{"index": i, "memory_total_mib": 97887} for i in range(8)]}])
    options = opts or {"gpu_memory_utilization": 0.9, "max_model_len": 196608, "kv_cache_dtype": "auto",
                       "reserve_mib": 4096}
    return vp.summarize(tensors, shape), shape, hw, options


def test_seed_vllm_auto_takes_tp8_with_expert_parallel():
    summary, shape, hw, opts = seed_vllm()
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, limit=None)
    assert choice["layout"].as_dict() == {"tensor_parallel_size": 8, "pipeline_parallel_size": 1,
                                          "data_parallel_size": 1, "enable_expert_parallel": True}
    assert choice["reason"].startswith("auto: TP=8+EP uses all 8 GPUs")
    rejected = dict((r["label"], r) for r in choice["rejected"])
    # the seed's three failures, each with its reason
    assert rejected["TP=4"]["rules"] == ["gpus"] and "4 GPUs stay idle" in rejected["TP=4"]["findings"][0]
    assert "memory" in rejected["TP=2+EP"]["rules"]
    assert "(115.1 GB) of weights" in rejected["TP=2+EP"]["findings"][0]
    assert rejected["TP=8"]["rules"] == ["expert_shard_vs_block"]
    assert "1536 / 8 = 192 is not a multiple of the FP8 block size 128" in rejected["TP=8"]["findings"][0]
    # closest first: layouts over all eight GPUs before those that leave some idle
    assert choice["rejected"][0]["label"] == "TP=8"
    labels = [r["label"] for r in choice["alternatives"]]
    assert "TP=4+DP=2+EP" in labels and "TP=8+EP" not in labels


def test_rejected_are_cut_to_the_first_few():
    summary, shape, hw, opts = seed_vllm()
    choice = lv.choose_vllm_layout(summary, shape, hw, opts)
    assert len(choice["rejected"]) == la.REJECTED_LIMIT
    assert [r["label"] for r in choice["rejected"][:2]] == ["TP=8", "TP=4+DP=2"]


def test_operator_values_are_kept_and_the_rest_chosen():
    summary, shape, hw, opts = seed_vllm()
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, given={"tensor_parallel_size": 4,
                                                                    "enable_expert_parallel": "auto"})
    assert choice["layout"].tp == 4 and choice["layout"].world == 8
    assert choice["layout"].ep is True


def test_an_operator_layout_that_vllm_refuses_is_an_error():
    summary, shape, hw, opts = seed_vllm()
    given = {"tensor_parallel_size": 8, "pipeline_parallel_size": 1, "data_parallel_size": 1,
             "enable_expert_parallel": False}
    with pytest.raises(la.AutoError, match="vLLM cannot run TP=8 as set: expert FFN 1536 / 8 = 192"):
        lv.choose_vllm_layout(summary, shape, hw, opts, given=given)


def test_an_operator_layout_with_idle_gpus_is_kept():
    summary, shape, hw, opts = seed_vllm()
    given = {"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "data_parallel_size": 1,
             "enable_expert_parallel": True}
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, given=given)
    assert choice["layout"].label() == "TP=4+EP" and "as set" in choice["reason"]


def test_kept_services_shrink_the_budget_and_the_pinned_kv_cache():
    free = seed_vllm()
    gpus = [{"index": i, "memory_total_mib": 97887, "kept_mib": 20480} for i in range(8)]
    kept = seed_vllm(nodes=[{"name": "seed", "gpus": gpus}])
    a = lv.choose_vllm_layout(*free)
    b = lv.choose_vllm_layout(*kept)
    assert a["layout"].label() == b["layout"].label() == "TP=8+EP"
    pinned_free = a["result"]["estimate"]["kv_cache_memory_bytes"]
    pinned_kept = b["result"]["estimate"]["kv_cache_memory_bytes"]
    assert pinned_free % (1 << 20) == 0
    # 0.9 x 97887 MiB = 88098 MiB without kept services; 97887 - 20480 = 77407 MiB with them
    assert (pinned_free - pinned_kept) // (1 << 20) == 88098 - 77407
    assert vp.startup_utilization(97887, 0.9, 20480) == 0.79
    assert vp.startup_utilization(97887, 0.9, 0) == 0.9


def test_a_model_too_large_for_the_gpus_names_the_smallest_that_would_run_it():
    gpus = [{"index": i, "memory_total_mib": 97887} for i in range(2)]
    summary, shape, hw, opts = seed_vllm(nodes=[{"name": "small", "gpus": gpus}])
    with pytest.raises(la.AutoError) as error:
        lv.choose_vllm_layout(summary, shape, hw, opts)
    message = str(error.value)
    assert "no layout of 1 node(s) x 2 GPUs of 97887 MiB runs the model on every GPU (every value auto)" in message
    assert "It would run on 2 node(s) x 2 GPUs of 97887 MiB as TP=4." in message


def test_bad_kept_memory_is_named():
    with pytest.raises(vp.VllmPlanError, match="kept_mib 'lots'"):
        vp.hardware([{"name": "n", "gpus": [{"index": 0, "memory_total_mib": 1000, "kept_mib": "lots"}]}])


def test_serve_arguments_pin_the_kv_cache():
    layout = vp.Layout(8, ep=True)
    opts = {"gpu_memory_utilization": 0.9, "max_model_len": 4096, "kv_cache_dtype": "auto",
            "kv_cache_memory_bytes": 59242446848}
    hw = {"nodes": 1, "gpus_per_node": 8}
    first = vp.serve_arguments("/m", layout, opts, hw, {})["args"]
    assert first[first.index("--kv-cache-memory-bytes") + 1] == "59242446848"
    assert vp.serve_arguments("/m", layout, opts, hw, {})["args"] == first
    unpinned = vp.serve_arguments("/m", layout, dict(opts, kv_cache_memory_bytes=None), hw, {})["args"]
    assert "--kv-cache-memory-bytes" not in unpinned


def test_values_set_that_rule_out_every_layout_are_judged_as_vllm_would():
    summary, shape, hw, opts = seed_vllm()
    with pytest.raises(la.AutoError, match=r"vLLM cannot run TP=16\+EP on 1 node\(s\) x 8 GPUs of 97887 MiB: "
                                           r"TP 16 x PP 1 x DP 1 = 16 GPUs, but"):
        lv.choose_vllm_layout(summary, shape, hw, opts, given={"tensor_parallel_size": 16, "enable_expert_parallel": True})


def test_kept_memory_per_gpu_follows_the_memory_plan_rule():
    gpu = {"index": 1, "uuid": "GPU-b", "memory_total_mib": 97887, "memory_free_mib": 60000}
    processes = [{"gpu_index": 1, "used_memory_mib": 20000, "systemd_unit": "gpulab-vllm.service"},
                 {"gpu_index": 1, "used_memory_mib": 17000, "systemd_unit": "kept.service"},
                 {"gpu_index": 0, "used_memory_mib": 5000, "systemd_unit": "gpulab-vllm.service"}]
    # free 60000 + own 20000 = 80000 available, 79872 in whole steps
    assert lv.kept_mib(gpu, processes, ["gpulab-vllm.service"]) == 97887 - 79872
    assert lv.kept_mib(gpu, processes, ["gpulab-vllm.service"], step_mib=0) == 97887 - 80000
    assert lv.kept_mib(gpu, processes, [], drained=[{"action": "stop", "gpus": {"GPU-b": 17000}}],
                       step_mib=0) == 97887 - 77000
    assert lv.kept_mib(dict(gpu, memory_free_mib=None), processes) is None
    nodes = [{"name": "b", "gpus": [{"index": 0, "memory_total_mib": 97887}, {"index": 1, "memory_total_mib": 97887}]}]
    found = lv.nodes_with_kept(nodes, {"b": {"gpus": [gpu], "processes": processes}}, ["gpulab-vllm.service"])
    # GPU 0 is not in the residency: it keeps what it had; the inventory's nodes are not changed
    assert [g.get("kept_mib") for g in found[0]["gpus"]] == [None, 97887 - 79872]
    assert "kept_mib" not in nodes[0]["gpus"][1]
    assert lv.nodes_with_kept(nodes, None) == nodes


def test_kept_memory_leaves_out_the_collections_supervisord_programs():
    """vllm_server reads kept memory by the memory_plan rule: gpulab-vllm under supervisord is not kept."""
    gpu = {"index": 0, "uuid": "GPU-a", "memory_total_mib": 143771, "memory_free_mib": 10000}
    processes = [{"gpu_index": 0, "used_memory_mib": 120000, "systemd_unit": None, "supervisor_program": "gpulab-vllm"},
                 {"gpu_index": 0, "used_memory_mib": 13000, "systemd_unit": None, "supervisor_program": "embedder"}]
    assert lv.kept_mib(gpu, processes, ["gpulab-vllm.service"], step_mib=0) == 143771 - 130000
    nodes = [{"name": "h", "gpus": [{"index": 0, "memory_total_mib": 143771}]}]
    found = lv.nodes_with_kept(nodes, {"h": {"gpus": [gpu], "processes": processes}}, ["gpulab-vllm.service"])
    assert found[0]["gpus"][0]["kept_mib"] == 143771 - 129792


def test_kept_memory_that_lowers_no_budget_counts_as_none():
    gpu = {"index": 0, "uuid": "GPU-a", "memory_total_mib": 100000, "memory_free_mib": 99000}
    nodes = [{"name": "h", "gpus": [{"index": 0, "memory_total_mib": 100000}]}]
    residency = {"h": {"gpus": [gpu], "processes": []}}
    # 99000 available -> 98816 in whole steps: 1184 MiB kept, within the tenth that 0.9 leaves
    assert lv.nodes_with_kept(nodes, residency)[0]["gpus"][0]["kept_mib"] == 1184
    assert lv.nodes_with_kept(nodes, residency, utilization=0.9)[0]["gpus"][0]["kept_mib"] == 0
    assert lv.nodes_with_kept(nodes, residency, utilization=0.99)[0]["gpus"][0]["kept_mib"] == 1184
