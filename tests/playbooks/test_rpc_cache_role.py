"""Role llama_rpc_server's entry point `cache` on local nodes: it reads the head's model manifest and
memory plan, prunes a cache over its bound oldest first and leaves a second run unchanged, and a
disk too full for the model's tensors stops the play with the numbers, removing nothing."""

import json
import os

import pytest
from playbook_runner import local_host, run_in

MIB = 1 << 20
TASK = "Prune the weight cache to its bound, or stop when the disk cannot take the model's tensors"


@pytest.fixture()
def lab(tmp_path):
    """node-a the head (its model manifest and memory plan), node-b a worker with three cached tensors."""
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "model.json").write_text(json.dumps(
        {"managed_by": "gpulab.inference", "source": "synthetic", "path": "/m/x.gguf", "size_bytes": 4 * MIB}))
    (tmp_path / "head" / "memory-plan.json").write_text(json.dumps({"devices": [
        {"name": "RPC0", "host": "node-b", "kind": "rpc", "layer_range": [0, 2], "output_layer": False, "split": 1.0,
         "weights_mib": 1}]}))
    cache = tmp_path / "llama" / "rpc"
    cache.mkdir(parents=True)
    for index, age in enumerate((300, 900, 600)):
        path = cache / ("%016x" % (index + 1))
        with open(path, "wb") as stream:
            stream.truncate(MIB)
        os.utime(path, (1_700_000_000 - age, 1_700_000_000 - age))
    common = dict(gpulab_model_manifest=str(tmp_path / "head" / "model.json"),
                  gpulab_memory_plan_file=str(tmp_path / "head" / "memory-plan.json"),
                  gpulab_rpc_cache_file=str(tmp_path / "state" / "rpc-cache.json"),
                  llama_rpc_server_cache_dir=str(tmp_path / "llama"))
    inventory = {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": local_host(**common)}},
        "rpc_workers": {"hosts": {"node-b": local_host(**common)}}}}}}}
    playbook = tmp_path / "cache.yml"
    playbook.write_text("- hosts: rpc_workers\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.include_role:\n        name: gpulab.inference.llama_rpc_server\n"
                        "        tasks_from: cache\n")

    def run(name, **extravars):
        return run_in(tmp_path / name, str(playbook), inventory, extravars=extravars)

    run.cache = cache
    run.record = tmp_path / "state" / "rpc-cache.json"
    return run


def test_a_cache_over_its_bound_is_pruned_oldest_first_and_a_second_run_changes_nothing(lab):
    # 2 MiB bound, 1 MiB for the model's tensors: one old file may stay, the newest.
    first = lab("first", llama_rpc_server_cache_max_gib=2 / 1024.0)
    assert first.status == "successful", first.failures
    (result,) = first.ok_results(TASK)
    assert result["removed"] == ["%016x" % 2, "%016x" % 3]
    assert result["model_changed"] is True
    assert sorted(os.listdir(lab.cache)) == ["%016x" % 1]
    record = json.loads(lab.record.read_text())
    assert record["path"] == str(lab.cache)
    assert record["max_gib"] == 2 / 1024.0
    second = lab("second", llama_rpc_server_cache_max_gib=2 / 1024.0)
    assert second.status == "successful", second.failures
    assert second.changed_tasks() == []


def test_a_disk_too_full_for_the_model_stops_with_the_numbers(lab):
    run = lab("full", llama_rpc_server_cache_min_free_gib=1_000_000)
    assert run.status == "failed"
    (failure,) = run.failures
    assert failure[:2] == ("node-b", TASK)
    assert "rpc_cache on node-b: %s: the disk is too full to start" % lab.cache in failure[2]
    assert "need up to 0.0 GiB" in failure[2]
    assert "1000000.0 GiB must stay free (llama_rpc_server_cache_min_free_gib)" in failure[2]
    assert len(os.listdir(lab.cache)) == 3
    assert not lab.record.exists()


def test_a_bad_bound_is_refused_by_the_argument_spec(lab):
    run = lab("bad", llama_rpc_server_cache_max_gib="lots")
    assert run.status == "failed"
    (failure,) = run.failures
    assert "llama_rpc_server_cache_max_gib" in failure[2]
    assert len(os.listdir(lab.cache)) == 3
