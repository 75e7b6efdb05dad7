"""vllm_server's validation step through ansible-runner: every node's GPUs are read (the
gpu-inventory.json gpu_preflight would write from the fake nvidia-smi profiles), vllm_plan checks the layout, and bad input stops the play before any change
with a message naming it. Only validate.yml runs (never main.yml, which would create users and
units here should a check regress); one playbook holds every case, one play per case."""

import json
import os
import shutil
import stat

import yaml
from playbook_runner import LAB_FILES, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh

FAKE_SMI = LAB_FILES / "fake-nvidia-smi"
VALIDATED = "Fail with the planner's findings when vLLM could not run this layout"


def smi_for(tmp_path, profile, answers=None):
    """A per-node nvidia-smi: the fake one with that node's profile (or the answers directory given)."""
    path = tmp_path / ("nvidia-smi-" + (answers.name if answers else profile))
    path.write_text('#!/bin/sh\nGPULAB_FAKE_NVIDIA_SMI_DIR=%s exec %s "$@"\n'
                    % (answers or LAB_FILES / "nvidia-smi" / profile, FAKE_SMI))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def inventory_for(tmp_path, host, profile):
    """The node's gpu-inventory.json as gpu_preflight writes it, from the profile's nvidia-smi answer."""
    profile_dir = LAB_FILES / "nvidia-smi" / profile
    gpus = nvidia_smi.parse_gpu_query((profile_dir / "query-gpu.csv").read_text())
    path = tmp_path / "gpu-inventory" / (host + ".json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(nvidia_smi.inventory_snapshot(gpus, {})))
    return str(path)


def kept_answers(tmp_path, profile, mib):
    """The profile's answers with a live consumer (this test's own process, through a pid file)
    holding `mib` on the first GPU: a service kept beside vLLM, as the fake nvidia-smi reports it."""
    answers = tmp_path / ("kept-" + profile)
    shutil.copytree(LAB_FILES / "nvidia-smi" / profile, answers)
    pid_file = tmp_path / "kept.pid"
    pid_file.write_text("%d\n" % os.getpid())
    first = nvidia_smi.parse_gpu_query((answers / "query-gpu.csv").read_text())[0]
    (answers / "consumers").write_text("%s,%s,%d\n" % (pid_file, first["uuid"], mib))
    return answers, first


def node(tmp_path, host, profile, answers=None, **hostvars):
    smi = smi_for(tmp_path, profile, answers)
    # the drain (asked in check mode by the plan) reads the same GPUs through its own setting
    return local_host(gpulab_gpu_inventory_file=inventory_for(tmp_path, host, profile),
                      vllm_server_nvidia_smi_path=smi, gpu_drain_nvidia_smi_path=smi,
                      vllm_server_driver_version_file=str(LAB_FILES / "nvidia-smi" / profile / "proc-driver-nvidia-version"),
                      gpulab_fabric_address="127.0.0.1", **hostvars)


CASES = {
    # group: (hosts -> profile, role vars)
    "good": ({"good-a": "rtx-pro-6000-x2"}, {"vllm_server_tensor_parallel_size": 2, "vllm_server_enable_expert_parallel": True}),
    "fp8block": ({"fp8block-a": "rtx-pro-6000-x2"}, {"vllm_server_tensor_parallel_size": 2,
                                                     "vllm_server_enable_expert_parallel": False,
                                                     "vllm_server_pipeline_parallel_size": 1,
                                                     "vllm_server_data_parallel_size": 1}),
    # every layout value at its default, auto
    "auto": ({"auto-a": "rtx-pro-6000-x2"}, {}),
    "noconfig": ({"noconfig-a": "rtx-pro-6000-x2"}, {"vllm_server_model_path": "EMPTY"}),
    "toobig": ({"toobig-a": "rtx-pro-6000-x2"}, {"vllm_server_tensor_parallel_size": 4, "vllm_server_enable_expert_parallel": True}),
    "parser": ({"parser-a": "rtx-pro-6000-x2"}, {"vllm_server_reasoning_parser": "minimax_m2_think"}),
    "mixed": ({"mixed-a": "rtx-pro-6000-x2", "mixed-b": "h200"}, {"vllm_server_tensor_parallel_size": 2}),
    # a service kept beside vLLM holds 24 GiB on GPU 0 (not drained): every layout value auto
    "kept": ({"kept-a": "rtx-pro-6000-x2"}, {"gpu_drain_enabled": False}),
}
KEPT_MIB = 24576


def test_validation_cases(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    sh.write_model(str(model), sh.ModelPlan(sh.validate_options({})))
    empty = tmp_path / "empty"
    empty.mkdir()
    groups = {}
    for group, (hosts, role_vars) in CASES.items():
        role_vars = dict({"vllm_server_model_path": str(model), "vllm_server_nodes_group": group}, **role_vars)
        if role_vars["vllm_server_model_path"] == "EMPTY":
            role_vars["vllm_server_model_path"] = str(empty)
        answers = kept_answers(tmp_path, "rtx-pro-6000-x2", KEPT_MIB)[0] if group == "kept" else None
        groups[group] = {"hosts": dict((name, node(tmp_path, name, profile, answers, **role_vars))
                                       for name, profile in hosts.items())}
    inventory = {"all": {"children": groups}}
    # one play over every host, so a failing case does not end the others
    plays = [{"name": "Validation cases", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate", "ansible.builtin.include_role": {"name": "gpulab.inference.vllm_server", "tasks_from": "validate.yml"}}]}]
    playbook = tmp_path / "cases.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    run = run_in(tmp_path / "runner", str(playbook), inventory)
    failures = dict((host, msg) for host, _task, msg in run.failures)
    assert sorted(failures) == ["fp8block-a", "mixed-a", "mixed-b", "noconfig-a", "parser-a", "toobig-a"], failures
    assert "expert FFN 384 / 2 = 192 is not a multiple of the FP8 block size 128" in failures["fp8block-a"]
    assert "Layouts that fit, best first: TP=2+EP" in failures["fp8block-a"]
    assert "has no config.json" in failures["noconfig-a"]
    assert "vLLM cannot run TP=4+EP on 1 node(s) x 2 GPUs" in failures["toobig-a"]
    assert "TP 4 x PP 1 x DP 1 = 4 GPUs, but 1 node(s) x 2 GPUs" in failures["toobig-a"]
    assert "reasoning parser 'minimax_m2_think' is not one vLLM 0.24 registers" in failures["parser-a"]
    assert "different GPU counts (mixed-a 2, mixed-b 1)" in failures["mixed-a"]
    assert [r["msg"] for r in run.ok_results(VALIDATED)][0].startswith("TP=2+EP: 0.01 GiB of weights per GPU (safetensors)")
    plans = [e["event_data"]["res"] for e in run.events if e.get("event") == "runner_on_ok"
             and e["event_data"].get("host") == "good-a" and e["event_data"].get("task", "").startswith("Plan the layout")]
    assert len(plans) == 1 and plans[0]["valid"] is True and plans[0]["label"] == "TP=2+EP"
    assert plans[0]["serve_args"][:2] == ["serve", str(model)]
    auto = [e["event_data"]["res"] for e in run.events if e.get("event") == "runner_on_ok"
            and e["event_data"].get("host") == "auto-a" and e["event_data"].get("task", "").startswith("Plan the layout")]
    assert len(auto) == 1 and auto[0]["label"] == "TP=2+EP"
    assert auto[0]["choice"]["summary"].startswith("auto: TP=2+EP uses all 2 GPUs and passes vLLM's rules")
    assert "Turned down: TP=2 (expert FFN 384 / 2 = 192" in auto[0]["choice"]["summary"]
    args = auto[0]["serve_args"]
    assert int(args[args.index("--kv-cache-memory-bytes") + 1]) == auto[0]["kv_cache_memory_bytes"] > 0
    # the kept service's memory, seen by the plan: the GPU's memory less its free memory in whole
    # 256 MiB steps (the idle card's own reserve counts, as nvidia-smi reports it used)
    first = nvidia_smi.parse_gpu_query((LAB_FILES / "nvidia-smi" / "rtx-pro-6000-x2" / "query-gpu.csv").read_text())[0]
    kept_mib = first["memory_total_mib"] - (first["memory_free_mib"] - KEPT_MIB) // 256 * 256
    kept = [e["event_data"]["res"] for e in run.events if e.get("event") == "runner_on_ok"
            and e["event_data"].get("host") == "kept-a" and e["event_data"].get("task", "").startswith("Plan the layout")]
    assert len(kept) == 1 and kept[0]["hardware"]["kept_mib"] == kept_mib > KEPT_MIB
    assert "up to %d MiB kept for other services" % kept_mib in kept[0]["hardware"]["label"]
    # the budget is what the kept service leaves, and vLLM is started with a fraction that passes its check
    assert kept[0]["estimate"]["budget_gib"] == round((first["memory_total_mib"] - kept_mib) / 1024.0, 2)
    kept_args = kept[0]["serve_args"]
    room = (first["memory_total_mib"] - kept_mib) * 1000 // first["memory_total_mib"] / 1000.0
    assert float(kept_args[kept_args.index("--gpu-memory-utilization") + 1]) == room < 0.9
    # the pinned KV cache shrinks by what the budget lost (the weights and the reserve stay)
    lost_mib = (auto[0]["estimate"]["budget_gib"] - kept[0]["estimate"]["budget_gib"]) * 1024
    gained_mib = (auto[0]["kv_cache_memory_bytes"] - kept[0]["kv_cache_memory_bytes"]) / 1048576.0
    assert lost_mib > 10000 and abs(gained_mib - lost_mib) < 16
    # an idle node keeps only the card's reserve: the operator's fraction stands
    assert auto[0]["hardware"]["kept_mib"] < 1024
    assert float(args[args.index("--gpu-memory-utilization") + 1]) == 0.9
