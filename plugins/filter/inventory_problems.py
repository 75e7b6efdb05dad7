# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: inventory_problems
short_description: What the inventory lacks for gpulab.inference, by check
version_added: 0.1.0
description:
  - Checks Ansible's C(groups) and every host's C(gpulab_fabric_address) the way the serving
    roles rely on them, and returns the problems by check, each naming the host and the value.
  - Exactly one host in the head group; every head and worker in the nodes group; every head
    and worker with a fabric address that is a plain IPv4 or IPv6 address of one node (not a
    name, not 0.0.0.0 or ::, not multicast); no address shared by two hosts (compared as
    addresses, so C(fd00::1) and C(FD00:0::1) are one).
  - The rules live in C(plugins/module_utils/inventory_checks.py); this filter only reads the
    inventory and hands it over.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: Ansible's C(groups).
    type: dict
    required: true
  hostvars:
    description: Ansible's C(hostvars); only C(gpulab_fabric_address) of each host is read.
    type: dict
    required: true
  head_group:
    description: Group holding exactly one host, the inference head.
    type: str
    default: inference_head
  workers_group:
    description: Group of the RPC workers.
    type: str
    default: rpc_workers
  nodes_group:
    description: Group of every GPU node.
    type: str
    default: gpu_nodes
"""

EXAMPLES = r"""
- name: Stop when the inventory has no single head
  ansible.builtin.assert:
    that: (groups | gpulab.inference.inventory_problems(hostvars)).head | length == 0
"""

RETURN = r"""
_value:
  description: Problems by check; every list is empty for a good inventory.
  type: dict
  contains:
    head:
      description: A sentence when the head group does not hold exactly one host.
      type: list
      elements: str
    membership:
      description: Heads and workers outside the nodes group, as C(host (reason)).
      type: list
      elements: str
    fabric_address:
      description: Heads and workers without a usable fabric address, as C(host (reason)).
      type: list
      elements: str
      sample: ["node-b (unset)", "node-c ('999.1.1.1' is not an IPv4 or IPv6 address)"]
    shared_fabric_address:
      description: Addresses held by more than one host, as C(address on host1, host2).
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.inventory_checks import (
    FABRIC_ADDRESS_VAR,
    InventoryError,
    check_inventory,
)


def inventory_problems(groups, hostvars, head_group="inference_head", workers_group="rpc_workers", nodes_group="gpu_nodes"):
    """Read each host's fabric address from hostvars and return check_inventory's answer."""
    try:
        hosts = list(groups.get("all") or [])
        for name in (head_group, workers_group, nodes_group):
            hosts.extend(host for host in groups.get(name) or [] if host not in hosts)
        addresses = {}
        for host in hosts:
            variables = hostvars[host] if host in hostvars else {}
            addresses[host] = variables.get(FABRIC_ADDRESS_VAR)
        return check_inventory(dict(groups), addresses, head_group, workers_group, nodes_group)
    except (InventoryError, AttributeError, TypeError) as exc:
        raise AnsibleFilterError("gpulab.inference.inventory_problems: %s" % exc)


class FilterModule:
    """Inventory checks of gpulab.inference."""

    def filters(self):
        return {"inventory_problems": inventory_problems}
