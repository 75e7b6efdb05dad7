"""playbooks/plan.yml: plan before download, against mirrors on 127.0.0.1 serving synthetic models
(the model role's own ranged server, and one without ranges), on the lab's fake GPUs and on
plan_hardware; every byte the plan reads is counted and held under 1% of the model."""

import functools
import http.server
import json
import os
import stat
import sys
import threading

import pytest
from playbook_runner import LAB_FILES, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

SHOW = "Show the ranked layouts"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A two-shard GGUF of ~90 MB and an FP8 checkpoint of ~45 MB, served with ranges."""
    root = tmp_path_factory.mktemp("mirror")
    opts = sm.validate_options({"shards": 2, "layers": 4, "hidden_size": 1024, "expert_ffn_size": 768})
    plan = sm.ModelPlan(opts, str(root / "m" / "synthetic.gguf"), sm.builtin_vocab(), None)
    (root / "m").mkdir()
    sm.write_model(plan, opts["seed"])
    (root / "hf").mkdir()
    sh.write_model(str(root / "hf"), sh.ModelPlan(sh.validate_options({"hidden_size": 1024, "layers": 4})))
    allowed = [os.path.relpath(os.path.join(d, f), str(root)) for d, _s, files in os.walk(str(root)) for f in files]
    server = model_io.ModelServer("127.0.0.1", 0, str(root), allowed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"root": root, "url": "http://127.0.0.1:%d" % server.server_address[1],
           "gguf": os.path.basename(plan.paths[0]), "gguf_bytes": sum(os.path.getsize(p) for p in plan.paths)}
    server.shutdown()
    server.server_close()


def smi_for(tmp_path, profile):
    path = tmp_path / ("nvidia-smi-" + profile)
    path.write_text('#!/bin/sh\nGPULAB_FAKE_NVIDIA_SMI_DIR=%s exec %s %s "$@"\n'
                    % (LAB_FILES / "nvidia-smi" / profile, sys.executable, LAB_FILES / "fake-nvidia-smi"))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def inventory(tmp_path, **allvars):
    """The container lab's shape: node-a (head, two 96 GB GPUs), node-b (a worker, one)."""
    head = local_host(gpu_preflight_nvidia_smi_path=smi_for(tmp_path, "rtx-pro-6000-x2"))
    worker = local_host(gpu_preflight_nvidia_smi_path=smi_for(tmp_path, "rtx-pro-6000-maxq"))
    return {"all": {"vars": allvars, "children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": head}}, "rpc_workers": {"hosts": {"node-b": worker}}}}}}}


def plan(tmp_path, name, inventory_vars, extravars=None):
    output = tmp_path / (name + ".json")
    run = run_in(tmp_path / name, "playbooks/plan.yml", inventory(tmp_path, **inventory_vars),
                 dict({"plan_output_file": str(output)}, **(extravars or {})))
    return run, output


def test_a_split_gguf_on_the_mirror_is_planned_on_the_labs_gpus(mirror, tmp_path):
    run, output = plan(tmp_path, "gguf", {"model_source": "%s/m/%s" % (mirror["url"], mirror["gguf"])})
    assert run.status == "successful", run.failures
    document = json.loads(output.read_text())
    assert document["format"] == "gguf" and document["engine"]["engine"] == "llama_cpp"
    # node-a first (the head), then node-b; the fake GPUs' live consumers count as kept
    assert [n["name"] for n in document["hardware"]] == ["node-a", "node-b"]
    rows = document["table"]["rows"]
    assert {r["layout"] for r in rows} == {"all 2 nodes", "node-a alone", "node-b alone"}
    # the serving intent's slots (throughput: gpulab_serving_concurrency 4), each the model's trained 4096
    assert all(r["fits"] for r in rows) and (rows[0]["concurrency"], rows[0]["ctx_size"]) == (4, 4 * 4096)
    every = [r for r in rows if r["layout"] == "all 2 nodes"][0]
    assert [d["name"] for d in every["devices"]] == ["RPC0", "CUDA0", "CUDA1"]
    # the headers and tensor tables of both shards, not the weights
    assert document["size_bytes"] == mirror["gguf_bytes"]
    assert 0 < document["bytes_read"] < document["size_bytes"] / 100, document["bytes_read"]
    shown = run.ok_results(SHOW)[0]["msg"]
    assert shown[0].startswith("auto: ") and "bytes read of %d" % mirror["gguf_bytes"] in shown[0]
    assert shown[1].startswith("llama.cpp: layout")


def test_a_checkpoint_is_planned_on_hardware_the_lab_does_not_have(mirror, tmp_path):
    hardware = [{"name": "box", "gpus": 4, "memory_gib": 24}]
    run, output = plan(tmp_path, "hf", {"model_source": "%s/hf" % mirror["url"]},
                       {"plan_hardware": hardware, "vllm_server_max_model_len": 4096})
    assert run.status == "successful", run.failures
    document = json.loads(output.read_text())
    assert document["engine"]["engine"] == "vllm" and document["hardware"][0]["name"] == "box"
    assert document["table"]["rows"][0]["verdict"] == "chosen"
    assert document["table"]["rows"][0]["layout"] in ("TP=4+EP", "TP=2+DP=2+EP", "TP=1+DP=4+EP")
    assert 0 < document["bytes_read"] < document["size_bytes"] / 100, (document["bytes_read"], document["size_bytes"])
    # no node was asked for its GPUs
    assert not [e for e in run.events if e.get("event") == "runner_on_ok"
                and e["event_data"].get("task") == "Read each node's GPUs and what holds their memory"]


