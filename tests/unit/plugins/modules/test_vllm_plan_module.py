# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.vllm_plan on model directories: safetensors headers for exact sizes, the
index, config-only estimates, and the errors before launch."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.modules import vllm_plan

from module_harness import ExitJson, FailJson, run_module

MIB = 1 << 20
H200 = [{"index": 0, "memory_total_mib": 143771}]
H200_X2 = [{"index": 0, "memory_total_mib": 143771}, {"index": 1, "memory_total_mib": 143771}]


def write_model(directory, **options):
    plan = sh.ModelPlan(sh.validate_options(options))
    os.mkdir(directory)
    sh.write_model(directory, plan)
    return plan


def plan_module(args):
    return run_module(vllm_plan.main, args, {}, None)


def test_exact_sizes_from_safetensors(tmp_path):
    model = str(tmp_path / "mm2")
    written = write_model(model)
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.kind is ExitJson, run.result
    result = run.result
    assert result["changed"] is False
    assert result["valid"] is True
    assert result["model"]["tensor_source"] == "safetensors"
    assert result["model"]["weights_bytes"] == written.weights_bytes
    # TP 1: every weight on the one GPU (the vocabulary padded to 64 rows is already 320)
    assert result["estimate"]["weights_bytes"] == written.weights_bytes
    assert result["max_model_len"] == 4096
    assert (result["reasoning_parser"], result["tool_call_parser"]) == ("minimax_m2_append_think", "minimax_m2")
    assert result["ranked"][0]["label"] == "TP=1"
    assert result["node_role"] == "head"
    # the KV cache pinned: 0.9 of the GPU less the weights and the 4096 MiB reserve, whole MiB
    pinned = (int(143771 * 0.9 * MIB) - written.weights_bytes - 4096 * MIB) // MIB * MIB
    assert result["kv_cache_memory_bytes"] == pinned
    assert result["serve_args"] == [
        "serve", model, "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1", "--data-parallel-size", "1", "--gpu-memory-utilization", "0.9",
        "--max-model-len", "4096", "--kv-cache-dtype", "auto", "--kv-cache-memory-bytes", str(pinned),
        "--reasoning-parser", "minimax_m2_append_think", "--tool-call-parser", "minimax_m2", "--enable-auto-tool-choice"]


SERVICE = {"install": "pip", "service_manager": "systemd", "vllm_command": ["/opt/v/bin/vllm"], "ray_command": ["/opt/v/bin/ray"],
           "env_file": "/etc/gpulab/vllm/environment", "rdma_env_file": "/etc/gpulab/rdma.env",
           "cache_dir": "/var/cache/gpulab/vllm", "node_name": "node-a", "fabric_address": "10.231.77.10",
           "hardening": {"NoNewPrivileges": "yes", "PrivateTmp": None}}


def test_the_service_files_come_with_the_plan(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200, "service": SERVICE})
    assert run.kind is ExitJson, run.result
    result = run.result
    assert result["wrapper"]["argv"] == ["/opt/v/bin/vllm"] + result["serve_args"]
    assert result["wrapper"]["comments"][0] == "vLLM on node-a, head of 1 node(s): TP=1 of %s" % model
    assert {"name": "VLLM_HOST_IP", "value": "10.231.77.10", "why": ""} in result["environment"]
    assert result["unit_file"]["service"][1:3] == ["User=gpulab-vllm", "Group=gpulab-vllm"]
    assert "NoNewPrivileges=yes" in result["unit_file"]["service"]
    assert not [line for line in result["unit_file"]["service"] if line.startswith("PrivateTmp")]
    assert result["program_user"] == "gpulab-vllm"
    without = plan_module({"model_path": model, "gpus": H200}).result
    assert "wrapper" not in without and "unit_file" not in without


def test_a_newline_in_the_service_is_refused_naming_the_variable(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200,
                       "service": dict(SERVICE, environment={"VLLM_X": "1\nLD_PRELOAD=/tmp/x.so"})})
    assert run.kind is FailJson
    assert run.result["msg"].startswith("vllm_server_environment '1\\nLD_PRELOAD=/tmp/x.so' holds a newline")


def test_synthetic_default_tp2_without_ep_fails_like_the_seed(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200_X2, "tensor_parallel_size": 2})
    assert run.kind is ExitJson
    assert run.result["valid"] is False and run.result["serve_args"] == [] and run.result["node_role"] is None
    assert "expert FFN 384 / 2 = 192 is not a multiple of the FP8 block size 128" in run.result["errors"][0]
    run = plan_module({"model_path": model, "gpus": H200_X2, "tensor_parallel_size": 2, "enable_expert_parallel": True})
    assert run.result["valid"] is True and run.result["errors"] == []


