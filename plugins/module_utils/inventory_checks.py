# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure checks of what the inventory must hold before any node is touched.

The serving roles rely on exactly one head, and on a fabric address (the node's own IPv4 or
IPv6 address on the RoCE network) on the head and on every RPC worker, distinct from every
other node's. Each function takes plain data (group members, host -> address) and returns the
problems as sentences that name the host and the value, so the gpu_preflight role only prints
them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

FABRIC_ADDRESS_VAR = "gpulab_fabric_address"


class InventoryError(ValueError):
    """A value in the inventory the collection cannot use; the message says why."""


def parse_fabric_address(value):
    """The ipaddress object of a gpulab_fabric_address, or InventoryError saying why not.

    Only a plain IPv4 or IPv6 address of one node is accepted: not a name, not a network,
    not the unspecified address (0.0.0.0, ::) nor a multicast one, no surrounding spaces.
    """
    if value is None or (isinstance(value, str) and value == ""):
        raise InventoryError("unset")
    if isinstance(value, bool) or not isinstance(value, str):
        # ipaddress would take the integer 167772161 as 10.0.0.1; an inventory means a string
        raise InventoryError("%r is a %s, not an address string" % (value, type(value).__name__))
    if value != value.strip():
        raise InventoryError("%r has surrounding spaces" % (value,))
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise InventoryError("%r is not an IPv4 or IPv6 address" % (value,))
    if address.is_unspecified:
        raise InventoryError("%r is the unspecified address; give the node's own address on the fabric" % (value,))
    if address.is_multicast:
        raise InventoryError("%r is a multicast address, not a node's address" % (value,))
    return address


def head_problems(heads, head_group, workers_group):
    """A sentence when the head group does not hold exactly one host, else an empty list."""
    heads = list(heads or [])
    if len(heads) == 1:
        return []
    return ["Group '%s' must hold exactly one host; it holds %d: %s. Keep one head in the inventory "
            "and move the others to '%s'." % (head_group, len(heads), ", ".join(heads) or "none", workers_group)]


def fabric_address_problems(hosts, addresses):
    """'host (reason)' for every host whose fabric address is unset or unusable, in order, once."""
    problems = []
    seen = set()
    for host in hosts:
        if host in seen:
            continue
        seen.add(host)
        try:
            parse_fabric_address(addresses.get(host))
        except InventoryError as exc:
            problems.append("%s (%s)" % (host, exc))
    return problems


def shared_fabric_addresses(addresses):
    """'address on host1, host2' for every address two hosts share, compared as addresses
    (fd00::1 and FD00:0:0::1 are one address). Unusable values are left to fabric_address_problems."""
    owners = {}
    for host in sorted(addresses):
        try:
            address = parse_fabric_address(addresses[host])
        except InventoryError:
            continue
        owners.setdefault(address, []).append(host)
    return ["%s on %s" % (address, ", ".join(hosts))
            for address, hosts in sorted(owners.items(), key=lambda item: (item[0].version, item[0]))
            if len(hosts) > 1]


def membership_problems(heads, workers, nodes, nodes_group):
    """Heads and workers that are not in the nodes group (the preflight play, which runs on that
    group, would never check them)."""
    nodes = set(nodes or [])
    outside = []
    for host in list(heads or []) + list(workers or []):
        if host not in nodes and host not in outside:
            outside.append(host)
    return ["%s (not in group '%s')" % (host, nodes_group) for host in outside]


def check_inventory(groups, addresses, head_group="inference_head", workers_group="rpc_workers",
                    nodes_group="gpu_nodes"):
    """Every inventory problem, by check: {'head': [...], 'membership': [...], 'fabric_address': [...],
    'shared_fabric_address': [...]}; all lists empty for a good inventory.

    groups: group name -> host names (Ansible's `groups`); addresses: host -> its
    gpulab_fabric_address (None or absent when unset), for every host of the inventory.
    """
    if not isinstance(groups, dict):
        raise InventoryError("groups must be a mapping of group name to hosts, got %s" % type(groups).__name__)
    if not isinstance(addresses, dict):
        raise InventoryError("addresses must be a mapping of host to address, got %s" % type(addresses).__name__)
    heads = list(groups.get(head_group) or [])
    workers = list(groups.get(workers_group) or [])
    return {
        "head": head_problems(heads, head_group, workers_group),
        "membership": membership_problems(heads, workers, groups.get(nodes_group), nodes_group),
        "fabric_address": fabric_address_problems(heads + workers, addresses),
        "shared_fabric_address": shared_fabric_addresses(
            dict((host, value) for host, value in addresses.items() if value is not None)),
    }
