#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_inventory
short_description: Read a node's GPU inventory, the file gpu_preflight writes
version_added: 0.3.0
description:
  - Reads and checks C(/var/lib/gpulab/gpu-inventory.json) (role C(common)'s C(gpulab_gpu_inventory_file)),
    the node's GPUs and driver as the C(gpulab.inference.gpu_preflight) role recorded them in the first
    play, and returns them. The roles of later plays read the GPUs this way, never from facts an
    earlier play set (docs/CONTRACTS.md).
  - A file that does not validate fails naming the field and saying to run gpu_preflight again.
  - A missing file fails, naming the node and the role that writes it; in check mode, where
    gpu_preflight changed nothing on a node never deployed, the module reads C(nvidia-smi) instead
    and composes the same record (RV(source) says which).
author:
  - gpulab.inference contributors (@gpulab)
options:
  path:
    description: The inventory file (C(gpulab_gpu_inventory_file)).
    type: path
    required: true
  required:
    description: Fail when the node has no GPU (a vLLM node needs them; a CPU node is legal elsewhere).
    type: bool
    default: false
  nvidia_smi_path:
    description: The C(nvidia-smi) read in check mode when the file is missing.
    type: str
    default: nvidia-smi
  driver_version_file:
    description: The kernel module's version file, read with C(nvidia-smi) in check mode when the file is missing.
    type: path
    default: /proc/driver/nvidia/version
  timeout_s:
    description: Seconds each C(nvidia-smi) call may take (check mode without the file only).
    type: int
    default: 30
extends_documentation_fragment:
  - gpulab.inference.read_only
seealso:
  - module: gpulab.inference.gpu_facts
"""

EXAMPLES = r"""
- name: Read the node's GPUs as gpu_preflight recorded them
  gpulab.inference.gpu_inventory:
    path: "{{ gpulab_gpu_inventory_file }}"
  register: node_gpus

- name: Read every vLLM node's GPUs, refusing a node without any
  gpulab.inference.gpu_inventory:
    path: "{{ gpulab_gpu_inventory_file }}"
    required: true
  delegate_to: "{{ item }}"
  loop: "{{ groups['vllm_nodes'] }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU, ordered by index, with C(index), C(uuid), C(name), C(pci_bus_id), C(compute_cap),
    C(cuda_arch) and C(memory_total_mib) (V(null) where nvidia-smi reads N/A).
  returned: success
  type: list
  elements: dict
  sample: [{index: 0, uuid: GPU-fdf55793, name: NVIDIA H200, pci_bus_id: "00000000:00:06.0", compute_cap: "9.0",
            cuda_arch: "90", memory_total_mib: 143771}]
gpu_count:
  description: Number of GPUs.
  returned: success
  type: int
  sample: 1
driver:
  description: C(driver_version), C(kernel_module_version) and C(cuda_version) (V(null) on a CPU node).
  returned: success
  type: dict
  sample: {driver_version: 580.159.04, kernel_module_version: 580.159.04, cuda_version: "13.0"}
source:
  description: The file read, or V(nvidia-smi) in check mode without the file.
  returned: success
  type: str
  sample: /var/lib/gpulab/gpu-inventory.json
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GPU_INVENTORY_OPTION, read_gpu_inventory


def read_inventory(module):
    """{gpus, gpu_count, driver, source}: from the file, or from nvidia-smi in check mode without it."""
    params = module.params
    return read_gpu_inventory(module, params['path'], params['nvidia_smi_path'], params['driver_version_file'],
                              params['timeout_s'])


def build_module():
    return AnsibleModule(
        # the same options as the other modules' gpu_inventory option, and required
        argument_spec=dict(GPU_INVENTORY_OPTION['options'], required=dict(type='bool', default=False)),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    inventory = read_inventory(module)
    if module.params['required'] and not inventory['gpus']:
        module.fail_json(msg='%s lists no GPU (required=true): this node needs NVIDIA GPUs; check nvidia-smi '
                             'there and run gpu_preflight again' % inventory['source'])
    module.exit_json(changed=False, **inventory)


if __name__ == '__main__':
    main()
