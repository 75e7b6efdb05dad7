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
    supervisord program, read from C(SUPERVISOR_PROCESS_NAME) in C(/proc/PID/environ), so that a
    check can tell an RPC worker from a stray process under either manager.
  - Reads only; changes nothing.
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
  - gpulab.inference.read_only
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
            - The supervisord program the process runs under (its C(SUPERVISOR_PROCESS_NAME)), or V(null) when it
              runs under none or its environment cannot be read (another user's process without root).
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

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    COMPUTE_APPS_QUERY_ARGS,
    GPU_QUERY_ARGS,
    NvidiaSmiParseError,
    build_residency,
    parse_compute_apps_query,
    parse_gpu_query,
)
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import NvidiaSmiRunner


class GpuResidency:
    """Runs the two nvidia-smi queries and reads the processes' cgroups and supervisord programs."""

    def __init__(self, module):
        self.module = module
        self.nvidia_smi_path = module.params['nvidia_smi_path']
        self.indices = module.params['gpus']
        self.proc_root = module.params['proc_root']
        self.runner = NvidiaSmiRunner(module, self.nvidia_smi_path, module.params['timeout_s'])
        self.residency = None

    @property
    def result(self):
        return {'changed': False, 'residency': self.residency}

    def read_cgroup(self, pid):
        """Text of /proc/PID/cgroup, or None when the process has exited."""
        try:
            with open(os.path.join(self.proc_root, str(pid), 'cgroup'), encoding='utf-8', errors='replace') as cgroup_file:
                return cgroup_file.read()
        except (IOError, OSError):
            return None

    def read_environ(self, pid):
        """Text of /proc/PID/environ, or None when it cannot be read (exited, or not ours without root)."""
        try:
            with open(os.path.join(self.proc_root, str(pid), 'environ'), 'rb') as environ_file:
                return environ_file.read().decode('utf-8', 'replace')
        except (IOError, OSError):
            return None

    def gather(self):
        if self.runner.find() is None:
            self.module.fail_json(
                msg='nvidia-smi (%s) not found: GPU residency needs the NVIDIA driver; '
                    'install it or set nvidia_smi_path' % self.nvidia_smi_path)
        gpu_stdout = self.runner.run(GPU_QUERY_ARGS)[1]
        apps_stdout = self.runner.run(COMPUTE_APPS_QUERY_ARGS)[1]
        try:
            gpus = parse_gpu_query(gpu_stdout)
            processes = parse_compute_apps_query(apps_stdout)
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg=str(exc))
        cgroups = dict((process['pid'], self.read_cgroup(process['pid'])) for process in processes)
        environs = dict((process['pid'], self.read_environ(process['pid'])) for process in processes)
        try:
            self.residency = build_residency(gpus, processes, self.indices, cgroups, environs)
        except ValueError as exc:
            self.module.fail_json(msg='gpus: %s' % exc)
        for process in self.residency['processes']:
            if process['gpu_index'] is None:
                self.module.warn(
                    'process %d (%s) holds memory on GPU %s, which the GPU query did not list'
                    % (process['pid'], process['process_name'], process['gpu_uuid']))


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            gpus=dict(type='list', elements='int'),
            timeout_s=dict(type='int', default=30),
            proc_root=dict(type='path', default='/proc'),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    residency = GpuResidency(module)
    residency.gather()
    module.exit_json(**residency.result)


if __name__ == '__main__':
    main()
