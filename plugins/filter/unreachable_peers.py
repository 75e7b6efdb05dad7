# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: unreachable_peers
short_description: The connections of a node that no acknowledgement answers (a fabric cut), from /proc/net/tcp
version_added: 0.3.0
description:
  - Reads the text of C(/proc/net/tcp) or C(/proc/net/tcp6) (O(_input)) and returns a line for each connection to
    one of O(addresses) whose data has waited for an acknowledgement through O(retransmits) retransmissions or
    more; 4 prove at least 3 s without an ACK (TCP's timer waits from 200 ms, doubling up to 120 s).
  - On the head with the RPC workers' addresses it says which worker the head cannot reach, which neither
    llama-server's C(/health) nor the worker's watch sees. The rule is C(plugins/module_utils/tcp_stall.py).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The text of C(/proc/net/tcp) or C(/proc/net/tcp6) (or both, one after the other).
    type: str
    required: true
  addresses:
    description: The peers' IP addresses.
    type: list
    elements: str
    required: true
  retransmits:
    description: The count from which a connection is unreachable.
    type: int
    default: 4
"""

EXAMPLES = r"""
- name: Say which workers the head cannot reach
  ansible.builtin.debug:
    msg: "{{ __proc_net_tcp.content | b64decode | gpulab.inference.unreachable_peers(['10.231.83.11']) }}"
"""

RETURN = r"""
_value:
  description: One line per such connection, by peer.
  type: list
  elements: str
  sample: ["10.231.83.11:50052 unreachable: no acknowledgement for at least 6.2 s (5 retransmissions, 321 bytes waiting)"]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.tcp_stall import (
    UNREACHABLE_RETRANSMITS,
    connections,
    unreachable_peers as find_unreachable,
)


def unreachable_peers(text, addresses, retransmits=UNREACHABLE_RETRANSMITS):
    if not isinstance(addresses, (list, tuple)):
        raise AnsibleFilterError("gpulab.inference.unreachable_peers: addresses is %r; give a list of IP addresses"
                                 % (addresses,))
    try:
        rows = connections(str(text))
    except (ValueError, IndexError, OSError) as exc:
        raise AnsibleFilterError("gpulab.inference.unreachable_peers: not /proc/net/tcp text (%s)" % exc)
    return [item['line'] for item in find_unreachable(rows, [str(a) for a in addresses], int(retransmits))]


class FilterModule:
    """A node's connections that wait for an acknowledgement."""

    def filters(self):
        return {"unreachable_peers": unreachable_peers}
