# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.model_plan on models in a directory: the engine by format, the table, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.modules import model_plan

from common_defaults import common_default
from module_harness import ExitJson, FailJson, run_module

ENGINES = common_default("gpulab_engines")

LAB = [{"name": "node-a", "gpus": 2, "memory_gib": 4}, {"name": "node-b", "gpus": 1, "memory_gib": 4}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    opts = sm.validate_options({"shards": 2})
    plan = sm.ModelPlan(opts, str(root / "synthetic.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    hf = root / "hf"
    hf.mkdir()
    sh.write_model(str(hf), sh.ModelPlan(sh.validate_options({})))
    return {"gguf": plan.paths[0], "hf": str(hf)}


def plan(args):
    return run_module(model_plan.main, dict({"engines": ENGINES}, **args), {}, None)


def test_a_gguf_is_planned_for_llama_cpp(models):
    run = plan({"source": models["gguf"], "hardware": LAB, "llama": {"parallel": 2}})
    assert run.kind is ExitJson, run.result
    result = run.result
    assert result["changed"] is False and result["format"] == "gguf"
    assert result["engine"] == {"engine": "llama_cpp", "reason": "auto: %s is a GGUF model, which llama.cpp serves"
                                                                 % models["gguf"]}
    rows = result["table"]["rows"]
    # the synthetic model's trained context fits each of the two slots on every layout here (llama-server
    # caps a slot at the trained context): the fewest devices first
    assert [(r["layout"], r["fits"], r["ctx_size"]) for r in rows] == [
        ("node-b alone", True, 8192), ("node-a alone", True, 8192), ("all 2 nodes", True, 8192)]
    assert rows[0]["concurrency"] == 2 and [d["name"] for d in rows[2]["devices"]] == ["RPC0", "CUDA0", "CUDA1"]
    assert result["lines"][0].startswith("llama.cpp: layout")
    assert result["bytes_read"] < result["size_bytes"]


def test_a_checkpoint_is_planned_for_vllm(models):
    run = plan({"source": models["hf"], "hardware": [{"name": "a", "gpus": 2, "memory_gib": 80}]})
    assert run.kind is ExitJson, run.result
    assert run.result["engine"]["engine"] == "vllm"
    assert run.result["table"]["rows"][0]["layout"] == "TP=2+EP"


@pytest.mark.parametrize("args, message", [
    ({"hardware": "two GPUs"}, "plan_hardware is not JSON"),
    ({"hardware": [{"gpus": 1}]}, r"plan_hardware[0].gpus[0] has no memory_gib"),
    ({"engine": "vllm"}, "gpulab_engine is vllm but %s is a GGUF model, which vLLM does not serve"),
    ({"source": "relative/model.gguf"}, "model_source 'relative/model.gguf': a path on the controller must be absolute"),
])
def test_bad_input_is_named(models, args, message):
    run = plan(dict({"source": models["gguf"], "hardware": LAB}, **args))
    assert run.kind is FailJson
    expected = message % models["gguf"] if "%s" in message else message
    assert expected in run.result["msg"]


def test_a_directory_without_a_model_is_named(tmp_path):
    run = plan({"source": str(tmp_path), "hardware": LAB})
    assert run.kind is FailJson and "no config.json" in run.result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_a_checkpoint_on_the_lab_is_planned_over_the_head_and_the_vllm_nodes(models):
    def node(gpus):
        return {"gpus": [{"index": i, "memory_total_mib": 81920, "memory_used_mib": 0, "memory_free_mib": 81920}
                         for i in range(gpus)], "processes": []}
    # node-b, an RPC worker with one GPU, would make the GPU counts differ
    residency = {"node-a": node(2), "node-b": node(1)}
    run = plan({"source": models["hf"], "residency": residency, "head": "node-a"})
    assert run.kind is ExitJson, run.result
    assert [n["name"] for n in run.result["hardware"]] == ["node-a"]
    assert run.result["lines"][0].startswith("vLLM on 1 node(s) x 2 GPUs")
    both = plan({"source": models["hf"], "residency": residency, "head": "node-a", "vllm_nodes": ["node-b"]})
    assert both.result["lines"][0].startswith("vLLM: the nodes have different GPU counts (node-a 2, node-b 1)")


def test_the_preview_keeps_a_kept_service_s_room_and_says_so(models):
    residency = {"node-a": {"gpus": [{"index": 0, "memory_total_mib": 81920, "memory_used_mib": 0,
                                      "memory_free_mib": 81920}], "processes": []}}
    kept = {"node-a": {"keep": ["asr"], "stated": {}, "history": {"asr": {"gpus": {"0": 40960}, "seen_at": "t"}}}}
    run = plan({"source": models["gguf"], "residency": residency, "head": "node-a", "kept": kept})
    assert run.kind is ExitJson, run.result
    assert run.result["hardware"][0]["gpus"][0]["kept_mib"] == 40960
    assert run.result["lines"][-1] == ("node-a: asr: 40960 MiB reserved on GPU 0 (40960 MiB from the most it held "
                                       "when last seen running (t); not running now)")
    bad = plan({"source": models["gguf"], "residency": residency, "head": "node-a",
                "kept": {"node-a": dict(kept["node-a"], stated={"tts": 1})}})
    assert bad.kind is FailJson and bad.result["msg"].startswith("node-a: gpulab_kept_mib names 'tts'")
