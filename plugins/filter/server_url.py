# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: server_url
short_description: The URL a client on a server's node reaches it at
version_added: 0.2.0
description:
  - Builds C(http://HOST:PORT) for a server bound to O(_input) and O(port), the one rule the
    benchmark, the report and the serving roles share.
  - A server bound to every address (C(0.0.0.0), C(::)) is reached over C(127.0.0.1); an IPv6
    address is put in brackets (C(http://[fd00::10]:8080)).
  - The host must be an IP address that can be listened on or a DNS name, the port 1-65535;
    anything else fails naming the value.
  - The rule lives in C(plugins/module_utils/endpoint_rule.py) (C(client_url), C(format_endpoint)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The address or name the server is bound to.
    type: str
    required: true
  port:
    description: The server's port.
    type: int
    required: true
  scheme:
    description: C(http) or C(https).
    type: str
    default: http
"""

EXAMPLES = r"""
- name: Ask llama-server for its health
  ansible.builtin.uri:
    url: "{{ llama_server_host | gpulab.inference.server_url(llama_server_port) }}/health"
"""

RETURN = r"""
_value:
  description: The URL, without a trailing slash.
  type: str
  sample: http://[fd00::10]:8080
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import (
    EndpointError,
    client_url,
)


def server_url(host, port, scheme="http"):
    try:
        return client_url(host, port, scheme)
    except EndpointError as exc:
        raise AnsibleFilterError("gpulab.inference.server_url: %s" % exc)


class FilterModule:
    """URLs of the collection's servers."""

    def filters(self):
        return {"server_url": server_url}
