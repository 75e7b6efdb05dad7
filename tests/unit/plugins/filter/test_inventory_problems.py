"""The inventory_problems filter reads each host's gpulab_fabric_address and returns the checks'
answer; bad input becomes an AnsibleFilterError that names the filter."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.inventory_problems import FilterModule

inventory_problems = FilterModule().filters()["inventory_problems"]

GROUPS = {"all": ["node-a", "node-b", "node-c", "spare"], "ungrouped": ["spare"],
          "gpu_nodes": ["node-a", "node-b", "node-c"], "inference_head": ["node-a"], "rpc_workers": ["node-b", "node-c"]}


def test_reads_fabric_addresses_from_hostvars():
    hostvars = {"node-a": {"gpulab_fabric_address": "10.0.0.1", "other": 1},
                "node-b": {"gpulab_fabric_address": "10.0.0.1"},
                "node-c": {},
                "spare": {"gpulab_fabric_address": "10.0.0.9"}}
    assert inventory_problems(GROUPS, hostvars) == {
        "head": [], "membership": [], "fabric_address": ["node-c (unset)"],
        "shared_fabric_address": ["10.0.0.1 on node-a, node-b"]}


def test_group_names_are_passed_on():
    groups = {"all": ["h"], "heads": ["h"], "workers": [], "nodes": ["h"]}
    problems = inventory_problems(groups, {"h": {"gpulab_fabric_address": "fd00::1"}},
                                  head_group="heads", workers_group="workers", nodes_group="nodes")
    assert problems == {"head": [], "membership": [], "fabric_address": [], "shared_fabric_address": []}


def test_a_head_missing_from_hostvars_counts_as_unset():
    groups = {"all": ["node-a"], "inference_head": ["node-a"], "rpc_workers": [], "gpu_nodes": ["node-a"]}
    assert inventory_problems(groups, {})["fabric_address"] == ["node-a (unset)"]


@pytest.mark.parametrize("groups, hostvars", [(["node-a"], {}), (GROUPS, None)])
def test_wrong_input_is_a_filter_error(groups, hostvars):
    with pytest.raises(AnsibleFilterError) as raised:
        inventory_problems(groups, hostvars)
    assert "gpulab.inference.inventory_problems:" in str(raised.value)
