"""playbooks/status.yml under supervisord on the scenario's node: both programs running with their
pid and start time, the build, the model, the endpoints, and each program's log file on request."""

import os
import shutil
import sys
from pathlib import Path

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
from playbook_runner import run_in  # noqa: E402 pylint: disable=wrong-import-position


def test_status_playbook_under_supervisord(tmp_path):
    # The scenario's hosts with the lab's group_vars, as molecule assembles its inventory.
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    shutil.copy(str(REPO / "molecule" / "supervisor" / "inventory" / "hosts.yml"), str(inventory / "hosts.yml"))
    (inventory / "group_vars").symlink_to(REPO / "inventory" / "demo" / "group_vars")
    run = run_in(tmp_path / "status", "playbooks/status.yml", str(inventory),
                 envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO)},
                 cmdline="-e status_log_lines=5")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    (shown,) = [e["event_data"]["res"]["msg"] for e in run.events
                if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Print the node's status"]
    assert shown["service_manager"] == "supervisor"
    programs = {s["name"]: s for s in shown["services"]}
    for name in ("gpulab-llama-server", "gpulab-rpc-server-0"):
        assert programs[name]["state"] == "running" and programs[name]["main_pid"], programs
        assert programs[name]["started"].endswith("Z") and len(programs[name]["log"]) == 5
    assert shown["build_id"] and shown["model"].endswith(".gguf")
    assert shown["endpoints"][0] == "http://127.0.0.1:8080 (llama.cpp, /health 200)"