def test_sharded_model_reads_every_shard(tmp_path):
    model = str(tmp_path / "llama")
    written = write_model(model, architecture="llama", quantization="none", shard_max_mib=1)
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.result["model"]["tensor_source"] == "safetensors"
    assert run.result["model"]["weights_bytes"] == written.weights_bytes
    assert run.result["reasoning_parser"] is None and run.result["tool_call_parser"] == "llama3_json"


def test_index_with_missing_shards_estimates_from_config(tmp_path):
    model = str(tmp_path / "llama")
    written = write_model(model, architecture="llama", quantization="none", shard_max_mib=1)
    os.unlink(os.path.join(model, "model-00002-of-00011.safetensors"))
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.kind is ExitJson
    assert run.result["model"]["tensor_source"] == "index"
    assert run.result["model"]["index_total_size"] == written.weights_bytes
    assert run.result["model"]["weights_bytes"] == written.weights_bytes
    assert "model-00002-of-00011.safetensors" in run.warnings[0]


def test_config_only_estimate(tmp_path):
    model = tmp_path / "cfg"
    model.mkdir()
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm", "minimax-m2.5-config.json")
    with open(fixture) as handle:
        (model / "config.json").write_text(handle.read())
    gpus = [{"index": i, "memory_total_mib": 97887} for i in range(8)]
    run = plan_module({"model_path": str(model), "gpus": gpus, "tensor_parallel_size": 4, "max_model_len": 65536,
                       "ranked_limit": 2})
    assert run.result["model"]["tensor_source"] == "config"
    assert run.result["valid"] is True
    assert run.warnings == ["TP 4 x PP 1 x DP 1 = 4 GPUs of 8: 4 GPUs stay idle; a larger TP or DP would use them"]
    assert run.result["warnings_found"] == run.warnings
    assert [r["label"] for r in run.result["ranked"]] == ["TP=8+EP", "TP=4+DP=2+EP"]


def test_model_directory_without_config_json(tmp_path):
    run = plan_module({"model_path": str(tmp_path), "gpus": H200})
    assert run.kind is FailJson
    assert run.result["msg"].startswith("model directory %s has no config.json" % tmp_path)


def test_model_path_not_a_directory(tmp_path):
    run = plan_module({"model_path": str(tmp_path / "nope"), "gpus": H200})
    assert run.kind is FailJson and "is not a directory" in run.result["msg"]


def test_broken_config_json(tmp_path):
    (tmp_path / "config.json").write_text("{")
    run = plan_module({"model_path": str(tmp_path), "gpus": H200})
    assert run.kind is FailJson and "config %s/config.json is not valid JSON" % tmp_path in run.result["msg"]


def test_truncated_safetensors(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    with open(os.path.join(model, "model.safetensors"), "r+b") as handle:
        handle.truncate(100)
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.kind is FailJson and "safetensors header says" in run.result["msg"]


def test_layout_using_more_gpus_than_exist_is_invalid(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200, "tensor_parallel_size": 2, "enable_expert_parallel": True})
    assert run.kind is ExitJson and run.result["valid"] is False
    assert run.result["errors"] == ["TP 2 x PP 1 x DP 1 = 2 GPUs, but 1 node(s) x 1 GPUs of 143771 MiB has only 1 GPUs; shrink the layout"]
    assert run.result["findings"][0]["source"].startswith("vllm/config/parallel.py")


def test_unknown_parser_name(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200, "reasoning_parser": "minimax-m2"})
    assert run.kind is FailJson and "reasoning parser 'minimax-m2' is not one vLLM 0.24 registers" in run.result["msg"]


def test_nodes_with_different_gpu_counts(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "nodes": [{"name": "node-a", "gpus": H200_X2}, {"name": "node-b", "gpus": H200}]})
    assert run.kind is FailJson
    assert "different GPU counts (node-a 2, node-b 1)" in run.result["msg"]


@pytest.mark.parametrize("args,message", [
    ({}, "one of the following is required: nodes, gpus"),
    ({"gpus": H200, "nodes": []}, "parameters are mutually exclusive: nodes|gpus"),
])
def test_gpus_or_nodes(tmp_path, args, message):
    run = plan_module(dict(args, model_path=str(tmp_path)))
    assert run.kind is FailJson and message in run.result["msg"]


