# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: worker_stall
short_description: What the head's wrapper reads in /proc/net/tcp to find an RPC worker it cannot reach
version_added: 0.3.0
description:
  - For the head's wrapper (role C(llama_server)), each RPC endpoint as the remote column of C(/proc/net/tcp)
    writes it, and the count of retransmissions of unacknowledged data that proves at least O(after_s) seconds
    without an ACK (TCP's timer waits from 200 ms, doubling up to 120 s).
  - The rule is C(plugins/module_utils/tcp_stall.py) (C(proc_net_address), C(retransmits_for)); the address
    must be an IP address.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The endpoints, each with C(address) and C(port) (the plan's C(endpoints)).
    type: list
    elements: dict
    required: true
  after_s:
    description: Seconds without an ACK after which a worker counts as unreachable; 0 turns the check off.
    type: float
    required: true
"""

EXAMPLES = r"""
- name: Say which connections the wrapper watches
  ansible.builtin.debug:
    msg: "{{ __llama_server_plan.endpoints | gpulab.inference.worker_stall(20) }}"
"""

RETURN = r"""
_value:
  description: C(peers) (one per endpoint, in order), C(retransmits) (0 when off) and C(at_least_s), the bound they prove.
  type: dict
  sample: {"peers": ["0B53E70A:C384"], "retransmits": 7, "at_least_s": 25.4}
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.tcp_stall import (
    proc_net_address,
    retransmits_for,
    unacked_at_least_s,
)


def worker_stall(endpoints, after_s):
    try:
        after_s = float(after_s)
        peers = [proc_net_address(str(item["address"]).strip("[]"), int(item["port"])) for item in endpoints]
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise AnsibleFilterError("gpulab.inference.worker_stall: give endpoints with an IP address and a port, "
                                 "and after_s in seconds (%s)" % exc)
    if after_s < 0:
        raise AnsibleFilterError("gpulab.inference.worker_stall: after_s is %s; give 0 (off) or more seconds" % after_s)
    count = retransmits_for(after_s) if after_s > 0 else 0
    return {"peers": peers, "retransmits": count, "at_least_s": unacked_at_least_s(count)}


class FilterModule:
    """The head's check of its connections to the RPC workers."""

    def filters(self):
        return {"worker_stall": worker_stall}
