#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_fabric_plan
short_description: Check the fabric interface settings before anything is changed
version_added: 0.2.0
description:
  - Runs on every fabric node before the C(gpulab.inference.roce) role changes anything. Reads the
    host's links with C(ip -j -d link show) and C(ip -j addr show) and refuses, naming the value and
    what to do, an interface that does not exist, an MTU above the NIC's maximum (C(maxmtu)), a
    fabric address outside the fabric subnet, and an address given to more than one host.
  - Returns the address with its prefix, the MTU, and whether the live interface already has them.
  - Reads only; never changes the host.
author:
  - gpulab.inference contributors (@gpulab)
options:
  interface:
    description: The fabric netdev (C(gpulab_fabric_interface)).
    type: str
    required: true
  address:
    description: This node's IPv4 fabric address (C(gpulab_fabric_address)), without a prefix.
    type: str
    required: true
  subnet:
    description: The fabric subnet in CIDR form; the address must lie inside it and takes its prefix.
    type: str
    required: true
  mtu:
    description: The MTU the interface is to get.
    type: int
    default: 9000
  peers:
    description:
      - The fabric address of every host in the play (this one included), by host name, to refuse
        duplicates.
    type: dict
    default: {}
  pfc_priority:
    description: The priority that gets PFC (0-7); returned as the C(mlnx_qos --pfc) vector.
    type: int
    default: 3
  network_manager:
    description:
      - The network manager that persists the interface; V(auto) picks netplan where it is installed,
        else a running NetworkManager, else systemd-networkd.
    type: str
    choices: [auto, netplan, networkmanager, networkd]
    default: auto
  network_managers_present:
    description:
      - What the host has, as the role found it; keys C(netplan) (installed), C(networkmanager_active),
        C(networkd_active), C(networkd_installed), each a boolean (missing keys are V(false)).
    type: dict
    default: {}
extends_documentation_fragment:
  - gpulab.inference.read_only
seealso:
  - module: gpulab.inference.roce_facts
"""

EXAMPLES = r"""
- name: Check the fabric settings
  gpulab.inference.roce_fabric_plan:
    interface: "{{ gpulab_fabric_interface }}"
    address: "{{ gpulab_fabric_address }}"
    subnet: 10.231.77.0/24
    mtu: 9000
    peers:
      node-a: 10.231.77.10
      node-b: 10.231.77.11
  register: roce_plan
"""

RETURN = r"""
interface:
  description: The fabric interface.
  returned: success
  type: str
  sample: ens1f0np0
address:
  description: The fabric address.
  returned: success
  type: str
  sample: 10.231.77.10
prefix:
  description: The prefix length, from O(subnet).
  returned: success
  type: int
  sample: 24
cidr:
  description: Address and prefix, as the network manager takes them.
  returned: success
  type: str
  sample: 10.231.77.10/24
subnet:
  description: The normalised fabric subnet.
  returned: success
  type: str
  sample: 10.231.77.0/24
mtu:
  description: The MTU to apply.
  returned: success
  type: int
  sample: 9000
max_mtu:
  description: The NIC's maximum MTU, V(null) where the driver gives none.
  returned: success
  type: int
  sample: 9978
live:
  description: The interface now, with C(mtu), C(addresses) (IPv4 with prefix) and C(operstate).
  returned: success
  type: dict
  sample: {mtu: 1500, addresses: [], operstate: UP}
live_ok:
  description: Whether the live interface already has the address and the MTU.
  returned: success
  type: bool
  sample: false
pfc:
  description: The C(mlnx_qos --pfc) argument for O(pfc_priority).
  returned: success
  type: str
  sample: 0,0,0,1,0,0,0,0
network_manager:
  description: The network manager that persists the interface.
  returned: success
  type: str
  sample: networkd
ping_payload_bytes:
  description: The C(ping -M do -s) payload that fills one packet of the MTU (MTU less 28).
  returned: success
  type: int
  sample: 8972
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner

from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    RoceError,
    choose_network_manager,
    fabric_plan,
    pfc_vector,
    parse_ip_addr_json,
    parse_ip_link_json,
)

LINK_ARGS = ['-j', '-d', 'link', 'show']
ADDR_ARGS = ['-j', 'addr', 'show']


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            interface=dict(type='str', required=True),
            address=dict(type='str', required=True),
            subnet=dict(type='str', required=True),
            mtu=dict(type='int', default=9000),
            peers=dict(type='dict', default={}),
            pfc_priority=dict(type='int', default=3),
            network_manager=dict(type='str', default='auto', choices=['auto', 'netplan', 'networkmanager', 'networkd']),
            network_managers_present=dict(type='dict', default={}),
        ),
        supports_check_mode=True,
    )


def run_ip(module, ip, args):
    command = [ip] + args
    rc, stdout, stderr = BoundedRunner(module).run(command)
    if rc != 0:
        module.fail_json(msg='%s failed (rc=%d): %s' % (' '.join(command), rc, (stdout + stderr).strip()),
                         rc=rc, stdout=stdout, stderr=stderr, cmd=command)
    return stdout


def main():
    module = build_module()
    params = module.params
    ip = module.get_bin_path('ip', required=True)
    present = params['network_managers_present']
    try:
        links = parse_ip_link_json(run_ip(module, ip, LINK_ARGS))
        addresses = parse_ip_addr_json(run_ip(module, ip, ADDR_ARGS))
        plan = fabric_plan(params['interface'], params['address'], params['subnet'], params['mtu'],
                           links, addresses, params['peers'])
        plan['network_manager'] = choose_network_manager(
            params['network_manager'], present.get('netplan'), present.get('networkmanager_active'),
            present.get('networkd_active'), present.get('networkd_installed'))
        plan['pfc'] = pfc_vector(params['pfc_priority'])
    except RoceError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **plan)


if __name__ == '__main__':
    main()
