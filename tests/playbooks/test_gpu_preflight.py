"""gpu_preflight through playbooks/facts.yml: bad inventories stop the play before any change;
a good one records each node's GPUs from the fake nvidia-smi profiles."""

import json

import pytest
from playbook_runner import LAB_FILES, local_host, run_in

FAKE_SMI = str(LAB_FILES / "fake-nvidia-smi")


def lab_inventory(tmp_path, heads, workers):
    """Inventory of local hosts; heads and workers map a name to (fake GPU profile, fabric address)."""
    def host(name, profile, address):
        profile_dir = LAB_FILES / "nvidia-smi" / profile
        hostvars = local_host(
            gpulab_gpu_inventory_file=str(tmp_path / name / "gpu-inventory.json"),
            gpu_preflight_nvidia_smi_path=FAKE_SMI,
            gpu_preflight_driver_version_file=str(profile_dir / "proc-driver-nvidia-version"),
        )
        if address is not None:
            hostvars["gpulab_fabric_address"] = address
        return hostvars

    return {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {name: host(name, *spec) for name, spec in heads.items()}},
        "rpc_workers": {"hosts": {name: host(name, *spec) for name, spec in workers.items()}},
    }}}}}


# The fake nvidia-smi reads its profile from GPULAB_FAKE_NVIDIA_SMI_DIR; one profile per run
# is enough for the inventory checks, which fail before any node is read.
ENV = {"GPULAB_FAKE_NVIDIA_SMI_DIR": str(LAB_FILES / "nvidia-smi" / "rtx-pro-6000-x2")}


def test_two_heads_fail_before_any_change(run_playbook, tmp_path):
    inventory = lab_inventory(
        tmp_path,
        {"node-a": ("rtx-pro-6000-x2", "10.0.0.1"), "node-x": ("rtx-pro-6000-x2", "10.0.0.3")},
        {"node-b": ("rtx-pro-6000-maxq", "10.0.0.2")},
    )
    result = run_playbook("playbooks/facts.yml", inventory, envvars=ENV)
    assert result.status == "failed"
    task, msg = result.failures[0][1:]
    assert task == "Exactly one host is the inference head"
    assert "holds 2: node-a, node-x" in msg
    assert result.changed_tasks() == []
    assert not any((tmp_path / name).exists() for name in ("node-a", "node-b", "node-x"))


def test_worker_without_fabric_address_is_named(run_playbook, tmp_path):
    inventory = lab_inventory(
        tmp_path,
        {"node-a": ("rtx-pro-6000-x2", "10.0.0.1")},
        {"node-b": ("rtx-pro-6000-maxq", None), "node-c": ("h200", "999.1.1.1")},
    )
    result = run_playbook("playbooks/facts.yml", inventory, envvars=ENV)
    assert result.status == "failed"
    task, msg = result.failures[0][1:]
    assert task == "Every worker and the head have a fabric address"
    assert "node-b (unset)" in msg
    assert "node-c ('999.1.1.1' is not an IPv4 or IPv6 address)" in msg
    assert "node-a" not in msg
    assert result.changed_tasks() == []


def test_shared_fabric_address_is_refused(run_playbook, tmp_path):
    inventory = lab_inventory(
        tmp_path,
        {"node-a": ("rtx-pro-6000-x2", "10.0.0.1")},
        {"node-b": ("rtx-pro-6000-maxq", "10.0.0.2"), "node-c": ("h200", "10.0.0.2")},
    )
    result = run_playbook("playbooks/facts.yml", inventory, envvars=ENV)
    assert result.status == "failed"
    task, msg = result.failures[0][1:]
    assert task == "Fabric addresses are unique"
    assert "10.0.0.2 on node-b, node-c" in msg


@pytest.mark.parametrize("profile, count, arch", [("rtx-pro-6000-x2", 2, "120"), ("h200", 1, "90")])
def test_good_inventory_records_gpus(run_playbook, tmp_path, profile, count, arch):
    inventory = lab_inventory(tmp_path, {"node-a": (profile, "10.0.0.1")}, {})
    env = {"GPULAB_FAKE_NVIDIA_SMI_DIR": str(LAB_FILES / "nvidia-smi" / profile)}
    result = run_playbook("playbooks/facts.yml", inventory, envvars=env)
    assert result.status == "successful", result.failures
    snapshot = json.loads((tmp_path / "node-a" / "gpu-inventory.json").read_text())
    assert int(snapshot["gpu_count"]) == count
    assert {gpu["cuda_arch"] for gpu in snapshot["gpus"]} == {arch}

    again = run_playbook("playbooks/facts.yml", inventory, envvars=env)
    assert again.status == "successful"
    assert again.changed_tasks() == []


