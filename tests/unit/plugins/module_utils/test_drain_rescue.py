"""drain_rescue: the outcome of the rescue's restore, node by node, and the message every node of a
failed deployment fails with. Results are shaped as Ansible registers a loop with a delegated
host that does not answer (ignore_unreachable)."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.drain_rescue import (
    RescueError,
    rescue_message,
    restore_outcome,
)

VAR = "__gpu_drain_node"


def ok(node):
    return {VAR: node, "changed": True, "failed": False, "restored": ["gpu-embed.service"]}


def lost(node):
    return {VAR: node, "changed": False, "unreachable": True,
            "msg": "Task failed: Failed to connect to the host via ssh: Connection refused"}


def failed(node, msg):
    return {VAR: node, "changed": False, "failed": True, "msg": msg}


def skipped(node):
    return {VAR: node, "changed": False, "skipped": True, "false_condition": "gpu_drain_enabled"}


def test_outcome_by_node():
    register = {"results": [ok("node-a"), ok("node-b"), lost("node-c"), skipped("node-d"),
                            failed("node-e", "could not start gpu-embed.service\n")]}
    assert restore_outcome(register, VAR) == {
        "restored": ["node-a", "node-b"], "unreachable": ["node-c"], "skipped": ["node-d"],
        "failed": {"node-e": "could not start gpu-embed.service"}}


def test_a_step_that_failed_and_every_node_restored():
    message = rescue_message({"results": [ok("node-a"), ok("node-b")]}, VAR, "Start the RPC workers",
                             "injected failure after the drain.")
    assert message == "Start the RPC workers failed: injected failure after the drain. The drained services were restored."


def test_a_lost_node_is_named_and_the_others_restored():
    message = rescue_message({"results": [ok("node-a"), ok("node-b"), lost("node-c")]}, VAR)
    assert message == (
        "The deployment stopped: node-c stopped answering."
        " node-c could not be reached (SSH): its drained services stay stopped until it answers."
        " From node-c's console, as root: check that sshd runs; `nft delete table inet gpulab_rpc` removes the RPC"
        " firewall (deploy.yml loads it again); the services the drain stopped are listed in"
        " /var/lib/gpulab/drain-state.json. Once node-c answers, run deploy.yml again, or"
        " `ansible-playbook playbooks/restore.yml -l node-c` to end the deployment."
        " The drained services were restored on node-a, node-b.")


def test_the_console_steps_follow_the_state_file_and_a_node_without_rpc_firewall():
    message = rescue_message({"results": [lost("node-c")]}, VAR, state_file="/srv/drain.json", rpc_table="")
    assert "From node-c's console, as root: check that sshd runs; the services the drain stopped are listed in " \
           "/srv/drain.json." in message
    assert "nft" not in message


def test_the_failed_step_comes_first_and_the_lost_node_after():
    message = rescue_message({"results": [ok("node-a"), lost("node-b")]}, VAR, "Start llama-server on the head",
                             "worker node-b is not answering")
    assert message.startswith("Start llama-server on the head failed: worker node-b is not answering. node-b could not")
    assert message.endswith("The drained services were restored on node-a.")


def test_a_failed_restore_is_named():
    message = rescue_message({"results": [ok("node-a"), failed("node-b", "unit gpu-embed.service not found")]}, VAR,
                             "Start the RPC workers", "")
    assert message == ("Start the RPC workers failed. Restoring node-b failed: unit gpu-embed.service not found;"
                       " restore it with playbooks/restore.yml. The drained services were restored on node-a.")


def test_a_host_stopped_by_another_nodes_failure():
    assert rescue_message({"results": [ok("node-a")]}, VAR) == (
        "A deploy step failed on another node. The drained services were restored.")


def test_restore_switched_off_keeps_the_drain():
    register = {"results": [skipped("node-a"), skipped("node-b")]}
    assert rescue_message(register, VAR, "Start the RPC workers", "boom", restore_on_failure=False) == (
        "Start the RPC workers failed: boom. The drain is kept (gpu_drain_restore_on_failure is false);"
        " restore with playbooks/restore.yml.")


def test_a_task_skipped_whole_has_no_nodes():
    assert restore_outcome({"skipped": True, "changed": False}, VAR) == {
        "restored": [], "unreachable": [], "failed": {}, "skipped": []}


@pytest.mark.parametrize("register, message", [
    ("not a result", "the restore result is a str, not a registered task result"),
    ({"results": "x"}, "the restore result's results is a str, not a list"),
    ({"results": [ok("node-a"), {"changed": False}]}, "restore result 2 does not name its node in __gpu_drain_node"),
    ({"results": [["node-a"]]}, "restore result 1 does not name its node"),
])
def test_results_that_cannot_be_read(register, message):
    with pytest.raises(RescueError, match=message):
        restore_outcome(register, VAR)
