# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a failed deployment says after the rescue tried to restore every drained node.

The rescue (role gpu_drain, tasks/rescue.yml) restores each node of the deployment from one
host, delegating to every node in turn, and keeps going when a node does not answer (its SSH
lost): one node that is gone must not keep the others drained. This module reads the restore
task's per-node results and writes the one message every node fails with: the step that failed
(when this host knows it), each node that could not be reached and stays drained, each restore
that failed, and which nodes were restored. Pure functions on plain data, so tests feed results
as Ansible registers them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class RescueError(ValueError):
    """The restore results cannot be read; the message says why."""


def restore_outcome(register, loop_var):
    """{'restored': [...], 'unreachable': [...], 'failed': {node: message}, 'skipped': [...]}
    from the restore task's registered result (a loop over nodes, `loop_var` naming the node).

    A task skipped as a whole (restore switched off) has no per-node results: every list is empty.
    """
    if not isinstance(register, dict):
        raise RescueError("the restore result is a %s, not a registered task result" % type(register).__name__)
    results = register.get("results", [])
    if not isinstance(results, list):
        raise RescueError("the restore result's results is a %s, not a list" % type(results).__name__)
    outcome = {"restored": [], "unreachable": [], "failed": {}, "skipped": []}
    for number, item in enumerate(results, 1):
        if not isinstance(item, dict) or not isinstance(item.get(loop_var), str):
            raise RescueError("restore result %d does not name its node in %s" % (number, loop_var))
        node = item[loop_var]
        if item.get("unreachable"):
            outcome["unreachable"].append(node)
        elif item.get("skipped"):
            outcome["skipped"].append(node)
        elif item.get("failed"):
            outcome["failed"][node] = str(item.get("msg") or "failed without a message").strip()
        else:
            outcome["restored"].append(node)
    return outcome


def _cause(failed_task, failed_message, unreachable):
    if failed_task:
        detail = str(failed_message or "").strip().rstrip(".")
        return "%s failed%s." % (failed_task, ": " + detail if detail else "")
    if unreachable:
        return "The deployment stopped: %s stopped answering." % ", ".join(unreachable)
    # This host was stopped because another node failed (any_errors_fatal): that node's own
    # message names the step.
    return "A deploy step failed on another node."


def console_steps(node, state_file, rpc_table):
    """What the operator can do at a node's console when SSH cannot reach it: the collection's own
    RPC firewall is the one thing of ours that can drop SSH, and the drain's state file lists what
    to start again by hand."""
    steps = ["check that sshd runs"]
    if rpc_table:
        steps.append("`nft delete table inet %s` removes the RPC firewall (deploy.yml loads it again)" % rpc_table)
    steps.append("the services the drain stopped are listed in %s" % state_file)
    return ("From %s's console, as root: %s. Once %s answers, run deploy.yml again, or "
            "`ansible-playbook playbooks/restore.yml -l %s` to end the deployment." % (node, "; ".join(steps), node, node))


def rescue_message(register, loop_var, failed_task=None, failed_message=None, restore_on_failure=True,
                   state_file="/var/lib/gpulab/drain-state.json", rpc_table="gpulab_rpc"):
    """The message every node of a failed deployment fails with. state_file and rpc_table name, for a
    node that cannot be reached, the drain's state file and the RPC firewall's table (empty: none)."""
    outcome = restore_outcome(register, loop_var)
    sentences = [_cause(failed_task, failed_message, outcome["unreachable"])]
    if not restore_on_failure:
        sentences.append("The drain is kept (gpu_drain_restore_on_failure is false); restore with playbooks/restore.yml.")
        return " ".join(sentences)
    for node in outcome["unreachable"]:
        sentences.append("%s could not be reached (SSH): its drained services stay stopped until it answers. %s"
                         % (node, console_steps(node, state_file, rpc_table)))
    for node in sorted(outcome["failed"]):
        sentences.append("Restoring %s failed: %s; restore it with playbooks/restore.yml." % (node, outcome["failed"][node]))
    if outcome["restored"] and not outcome["unreachable"] and not outcome["failed"]:
        sentences.append("The drained services were restored.")
    elif outcome["restored"]:
        sentences.append("The drained services were restored on %s." % ", ".join(outcome["restored"]))
    return " ".join(sentences)