def test_worker_outside_the_gpu_nodes_is_named(run_playbook, tmp_path):
    # rpc_workers beside gpu_nodes instead of inside it: node-z would never be preflighted
    head = lab_inventory(tmp_path, {"node-a": ("rtx-pro-6000-x2", "10.0.0.1")}, {})
    head_group = head["all"]["children"]["gpu_nodes"]["children"]["inference_head"]
    inventory = {"all": {"children": {
        "gpu_nodes": {"children": {"inference_head": head_group}},
        "rpc_workers": {"hosts": {"node-z": {"gpulab_fabric_address": "10.0.0.9"}}},
    }}}
    result = run_playbook("playbooks/facts.yml", inventory, envvars=ENV)
    assert result.status == "failed"
    task, msg = result.failures[0][1:]
    assert task == "The head and the workers are GPU nodes"
    assert "node-z (not in group 'gpu_nodes')" in msg
    assert result.changed_tasks() == []


def test_renamed_groups_come_from_the_common_role(run_playbook, tmp_path):
    # two heads under the default names pass when the lab names its head group otherwise
    inventory = lab_inventory(tmp_path, {"node-a": ("rtx-pro-6000-x2", "10.0.0.1")}, {"node-b": ("h200", "10.0.0.2")})
    result = run_playbook("playbooks/facts.yml", inventory, extravars={"gpulab_head_group": "no_such_group"}, envvars=ENV)
    assert result.status == "failed"
    task, msg = result.failures[0][1:]
    assert task == "Exactly one host is the inference head"
    assert "Group 'no_such_group' must hold exactly one host; it holds 0: none" in msg


ENGINE_TASK = "Say which engine deploys and why"


def test_engine_auto_is_said_with_its_reason_or_refused_naming_the_variables(tmp_path):
    inventory = lab_inventory(tmp_path, {"node-a": ("rtx-pro-6000-x2", "10.0.0.1")}, {})

    def run_playbook(playbook, inventory, extravars=None, envvars=None):
        # a runner directory per run: each keeps its own extra variables
        return run_in(tmp_path / ("runner-%d" % len(list(tmp_path.glob("runner-*")))), playbook, inventory, extravars, envvars)

    checkpoint = {"gpulab_engine": "auto", "model_source": "http://10.231.77.5/ckpt"}
    result = run_playbook("playbooks/facts.yml", inventory, extravars=checkpoint, envvars=ENV)
    assert result.status == "successful", result.failures
    assert [r["msg"] for r in result.ok_results(ENGINE_TASK)] == [
        "engine vllm: auto: model_source http://10.231.77.5/ckpt is a Hugging Face checkpoint (config.json and "
        "safetensors), which vLLM serves"]
    # the default is auto; with no model named it is the engine table's first, said so
    default = run_playbook("playbooks/facts.yml", inventory, envvars=ENV)
    assert [r["msg"] for r in default.ok_results(ENGINE_TASK)] == [
        "engine llama_cpp: auto: the inventory names no model (vllm_server_model_path, llama_server_model_path, "
        "model_source, model_path, model_synthetic), so the first engine of gpulab_engines"]
    set_engine = run_playbook("playbooks/facts.yml", inventory, extravars={"gpulab_engine": "vllm"}, envvars=ENV)
    assert [r["msg"] for r in set_engine.ok_results(ENGINE_TASK)] == ["engine vllm: gpulab_engine is set to vllm"]
    head_without_path = run_playbook("playbooks/facts.yml", inventory, extravars={"model_source": "head"}, envvars=ENV)
    failures = head_without_path.failures
    assert [(host, task) for host, task, _msg in failures] == [("node-a", ENGINE_TASK)], failures
    assert "gpulab_engine is auto and model_source is head, but model_path" in failures[0][2]
    assert "Traceback" not in failures[0][2]
