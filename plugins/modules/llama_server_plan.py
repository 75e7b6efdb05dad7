#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_server_plan
short_description: Validate a llama-server deployment and compute its RPC list and tensor split
description:
  - Runs on the inference head before anything is changed. Checks that every shard of the model
    exists on the head, that no two RPC endpoints share an address and port, and that the tensor
    split has one entry per device.
  - Returns the C(--rpc) list, the devices in llama.cpp's order (RPC devices first in C(--rpc)
    order, then the head's local GPUs, as src/llama.cpp C(llama_prepare_model_devices) orders
    them), the C(--tensor-split) value and a C(/health) timeout scaled to the model's size.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  model_path:
    description:
      - Model file on the head. For a split GGUF, the first shard (C(<stem>-00001-of-00006.gguf));
        every other shard must sit beside it.
    type: path
    required: true
  workers:
    description:
      - RPC workers in C(--rpc) order, the manifests C(/etc/gpulab/rpc-server/servers.json) that the
        C(llama_rpc_server) role publishes on each worker.
      - Each has C(host) (inventory name, used in messages), C(address) (the fabric address its
        servers are bound to), C(unit) (the template unit name) and C(endpoints), one entry per
        RPC server with C(instance), C(port), C(device) and C(memory_mib). Other keys are ignored.
    type: list
    elements: dict
    default: []
  local_gpus:
    description:
      - The head's own GPUs (C(gpulab_gpus) facts) that llama-server uses. Empty for a CPU build.
    type: list
    elements: dict
    default: []
  tensor_split:
    description:
      - V(equal) (one part per device), V(proportional) (memory size per device) or a list of
        numbers, one per device in llama.cpp's order.
      - Proportional uses memory size, not free memory, which shrinks once the model is loaded.
    type: raw
    default: equal
  health_timeout_s:
    description:
      - Seconds to wait for C(/health) to answer 200. V(0) computes it from the model's size
        with O(health_timeout_floor_s) and O(health_load_rate_mib_s).
    type: int
    default: 0
  health_timeout_floor_s:
    description: Smallest computed health timeout, for small models and slow starts.
    type: int
    default: 120
  health_load_rate_mib_s:
    description: Assumed load rate (disk read and transfer to the RPC workers) in MiB/s.
    type: int
    default: 100
  host:
    description: llama-server's bind address; the module warns when it is not loopback and no API key is set.
    type: str
    default: 127.0.0.1
  api_key_set:
    description: Whether an API key is configured.
    type: bool
    default: false
  api_key_vaulted:
    description:
      - Whether the API key comes from ansible-vault (C(llama_server_api_key is vault_encrypted)).
        When V(false) with O(api_key_set=true), the module warns that the key looks like plain text.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Plan the head with two CPU workers and a synthetic model
  gpulab.inference.llama_server_plan:
    model_path: /var/lib/gpulab/models/synthetic.gguf
    workers:
      - host: node-b
        address: 10.231.77.11
        endpoints: [{port: 50052, device: CPU, memory_mib: 20000}]
  register: plan

- name: Plan the reference lab, three GPUs split 1:1:1 and six shards
  gpulab.inference.llama_server_plan:
    model_path: /srv/models/MiniMax-M2.7-Q8_0/MiniMax-M2.7-Q8_0-00001-of-00006.gguf
    workers: "{{ llama_server_workers }}"
    local_gpus: "{{ ansible_facts.gpulab_gpus }}"
    tensor_split: equal

- name: Split by memory size
  gpulab.inference.llama_server_plan:
    model_path: /srv/models/model.gguf
    workers: "{{ llama_server_workers }}"
    local_gpus: "{{ ansible_facts.gpulab_gpus }}"
    tensor_split: proportional
"""

RETURN = r"""
rpc:
  description: The C(--rpc) value, endpoints joined by commas (empty without workers).
  returned: success
  type: str
  sample: 10.231.77.11:50052,10.231.77.12:50052
