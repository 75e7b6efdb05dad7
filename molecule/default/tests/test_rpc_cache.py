"""The RPC weight cache's bound on the deployed lab (role llama_rpc_server, entry point `cache`, which
deploy.yml runs before the drain): tensors the current model does not use, put in node-b's cache
with old times, are pruned oldest first down to the bound; a file a process holds open is left
alone; a disk too full for the model's tensors stops deploy.yml with the numbers before the drain,
with every serving unit as it was. The fake tensors and the cache's record are put back afterwards,
so later deploys find the lab as the converge left it.
"""

import json
import time

import pytest

from lab_playbooks import lab_host, run_on_lab

CACHE_DIR = "/var/cache/gpulab/rpc/rpc"
RECORD = "/var/lib/gpulab/rpc-cache.json"
SAVED_RECORD = "/var/tmp/gpulab-rpc-cache-test.json"
DRAIN_STATE = "/var/lib/gpulab/drain-state.json"
HOLDER = "/var/tmp/gpulab-rpc-cache-hold"
HOLDER_PID = "/run/gpulab-rpc-cache-hold.pid"
TASK = "Prune the weight cache to its bound, or stop when the disk cannot take the model's tensors"
MIB = 1 << 20
GIB = 1 << 30
# Names rpc-server could write (16 hex digits), days old: no current model used them.
FAKES = {"fffffffffffff001": "2020-01-01", "fffffffffffff002": "2020-01-02", "fffffffffffff003": "2020-01-03"}


def cache_sizes(node):
    """{name: bytes} of the cache files on node."""
    listed = node.check_output(f"find {CACHE_DIR} -maxdepth 1 -type f -printf '%f %s\\n' 2>/dev/null || true")
    return dict((name, int(size)) for name, size in (line.split() for line in listed.splitlines() if line.strip()))


def put_fake(node, name, day, mib=4):
    node.check_output(f"truncate -s {mib}M {CACHE_DIR}/{name} && touch -d '{day} 00:00:00' {CACHE_DIR}/{name}")


def bound_cache(tmp_path, name, **extravars):
    """Role llama_rpc_server's entry point `cache` as deploy.yml's plan step runs it, on node-b only
    (node-c's cache and record stay as the converge left them)."""
    playbook = tmp_path / "cache.yml"
    playbook.write_text("- hosts: node-b\n  gather_facts: false\n  tasks:\n"
                        "    - name: Bound each worker's weight cache\n      ansible.builtin.include_role:\n"
                        "        name: gpulab.inference.llama_rpc_server\n        tasks_from: cache\n")
    return run_on_lab(tmp_path / name, str(playbook), extravars=extravars)


def result_of(run, host):
    (result,) = [e["event_data"]["res"] for e in run.events if e.get("event") == "runner_on_ok"
                 and e["event_data"].get("task") == TASK and e["event_data"].get("host") == host]
    return result


@pytest.fixture(scope="module")
def worker():
    """node-b with its cache as the converge left it; the fakes and the record put back afterwards."""
    node = lab_host("node-b")
    assert node.file(RECORD).exists, "no weight cache record on node-b: did the converge run?"
    node.check_output(f"cp -p {RECORD} {SAVED_RECORD}")
    before = cache_sizes(node)
    assert not set(FAKES) & set(before)
    yield node, before
    node.run(f"test -f {HOLDER_PID} && kill $(cat {HOLDER_PID}); rm -f {HOLDER_PID} {HOLDER}")
    node.check_output("rm -f " + " ".join(f"{CACHE_DIR}/{name}" for name in FAKES))
    node.check_output(f"mv -f {SAVED_RECORD} {RECORD}")


def test_the_converge_recorded_the_cache(worker):
    node, _before = worker
    record = json.loads(node.file(RECORD).content_string)
    assert record["managed_by"] == "gpulab.inference"
    assert record["path"] == CACHE_DIR
    assert record["max_gib"] is None
    assert len(record["model"]) == 64


