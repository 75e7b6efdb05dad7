"""drain_restore_report filter: restore.yml's per-node lines from registered results."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.drain_restore_report import FilterModule

REPORT = FilterModule().filters()["drain_restore_report"]


def test_every_outcome_gets_its_line_and_the_lost_nodes_are_named():
    results = {
        "node-a": {"changed": True, "units_stopped": ["gpulab-llama-server"], "restored": ["supervisor:gpu-embed"]},
        "node-b": {"unreachable": True, "msg": "Failed to connect to the host via ssh",
                   "state_file": "/var/lib/gpulab/drain-state.json"},
        "node-c": {"failed": True, "msg": "started but not running after 120 s: systemd:gpu-embed.service; ..."},
        "node-d": {"changed": False, "units_stopped": [], "restored": []},
        "node-e": {"skipped": True},
    }
    node_vars = dict((node, {"restore_node_result": result}) for node, result in results.items())
    node_vars["node-c"]["restore_node_error"] = "the module failed"
    node_vars["node-f"] = {"restore_node_error": "the play ended before it"}
    report = REPORT(["node-a", "node-b", "node-c", "node-d", "node-e", "node-f"], node_vars)
    assert report["lines"] == [
        "node-a: stopped gpulab-llama-server; started again supervisor:gpu-embed",
        "node-b: unreachable, nothing restored; it stays drained. Run restore.yml again once it answers, or on its "
        "console start what /var/lib/gpulab/drain-state.json lists and remove that file",
        "node-c: not restored: started but not running after 120 s: systemd:gpu-embed.service; ...",
        "node-d: none of the collection's services ran; nothing was drained",
        "node-e: skipped (gpu_drain_enabled is false)",
        "node-f: not restored: the play ended before it",
    ]
    assert report["not_restored"] == ["node-b", "node-c", "node-f"]


def test_a_node_that_never_ran_the_restore_is_not_restored():
    assert REPORT(["node-a"], {"node-a": {"ansible_host": "10.0.0.1"}}) == {
        "lines": ["node-a: not restored: the restore did not run there"], "not_restored": ["node-a"]}


def test_input_that_is_not_nodes_and_mappings_is_refused():
    with pytest.raises(AnsibleFilterError, match="drain_restore_report"):
        REPORT("node-a", {})
