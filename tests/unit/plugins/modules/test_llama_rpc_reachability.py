"""llama_rpc_reachability with ss answered from a table and connections patched."""

from unittest import mock

import pytest

from ansible_collections.gpulab.inference.plugins.modules import llama_rpc_reachability
import module_harness
from module_harness import ExitJson, FailJson

SS = "/usr/bin/ss"
ESTABLISHED = "0      0          10.231.77.10:41862    10.231.77.11:50052\n"
ENDPOINTS = [{"host": "node-b", "address": "10.231.77.11", "port": 50052, "endpoint": "10.231.77.11:50052"},
             {"host": "node-c", "address": "10.231.77.12", "port": 50052, "endpoint": "10.231.77.12:50052"}]


def run(args, accepts):
    probed = []

    def connects(address, port, timeout_s):
        probed.append((address, port, timeout_s))
        return accepts

    answers = {(SS, "-Htn", "state", "established"): (0, ESTABLISHED, "")}
    with mock.patch.object(llama_rpc_reachability, "connects", connects):
        result = module_harness.run_module(llama_rpc_reachability.main, args, answers, {"ss": SS})
    return result, probed


def test_attached_endpoint_is_not_probed():
    result, probed = run({"endpoints": ENDPOINTS, "timeout_s": 3}, accepts=True)
    assert result.kind is ExitJson
    assert result.result["attached"] == ["10.231.77.11:50052"]
    assert result.result["probed"] == ["10.231.77.12:50052"]
    assert probed == [("10.231.77.12", 50052, 3)]


def test_unreachable_endpoint_is_named():
    result, unused = run({"endpoints": ENDPOINTS, "timeout_s": 3}, accepts=False)
    assert result.kind is FailJson
    assert result.result["msg"].startswith("the head cannot connect to RPC endpoint(s) 10.231.77.12:50052 (node-c) within 3 s")


def test_bad_port_is_named():
    result, probed = run({"endpoints": [dict(ENDPOINTS[1], port="abc")]}, accepts=True)
    assert result.kind is FailJson
    assert result.result["msg"] == "endpoints entry 0 port 'abc' is not a port number (1-65535)"
    assert probed == []


@pytest.mark.parametrize("change, message", [
    ({"port": 70000}, "endpoints entry 0 port 70000 is out of range"),
    ({"port": 0}, "endpoints entry 0 port 0 is out of range"),
    ({"port": None}, "endpoints entry 0 port None is not a port number"),
    ({"address": ""}, "endpoints entry 0 address '' is empty"),
    ({"address": None}, "endpoints entry 0 address None is empty"),
    ({"address": "10.231.77.12\nx"}, "is neither an IP address nor a host name"),
    ({"address": "10.231.77.12 -p 1"}, "is neither an IP address nor a host name"),
    ({"address": "255.255.255.255"}, "is a multicast, broadcast or reserved address"),
    ({"address": "999.1.1.1"}, "is neither an IP address nor a host name"),
])
def test_bad_endpoint_is_named_before_any_probe(change, message):
    result, probed = run({"endpoints": [dict(ENDPOINTS[1], **change)]}, accepts=True)
    assert result.kind is FailJson, result.result
    assert message in result.result["msg"]
    assert probed == []


def test_ipv6_endpoint_is_probed_and_named_with_brackets():
    result, probed = run({"endpoints": [dict(ENDPOINTS[1], address="fd00::12")]}, accepts=False)
    assert result.kind is FailJson
    assert "[fd00::12]:50052 (node-c)" in result.result["msg"]
    assert [p[:2] for p in probed] == [("fd00::12", 50052)]