def test_config_of_written_model_round_trips(tmp_path):
    model = str(tmp_path / "q")
    write_model(model, architecture="qwen2", quantization="fp8", hidden_size=512, ffn_size=1024)
    with open(os.path.join(model, "config.json")) as handle:
        assert json.load(handle)["quantization_config"]["weight_block_size"] == [128, 128]
    # dense FP8 at TP 2: 1024 / 2 = 512, heads 4 / 2: fits the block rules
    run = plan_module({"model_path": model, "gpus": H200_X2, "tensor_parallel_size": 2})
    assert run.result["valid"] is True, run.result["findings"]


@pytest.mark.parametrize("args, message", [
    ({"port": 70000}, "port 70000 is out of range (1-65535)"),
    ({"port": 0}, "port 0 is out of range"),
    ({"port": -1}, "port -1 is not a port number"),
    ({"master_port": 65536}, "master_port 65536 is out of range"),
    ({"dp_rpc_port": 99999}, "dp_rpc_port 99999 is out of range"),
    ({"host": "255.255.255.255"}, "host 255.255.255.255 is a multicast, broadcast or reserved address"),
    ({"host": "224.0.0.1"}, "host 224.0.0.1 is a multicast"),
    ({"host": "ff02::1"}, "host ff02::1 is a multicast"),
    ({"host": "127.0.0.1; rm -rf /"}, "host '127.0.0.1; rm -rf /' is neither an IP address nor a host name"),
    ({"host": "$(id)"}, "is neither an IP address nor a host name"),
    ({"host": "node-a\n--api-key x"}, "is neither an IP address nor a host name"),
    ({"host": "999.1.1.1"}, "host '999.1.1.1' is neither"),
    ({"host": ""}, "host '' is empty"),
    ({"master_addr": "10.0.0.1 --headless"}, "master_addr '10.0.0.1 --headless' is neither"),
    ({"served_model_name": "mm2 --trust-remote-code"}, "served_model_name 'mm2 --trust-remote-code' is not a model name"),
    ({"served_model_name": "mm2\n"}, "served_model_name 'mm2\\n' is not a model name"),
])
def test_launch_settings_that_cannot_work_are_refused_before_the_model_is_read(tmp_path, args, message):
    # No model directory: the launch settings are checked first.
    run = plan_module(dict(args, model_path=str(tmp_path / "absent"), gpus=H200))
    assert run.kind is FailJson, run.result
    assert message in run.result["msg"]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "fd00::10", "node-a", "node-a.lab.example"])
def test_listen_hosts_that_work_are_accepted(tmp_path, host):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module({"model_path": model, "gpus": H200, "host": host})
    assert run.kind is ExitJson, run.result
    assert run.result["serve_args"][3] == host


