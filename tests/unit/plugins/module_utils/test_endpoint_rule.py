# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The endpoint rule (endpoint_rule): the hosts and ports a server listens on or is reached at, host:port with
an IPv6 address in brackets, and a client's URL."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import (
    EndpointError,
    client_url,
    endpoint,
    format_endpoint,
    listen_address,
    port_number,
)


def test_port_number_accepts_digits_only():
    assert port_number(" 8080 ", "port") == 8080
    with pytest.raises(EndpointError, match="'80 80' is not a port number"):
        port_number("80 80", "port")


@pytest.mark.parametrize("value, message", [
    (True, "port True is not a port number"),
    (0, "port 0 is out of range"),
    ("65536", "port 65536 is out of range"),
])
def test_port_number_refuses_booleans_and_ports_out_of_range(value, message):
    with pytest.raises(EndpointError, match=message):
        port_number(value, "port")


@pytest.mark.parametrize("address, port, expected", [
    ("10.0.0.2", 50052, "10.0.0.2:50052"),
    ("fd00::2", 50052, "[fd00::2]:50052"),
    ("node-b.lab", "8080", "node-b.lab:8080"),
])
def test_format_endpoint_puts_ipv6_in_brackets(address, port, expected):
    assert format_endpoint(address, port) == expected


def test_listen_address_normalises_addresses_and_keeps_names():
    assert listen_address("fd00:0::2", "host") == "fd00::2"
    assert listen_address("0.0.0.0", "host") == "0.0.0.0"
    assert listen_address("node-b.lab", "host") == "node-b.lab"


@pytest.mark.parametrize("value, message", [
    ("", "host '' is empty or not text"),
    (None, "host None is empty or not text"),
    ("10.0.0.1;id", "host '10.0.0.1;id' is neither an IP address nor a host name"),
    ("10.0.0", "host '10.0.0' is neither an IP address nor a host name"),
    ("224.0.0.251", "host 224.0.0.251 is a multicast, broadcast or reserved address"),
])
def test_listen_address_refuses_what_no_server_listens_on(value, message):
    with pytest.raises(EndpointError) as caught:
        listen_address(value, "host")
    assert str(caught.value).startswith(message)


def test_endpoint_keeps_a_wildcard_and_checks_both_parts():
    assert endpoint("::", 8000) == "[::]:8000"
    with pytest.raises(EndpointError, match="endpoint port 'x' is not a port number"):
        endpoint("10.0.0.1", "x")


def test_client_url_reaches_a_wildcard_over_loopback():
    assert client_url("0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert client_url("::", 8000, "https") == "https://127.0.0.1:8000"
    assert client_url("fd00::10", 8000) == "http://[fd00::10]:8000"
    with pytest.raises(EndpointError, match="scheme 'ftp' is not http or https"):
        client_url("127.0.0.1", 8080, "ftp")
