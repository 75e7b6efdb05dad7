#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_residency
short_description: Report which processes hold how much memory on which NVIDIA GPU
version_added: 0.1.0
description:
  - Runs C(nvidia-smi) twice (GPUs, then compute processes) and reports memory used per GPU
    and per process, the total and the imbalance between GPUs.
  - Names the systemd service each process runs in, read from C(/proc/PID/cgroup), and the
    program it runs under with the manager C(supervisor), read from C(SUPERVISOR_PROCESS_NAME) in
    C(/proc/PID/environ) (module_utils/service_process.py), so that a check can tell an RPC worker
    from a stray process under either manager.
  - Reads only, besides the kept services' history (O(kept_history_file)), a record of what it read.
author:
  - gpulab.inference contributors (@gpulab)
options:
  nvidia_smi_path:
    description:
      - The C(nvidia-smi) to run, as a command name looked up in E(PATH) (and the sbin
        directories) or as an absolute path.
    type: str
    default: nvidia-smi
  gpus:
    description:
      - Indices of the GPUs to report on; processes on other GPUs are left out.
      - Omit to report on all GPUs. An index the host lacks fails the task.
    type: list
    elements: int
  timeout_s:
    description:
      - Seconds each C(nvidia-smi) call may take. A call that takes longer fails the task, naming
        the GPU (by PCI bus id) that does not answer when asked on its own.
    type: int
    default: 30
  proc_root:
    description:
      - Where the process file system is mounted (tests point it elsewhere).
    type: path
    default: /proc
extends_documentation_fragment:
  - gpulab.inference.kept_history
attributes:
  check_mode:
    support: full
    description: Reads as in a real run; O(kept_history_file) is not written.
  diff_mode:
    support: none
    description: No diff is returned.
notes:
  - A process that exits between the two queries is still listed, with RV(residency.processes[].exited=true).
  - Fails when C(nvidia-smi) is missing or refuses to start (for example after a driver upgrade
    without a reboot); M(gpulab.inference.gpu_facts) tells those cases apart.
seealso:
  - module: gpulab.inference.gpu_facts
"""

EXAMPLES = r"""
- name: Report GPU memory residency on every GPU
  gpulab.inference.gpu_residency:
  register: gpu_residency

- name: Report residency on the GPUs the RPC servers use
  gpulab.inference.gpu_residency:
    gpus: [0, 1]
  register: gpu_residency

- name: Show the memory each systemd service holds
  ansible.builtin.debug:
    msg: "{{ item.systemd_unit }} holds {{ item.used_memory_mib }} MiB on GPU {{ item.gpu_index }}"
  loop: "{{ gpu_residency.residency.processes }}"
"""

RETURN = r"""
kept_history:
  description:
    - The kept services' history after this look (O(kept_history_file)), per keep pattern C(gpus) (GPU index to the
      most MiB its processes held there) and C(seen_at) (when last seen running, UTC).
  returned: when O(kept_history_file) is given
  type: dict
  sample: {whisper-asr: {gpus: {"0": 6144}, seen_at: "2026-12-07T11:02:03Z"}}
residency:
  description: Memory residency of the GPUs considered.
  returned: success
  type: dict
  contains:
    gpus:
      description: The GPUs considered, ordered by index. Memory is V(null) where nvidia-smi reads N/A (MIG mode).
      type: list
      elements: dict
      sample:
        - index: 0
          uuid: GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd
          name: NVIDIA H200
          memory_used_mib: 18033
          memory_total_mib: 143771
          memory_free_mib: 125122
    processes:
      description: Processes holding a compute context on the GPUs considered.
      type: list
      elements: dict
      contains:
        pid:
          description: Process id.
          type: int
          sample: 4242
        process_name:
          description: Process name as nvidia-smi reports it (often the executable's path).
          type: str
          sample: /opt/gpulab/llama.cpp/current/bin/ggml-rpc-server
        gpu_index:
          description: Index of the GPU; V(null) when the GPU query did not list the process's GPU UUID.
          type: int
          sample: 0
        gpu_uuid:
          description: UUID of the GPU.
          type: str
          sample: GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd
        used_memory_mib:
          description: GPU memory the process holds, in MiB; V(null) where nvidia-smi reads N/A (MIG mode).
          type: int
          sample: 9812
        systemd_unit:
          description: The systemd service the process runs in, or V(null) when it runs in none.
          type: str
          sample: gpulab-rpc-server@0.service
        supervisor_program:
          description:
            - The program the process runs under with the manager C(supervisor) (its C(SUPERVISOR_PROCESS_NAME)), or
              V(null) when it runs under none or its environment cannot be read (another user's process without root).
          type: str
          sample: gpulab-rpc-server-0
        exited:
          description: True when the process was gone by the time its cgroup was read.
          type: bool
          sample: false
    aggregate_used_gib:
      description: Memory used over the GPUs considered, in GiB, rounded to 2 decimals.
      type: float
      sample: 17.61
    imbalance_gib:
      description: Most used minus least used memory over the GPUs considered, in GiB, rounded to 2 decimals.
      type: float
      sample: 0.0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.kept_history import KEPT_HISTORY_OPTIONS, keep_history
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GpuResidency


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            gpus=dict(type='list', elements='int'),
            timeout_s=dict(type='int', default=30),
            proc_root=dict(type='path', default='/proc'),
            **KEPT_HISTORY_OPTIONS
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    residency = GpuResidency(module, module.params['nvidia_smi_path'], module.params['timeout_s'],
                             module.params['gpus'], module.params['proc_root'])
    residency.gather()
    result = residency.result
    if module.params['kept_history_file']:
        result['kept_history'] = keep_history(module, residency.residency)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
