#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_facts
short_description: Gather RDMA (RoCE and InfiniBand) device, port and GID facts from sysfs
version_added: 0.2.0
description:
  - Reads every RDMA device and port under C(class/infiniband) of O(sysfs_root) and sets
    C(gpulab_roce) (one entry per device) and C(gpulab_roce_fabric) (what the fabric interface
    uses).
  - For every port, the state, the physical state, the link layer, the rate, the netdev each GID
    belongs to, and every GID with its index, type (V(IB), V(RoCE v1), V(RoCE v2)) and the IPv4
    address it encodes.
  - With O(fabric_interface), picks the RoCE v2 GID of the interface that encodes an IPv4 address
    (O(fabric_address) when given) and suggests the environment for NCCL (C(NCCL_IB_HCA),
    C(NCCL_IB_GID_INDEX), C(NCCL_SOCKET_IFNAME)), Gloo (C(GLOO_SOCKET_IFNAME)) and llama.cpp RPC
    (C(GGML_RDMA_DEV), C(GGML_RDMA_GID)).
  - A host without RDMA devices gets an empty list, not an error.
  - Reads only; changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
options:
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point it at a fixture tree.
    type: path
    default: /sys
  fabric_interface:
    description:
      - The netdev of the fabric (normally C(gpulab_fabric_interface)). Without it,
        C(gpulab_roce_fabric.found) is V(false) and no environment is suggested.
    type: str
  fabric_address:
    description:
      - The node's IPv4 address on the fabric (normally C(gpulab_fabric_address)). When given,
        only the GID that encodes this address is picked.
    type: str
extends_documentation_fragment:
  - gpulab.inference.read_only
attributes:
  facts:
    support: full
    description: Sets C(gpulab_roce) and C(gpulab_roce_fabric).
notes:
  - No sysfs attribute holds a port's active MTU. For a RoCE port it follows from the netdev MTU
    as the kernel computes it (C(iboe_get_mtu)); for an InfiniBand port it is V(null).
  - llama.cpp RPC always uses verbs port 1; a GID on another port gets no C(GGML_RDMA_*) settings.
seealso:
  - module: gpulab.inference.roce_fabric_plan
"""

EXAMPLES = r"""
- name: Gather RDMA facts
  gpulab.inference.roce_facts:

- name: Gather RDMA facts and the fabric interface's GID and environment
  gpulab.inference.roce_facts:
    fabric_interface: "{{ gpulab_fabric_interface }}"
    fabric_address: "{{ gpulab_fabric_address }}"

- name: Read a captured sysfs tree
  gpulab.inference.roce_facts:
    sysfs_root: /tmp/captured-sys
    fabric_interface: ens1f0np0
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpulab_roce:
      description: One entry per RDMA device, by name; empty on a host without RDMA devices.
      returned: always
      type: list
      elements: dict
      contains:
        name:
          description: The RDMA device name.
          type: str
          sample: mlx5_0
        node_type:
          description: The device's node type as sysfs prints it.
          type: str
          sample: "1: CA"
        fw_ver:
          description: Firmware version, or V(null).
          type: str
          sample: 22.39.2048
        ports:
          description:
            - One entry per port with C(port), C(state) (V(ACTIVE), V(DOWN), ...), C(phys_state)
              (V(LinkUp), V(Disabled), ...), C(link_layer) (V(Ethernet) or V(InfiniBand)), C(rate)
              (as sysfs prints it), C(rate_gbps), C(netdevs), C(netdev_mtu), C(active_mtu) and
              C(gids).
            - Each GID has C(index), C(gid), C(type) (V(IB), V(RoCE v1), V(RoCE v2)), C(netdev) and
              C(ipv4) (the address of an IPv4-mapped GID, else V(null)). Unused (zero) entries are
              left out.
          type: list
          elements: dict
    gpulab_roce_fabric:
      description: The fabric interface's RoCE v2 IPv4 GID and the environment that follows from it.
      returned: always
      type: dict
      contains:
        interface:
          description: O(fabric_interface).
          type: str
          sample: ens1f0np0
        found:
          description: Whether the interface has a RoCE v2 GID that encodes an IPv4 address.
          type: bool
          sample: true
        selection:
          description:
            - C(device), C(port), C(gid_index), C(gid), C(ipv4), C(state), C(phys_state),
              C(rate_gbps), C(active_mtu), C(netdev_mtu) of the picked GID; V(null) when none.
          type: dict
        env:
          description: Suggested environment; empty when nothing was found.
          type: dict
          sample:
            NCCL_IB_HCA: "=mlx5_0:1"
            NCCL_IB_GID_INDEX: "3"
            NCCL_SOCKET_IFNAME: "=ens1f0np0"
            GLOO_SOCKET_IFNAME: ens1f0np0
            GGML_RDMA_DEV: mlx5_0
            GGML_RDMA_GID: "3"
        service_directives:
          description:
            - C([directive, value]) pairs a hardened systemd service adds to use the device (the verbs
              character devices, netlink, locked memory); empty when nothing was found.
          type: list
          elements: list
          sample: [[DeviceAllow, char-infiniband_verbs rw], [RestrictAddressFamilies, AF_NETLINK], [LimitMEMLOCK, infinity]]
        message:
          description: Why nothing was found (or why llama.cpp gets no settings); empty otherwise.
          type: str
          sample: ""
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    RoceError,
    fabric_facts,
    read_devices,
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type='path', default='/sys'),
            fabric_interface=dict(type='str'),
            fabric_address=dict(type='str'),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    params = module.params
    try:
        devices = read_devices(params['sysfs_root'])
        fabric = fabric_facts(devices, params['fabric_interface'], params['fabric_address'])
    except RoceError as exc:
        module.fail_json(msg='%s (under %s)' % (exc, params['sysfs_root']))
    module.exit_json(changed=False, ansible_facts={'gpulab_roce': devices, 'gpulab_roce_fabric': fabric})


if __name__ == '__main__':
    main()
