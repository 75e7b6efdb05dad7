"""drain_rescue_message: the rescue's message from the registered restore, errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.drain_rescue_message import (
    FilterModule,
    drain_rescue_message,
)

VAR = "__gpu_drain_node"
RESTORE = {"results": [{VAR: "node-a", "changed": True}, {VAR: "node-b", "unreachable": True, "msg": "refused"}]}


def test_names_the_lost_node():
    message = drain_rescue_message(RESTORE, VAR, failed_task="", failed_message="")
    assert message.startswith("The deployment stopped: node-b stopped answering. node-b could not be reached (SSH)")
    assert message.endswith("The drained services were restored on node-a.")


def test_restore_on_failure_as_ansible_passes_it():
    assert drain_rescue_message({"results": []}, VAR, "step", "boom", "False").endswith(
        "The drain is kept (gpu_drain_restore_on_failure is false); restore with playbooks/restore.yml.")


def test_unreadable_results_are_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="gpulab.inference.drain_rescue_message: restore result 1 does not name"):
        drain_rescue_message({"results": [{}]}, VAR)


def test_registered_as_a_filter():
    assert FilterModule().filters() == {"drain_rescue_message": drain_rescue_message}
