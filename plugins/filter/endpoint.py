# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: endpoint
short_description: The host:port a server listens on, IPv6 in brackets
version_added: 0.3.0
description:
  - Builds C(HOST:PORT) for a server bound to O(_input) and O(port), as llama.cpp's C(--rpc), C(ss)
    and Ray's C(--address) write it; an IPv6 address is put in brackets (C([fd00::11]:50052)).
  - The one endpoint rule of the collection, C(format_endpoint) in
    C(plugins/module_utils/endpoint_rule.py); filter C(gpulab.inference.server_url) builds a client's URL on it.
  - The host must be an IP address that can be listened on or a DNS name, the port 1-65535;
    anything else fails naming the value.
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
"""

EXAMPLES = r"""
- name: Name an RPC server in a loop label
  ansible.builtin.debug:
    msg: "{{ gpulab_fabric_address | gpulab.inference.endpoint(50052) }}"
"""

RETURN = r"""
_value:
  description: The endpoint.
  type: str
  sample: "[fd00::11]:50052"
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import (
    EndpointError,
    endpoint as checked_endpoint,
)


def endpoint(host, port):
    try:
        return checked_endpoint(host, port)
    except EndpointError as exc:
        raise AnsibleFilterError("gpulab.inference.endpoint: %s" % exc)


class FilterModule:
    """host:port of the collection's servers."""

    def filters(self):
        return {"endpoint": endpoint}
