# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one endpoint rule: which hosts and ports a server may listen on or be reached at,
and how host:port and a client's URL are written (an IPv6 address in brackets); with it the value
parsers every layer above uses: the one whole-number parser, the one port parser, the one URL parser.

llama.cpp's head and RPC servers, vLLM and the filters endpoint and server_url all use it, so a fix
lands once. Pure functions; errors name the option they were given (`what`) and are raised as
`error`, EndpointError unless a caller passes its own (as service_files' functions take theirs), so a
plan's callers keep catching the one error of that plan.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from urllib.parse import urlsplit


class EndpointError(ValueError):
    """Bad input: the message names the offending value and what to do."""


def refuse_unbindable(parsed, what, error=EndpointError):
    """Refuse an ipaddress address no server can listen on; what names it in the message."""
    # Multicast, the broadcast address and IPv4's reserved 240/4 cannot be listened on.
    if parsed.is_multicast or (parsed.version == 4 and parsed.is_reserved):
        raise error(
            "%s is a multicast, broadcast or reserved address, which no server can listen on; use the node's "
            "own address (e.g. its gpulab_fabric_address) or 127.0.0.1" % what)


# A DNS name (RFC 1123 labels); an all-numeric name is a mistyped IPv4 address, not a name.
DNS_NAME_PATTERN = re.compile(r"\A(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                              r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")


def listen_address(value, what, error=EndpointError):
    """A host a server listens on or is reached at: an IP address that can be bound, or a DNS name.

    Returns the normalised address or the name; what names the option in messages. Shell
    metacharacters, spaces, newlines, multicast and broadcast addresses are refused.
    """
    if not isinstance(value, str) or not value.strip():
        raise error("%s %r is empty or not text; give an IP address or a host name" % (what, value))
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        parsed = None
    if parsed is not None:
        refuse_unbindable(parsed, "%s %s" % (what, value), error)
        return str(parsed)
    if not DNS_NAME_PATTERN.match(value) or re.match(r"\A[0-9.]+\Z", value):
        raise error("%s %r is neither an IP address nor a host name (letters, digits, - and . only); "
                    "give e.g. 127.0.0.1, the node's fabric address or its DNS name" % (what, value))
    return value


def whole_number(value, what, error=EndpointError):
    """A whole number >= 0 from an int or a decimal string; what names it in the error."""
    if isinstance(value, bool):
        raise error("%s %r is not a whole number" % (what, value))
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise error("%s %r is not a whole number" % (what, value))
    if number < 0:
        raise error("%s %r is negative" % (what, value))
    return number


def port_number(value, what, error=EndpointError):
    """A TCP port 1..65535 from an int or a decimal string; booleans and 'abc' are refused."""
    if isinstance(value, bool) or not re.match(r"\A[0-9]{1,5}\Z", str(value).strip()):
        raise error("%s %r is not a port number (1-65535)" % (what, value))
    port = int(str(value).strip())
    if not 0 < port < 65536:
        raise error("%s %r is out of range (1-65535)" % (what, port))
    return port


def format_endpoint(address, port):
    """'10.0.0.2:50052', '[fd00::2]:50052': how llama.cpp's --rpc and ss print an endpoint.

    The collection's one endpoint rule (host:port, an IPv6 address in brackets); filter
    gpulab.inference.endpoint is this function with its inputs checked (endpoint below)."""
    address = str(address)
    return "%s:%s" % ("[%s]" % address if ":" in address else address, port)


def endpoint(host, port, error=EndpointError):
    """host:port of a server bound to host, both checked first (listen_address, port_number).

    Unlike client_url a wildcard stays as it is: this is where the server listens."""
    return format_endpoint(listen_address(host, "endpoint host", error),
                           port_number(port, "endpoint port", error))


def client_url(host, port, scheme="http"):
    """Where a client on the server's node reaches a server bound to host:port.

    A server bound to every address (0.0.0.0, ::) is reached over loopback; an IPv6 address is
    put in brackets (format_endpoint). host and port are checked first (listen_address,
    port_number), so nothing odd reaches a URL.
    """
    if scheme not in ("http", "https"):
        raise EndpointError("scheme %r is not http or https" % (scheme,))
    address = listen_address(host, "server host")
    if address in ("0.0.0.0", "::"):
        address = "127.0.0.1"
    return "%s://%s" % (scheme, format_endpoint(address, port_number(port, "server port")))


def parse_url(url, what="base_url", error=EndpointError):
    """(scheme, host, port, path prefix) of a server's http(s) URL, e.g. an OpenAI-compatible base URL.

    The host may be an IPv6 address in brackets; the port defaults to the scheme's (None). A port out
    of range, spaces, a query or credentials in the URL are refused with the value named.
    """
    if not isinstance(url, str) or not re.match(r'\A[!-~]+\Z', url):
        raise error('%s %r has spaces, control characters or nothing in it; give http://HOST:PORT' % (what, url))
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise error('%s must look like http://HOST:PORT, got %r' % (what, url))
    if parts.query or parts.fragment or parts.username is not None:
        raise error('%s %r has a query, a fragment or credentials; give http://HOST:PORT '
                    '(the API key goes in api_key)' % (what, url))
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port < 65536:
        raise error('%s %r has a port that is not a number in 1-65535; give http://HOST:PORT, '
                    'e.g. http://127.0.0.1:8080' % (what, url))
    return parts.scheme, parts.hostname, port, parts.path.rstrip('/')
