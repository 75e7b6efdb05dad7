"""server_url: one rule for the URL of a server, IPv6 in brackets, wildcards over loopback."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.server_url import FilterModule, server_url


@pytest.mark.parametrize("host, port, expected", [
    ("127.0.0.1", 8080, "http://127.0.0.1:8080"),
    ("0.0.0.0", 8080, "http://127.0.0.1:8080"),
    ("::", "8000", "http://127.0.0.1:8000"),
    ("fd00::10", 8080, "http://[fd00::10]:8080"),
    ("FD00:0::10", 8080, "http://[fd00::10]:8080"),
    ("::1", 8080, "http://[::1]:8080"),
    ("head.lab.example", 8080, "http://head.lab.example:8080"),
])
def test_url_of_a_server(host, port, expected):
    assert server_url(host, port) == expected


def test_https():
    assert server_url("fd00::10", 443, "https") == "https://[fd00::10]:443"


@pytest.mark.parametrize("host, port, message", [
    ("fd00::10", 70000, "server port 70000 is out of range"),
    ("fd00::10", "80a", "server port '80a' is not a port number"),
    ("[fd00::10]", 8080, "is neither an IP address nor a host name"),
    ("head\nx", 8080, "is neither an IP address nor a host name"),
    ("10.0.0.1:8080", 8080, "is neither an IP address nor a host name"),
    ("255.255.255.255", 8080, "multicast, broadcast or reserved"),
    ("", 8080, "is empty"),
    (None, 8080, "is empty"),
])
def test_a_host_or_port_that_cannot_be_reached_is_named(host, port, message):
    with pytest.raises(AnsibleFilterError, match="gpulab.inference.server_url: .*" + message.replace("(", r"\(")):
        server_url(host, port)


def test_a_scheme_other_than_http_is_refused():
    with pytest.raises(AnsibleFilterError, match="scheme 'ftp' is not http or https"):
        server_url("127.0.0.1", 21, "ftp")


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"server_url": server_url}
