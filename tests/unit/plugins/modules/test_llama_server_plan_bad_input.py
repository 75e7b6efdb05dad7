"""llama_server_plan refuses what it cannot use, naming it: a worker's servers.json (another host
controls it) and the head's own bind address. Nothing reaches the wrapper script unchecked."""

import pytest

from llama_server_plan_case import head_files, run
from module_harness import ExitJson, FailJson


def manifest(**change):
    worker = {"managed_by": "gpulab.inference", "host": "node-b", "address": "10.231.77.11", "build_id": "0123456789ab",
              "unit": "gpulab-rpc-server",
              "endpoints": [{"instance": 0, "device": "CPU", "gpu_index": None, "port": 50052, "memory_mib": 15990}]}
    worker.update(change)
    return worker


@pytest.fixture()
def head(tmp_path):
    return head_files(tmp_path)


def test_a_worker_host_with_a_newline_never_reaches_the_head_wrapper(head):
    # The reproduced exploit: the host lands in a comment line of the head's wrapper script.
    result = run(dict(head, workers=[manifest(host="w1\ntouch /tmp/x\n#")]))
    assert result.kind is FailJson, result.result
    assert result.result["msg"].startswith("workers entry 0: servers.json field host 'w1\\ntouch /tmp/x\\n#' is not a host name")
    assert "devices" not in result.result


@pytest.mark.parametrize("change, message", [
    ({"host": "node-b\n"}, "servers.json field host 'node-b\\n' is not a host name"),
    ({"host": "node-b; reboot"}, "field host 'node-b; reboot' is not a host name"),
    ({"host": "`id`"}, "is not a host name"),
    ({"host": {"name": "node-b"}}, "is not a host name"),
    ({"unit": "gpulab-rpc-server\n"}, "unit 'gpulab-rpc-server\\n' is not a systemd unit name"),
    ({"build_id": "0123456789ab\n"}, "build_id '0123456789ab\\n' is not a 12-digit hex build id"),
    ({"address": "10.231.77.11\n--rpc 6.6.6.6:1"}, "is not an IP address"),
    ({"endpoints": [{"device": "CPU\n", "port": 50052}]}, "device 'CPU\\n' is not a ggml device name"),
    ({"endpoints": [{"device": "CPU", "port": 50052, "memory_mib": -1}]}, "memory_mib -1 is negative"),
    ({"endpoints": [{"device": "CPU", "port": 99999}]}, "port 99999 is out of range"),
    ({"build_info": {"build_id": "0123456789ab", "source": "x"}}, "servers.json build_info: source is 'x'"),
    ({"build_info": {"build_id": "0123456789ab", "cuda": "yes"}}, "cuda is 'yes', expected true or false"),
])
def test_a_worker_manifest_field_that_cannot_be_used_is_named(head, change, message):
    result = run(dict(head, workers=[manifest(**change)]))
    assert result.kind is FailJson, result.result
    assert message in result.result["msg"]


@pytest.mark.parametrize("host, message", [
    ("255.255.255.255", "llama_server_host 255.255.255.255 is a multicast, broadcast or reserved address"),
    ("ff02::1", "llama_server_host ff02::1 is a multicast"),
    ("127.0.0.1; curl x|sh", "llama_server_host '127.0.0.1; curl x|sh' is neither an IP address nor a host name"),
    ("127.0.0.1\n", "is neither an IP address nor a host name"),
    ("", "llama_server_host '' is empty"),
])
def test_a_bind_address_nothing_can_listen_on_is_refused(head, host, message):
    result = run(dict(head, host=host))
    assert result.kind is FailJson, result.result
    assert message in result.result["msg"]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "fd00::10", "localhost"])
def test_bind_addresses_that_work_are_accepted(head, host):
    result = run(dict(head, host=host, workers=[manifest()]))
    assert result.kind is ExitJson, result.result