def test_a_mirror_without_ranges_is_refused(mirror, tmp_path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror["root"]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    source = "http://127.0.0.1:%d/m/%s" % (server.server_address[1], mirror["gguf"])
    try:
        run, output = plan(tmp_path, "norange", {"model_source": source})
    finally:
        server.shutdown()
        server.server_close()
    assert run.status == "failed"
    messages = [msg for _host, _task, msg in run.failures]
    assert any("the mirror must answer byte ranges (206)" in m for m in messages), messages
    assert not output.exists()


def test_malformed_plan_hardware_is_named(mirror, tmp_path):
    run, output = plan(tmp_path, "badhw", {"model_source": "%s/m/%s" % (mirror["url"], mirror["gguf"])},
                       {"plan_hardware": [{"name": "a", "gpus": 2}]})
    assert run.status == "failed"
    messages = [msg for _host, _task, msg in run.failures]
    assert any("plan_hardware[0].gpus[0] has no memory_gib (or memory_mib): give the GPU's memory" in m
               for m in messages), messages
    assert not output.exists()


def test_a_full_size_deepseek_v3_is_answered_from_its_headers_on_three_96_gb_gpus(tmp_path):
    """DeepSeek-V3's own shape (61 layers, 256 routed experts + 1 shared, 3 dense layers, MLA, FP8:
    626.9 GiB in 129 files), headers over sparse holes, given as a path on the controller."""
    model = tmp_path / "deepseek-v3"
    model.mkdir()
    checkpoint = sh.ModelPlan(sh.validate_options(sh.family_options("deepseek-v3", weights="sparse", shard_max_mib=5000)))
    sh.write_model(str(model), checkpoint)
    run, output = plan(tmp_path, "dsv3", {"model_source": str(model)},
                       {"plan_hardware": [{"name": "lab", "gpus": 3, "memory_gib": 96}]})
    assert run.status == "successful", run.failures
    document = json.loads(output.read_text())
    assert document["engine"]["engine"] == "vllm"
    assert document["size_bytes"] > 626 << 30 and document["bytes_read"] < document["size_bytes"] / 10000
    table = document["table"]
    # does not fit: every layout of three GPUs named with its reason, and the smallest hardware that would
    assert table["rows"] == [] and table["error"].startswith("no layout of 1 node(s) x 3 GPUs of 98304 MiB")
    assert "TP=3 puts 209.7 GiB" in table["error"]
    assert table["smallest_fitting"].startswith("It would run on 3 node(s) x 3 GPUs of 98304 MiB")
    shown = run.ok_results(SHOW)[0]["msg"]
    assert shown[-1] == "model: DeepseekV3ForCausalLM: mla attention (61 full layers): 70272 bytes of cache per token"


def test_a_family_not_modelled_is_named_with_its_weights_planned(tmp_path):
    model = tmp_path / "deepseek-v32"
    model.mkdir()
    checkpoint = sh.ModelPlan(sh.validate_options(sh.family_options("deepseek-v3", layers=4, weights="sparse")))
    sh.write_model(str(model), checkpoint)
    config = json.loads((model / "config.json").read_text())
    config.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32")
    (model / "config.json").write_text(json.dumps(config))
    run, output = plan(tmp_path, "dsv32", {"model_source": str(model), "vllm_server_max_model_len": 8192},
                       {"plan_hardware": [{"name": "box", "gpus": 1, "memory_gib": 96}]})
    assert run.status == "successful", run.failures
    row = json.loads(output.read_text())["table"]["rows"][0]
    assert (row["layout"], row["verdict"], row["kv_tokens"], row["concurrency"]) == ("TP=1", "chosen", None, None)
    assert row["weights_gib"] == pytest.approx(checkpoint.weights_bytes / 2.0 ** 30, abs=0.01)
    assert "KV tokens not sized: the family's cache is not modelled" in row["reason"]
    shown = run.ok_results(SHOW)[0]["msg"]
    assert shown[-1] == ("model: DeepseekV32ForCausalLM: family DeepseekV32ForCausalLM is not modelled: weights only "
                         "(vLLM keeps it in sparse attention with an indexer cache)")


def test_deepseek_v3_in_q2_k_is_split_over_the_seed_labs_three_gpus(tmp_path):
    """The GGUF's headers over a hole of its 205.8 GiB (tests/model_tables.py), planned on the seed
    lab's shape given as plan_hardware: node-a with two 96 GB GPUs, node-b with one."""
    import model_tables
    path = tmp_path / "DeepSeek-V3-Q2_K.gguf"
    size = model_tables.write_deepseek_v3_q2_k(str(path))
    hardware = [{"name": "node-a", "gpus": 2, "memory_gib": 96}, {"name": "node-b", "gpus": 1, "memory_gib": 96}]
    run, output = plan(tmp_path, "dsv3-gguf", {"model_source": str(path), "llama_server_parallel": 1},
                       {"plan_hardware": hardware})
    assert run.status == "successful", run.failures
    document = json.loads(output.read_text())
    assert document["engine"]["engine"] == "llama_cpp" and document["size_bytes"] == size
    assert document["bytes_read"] < size / 100000
    every = document["table"]["rows"][0]
    assert (every["layout"], every["fits"]) == ("all 2 nodes", True)
    # the whole trained context, split over node-b's GPU (RPC) and node-a's two, with room left on each
    assert every["ctx_size"] == 163840 and sum(every["tensor_split"]) == 62 and len(every["tensor_split"]) == 3
    assert [d["name"] for d in every["devices"]] == ["RPC0", "CUDA0", "CUDA1"]
    assert all(d["headroom_mib"] > 10000 for d in every["devices"])
    assert [r["fits"] for r in document["table"]["rows"][1:]] == [False, False]
    shown = run.ok_results(SHOW)[0]["msg"]
    assert shown[-1] == "model: deepseek2: mla attention (61 full layers): 70272 bytes of cache per token"