def _index(model, weight_map):
    with open(os.path.join(model, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": 1}, "weight_map": weight_map}, handle)


@pytest.mark.parametrize("weight_map, message", [
    ({"lm_head.weight": "../../../etc/shadow"}, "weight_map names '../../../etc/shadow' for tensor 'lm_head.weight'"),
    ({"lm_head.weight": "/etc/passwd"}, "weight_map names '/etc/passwd'"),
    ({"lm_head.weight": "model.safetensors\n"}, "is not a .safetensors file name"),
    ({"lm_head.weight": 7}, "weight_map names 7"),
    ({"lm_head.weight": "sub/model.safetensors"}, "is not a .safetensors file name"),
    ({}, "has no weight_map"),
    ([], "has no weight_map"),
])
def test_index_naming_a_file_outside_the_model_directory_is_refused(tmp_path, weight_map, message):
    model = str(tmp_path / "mm2")
    write_model(model)
    _index(model, weight_map)
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.kind is FailJson, run.result
    assert message in run.result["msg"]


def test_safetensors_header_that_is_a_json_array_is_named(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    with open(os.path.join(model, "model.safetensors"), "wb") as handle:
        handle.write(struct.pack("<Q", 2) + b"[]")
    run = plan_module({"model_path": model, "gpus": H200})
    assert run.kind is FailJson, run.result
    assert "model.safetensors: safetensors header is a JSON list, not an object of tensors" in run.result["msg"]


def test_auto_layout_is_chosen_and_explained(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    args = {"model_path": model, "gpus": H200_X2, "tensor_parallel_size": "auto", "pipeline_parallel_size": "auto",
            "data_parallel_size": "auto", "enable_expert_parallel": "auto"}
    run = plan_module(args)
    assert run.kind is ExitJson, run.result
    result = run.result
    assert result["valid"] is True and result["label"] == "TP=2+EP"
    assert result["choice"]["reason"].startswith("auto: TP=2+EP uses all 2 GPUs")
    assert result["choice"]["rejected"][0]["label"] == "TP=2"
    assert "expert FFN 384 / 2 = 192" in result["choice"]["rejected"][0]["findings"][0]
    # the same inputs give the same command line
    assert plan_module(args).result["serve_args"] == result["serve_args"]


def test_kept_memory_lowers_the_start_up_utilization_and_the_pinned_cache(tmp_path):
    model = str(tmp_path / "mm2")
    written = write_model(model)
    kept = [dict(gpu, kept_mib=40960) for gpu in H200]
    result = plan_module({"model_path": model, "gpus": kept}).result
    args = result["serve_args"]
    # vLLM refuses to start when free memory is below memory x utilization: 102811 / 143771 MiB
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.715"
    # the budget is what the kept service leaves, below 0.9 of the GPU
    assert result["kv_cache_memory_bytes"] == ((143771 - 40960) * MIB - written.weights_bytes - 4096 * MIB) // MIB * MIB
    unpinned = plan_module({"model_path": model, "gpus": H200, "pin_kv_cache": False}).result
    assert "--kv-cache-memory-bytes" not in unpinned["serve_args"] and unpinned["kv_cache_memory_bytes"] is None


@pytest.mark.parametrize("args, message", [
    ({"tensor_parallel_size": 0}, "tensor_parallel_size is 0; give a whole number of 1 or more or auto"),
    ({"data_parallel_size": "two"}, "data_parallel_size is 'two'; give a whole number of 1 or more or auto"),
    ({"enable_expert_parallel": "maybe"}, "enable_expert_parallel is 'maybe'; give true or false or auto"),
])
def test_bad_layout_values_are_named(tmp_path, args, message):
    model = str(tmp_path / "mm2")
    write_model(model)
    run = plan_module(dict({"model_path": model, "gpus": H200_X2}, **args))
    assert run.kind is FailJson and run.result["msg"] == message


def test_auto_with_nothing_that_fits_names_the_smallest_layout(tmp_path):
    model = str(tmp_path / "mm2")
    write_model(model)
    tiny = [{"index": 0, "memory_total_mib": 64}]
    run = plan_module({"model_path": model, "gpus": tiny, "tensor_parallel_size": "auto"})
    assert run.kind is FailJson
    assert run.result["msg"].startswith("no layout of 1 node(s) x 1 GPUs of 64 MiB runs the model on every GPU "
                                        "(with data_parallel_size=1, enable_expert_parallel=False, pipeline_parallel_size=1)")


def test_kept_services_from_the_residency_shrink_the_budget_and_drift_does_not(tmp_path):
    model = str(tmp_path / "mm2")
    written = write_model(model)

    def residency(kept_mib, own_mib=0, drift_mib=0):
        # a kept service (a stranger's unit) and the collection's own vLLM from the last deploy
        return {"node-a": {"gpus": [{"index": 0, "uuid": "GPU-a", "memory_total_mib": 143771,
                                     "memory_free_mib": 143771 - 600 - kept_mib - own_mib - drift_mib}],
                           "processes": [{"gpu_index": 0, "used_memory_mib": kept_mib, "systemd_unit": "other.service"},
                                         {"gpu_index": 0, "used_memory_mib": own_mib, "systemd_unit": "gpulab-vllm.service"}]}}

    args = {"model_path": model, "nodes": [{"name": "node-a", "gpus": H200}], "own_units": ["gpulab-vllm.service"]}
    run = plan_module(dict(args, residency=residency(40960, own_mib=100000)))
    assert run.kind is ExitJson, run.result
    # free in whole 256 MiB steps: 143771 - 600 - 40960 = 102211 -> 102144; vLLM's own memory counts as free
    kept = 143771 - 102144
    assert run.result["hardware"]["kept_mib"] == kept
    pinned = ((143771 - kept) * MIB - written.weights_bytes - 4096 * MIB) // MIB * MIB
    assert run.result["kv_cache_memory_bytes"] == pinned
    assert run.result["serve_args"][run.result["serve_args"].index("--gpu-memory-utilization") + 1] == "0.71"
    # a few MiB of drift: the same plan, the same argv
    drifted = plan_module(dict(args, residency=residency(40960, drift_mib=3)))
    assert drifted.result["serve_args"] == run.result["serve_args"]
    # what the drain will stop counts as free too
    drained = plan_module(dict(args, residency=residency(40960), drained={"node-a": [
        {"action": "stop", "gpus": {"GPU-a": 40960}}]}))
    # the 600 MiB no process holds fit in the tenth of the GPU vLLM leaves alone: nothing is kept
    assert 143771 - (143771 - 600) // 256 * 256 < 143771 * 0.1
    assert drained.result["hardware"]["kept_mib"] == 0
    # without a residency the GPUs keep what they say (nothing)
    assert plan_module(args).result["hardware"]["kept_mib"] == 0


def test_a_second_deploy_plans_what_the_first_did(tmp_path):
    """The H200 run: vLLM served after the first deploy; on the second its own memory counts as free,
    but the memory no process holds moved from 600 to 900 MiB, across a 256 MiB step. Nothing that
    goes into plan.json (choice, hardware, estimate) may change for it."""
    model = str(tmp_path / "mm2")
    write_model(model)

    def residency(unowned_mib, own_mib):
        return {"node-a": {"gpus": [{"index": 0, "uuid": "GPU-a", "memory_total_mib": 143771,
                                     "memory_free_mib": 143771 - unowned_mib - own_mib}],
                           "processes": [{"gpu_index": 0, "used_memory_mib": own_mib, "systemd_unit": None,
                                          "supervisor_program": "gpulab-vllm"}] if own_mib else []}}

    args = {"model_path": model, "nodes": [{"name": "node-a", "gpus": H200}], "own_units": ["gpulab-vllm.service"],
            "tensor_parallel_size": "auto", "pipeline_parallel_size": "auto", "data_parallel_size": "auto",
            "enable_expert_parallel": "auto"}
    first = plan_module(dict(args, residency=residency(600, 0)))
    second = plan_module(dict(args, residency=residency(900, 128000)))
    assert first.kind is ExitJson and second.kind is ExitJson, (first.result, second.result)
    for key in ("choice", "hardware", "estimate", "kv_cache_memory_bytes", "serve_args", "label", "max_model_len"):
        assert second.result[key] == first.result[key], key
    assert first.result["hardware"]["kept_mib"] == 0
    # a kept service that lowers the budget is still kept
    kept = plan_module(dict(args, residency=residency(600 + 40960, 0)))
    assert kept.result["hardware"]["kept_mib"] == 143771 - (143771 - 600 - 40960) // 256 * 256


def test_a_kept_service_down_at_plan_time_still_counts_as_kept(tmp_path):
    """The H100 case: the kept speech recognition (40960 MiB when last seen) restarts while vLLM plans;
    its memory stays kept, and kept_room says so."""
    model = str(tmp_path / "mm2")
    write_model(model)
    residency = {"node-a": {"gpus": [{"index": 0, "uuid": "GPU-a", "memory_total_mib": 143771,
                                      "memory_free_mib": 143771 - 600}], "processes": []}}
    kept = {"node-a": {"keep": ["asr"], "stated": {},
                       "history": {"asr": {"gpus": {"0": 40960}, "seen_at": "2026-12-07T10:00:00Z"}}}}
    args = {"model_path": model, "nodes": [{"name": "node-a", "gpus": H200}], "residency": residency}
    down = plan_module(dict(args, kept=kept))
    assert down.kind is ExitJson, down.result
    assert down.result["hardware"]["kept_mib"] == 143771 - (143771 - 600 - 40960) // 256 * 256
    assert down.result["kept_room"]["lines"] == [
        "node-a: asr: 40960 MiB reserved on GPU 0 (40960 MiB from the most it held when last seen running "
        "(2026-12-07T10:00:00Z); not running now)"]
    # the same service running with its memory: the same kept figure, nothing more reserved
    running = {"node-a": {"gpus": [{"index": 0, "uuid": "GPU-a", "memory_total_mib": 143771,
                                    "memory_free_mib": 143771 - 600 - 40960}],
                          "processes": [{"gpu_index": 0, "used_memory_mib": 40960, "systemd_unit": "asr.service"}]}}
    up = plan_module(dict(args, residency=running, kept=kept))
    assert up.result["hardware"]["kept_mib"] == down.result["hardware"]["kept_mib"]
    assert up.result["kept_room"]["lines"] == []
    # without the history the plan would hand the kept service's memory to vLLM
    assert plan_module(args).result["hardware"]["kept_mib"] == 0
