"""Inventory checks: addresses parsed with ipaddress, one head, fabric addresses on the head and
every worker, no address on two hosts, heads and workers inside the nodes group."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.inventory_checks import (
    InventoryError,
    check_inventory,
    fabric_address_problems,
    head_problems,
    membership_problems,
    parse_fabric_address,
    shared_fabric_addresses,
)


def lab(heads=("node-a",), workers=("node-b", "node-c"), nodes=None):
    nodes = list(heads) + list(workers) if nodes is None else nodes
    return {"all": sorted(set(nodes) | set(heads) | set(workers)), "ungrouped": [],
            "gpu_nodes": list(nodes), "inference_head": list(heads), "rpc_workers": list(workers)}


GOOD_ADDRESSES = {"node-a": "10.231.77.10", "node-b": "10.231.77.11", "node-c": "10.231.77.12"}


# --- one address ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("10.231.77.10", "10.231.77.10"),
    ("192.168.100.11", "192.168.100.11"),
    ("127.0.0.1", "127.0.0.1"),
    ("fd00:100::11", "fd00:100::11"),
    ("FD00:100:0::11", "fd00:100::11"),
    ("fe80::1", "fe80::1"),
])
def test_good_addresses_parse(value, expected):
    assert str(parse_fabric_address(value)) == expected


@pytest.mark.parametrize("value, reason", [
    (None, "unset"),
    ("", "unset"),
    ("999.1.1.1", "'999.1.1.1' is not an IPv4 or IPv6 address"),
    ("10.0.0", "'10.0.0' is not an IPv4 or IPv6 address"),
    ("10.0.0.1.5", "'10.0.0.1.5' is not an IPv4 or IPv6 address"),
    ("010.0.0.1", "'010.0.0.1' is not an IPv4 or IPv6 address"),
    ("node-b.lab.example", "'node-b.lab.example' is not an IPv4 or IPv6 address"),
    ("10.0.0.0/24", "'10.0.0.0/24' is not an IPv4 or IPv6 address"),
    ("fd00::1::2", "'fd00::1::2' is not an IPv4 or IPv6 address"),
    (":", "':' is not an IPv4 or IPv6 address"),
    (" 10.0.0.1", "' 10.0.0.1' has surrounding spaces"),
    ("10.0.0.1\n", "'10.0.0.1\\n' has surrounding spaces"),
    ("0.0.0.0", "'0.0.0.0' is the unspecified address"),
    ("::", "'::' is the unspecified address"),
    ("239.1.1.1", "'239.1.1.1' is a multicast address"),
    ("ff02::1", "'ff02::1' is a multicast address"),
    (167772161, "167772161 is a int, not an address string"),
    (True, "True is a bool, not an address string"),
    (["10.0.0.1"], "['10.0.0.1'] is a list, not an address string"),
])
def test_bad_addresses_name_the_value_and_reason(value, reason):
    with pytest.raises(InventoryError) as raised:
        parse_fabric_address(value)
    assert str(raised.value).startswith(reason)


# --- the head -----------------------------------------------------------------------------------

def test_one_head_is_fine():
    assert head_problems(["node-a"], "inference_head", "rpc_workers") == []


@pytest.mark.parametrize("heads, held", [
    ([], "it holds 0: none"),
    (None, "it holds 0: none"),
    (["node-a", "node-x"], "it holds 2: node-a, node-x"),
])
def test_not_exactly_one_head_is_named(heads, held):
    (problem,) = head_problems(heads, "inference_head", "rpc_workers")
    assert "Group 'inference_head' must hold exactly one host; " + held in problem
    assert "move the others to 'rpc_workers'" in problem


# --- fabric addresses -------------------------------------------------------------------------

def test_every_head_and_worker_needs_an_address():
    problems = fabric_address_problems(
        ["node-a", "node-b", "node-c", "node-b"],
        {"node-a": "10.0.0.1", "node-c": "999.1.1.1"})
    assert problems == ["node-b (unset)", "node-c ('999.1.1.1' is not an IPv4 or IPv6 address)"]


def test_shared_addresses_compare_as_addresses():
    shared = shared_fabric_addresses({
        "node-a": "10.0.0.1", "node-b": "10.0.0.2", "node-c": "10.0.0.2",
        "node-d": "fd00::1", "node-e": "FD00:0::1", "node-f": "not-an-address", "node-g": "not-an-address",
    })
    assert shared == ["10.0.0.2 on node-b, node-c", "fd00::1 on node-d, node-e"]


def test_membership_names_hosts_outside_the_nodes_group():
    assert membership_problems(["node-a"], ["node-b", "node-z", "node-z"], ["node-a", "node-b"], "gpu_nodes") == [
        "node-z (not in group 'gpu_nodes')"]


# --- the whole inventory ----------------------------------------------------------------------

def test_good_inventory_has_no_problem():
    assert check_inventory(lab(), GOOD_ADDRESSES) == {
        "head": [], "membership": [], "fabric_address": [], "shared_fabric_address": []}


def test_a_node_that_is_head_and_worker_is_fine():
    groups = lab(heads=("node-a",), workers=("node-a", "node-b"))
    assert check_inventory(groups, {"node-a": "10.0.0.1", "node-b": "10.0.0.2"})["fabric_address"] == []


def test_cpu_only_node_without_role_needs_no_address():
    groups = lab(nodes=["node-a", "node-b", "node-c", "node-d"])
    problems = check_inventory(groups, dict(GOOD_ADDRESSES, **{"node-d": None}))
    assert problems == {"head": [], "membership": [], "fabric_address": [], "shared_fabric_address": []}


def test_bad_inventory_reports_every_check():
    groups = lab(heads=("node-a", "node-x"), workers=("node-b", "node-c"), nodes=["node-a", "node-b", "node-c"])
    problems = check_inventory(groups, {"node-a": "10.0.0.1", "node-b": "10.0.0.1", "node-c": "0.0.0.0"})
    assert problems["head"] and "node-a, node-x" in problems["head"][0]
    assert problems["membership"] == ["node-x (not in group 'gpu_nodes')"]
    assert problems["fabric_address"] == [
        "node-x (unset)", "node-c ('0.0.0.0' is the unspecified address; give the node's own address on the fabric)"]
    assert problems["shared_fabric_address"] == ["10.0.0.1 on node-a, node-b"]


def test_groups_under_other_names():
    groups = {"all": ["h1", "w1"], "heads": ["h1"], "workers": ["w1"], "nodes": ["h1", "w1"]}
    problems = check_inventory(groups, {"h1": "10.0.0.1"}, "heads", "workers", "nodes")
    assert problems["fabric_address"] == ["w1 (unset)"]


@pytest.mark.parametrize("groups, addresses, message", [
    (["node-a"], {}, "groups must be a mapping of group name to hosts, got list"),
    ({"all": []}, ["node-a"], "addresses must be a mapping of host to address, got list"),
])
def test_wrong_input_types_are_named(groups, addresses, message):
    with pytest.raises(InventoryError) as raised:
        check_inventory(groups, addresses)
    assert str(raised.value) == message