endpoints:
  description: Endpoints in C(--rpc) order with C(host), C(address), C(port), C(endpoint), C(device).
  returned: success
  type: list
  elements: dict
devices:
  description: Devices in llama.cpp's order with C(name) (RPC0.., CUDA0..), C(kind), C(host), C(endpoint).
  returned: success
  type: list
  elements: dict
tensor_split:
  description: One proportion per device.
  returned: success
  type: list
  sample: [1, 1, 1]
tensor_split_arg:
  description: The C(--tensor-split) value.
  returned: success
  type: str
  sample: 1,1,1
shards:
  description: Every file of the model.
  returned: success
  type: list
  elements: str
model_bytes:
  description: Total size of the model's files in bytes.
  returned: success
  type: int
health_timeout_s:
  description: Seconds to wait for C(/health).
  returned: success
  type: int
"""

import ipaddress
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    LlamaServerError,
    device_order,
    format_tensor_split,
    health_timeout_s,
    missing_shards,
    model_shards,
    rpc_endpoints,
    tensor_split,
)


class LlamaServerPlan:
    """Validates the inputs and computes the plan; `result` is the return value."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.plan = {}

    def run(self):
        shards = model_shards(self.params["model_path"])
        existing = set(s for s in shards if os.path.isfile(s))
        missing = missing_shards(shards, existing)
        if missing:
            raise LlamaServerError(
                "model file(s) missing on the head: %s; copy every shard beside the first one "
                "or fix llama_server_model_path" % ", ".join(missing))
        model_bytes = sum(os.path.getsize(s) for s in shards)
        endpoints = rpc_endpoints(self.params["workers"])
        devices = device_order(endpoints, self.params["local_gpus"])
        split = tensor_split(self.params["tensor_split"], devices)
        timeout_s = self.params["health_timeout_s"] or health_timeout_s(
            model_bytes, self.params["health_timeout_floor_s"], self.params["health_load_rate_mib_s"])
        self.plan = {
            "rpc": ",".join(e["endpoint"] for e in endpoints),
            "endpoints": endpoints,
            "devices": devices,
            "tensor_split": split,
            "tensor_split_arg": format_tensor_split(split),
            "shards": shards,
            "model_bytes": model_bytes,
            "health_timeout_s": timeout_s,
        }

    @property
    def warnings(self):
        warnings = []
        if self.params["api_key_set"] and not self.params["api_key_vaulted"]:
            warnings.append(
                "llama_server_api_key is not vault-encrypted: keep it in ansible-vault "
                "(ansible-vault encrypt_string), or set llama_server_api_key_warn_plaintext: false "
                "when its whole variable file is encrypted")
        try:
            loopback = ipaddress.ip_address(self.params["host"]).is_loopback
        except ValueError:
            loopback = self.params["host"] == "localhost"
        if not loopback and not self.params["api_key_set"]:
            warnings.append(
                "llama-server listens on %s without an API key: anyone who reaches it can use it; "
                "set llama_server_api_key" % self.params["host"])
        return warnings

    @property
    def result(self):
        result = dict(changed=False)
        result.update(self.plan)
        return result


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path", required=True),
            workers=dict(type="list", elements="dict", default=[]),
            local_gpus=dict(type="list", elements="dict", default=[]),
            tensor_split=dict(type="raw", default="equal"),
            health_timeout_s=dict(type="int", default=0),
            health_timeout_floor_s=dict(type="int", default=120),
            health_load_rate_mib_s=dict(type="int", default=100),
            host=dict(type="str", default="127.0.0.1"),
            api_key_set=dict(type="bool", default=False),
            api_key_vaulted=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    plan = LlamaServerPlan(module)
    try:
        plan.run()
    except LlamaServerError as exc:
        module.fail_json(msg=str(exc))
    for warning in plan.warnings:
        module.warn(warning)
    module.exit_json(**plan.result)


if __name__ == "__main__":
    main()
