#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU and driver facts with nvidia-smi
version_added: 0.1.0
description:
  - Runs C(nvidia-smi) and sets C(gpulab_gpus), C(gpulab_gpu_count) and C(gpulab_gpu_driver).
  - A host without C(nvidia-smi) is a CPU node, a legal member of the cluster. It gets an empty
    GPU list unless O(required=true).
  - >-
    After a driver upgrade without a reboot, the userspace driver no longer matches the loaded
    kernel module and every C(nvidia-smi) call fails with
    C(Failed to initialize NVML: Driver/library version mismatch). The module does not fail
    then; it sets C(gpulab_gpu_driver.mismatch=true), an empty GPU list and a message, so that a
    later task (the C(gpulab.inference.gpu_preflight) role) can stop the play with a clear reason.
  - Reads only; changes nothing but its records (O(snapshot_file), O(kept_history_file)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  nvidia_smi_path:
    description:
      - The C(nvidia-smi) to run, as a command name looked up in E(PATH) (and the sbin
        directories) or as an absolute path.
    type: str
    default: nvidia-smi
  driver_version_file:
    description:
      - The file that tells the loaded kernel module's version.
      - The container lab points it at a file of the fake C(nvidia-smi) profile.
      - A missing file leaves C(kernel_module_version) at V(null).
    type: path
    default: /proc/driver/nvidia/version
  required:
    description:
      - Fail when C(nvidia-smi) cannot be found or lists no GPU, instead of reporting a CPU node.
      - A driver/library mismatch is still reported, not failed, so the caller can give the reboot advice.
    type: bool
    default: false
  timeout_s:
    description:
      - Seconds each C(nvidia-smi) call may take. A call that takes longer fails the task, naming
        the GPU (by PCI bus id) that does not answer when asked on its own.
    type: int
    default: 30
  residency:
    description:
      - Also report which processes hold how much memory on which GPU, as M(gpulab.inference.gpu_residency) does
        (RV(residency)), in the same module run. Skipped on a node without GPUs or with a driver mismatch.
    type: bool
    default: false
  snapshot_file:
    description:
      - Where to keep RV(snapshot) as JSON (the role C(gpulab.inference.gpu_preflight)'s C(gpu-inventory.json), which
        later plays read), written atomically, mode C(0644), only when its content differs; its directory is made
        where missing. Empty writes nothing.
      - A record of what was read, like a fact cache, so a rewrite (a driver upgrade) does not count as a change.
      - Not written while the userspace driver and the loaded kernel module differ (an upgrade without a reboot, which
        the caller refuses); the last record of a working driver stays.
    type: path
    default: ""
extends_documentation_fragment:
  - gpulab.inference.kept_history
attributes:
  check_mode:
    support: full
    description: Reads as in a real run; O(snapshot_file) and O(kept_history_file) are not written.
  diff_mode:
    support: none
    description: No diff is returned.
  facts:
    support: full
    description: Sets C(gpulab_gpus), C(gpulab_gpu_count) and C(gpulab_gpu_driver).
notes:
  - The CUDA version comes from C(nvidia-smi --version), since no C(--query-gpu) field holds it.
seealso:
  - module: gpulab.inference.gpu_residency
"""

EXAMPLES = r"""
- name: Gather GPU facts (CPU nodes get an empty list)
  gpulab.inference.gpu_facts:

- name: Gather GPU facts on a node that must have GPUs
  gpulab.inference.gpu_facts:
    required: true

- name: Gather GPU facts from a fake nvidia-smi in the container lab
  gpulab.inference.gpu_facts:
    nvidia_smi_path: /usr/local/bin/nvidia-smi
    driver_version_file: /etc/gpulab-fake-nvidia-smi/proc-driver-nvidia-version
"""

RETURN = r"""
kept_history:
  description:
    - What M(gpulab.inference.gpu_residency) returns as its RV(gpulab.inference.gpu_residency#module:kept_history),
      from the residency read in this run.
  returned: when O(kept_history_file) is given and the residency was read
  type: dict
residency:
  description: What M(gpulab.inference.gpu_residency) returns as its RV(gpulab.inference.gpu_residency#module:residency).
  returned: when O(residency=true) and the node has GPUs and no driver mismatch
  type: dict
snapshot:
  description:
    - What identifies the node's GPUs and driver, without live values (memory used, utilisation),
      so that it changes only with the hardware or the driver. Kept in O(snapshot_file) where given.
  returned: always
  type: dict
  sample:
    managed_by: gpulab.inference
    driver_version: 580.159.04
    kernel_module_version: 580.159.04
    cuda_version: "13.0"
    gpu_count: 1
    gpus:
      - index: 0
        uuid: GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd
        name: NVIDIA H200
        pci_bus_id: "00000000:00:06.0"
        compute_cap: "9.0"
        cuda_arch: "90"
        memory_total_mib: 143771
snapshot_written:
  description: Whether O(snapshot_file) was rewritten (in check mode, would be).
  returned: always
  type: bool
table:
  description: The GPUs as printable lines, a summary, a header and one row per GPU (N/A shown as C(-)).
  returned: always
  type: list
  elements: str
  sample:
    - 1 GPU(s), driver 580.159.04 (kernel module 580.159.04), CUDA 13.0
    - "GPU  name                                                       cc     arch      memory used/total  util"
    - "0    NVIDIA H200                                                9.0    sm_90          0/143771 MiB    0%"
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpulab_gpus:
      description: One entry per GPU, ordered by index. Values nvidia-smi cannot read (N/A) are V(null).
      returned: always
      type: list
      elements: dict
      contains:
        index:
          description: nvidia-smi's GPU index.
          type: int
          sample: 0
        uuid:
          description: GPU UUID.
          type: str
          sample: GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd
        name:
          description: Product name.
          type: str
          sample: NVIDIA H200
        pci_bus_id:
          description: PCI bus id as domain:bus:device.function.
          type: str
          sample: "00000000:00:06.0"
        driver_version:
          description: Userspace driver version nvidia-smi reports for this GPU.
          type: str
          sample: 580.159.04
        compute_cap:
          description: CUDA compute capability, MAJOR.MINOR.
          type: str
          sample: "9.0"
        cuda_arch:
          description: The compute capability as a CUDA architecture number (CMAKE_CUDA_ARCHITECTURES).
          type: str
          sample: "90"
        memory_total_mib:
          description: Total memory in MiB (V(null) for a GPU in MIG mode).
          type: int
          sample: 143771
        memory_used_mib:
          description: Used memory in MiB.
          type: int
          sample: 0
        memory_free_mib:
          description: Free memory in MiB.
          type: int
          sample: 143156
        utilization_gpu_pct:
          description: GPU utilization in percent over the last sample period.
          type: int
          sample: 0
        mig_mode:
          description: Current MIG mode, V(Enabled), V(Disabled), or V(null) where MIG is not supported.
          type: str
          sample: Disabled
    gpulab_gpu_count:
      description: Number of GPUs in RV(ansible_facts.gpulab_gpus).
      returned: always
      type: int
      sample: 1
    gpulab_gpu_driver:
      description: Driver versions. All values are V(null) on a host without nvidia-smi.
      returned: always
      type: dict
      contains:
        driver_version:
          description:
            - Userspace driver version.
            - On a mismatch, the NVML library version nvidia-smi printed, which may lack the patch level.
          type: str
          sample: 580.159.04
        cuda_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "13.0"
        kernel_module_version:
          description: Version of the loaded kernel module, from O(driver_version_file).
          type: str
          sample: 580.159.04
        mismatch:
          description: True when the userspace driver and the loaded kernel module differ (reboot needed).
          type: bool
          sample: false
        message:
          description: Why the GPU list is empty, when it is because of a mismatch or a missing nvidia-smi.
          type: str
          sample: ""
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import keep_file, nice_json
from ansible_collections.gpulab.inference.plugins.module_utils.kept_history import KEPT_HISTORY_OPTIONS, keep_history
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GpuFacts, GpuResidency


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            driver_version_file=dict(type='path', default='/proc/driver/nvidia/version'),
            required=dict(type='bool', default=False),
            timeout_s=dict(type='int', default=30),
            residency=dict(type='bool', default=False),
            snapshot_file=dict(type='path', default=''),
            **KEPT_HISTORY_OPTIONS
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    params = module.params
    facts = GpuFacts(module, params['nvidia_smi_path'], params['driver_version_file'], params['required'],
                     params['timeout_s'])
    facts.gather()
    result = facts.result
    if params['residency'] and facts.gpus and not facts.driver['mismatch']:
        residency = GpuResidency(module, params['nvidia_smi_path'], params['timeout_s'])
        residency.gather(gpus=facts.gpus)
        result['residency'] = residency.residency
        if params['kept_history_file']:
            result['kept_history'] = keep_history(module, residency.residency)
    result['snapshot_written'] = False
    # A driver upgraded without a reboot is refused by the caller: the last good record stays.
    if params['snapshot_file'] and not facts.driver['mismatch']:
        try:
            result['snapshot_written'] = keep_file(params['snapshot_file'], nice_json(result['snapshot']), module.check_mode)
        except (IOError, OSError) as exc:
            module.fail_json(msg='%s cannot be written: %s' % (params['snapshot_file'], exc))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
