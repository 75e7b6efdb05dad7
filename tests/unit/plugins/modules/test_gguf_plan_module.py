# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.gguf_plan: a plan from a model file, the refusal with a table, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.modules import gguf_plan

from module_harness import ExitJson, FailJson, run_module


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    opts = sm.validate_options({"shards": 2})
    plan = sm.ModelPlan(opts, str(tmp_path_factory.mktemp("m") / "lab.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    return plan


def plan(args):
    return run_module(gguf_plan.main, args, {}, None)


DEVICES = [{"name": "RPC0", "host": "node-b", "free_mib": 24105}, {"name": "RPC1", "host": "node-c", "free_mib": 24105}]


def test_plans_the_lab_layout(split_model):
    run = plan({"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048, "parallel": 1})
    assert run.kind is ExitJson, run.result
    result = run.result
    assert result["changed"] is False and result["fits"] is True
    assert result["model"]["files"] == 2 and result["model"]["architecture"] == "minimax-m2"
    assert [d["layer_range"] for d in result["devices"]] == ["0-2", "3"]
    assert result["devices"][0]["weights_mib"] == 13.62
    assert result["devices"][1]["output_layer"] is True
    assert result["tensor_split"] == [1.0, 1.0]
    assert (result["kv_cells"], result["kv_streams"]) == (2048, 1)
    assert result["smallest_set"] == ["RPC0"]
    assert result["single_node"] == {"node-b": True, "node-c": True}
    assert result["no_single_node_fits"] is False
    assert result["table"][1].startswith("RPC0")
    assert run.commands == []


def test_plans_from_nodes(split_model):
    nodes = {"head": "node-a", "workers": ["node-b"], "cuda": True,
             "residency": {"node-b": {"gpus": [{"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97248}],
                                      "processes": []}}}
    run = plan({"path": split_model.paths[0], "nodes": nodes, "ctx_size": 1024})
    assert run.kind is ExitJson, run.result
    assert [(d["name"], d["host"], d["free_mib"]) for d in run.result["devices"]] == [("RPC0", "node-b", 97248)]
    assert run.result["devices"][0]["layers"] == [0, 1, 2, 3]


def test_refuses_an_overflow_with_the_table(split_model):
    devices = [dict(DEVICES[0]), dict(DEVICES[1], free_mib=20)]
    run = plan({"path": split_model.paths[0], "devices": devices, "ctx_size": 2048, "margin_mib": 16,
                "require_fit": True})
    assert run.kind is FailJson
    msg = run.result["msg"]
    assert msg.startswith("RPC1 would overflow (free memory minus a 16 MiB margin); nothing was changed.")
    # the device's row says NO; the table's last line names the cache's structure
    assert [line for line in msg.splitlines() if line.startswith("RPC1 ")][-1].rstrip().endswith("NO")
    assert msg.rstrip().splitlines()[-1].startswith("cache: minimax-m2: gqa attention")
    assert run.result["overflowing"] == ["RPC1"]
    # without require_fit the same plan is returned, not failed
    run = plan({"path": split_model.paths[0], "devices": devices, "ctx_size": 2048, "margin_mib": 16})
    assert run.kind is ExitJson and run.result["fits"] is False


@pytest.mark.parametrize("args, message", [
    ({"tensor_split": [1, -2]}, r"tensor_split entry -2 is negative"),
    ({"tensor_split": [0, 0]}, r"tensor_split \[0, 0\] is all zero"),
    ({"tensor_split": "1,1,1"}, r"tensor_split has 3 entries but there are only 2 devices \(RPC0, RPC1\)"),
    ({"cache_type_k": "q2"}, r"cache_type_k='q2' is not a KV cache type"),
    ({"parallel": 0}, r"parallel=0 must be a positive number of slots"),
])
def test_bad_plan_input_is_named(split_model, args, message):
    run = plan(dict({"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048}, **args))
    assert run.kind is FailJson
    assert re.search(message, run.result["msg"]), run.result["msg"]


def test_not_a_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("<html>404 not found</html>")
    run = plan({"path": str(path), "devices": DEVICES})
    assert run.kind is FailJson
    assert "model.gguf: not a GGUF file" in run.result["msg"]


def test_missing_shard(split_model, tmp_path):
    lonely = str(tmp_path / "lab-00001-of-00002.gguf")
    os.symlink(split_model.paths[0], lonely)
    run = plan({"path": lonely, "devices": DEVICES})
    assert run.kind is FailJson
    assert run.result["msg"].startswith("missing shard 2 of 2: ")
    assert "lab-00002-of-00002.gguf does not exist" in run.result["msg"]


def test_devices_or_nodes_is_required(split_model):
    run = plan({"path": split_model.paths[0]})
    assert run.kind is FailJson
    assert "one of the following is required: devices, nodes" in run.result["msg"]


def test_record_leaves_out_live_free_memory(split_model):
    first = plan({"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048}).result["record"]
    moved = [dict(d, free_mib=d["free_mib"] - 5000) for d in DEVICES]
    second = plan({"path": split_model.paths[0], "devices": moved, "ctx_size": 2048}).result["record"]
    assert first == second
    assert first["devices"][0] == {
        "name": "RPC0", "host": "node-b", "kind": None, "gpu_index": None, "layer_range": "0-2", "output_layer": False, "split": 1.0,
        "weights_mib": 13.62, "kv_cache_mib": 6.0, "compute_mib_estimate": first["devices"][0]["compute_mib_estimate"],
        "context_mib": 720.0, "total_mib": first["devices"][0]["total_mib"]}
    row = first["devices"][0]
    assert row["total_mib"] == pytest.approx(13.62 + 6.0 + row["compute_mib_estimate"] + 720.0, abs=0.02)
    assert first["options"]["ctx_size"] == 2048 and first["options"]["tensor_split"] == "equal"
    assert first["model"]["files"] == 2


def test_the_record_is_kept_in_record_file_and_rewritten_only_when_the_prediction_moved(split_model, tmp_path):
    path = tmp_path / "state" / "memory-plan.json"
    args = {"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048, "record_file": str(path)}
    checked = plan(dict(args, _ansible_check_mode=True))
    assert checked.kind is ExitJson and checked.result["changed"] is True
    assert not path.parent.exists()
    first = plan(args)
    assert first.result["changed"] is True
    assert json.loads(path.read_text()) == first.result["record"]
    # the layout role memory_plan wrote with to_nice_json, so an upgrade rewrites nothing
    assert path.read_text() == json.dumps(first.result["record"], indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
    assert path.stat().st_mode & 0o777 == 0o644
    # live free memory moved, the prediction did not: nothing to write
    moved = [dict(d, free_mib=d["free_mib"] - 5000) for d in DEVICES]
    assert plan(dict(args, devices=moved)).result["changed"] is False
    assert plan(dict(args, ctx_size=4096)).result["changed"] is True
    before = path.read_text()
    refused = plan(dict(args, devices=[DEVICES[0], dict(DEVICES[1], free_mib=20)], margin_mib=16, require_fit=True))
    assert refused.kind is FailJson and path.read_text() == before


def test_a_device_without_layers_holds_the_idle_cuda_context(split_model):
    """Issue 34's H200: the RPC server given no layers still held 518 MiB (the default)."""
    args = {"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048, "tensor_split": [0, 1]}
    run = plan(args)
    assert run.kind is ExitJson, run.result
    idle, busy = run.result["devices"]
    assert (idle["layer_range"], idle["context_mib"], idle["total_mib"]) == ("", 518.0, 518.0)
    assert busy["context_mib"] == 720.0
    assert run.result["record"]["options"]["cuda_idle_context_mib"] == 518
    off = plan(dict(args, cuda_idle_context_mib=0)).result["devices"]
    assert (off[0]["context_mib"], off[0]["total_mib"], off[1]["total_mib"]) == (0.0, 0.0, busy["total_mib"])
    bad = plan(dict(args, cuda_idle_context_mib=-5))
    assert bad.kind is FailJson
    assert "cuda_idle_context_mib -5 must be >= 0 (0 leaves the idle CUDA context out)" in bad.result["msg"]


def kv_mib(result):
    return sum(d["kv_cache_mib"] for d in result["devices"])


def test_server_options_plan_what_the_head_runs_with_a_q8_0_cache(split_model):
    """The head's options (role common's gpulab_llama_server_memory_options) reach the plan as given."""
    f16 = plan({"path": split_model.paths[0], "devices": DEVICES, "server": {"ctx_size": 4096, "parallel": 2}})
    q8 = plan({"path": split_model.paths[0], "devices": DEVICES,
               "server": {"ctx_size": 4096, "parallel": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}})
    assert f16.kind is ExitJson and q8.kind is ExitJson, (f16.result, q8.result)
    assert f16.result["record"]["options"]["cache_type_k"] == "f16"
    assert q8.result["record"]["options"]["cache_type_k"] == "q8_0"
    assert q8.result["record"]["options"]["cache_type_v"] == "q8_0"
    assert (q8.result["kv_cells"], q8.result["kv_streams"]) == (f16.result["kv_cells"], f16.result["kv_streams"]) == (2048, 2)
    # q8_0 keeps 34 bytes per 32 values, f16 64
    assert kv_mib(q8.result) == pytest.approx(kv_mib(f16.result) * 34 / 64, rel=0.02)
    assert kv_mib(q8.result) < kv_mib(f16.result)


def test_extra_args_that_change_the_cache_type_count_in_the_plan(split_model):
    given = plan({"path": split_model.paths[0], "devices": DEVICES,
                  "server": {"ctx_size": 4096, "parallel": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}})
    extra = plan({"path": split_model.paths[0], "devices": DEVICES,
                  "server": {"ctx_size": 4096, "parallel": 2, "extra_args": ["--no-mmap", "-ctk", "q8_0", "-ctv", "q8_0"]}})
    assert extra.kind is ExitJson, extra.result
    assert extra.result["record"]["options"] == given.result["record"]["options"]
    assert kv_mib(extra.result) == kv_mib(given.result)
    # -c and -np in the extra arguments win over the options, as in llama-server
    wider = plan({"path": split_model.paths[0], "devices": DEVICES,
                  "server": {"ctx_size": 4096, "parallel": 2, "extra_args": ["-c", "8192", "-np", "1"]}})
    assert (wider.result["kv_cells"], wider.result["kv_streams"]) == (8192, 1)


@pytest.mark.parametrize("server, message", [
    ({"extra_args": ["-ctk", "q8"]}, "-ctk in llama_server_extra_args 'q8' is not a KV cache type"),
    ({"cache_type_v": "q8_0", "flash_attn": "off"}, "cache_type_v=q8_0 needs flash attention"),
    ({"ctxsize": 1}, "unknown llama-server option"),
])
def test_bad_server_options_are_named(split_model, server, message):
    run = plan({"path": split_model.paths[0], "devices": DEVICES, "server": server})
    assert run.kind is FailJson
    assert message in run.result["msg"], run.result["msg"]


def test_server_and_a_single_memory_option_exclude_each_other(split_model):
    run = plan({"path": split_model.paths[0], "devices": DEVICES, "server": {}, "ctx_size": 2048})
    assert run.kind is FailJson
    assert "mutually exclusive: server|ctx_size" in run.result["msg"]


def test_auto_split_and_context_are_chosen_and_recorded(split_model):
    devices = [{"name": "RPC0", "host": "node-b", "free_mib": 4000}, {"name": "RPC1", "host": "node-c", "free_mib": 1500}]
    run = plan({"path": split_model.paths[0], "devices": devices, "tensor_split": "auto",
                "server": {"ctx_size": "auto", "parallel": 1}, "margin_mib": 256, "cuda_context_mib": 0})
    assert run.kind is ExitJson, run.result
    result = run.result
    choice = result["choice"]
    # the lab model's trained context fits; the split gives the larger device more layers
    assert choice["ctx_size"] == 4096 and result["kv_cells"] == 4096
    assert sum(choice["tensor_split"]) == 5 and choice["tensor_split"][0] >= choice["tensor_split"][1]
    assert result["record"]["tensor_split"] == choice["tensor_split"]
    assert result["record"]["options"]["ctx_size"] == 4096 and result["record"]["options"]["tensor_split"] == "auto"
    assert choice["lines"][0] == "auto: 4096 tokens, the model's trained context (it fits with the margin)"
    assert choice["lines"][1].startswith("auto: whole-layer split ")


def test_without_auto_there_is_no_choice(split_model):
    run = plan({"path": split_model.paths[0], "devices": DEVICES, "ctx_size": 2048, "parallel": 1})
    assert run.result["choice"] is None


def test_a_kept_service_that_is_down_keeps_its_room_and_the_table_says_so(split_model):
    """The H100 case on the lab: node-b's kept whisper-asr held 6144 MiB when last seen and is not
    running at plan time; its MiB stay out of RPC0's free memory, and the table ends saying why."""
    residency = {"node-b": {"gpus": [{"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97248}],
                            "processes": []}}
    kept = {"node-b": {"keep": ["whisper-asr"], "stated": {},
                       "history": {"whisper-asr": {"gpus": {"0": 6144}, "seen_at": "2026-12-07T10:00:00Z"}}}}
    nodes = {"head": "node-a", "workers": ["node-b"], "cuda": True, "residency": residency, "kept": kept}
    run = plan({"path": split_model.paths[0], "nodes": nodes, "ctx_size": 1024})
    assert run.kind is ExitJson, run.result
    assert [(d["name"], d["free_mib"]) for d in run.result["devices"]] == [("RPC0", 97248 - 6144)]
    assert run.result["device_inputs"][0]["kept_reserved_mib"] == 6144
    why = ("node-b: whisper-asr: 6144 MiB reserved on GPU 0 (6144 MiB from the most it held when last seen running "
           "(2026-12-07T10:00:00Z); not running now)")
    assert run.result["kept_room"]["lines"] == [why]
    assert run.result["kept_room"]["reserved"]["node-b"]["gpus"]["0"]["reserved_mib"] == 6144
    assert run.result["table"][-1] == why
    # the operator's figure wins
    stated = dict(nodes, kept={"node-b": dict(kept["node-b"], stated={"whisper-asr": 8192})})
    assert plan({"path": split_model.paths[0], "nodes": stated, "ctx_size": 1024}).result["devices"][0][
        "free_mib"] == 97248 - 8192
    # without kept services nothing is reserved and the table has no such line
    bare = plan({"path": split_model.paths[0], "nodes": dict(nodes, kept=None), "ctx_size": 1024})
    assert bare.result["devices"][0]["free_mib"] == 97248 and bare.result["kept_room"]["lines"] == []


def test_a_bad_operator_figure_fails_the_plan_naming_the_node_and_the_variable(split_model):
    nodes = {"head": "node-a", "workers": ["node-b"], "cuda": True,
             "residency": {"node-b": {"gpus": [{"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97248}],
                                      "processes": []}},
             "kept": {"node-b": {"keep": ["whisper-asr"], "history": {}, "stated": {"whisper": 6144}}}}
    run = plan({"path": split_model.paths[0], "nodes": nodes, "ctx_size": 1024})
    assert run.kind is FailJson
    assert run.result["msg"].startswith("node-b: gpulab_kept_mib names 'whisper', which is not a keep pattern "
                                        "(gpu_drain_keep: whisper-asr)")