def test_a_cache_over_its_bound_is_pruned_oldest_first(worker, tmp_path):
    node, before = worker
    for name, day in FAKES.items():
        put_fake(node, name, day)
    # Room for what the current model's files hold plus one fake: the two oldest go.
    bound_gib = (sum(before.values()) + 4 * MIB) / GIB
    run = bound_cache(tmp_path, "over", llama_rpc_server_cache_max_gib=bound_gib)
    assert run.status == "successful", run.failures
    result = result_of(run, "node-b")
    assert result["removed"] == ["fffffffffffff001", "fffffffffffff002"]
    assert result["removed_bytes"] == 8 * MIB
    assert result["model_changed"] is False
    after = cache_sizes(node)
    assert after == dict(before, fffffffffffff003=4 * MIB)


def test_a_file_held_open_is_left_alone(worker, tmp_path):
    node, _before = worker
    put_fake(node, "fffffffffffff001", "2020-01-01")
    put_fake(node, "fffffffffffff002", "2020-01-02")
    node.check_output(f"printf '%s\\n' '#!/bin/sh' 'echo $$ > {HOLDER_PID}' 'exec 3<\"$1\"' 'exec sleep 600' > {HOLDER}"
                      f" && chmod 0755 {HOLDER}")
    node.check_output(f"setsid {HOLDER} {CACHE_DIR}/fffffffffffff001 >/dev/null 2>&1 </dev/null &")
    deadline = time.monotonic() + 30
    while node.run(f"ls -l /proc/$(cat {HOLDER_PID})/fd 2>/dev/null | grep -q fffffffffffff001").rc != 0:
        assert time.monotonic() < deadline, "the holder did not open the file"
        time.sleep(0.5)
    try:
        # A bound of one byte: everything not in use goes.
        run = bound_cache(tmp_path, "open", llama_rpc_server_cache_max_gib=1 / GIB)
    finally:
        node.run(f"kill $(cat {HOLDER_PID}); rm -f {HOLDER_PID}")
    assert run.status == "successful", run.failures
    result = result_of(run, "node-b")
    assert "fffffffffffff001" in result["in_use"]
    assert "fffffffffffff001" not in result["removed"]
    assert "fffffffffffff002" in result["removed"]
    assert result["over_bound"] is True
    # What is left is exactly what is in use: the open file, and the current model's files
    # (those it used since it was deployed).
    after = cache_sizes(node)
    assert "fffffffffffff002" not in after
    assert set(after) == set(result["in_use"])
    assert result["left_bytes"] == sum(after.values())


def test_a_full_disk_stops_deploy_before_the_drain(worker, tmp_path):
    units = {}
    for name in ("node-a", "node-b", "node-c"):
        host = lab_host(name)
        units[name] = host.check_output("systemctl list-units 'gpulab-*' --state=active --plain --no-legend "
                                        "| awk '{print $1}' | sort | xargs -r systemctl show -p Id -p InvocationID")
        assert not host.file(DRAIN_STATE).exists
    # More to keep free than any disk has: the disk counts as full.
    run = run_on_lab(tmp_path / "full", "deploy.yml", extravars={"llama_rpc_server_cache_min_free_gib": 1_000_000},
                     cmdline="--tags serving")
    assert run.status == "failed"
    failures = run.failed_events()
    assert sorted(event["host"] for event in failures) == ["node-b", "node-c"]
    for event in failures:
        assert event["task"] == TASK
        assert event["task_path"].split(":")[0].endswith("roles/llama_rpc_server/tasks/cache.yml")
        message = event["res"]["msg"]
        assert "the disk is too full to start" in message
        assert "GiB free" in message
        assert "1000000.0 GiB must stay free (llama_rpc_server_cache_min_free_gib)" in message
    # Nothing drained, nothing restarted: the drain role ran only its check-mode question (would_stop,
    # asked by the memory plan, with the node's settings it reads first), never the drain itself.
    asked_only = ("/roles/gpu_drain/tasks/would_stop.yml", "/roles/gpu_drain/tasks/node_defaults.yml")
    drain_tasks = [e["event_data"].get("task_path") or "" for e in run.events
                   if e.get("event_data", {}).get("role") == "gpu_drain"]
    assert [path for path in drain_tasks
            if "/roles/gpu_drain/tasks/" in path and not any(place in path for place in asked_only)] == []
    for name in ("node-a", "node-b", "node-c"):
        host = lab_host(name)
        assert not host.file(DRAIN_STATE).exists
        assert host.check_output("systemctl list-units 'gpulab-*' --state=active --plain --no-legend "
                                 "| awk '{print $1}' | sort | xargs -r systemctl show -p Id -p InvocationID") == units[name]
