"""The drain and its restore on the supervisord node, over SSH as an operator runs them: GPU
consumers of three kinds (drain_consumers.yml: a supervisord program, a podman container, a process
no manager runs), then deploy.yml failing after the drain (the head gets an argument llama-server
refuses) and, after a deploy that succeeds, playbooks/restore.yml by hand. Both times the program
and the container run again, the process was never stopped, the collection's programs are stopped
and no drain state is left. The node is left as converged for the scenario's later steps."""

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
from playbook_runner import run_in  # noqa: E402 pylint: disable=wrong-import-position

ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}
CTL = "/opt/gpulab/supervisor/bin/supervisorctl -c /etc/gpulab/supervisord.conf"
OWN = ("gpulab-llama-server", "gpulab-rpc-server-0")
CONTAINER = "7d3c1f0e9b8a47c6a5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c3b2a190817"
DRAINED = {"supervisor:gpu-embed", "container:podman:" + CONTAINER}
STATE_FILE = "/var/lib/gpulab/drain-state.json"
DRAIN_TASK = "Drain the GPUs (state file first, then stop, then wait for the memory to fall)"
RESCUE_FAIL = "Fail with the error of the step that failed, naming the nodes not restored"
SERVING = "--tags serving --skip-tags bench"
# Accepted by every check before the drain, refused by llama-server itself once it starts.
INJECTED = {"llama_server_extra_args": ["--gpulab-injected-failure"], "llama_server_health_timeout_s": 20}


@pytest.fixture(name="inventory", scope="module")
def fixture_inventory(tmp_path_factory):
    # The scenario's hosts with the lab's group_vars, as molecule assembles its inventory.
    inventory = tmp_path_factory.mktemp("drain") / "inventory"
    inventory.mkdir()
    shutil.copy(str(REPO / "molecule" / "supervisor" / "inventory" / "hosts.yml"), str(inventory / "hosts.yml"))
    (inventory / "group_vars").symlink_to(REPO / "inventory" / "demo" / "group_vars")
    return str(inventory)


def states(host):
    """{program: state} as supervisorctl reports them."""
    status = host.run(CTL + " status")
    assert status.rc in (0, 3), status.stdout + status.stderr
    return {line.split()[0]: line.split()[1] for line in status.stdout.splitlines() if line.strip()}


def pid_of(host, name):
    return host.check_output("cat /run/gpulab-test/%s.pid" % name).strip()


def consumers(host):
    """What runs of the three consumers: the program's state, whether the container runs, the
    unmanaged process's pid if alive."""
    scratch = pid_of(host, "scratch")
    return {"gpu-embed": states(host).get("gpu-embed"),
            "container": host.check_output("podman inspect --format '{{.State.Running}}' " + CONTAINER),
            "scratch": scratch if host.run("kill -0 " + scratch).rc == 0 else None}


@pytest.fixture(name="consumers_running")
def fixture_consumers_running(host, tmp_path, inventory):
    assert not host.file(STATE_FILE).exists, "the node is drained before the test"
    run = run_in(tmp_path / "consumers", "molecule/supervisor/drain_consumers.yml", inventory, envvars=ENV)
    assert run.status == "successful", run.failures
    before = consumers(host)
    assert before["gpu-embed"] == "RUNNING" and before["container"] == "true" and before["scratch"], before
    yield before
    run = run_in(tmp_path / "remove", "molecule/supervisor/drain_consumers.yml", inventory, envvars=ENV,
                 extravars={"drain_consumers_present": False})
    assert run.status == "successful", run.failures
    # Serving again, as converged: the last restore stopped the programs.
    host.run(CTL + " start " + " ".join(OWN))
    for _attempt in range(60):
        if host.run("curl -fsS -o /dev/null http://127.0.0.1:8080/health").rc == 0:
            break
        time.sleep(2)
    else:
        pytest.fail("the head did not answer /health after the test: %s" % states(host))


def assert_restored(host, before):
    after = consumers(host)
    assert after["gpu-embed"] == "RUNNING" and after["container"] == "true", after
    assert after["scratch"] == before["scratch"], "the unmanaged process was stopped: %s" % after
    programs = states(host)
    assert all(programs[name] == "STOPPED" for name in OWN), programs
    assert not host.file(STATE_FILE).exists


def drained(run):
    (result,) = run.ok_results(DRAIN_TASK)
    return result


def test_a_deploy_that_fails_after_the_drain_and_restore_yml(host, tmp_path, inventory, consumers_running):
    before = consumers_running
    assert all(states(host)[name] == "RUNNING" for name in OWN)

    failed = run_in(tmp_path / "failed", "deploy.yml", inventory, envvars=ENV, extravars=INJECTED, cmdline=SERVING)
    assert failed.status == "failed"
    result = drained(failed)
    assert set(result["stopped"]) == DRAINED, result["summary"]
    assert [c["action"] for c in result["consumers"] if c["kind"] == "process"] == ["report"], result["consumers"]
    (message,) = [msg for unused_host, task, msg in failed.failures if task == RESCUE_FAIL]
    assert "The drained services were restored." in message, message
    assert_restored(host, before)

    deployed = run_in(tmp_path / "deployed", "deploy.yml", inventory, envvars=ENV, cmdline=SERVING)
    assert deployed.status == "successful", deployed.failures
    assert set(drained(deployed)["stopped"]) == DRAINED
    programs = states(host)
    assert all(programs[name] == "RUNNING" for name in OWN), programs
    assert programs["gpu-embed"] == "STOPPED" and host.file(STATE_FILE).exists

    restored = run_in(tmp_path / "restore", "playbooks/restore.yml", inventory, envvars=ENV)
    assert restored.status == "successful", restored.failures
    assert_restored(host, before)
