"""build_surveys: each node's own survey where it ran one, the build host's loop for the rest."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.build_surveys import FilterModule, build_surveys


def survey(host):
    return {"host": host, "cpu_arch": "x86_64", "glibc_version": "2.36", "gpus": []}


HOSTVARS = {
    "node-a": {"__llama_cpp_build_self_survey": {"changed": False, "node": survey("node-a")}},
    "node-b": {"__llama_cpp_build_self_survey": {"skipped": True, "changed": False}},
    "node-c": {"gpulab_fabric_address": "10.231.77.12"},
}


def test_the_nodes_without_a_survey_of_their_own():
    assert build_surveys(["node-a", "node-b", "node-c"], HOSTVARS, missing=True) == ["node-b", "node-c"]
    assert build_surveys(["node-a"], HOSTVARS, missing=True) == []


def test_own_surveys_first_the_loop_s_for_the_rest_in_the_nodes_order():
    here = [{"item": "node-c", "node": survey("node-c")}, {"item": "node-b", "node": survey("node-b")}]
    assert [s["host"] for s in build_surveys(["node-c", "node-a", "node-b"], HOSTVARS, here)] == ["node-c", "node-a", "node-b"]


def test_a_node_without_any_survey_is_named():
    with pytest.raises(AnsibleFilterError, match="node-b has no survey for the build: run role gpulab.inference.llama_cpp_build's survey"):
        build_surveys(["node-a", "node-b"], HOSTVARS, [{"item": "node-c", "node": survey("node-c")}])


def test_a_node_unknown_to_hostvars_counts_as_not_surveyed():
    assert build_surveys(["node-z"], HOSTVARS, missing=True) == ["node-z"]


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="must be a list of node names"):
        build_surveys("node-a", HOSTVARS)


def test_registered():
    assert FilterModule().filters()["build_surveys"] is build_surveys
