#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_rpc_server_plan
short_description: Decide which ggml RPC servers a worker runs, on which address and ports
description:
  - Runs on an RPC worker before anything is changed. A CUDA build gets one RPC server per GPU
    (llama.cpp's advice), each seeing only its GPU through C(CUDA_VISIBLE_DEVICES); a CPU build
    gets one server for the CPU device.
  - Refuses a wildcard bind address (V(0.0.0.0), V(::)) unless O(allow_any_address=true), because the
    ggml RPC protocol has no authentication.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  cuda:
    description: Whether the deployed llama.cpp build has CUDA (C(cuda) in its BUILD_INFO.json).
    type: bool
    required: true
  gpus:
    description: The node's C(gpulab_gpus) facts (C(index), C(memory_mib)).
    type: list
    elements: dict
    default: []
  gpu_indices:
    description: nvidia-smi indices of the GPUs to expose; empty exposes every GPU.
    type: list
    elements: int
    default: []
  address:
    description: Address to bind to, normally the node's C(gpulab_fabric_address).
    type: str
    required: true
  allow_any_address:
    description: Allow a wildcard O(address). Only behind a firewall that covers every interface.
    type: bool
    default: false
  port_base:
    description: Port of the first server; server I(i) listens on O(port_base) + I(i).
    type: int
    default: 50052
  memory_mib:
    description: Host memory size in MiB, reported for the CPU device (used by a proportional split).
    type: int
"""

EXAMPLES = r"""
- name: Plan the RPC servers of a GPU worker
  gpulab.inference.llama_rpc_server_plan:
    cuda: true
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    address: "{{ gpulab_fabric_address }}"
  register: rpc_plan

- name: Plan the RPC server of a CPU worker (container lab)
  gpulab.inference.llama_rpc_server_plan:
    cuda: false
    address: 10.231.77.11
    memory_mib: "{{ ansible_facts.memtotal_mb }}"

- name: Expose only GPUs 1 and 2, from port 51000
  gpulab.inference.llama_rpc_server_plan:
    cuda: true
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    gpu_indices: [1, 2]
    address: "{{ gpulab_fabric_address }}"
    port_base: 51000
"""

RETURN = r"""
address:
  description: The normalised bind address.
  returned: success
  type: str
  sample: 10.231.77.11
servers:
  description:
    - One entry per RPC server with C(instance) (the systemd instance and port offset),
      C(device) (the C(--device) name), C(gpu_index) (C(CUDA_VISIBLE_DEVICES), or V(null) for the
      CPU), C(port) and C(memory_mib).
  returned: success
  type: list
  elements: dict
  sample: [{instance: 0, device: CPU, gpu_index: null, port: 50052, memory_mib: 20000}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    LlamaServerError,
    check_bind_address,
    rpc_devices,
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            cuda=dict(type="bool", required=True),
            gpus=dict(type="list", elements="dict", default=[]),
            gpu_indices=dict(type="list", elements="int", default=[]),
            address=dict(type="str", required=True),
            allow_any_address=dict(type="bool", default=False),
            port_base=dict(type="int", default=50052),
            memory_mib=dict(type="int"),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    params = module.params
    try:
        address = check_bind_address(params["address"], params["allow_any_address"])
        servers = rpc_devices(params["cuda"], params["gpus"], params["gpu_indices"])
    except LlamaServerError as exc:
        module.fail_json(msg=str(exc))
    last_port = params["port_base"] + len(servers) - 1
    if params["port_base"] < 1 or last_port > 65535:
        module.fail_json(msg="ports %d..%d are out of range; fix llama_rpc_server_port_base"
                         % (params["port_base"], last_port))
    for server in servers:
        server["port"] = params["port_base"] + server["instance"]
        if server["device"] == "CPU":
            server["memory_mib"] = params["memory_mib"]
    if address in ("0.0.0.0", "::"):
        module.warn("RPC servers bind to %s: the ggml RPC protocol has no authentication; "
                    "only the nftables rules keep other hosts out" % address)
    module.exit_json(changed=False, address=address, servers=servers)


if __name__ == "__main__":
    main()
