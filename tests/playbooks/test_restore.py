"""playbooks/restore.yml with one node that answers (local, under supervisord: the stand-in
supervisorctl) and one that does not (SSH to a closed loopback port): on node-a the collection's
programs are stopped, the head first, the drained program started again and the state file removed;
the run goes on past node-b and ends failing, with one line per node saying what was restored and
node-b named as not restored."""

import json

from playbook_runner import run_in
from supervisor_double import calls, programs, supervisord_node

STATE = {"schema": "gpulab.inference.gpu_drain/1", "phase": "drained", "created": "2026-12-01T10:00:00Z",
         "updated": "2026-12-01T10:00:00Z", "killed": [],
         "entries": [{"key": "supervisor:gpu-embed", "kind": "supervisor", "name": "gpu-embed", "was_active": True,
                      "was_enabled": None, "gpus_mib": {}}]}
LOST = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "nobody",
        "ansible_ssh_common_args": "-o ConnectTimeout=5 -o BatchMode=yes -o StrictHostKeyChecking=no "
                                   "-o UserKnownHostsFile=/dev/null"}


def test_restore_reports_per_node_and_goes_on_past_a_node_that_does_not_answer(tmp_path):
    root = tmp_path / "node-a"
    root.mkdir()
    state_file = root / "drain-state.json"
    state_file.write_text(json.dumps(STATE))
    head = supervisord_node(root, {"gpulab-rpc-server-0": "RUNNING", "gpulab-llama-server": "RUNNING",
                                   "gpu-embed": "STOPPED"}, gpu_drain_state_file=str(state_file))
    inventory = {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": head}}, "rpc_workers": {"hosts": {"node-b": LOST}}}}}}}

    run = run_in(tmp_path / "runner", "playbooks/restore.yml", inventory)

    assert run.status == "failed"
    assert programs(root) == {"gpulab-llama-server": "STOPPED", "gpulab-rpc-server-0": "STOPPED", "gpu-embed": "RUNNING"}
    assert calls(root, "stop") == [["stop", "gpulab-llama-server"], ["stop", "gpulab-rpc-server-0"]]
    assert calls(root, "start") == [["start", "gpu-embed"]]
    assert not state_file.exists()
    (report,) = run.ok_results("What each node got back")
    assert report["msg"] == [
        "node-a: stopped gpulab-llama-server, gpulab-rpc-server-0; started again supervisor:gpu-embed",
        "node-b: unreachable, nothing restored; it stays drained. Run restore.yml again once it answers, or on its "
        "console start what /var/lib/gpulab/drain-state.json lists and remove that file"]
    assert run.failures == [("localhost", "Fail naming the nodes that were not restored",
                             "not restored: node-b (see each node's line above)")]
