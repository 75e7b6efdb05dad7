"""A worker whose sshd stops in the middle of deploy.yml (its serving steps), on the converged lab,
driven through ansible-runner (events and stats): once the drain ran, node-c's sshd is stopped and its sessions
ended through podman. The run must fail on every node naming node-c, the other nodes must get
their drained services back, and once sshd is back the next deploy.yml converges and the one after
it changes nothing. A fake GPU consumer per node (transport_fault_consumers.yml) gives the drain
something to stop; it is removed again at the end, so the scenario's later steps find the lab as
converged."""

import subprocess

import ansible_runner
import pytest
import testinfra

from lab_playbooks import COLLECTIONS, ENV, INVENTORY, LAB, REPO, PlaybookRun, run_in

CONSUMERS = "molecule/default/transport_fault_consumers.yml"
CONSUMER = "gpulab-test-consumer.service"
DRAIN_TASK = "Drain the GPUs (state file first, then stop, then wait for the memory to fall)"
RESCUE_FAIL = "Fail with the error of the step that failed, naming the nodes not restored"
NODES = ("node-a", "node-b", "node-c")
LOST = "node-c"
# The three runs are the serving steps (the model, the memory plan, the drain, the RPC workers,
# the head), where the fault strikes and what it touches: the fabric and the build before them
# change nothing on the converged lab (molecule's idempotence step covers them), and the benchmark
# is not part of what is restored.
SERVING = "--tags serving --skip-tags bench"


def node(name):
    # Through podman, not SSH (lab_playbooks.lab_host): node-c is read while its sshd is stopped.
    return testinfra.get_host("podman://%s-%s" % (LAB, name))


def sshd(name, action):
    # The podman connection only breaks and mends the node. Debian's ssh.service stops only its
    # listener (KillMode=process): `systemctl kill` also ends the open sessions, Ansible's
    # ControlMaster connection among them, as a node that really lost its sshd would.
    commands = [["systemctl", action, "ssh.service"]] + ([["systemctl", "kill", "ssh.service"]] if action == "stop" else [])
    for command in commands:
        subprocess.run(["podman", "exec", "%s-%s" % (LAB, name)] + command, check=True, timeout=60)


def deploy(private, event_handler=None):
    private.mkdir(parents=True)
    env = dict(ENV, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1")
    runner = ansible_runner.run(private_data_dir=str(private), playbook=str(REPO / "deploy.yml"), inventory=INVENTORY,
                                cmdline=SERVING, envvars=env, event_handler=event_handler, quiet=True)
    return PlaybookRun(runner)


def consumer_state(name):
    return node(name).run("systemctl is-active %s" % CONSUMER).stdout.strip()


@pytest.fixture()
def consumers(tmp_path):
    for name in NODES:
        assert not node(name).file("/var/lib/gpulab/drain-state.json").exists, name + " is drained before the test"
    run = run_in(tmp_path / "consumers", CONSUMERS, INVENTORY, envvars=ENV)
    assert run.status == "successful", run.failures
    yield
    sshd(LOST, "start")
    run = run_in(tmp_path / "remove", CONSUMERS, INVENTORY, envvars=ENV, extravars={"transport_fault_present": False})
    assert run.status == "successful", run.failures


def test_a_node_whose_sshd_stops_after_the_drain(tmp_path, consumers):  # pylint: disable=redefined-outer-name,unused-argument
    assert [consumer_state(name) for name in NODES] == ["active"] * 3
    drained = set()
    broken = []

    def break_after_the_drain(event):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == DRAIN_TASK:
            drained.add(data["host"])
            if drained == set(NODES) and not broken:
                sshd(LOST, "stop")
                broken.append(data["host"])
        return True

    run = deploy(tmp_path / "broken", break_after_the_drain)
    assert broken, "the drain never ran: %s" % run.failures
    assert run.status == "failed"
    assert LOST in run.stats.get("dark", {}), run.stats
    # every node that still answers fails with the rescue's message, which names the lost node
    rescued = {host: message for host, task, message in run.failures if task == RESCUE_FAIL}
    assert sorted(rescued) == ["node-a", "node-b"], run.failures
    for message in rescued.values():
        assert "node-c could not be reached (SSH): its drained services stay stopped" in message
        assert message.endswith("The drained services were restored on node-a, node-b.")
    # restored where the rescue reached: the consumer runs again, the drain state is gone
    assert [consumer_state(name) for name in NODES] == ["active", "active", "inactive"]
    assert [node(name).file("/var/lib/gpulab/drain-state.json").exists for name in NODES] == [False, False, True]

    sshd(LOST, "start")
    converged = deploy(tmp_path / "converge")
    assert converged.status == "successful", converged.failures
    assert converged.ok_results("Print the answer and the layer placement")
    assert [consumer_state(name) for name in NODES] == ["inactive"] * 3

    again = deploy(tmp_path / "again")
    assert again.status == "successful", again.failures
    assert again.changed_tasks() == []
    assert again.warnings() == []
