"""deploy.yml's tags for partial runs: the preflight always runs, and each tag selects its plays only
(ansible-playbook --list-tasks, so nothing is contacted)."""

import os
import re
import subprocess
import sys

import pytest
from playbook_runner import COLLECTIONS, REPO

PREFLIGHT = "Preflight checks and GPU facts"
# playbooks/engine.yml: one play per step of the engine's role; its check step runs with any tag but fabric
CHECK = "Check the engine can be planned"
SERVE = "Drain the GPUs and start the engine; a failure or a lost node restores every drained node"
# The closing play is tagged always: an API opened by the operator's choice is said last.
WARNINGS = "Warnings that stand after the run"
EXPECTED = {
    "fabric": [PREFLIGHT, "RoCE fabric (nodes with gpulab_fabric_interface)",
               "Check every node's side of the RoCE fabric", "Measure RDMA write bandwidth from every worker to the head",
               WARNINGS],
    "build": [PREFLIGHT, CHECK, "Build the engine and ship it to every node", WARNINGS],
    "bench": [PREFLIGHT, CHECK, "Benchmark what is served and write the report", WARNINGS],
    "serving": [PREFLIGHT, CHECK, "Model on the nodes that read it", "Plan the engine before anything is started, stopped or drained",
                # the engines not deployed are retired (playbooks/stop.yml), before anything is drained
                "Stop the engines on the head", "Stop the engines on the other nodes", SERVE, "Report what is served", WARNINGS],
}


def plays_with_tasks(tags):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    listed = subprocess.run(["ansible-playbook", "deploy.yml", "-i", "inventory/demo", "--list-tasks", "--tags", tags],
                            cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr
    plays = []
    current = None  # the play whose tasks follow
    for line in listed.stdout.splitlines():
        match = re.match(r"^  play #[0-9]+ \([^)]*\): (.*?)\tTAGS: ", line)
        if match:
            current = match.group(1)
            continue
        # A role's argument validation is tagged always: it runs with any tag and changes nothing.
        task = line.startswith("      ") and "Validating arguments against arg spec" not in line
        if current and task and line.strip() and current not in plays:
            plays.append(current)
    return plays


@pytest.mark.parametrize("tag", sorted(EXPECTED))
def test_a_tag_runs_the_preflight_and_its_plays(tag):
    assert plays_with_tasks(tag) == EXPECTED[tag]


MONITORING = "Monitoring (Prometheus, node exporters, GPU and state metrics, alert rules)"


def hosts_of_play(play, *extra):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    listed = subprocess.run(["ansible-playbook", "deploy.yml", "-i", "inventory/demo", "--list-hosts"] + list(extra),
                            cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr
    blocks = re.split(r"^  play #[0-9]+ \([^)]*\): ", listed.stdout, flags=re.M)
    block = [b for b in blocks if b.startswith(play + "\t")]
    assert len(block) == 1, listed.stdout
    return int(re.search(r"hosts \(([0-9]+)\)", block[0]).group(1))


def test_without_monitoring_enabled_its_play_runs_on_no_host():
    # deploy.yml is unchanged in tasks without the opt-in: the play is there and matches nothing, while
    # the plays before it keep their hosts (with the opt-in the play takes gpu_nodes: molecule vllm)
    assert hosts_of_play(MONITORING) == 0
    assert hosts_of_play(PREFLIGHT) == 3
