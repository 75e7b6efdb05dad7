"""endpoint: host:port as llama.cpp, ss and Ray write it, IPv6 in brackets, inputs checked."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.endpoint import FilterModule, endpoint


@pytest.mark.parametrize("host, port, expected", [
    ("10.231.77.11", 50052, "10.231.77.11:50052"),
    ("10.231.77.11", "50053", "10.231.77.11:50053"),
    ("fd00::11", 50052, "[fd00::11]:50052"),
    ("FD00:0::11", 6379, "[fd00::11]:6379"),
    ("0.0.0.0", 50052, "0.0.0.0:50052"),
    ("::", 50052, "[::]:50052"),
    ("node-b.lab.example", 6379, "node-b.lab.example:6379"),
])
def test_endpoint_of_a_server(host, port, expected):
    assert endpoint(host, port) == expected


@pytest.mark.parametrize("host, port, message", [
    ("fd00::11", 0, "endpoint port 0 is out of range"),
    ("fd00::11", "6379x", "endpoint port '6379x' is not a port number"),
    ("[fd00::11]", 6379, "is neither an IP address nor a host name"),
    ("10.0.0.1:6379", 6379, "is neither an IP address nor a host name"),
    ("", 6379, "is empty"),
])
def test_a_bad_host_or_port_is_named(host, port, message):
    with pytest.raises(AnsibleFilterError, match="gpulab.inference.endpoint: .*" + message):
        endpoint(host, port)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"endpoint": endpoint}
