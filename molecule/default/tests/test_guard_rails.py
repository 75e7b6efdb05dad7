"""Values an operator mistypes or copies, on the converged lab over SSH, through ansible-runner: a port
the deployment would take that SSH or another service uses, and a head API opened without a key, are
refused by the preflight before any change, naming the variable; the lab stays reachable. The opt-in to
an open API is accepted and said again at the end of the run. The RPC firewall never drops SSH, even
with a drop rule that names SSH's port."""

import os
import re
import subprocess

import pytest

from lab_playbooks import LAB, SSH_CONFIG, lab_host, run_on_lab

FABRIC = os.environ.get("GPULAB_LAB_FABRIC_PREFIX", "10.231.77")
HEAD_ADDRESS = f"{FABRIC}.10"
NODES = ("node-a", "node-b", "node-c")
EXPOSURE_TASK = "No node would lose SSH, collide with a service or open its API"
# A service of someone else's on the head: a port the collection must not take.
LISTENER_UNIT = "gpulab-test-listener"
LISTENER_PORT = 18777
# Only the plays tagged always run (the preflight and the closing warnings): nothing else is touched.
PREFLIGHT_ONLY = "--tags gpulab-guard-rails-preflight-only"


def ssh_answers(name):
    """A new SSH connection (not Ansible's shared one) to the node runs a command."""
    probe = subprocess.run(["ssh", "-F", SSH_CONFIG, "-o", "ControlPath=none", "-o", "ConnectTimeout=10", name, "true"],
                           capture_output=True, text=True, timeout=60, check=False)
    return probe.returncode == 0


def refused(tmp_path, label, extravars):
    """deploy.yml with extravars: it fails in the preflight's exposure check and changes nothing."""
    run = run_on_lab(tmp_path / label, "deploy.yml", extravars=extravars)
    assert run.status == "failed"
    (failure, *_others) = run.failures
    assert failure[1] == EXPOSURE_TASK, run.failures
    assert run.changed_tasks() == []
    for name in NODES:
        assert not lab_host(name).file("/var/lib/gpulab/drain-state.json").exists
        assert ssh_answers(name), name + " no longer answers over SSH"
    return failure[2]


def test_rpc_servers_and_the_head_on_the_ssh_port_are_refused(tmp_path):
    message = refused(tmp_path, "ssh-port", {"llama_rpc_server_port_base": 22, "llama_server_port": 22})
    lines = message.splitlines()
    assert len(lines) == 3, message
    assert lines[0].startswith("llama_server_port=22 on node-a: llama-server's API would listen on 22, and SSH")
    for worker, line in zip(("node-b", "node-c"), lines[1:]):
        assert line.startswith(f"llama_rpc_server_port_base=22 on {worker}: the RPC servers would listen on 22")
        assert "cut SSH" in line


def test_the_vllm_head_on_the_ssh_port_is_refused(tmp_path):
    message = refused(tmp_path, "vllm-ssh-port", {"gpulab_engine": "vllm", "vllm_server_port": 22})
    assert message.startswith("vllm_server_port=22 on node-a: vLLM's API would listen on 22, and SSH"), message


@pytest.fixture()
def listener():
    head = lab_host("node-a")
    head.check_output(f"systemd-run --unit {LISTENER_UNIT} -p User=nobody python3 -m http.server {LISTENER_PORT} "
                      "--bind 127.0.0.1")
    head.check_output(f"timeout 20 bash -c 'until </dev/tcp/127.0.0.1/{LISTENER_PORT}; do sleep 0.2; done'")
    yield
    head.run(f"systemctl stop {LISTENER_UNIT}")


def test_ports_another_service_holds_are_refused_naming_it(tmp_path, listener):  # pylint: disable=redefined-outer-name,unused-argument
    message = refused(tmp_path, "taken", {"llama_server_port": LISTENER_PORT, "model_serve_port": LISTENER_PORT + 1})
    assert message.startswith(f"llama_server_port={LISTENER_PORT} on node-a: llama-server's API would listen on "
                              f"{LISTENER_PORT}, but port {LISTENER_PORT} is taken by "), message
    # The lab's containers lack CAP_SYS_PTRACE, so root there cannot read another user's /proc/<pid>/fd:
    # the holder is then named by the socket's owner alone, as the kernel's socket table gives it.
    assert re.search(r"taken by (python3 \(pid [0-9]+, user nobody\)|a process of user nobody) on 127\.0\.0\.1\. "
                     r"Set llama_server_port to a free port, or stop that service\.$", message), message
    assert len(message.splitlines()) == 1


def test_a_head_on_the_fabric_without_a_key_is_refused(tmp_path):
    message = refused(tmp_path, "open-api", {"llama_server_host": HEAD_ADDRESS})
    assert message == (
        f"llama_server_host={HEAD_ADDRESS} on node-a serves the API to every host that reaches that address, and no "
        "llama_server_api_key is set. Set llama_server_api_key (with ansible-vault), bind to 127.0.0.1, or set "
        "llama_server_allow_unauthenticated: true to accept an open API.")


def test_the_opt_in_is_accepted_and_said_at_the_end(tmp_path):
    run = run_on_lab(tmp_path / "opt-in", "deploy.yml", cmdline=PREFLIGHT_ONLY,
                     extravars={"llama_server_host": HEAD_ADDRESS, "llama_server_allow_unauthenticated": True})
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    warning = (f"node-a serves its API without a key on {HEAD_ADDRESS} (llama_server_allow_unauthenticated is true): "
               "every host that reaches that address can use it.")
    said = [(e["event_data"]["play"], e["event_data"]["res"]["msg"]) for e in run.events
            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Say which API is open by the operator's choice"]
    assert said == [("Preflight checks and GPU facts", [warning]), ("Warnings that stand after the run", [warning])]
    # the last task of the run
    last = [e["event_data"].get("task") for e in run.events if e.get("event") == "runner_on_ok"][-1]
    assert last == "Say which API is open by the operator's choice"


def test_the_rpc_firewall_never_drops_ssh(tmp_path):  # pylint: disable=unused-argument
    """A drop rule that names SSH's port (what port_base=22 would have loaded before the preflight
    refused it) is appended to node-b's table: SSH still answers, as the accept comes first."""
    container = f"{LAB}-node-b"
    ruleset = subprocess.run(["podman", "exec", container, "nft", "-a", "list", "chain", "inet", "gpulab_rpc", "input"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    rules = [line.strip() for line in ruleset.splitlines() if "dport" in line]
    assert re.match(r"tcp dport (\{ )?22( \})? accept", rules[0]), rules
    subprocess.run(["podman", "exec", container, "nft", "add", "rule", "inet", "gpulab_rpc", "input",
                    "tcp", "dport", "22", "counter", "drop"], timeout=60, check=True)
    try:
        assert ssh_answers("node-b")
    finally:
        # The table as deploy.yml loads it, whatever the probe did.
        subprocess.run(["podman", "exec", container, "nft", "-f", "/etc/nftables.d/gpulab-rpc.nft"], timeout=60, check=True)
    assert "dport 22 counter" not in subprocess.run(
        ["podman", "exec", container, "nft", "list", "table", "inet", "gpulab_rpc"],
        capture_output=True, text=True, timeout=60, check=True).stdout
