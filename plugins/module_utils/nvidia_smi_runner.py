# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way the collection's modules run nvidia-smi: found once, every call bounded by a
timeout, and a call that hangs is answered with the GPU that hangs it.

A GPU that has fallen off the bus or whose driver is wedged makes every NVML call wait, and
nvidia-smi with it, for minutes. Each call therefore runs under coreutils' timeout. When one
times out, every GPU the kernel module knows (one directory per PCI bus id under
/proc/driver/nvidia/gpus) is asked alone (`nvidia-smi -i <bus id>`), so the message can name
the GPU to reset or the node to reboot. The wording lives in nvidia_smi.timeout_message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import bounded_argv, timed_out
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    COMPUTE_APPS_QUERY_ARGS,
    GPU_QUERY_ARGS,
    MIG_QUERY_ARGS,
    PROBE_ARGS,
    VERSION_ARGS,
    NvidiaSmiParseError,
    build_residency,
    driver_facts,
    gpu_table,
    inventory_snapshot,
    is_nvml_mismatch,
    merge_mig_modes,
    missing_gpus_message,
    parse_compute_apps_query,
    parse_gpu_query,
    parse_inventory,
    parse_kernel_module_version,
    parse_mig_query,
    parse_nvml_library_version,
    parse_smi_version,
    timeout_message,
)

DEFAULT_TIMEOUT_S = 30
# seconds a GPU probe may take once a call has hung (one probe per GPU, in turn)
PROBE_TIMEOUT_S = 10
DRIVER_GPUS_DIR = "/proc/driver/nvidia/gpus"


class NvidiaSmiRunner:
    """Runs nvidia-smi for a module; failures end in module.fail_json with the command's output."""

    def __init__(self, module, nvidia_smi_path="nvidia-smi", timeout_s=DEFAULT_TIMEOUT_S, gpus_dir=None,
                 partial_result=None, timeout_option="timeout_s"):
        """partial_result: a callable giving the module's result so far, kept in a failure (a
        module that has already changed something reports what it changed); timeout_option: the
        module option named in a timeout's message."""
        self.module = module
        self.timeout_option = timeout_option
        self.partial_result = partial_result
        self.nvidia_smi_path = nvidia_smi_path
        self.timeout_s = timeout_s
        self.gpus_dir = gpus_dir or DRIVER_GPUS_DIR
        self.smi = None
        self.timeout_bin = None

    def find(self):
        """Path of nvidia-smi, or None when the host has none (a CPU node)."""
        if self.timeout_s is None or isinstance(self.timeout_s, bool) or self.timeout_s < 1:
            self.module.fail_json(msg="timeout_s=%r must be a positive number of seconds" % (self.timeout_s,))
        self.smi = self.module.get_bin_path(self.nvidia_smi_path)
        if self.smi is not None:
            self.timeout_bin = self.module.get_bin_path("timeout", required=True)
        return self.smi

    def bounded(self, args, timeout_s):
        return bounded_argv(self.timeout_bin, timeout_s, [self.smi] + list(args))

    def run(self, args, allow_mismatch=False):
        """(rc, stdout, stderr) of nvidia-smi with args; fails on a non-zero exit (but an allowed
        driver/library mismatch) and on a timeout, naming the GPUs that do not answer."""
        command = self.bounded(args, self.timeout_s)
        rc, stdout, stderr = self.module.run_command(command)
        extra = self.partial_result() if self.partial_result else {}
        if timed_out(rc):
            self.module.fail_json(msg=timeout_message([self.smi] + list(args), self.timeout_s, self.probe_gpus(),
                                                      self.timeout_option),
                                  rc=rc, stdout=stdout, stderr=stderr, cmd=command, **extra)
        if rc != 0 and not (allow_mismatch and is_nvml_mismatch(stdout, stderr)):
            self.module.fail_json(
                msg="%s failed (rc=%d): %s" % (" ".join([self.smi] + list(args)), rc, (stdout + stderr).strip()),
                rc=rc, stdout=stdout, stderr=stderr, cmd=command, **extra)
        return rc, stdout, stderr

    def driver_gpus(self):
        """PCI bus ids of the GPUs the kernel module knows, sorted; empty when it says nothing."""
        try:
            return sorted(os.listdir(self.gpus_dir))
        except (IOError, OSError):
            return []

    def probe_gpus(self):
        """[(bus id, answered in time)] for every GPU the kernel module knows."""
        probes = []
        for bus_id in self.driver_gpus():
            command = self.bounded(["-i", bus_id] + PROBE_ARGS, min(self.timeout_s, PROBE_TIMEOUT_S))
            rc = self.module.run_command(command)[0]
            probes.append((bus_id, not timed_out(rc)))
        return probes


class GpuFacts:
    """Runs nvidia-smi and holds what it learnt (modules gpu_facts and gpu_inventory); result builds
    gpu_facts' return value in one place."""

    def __init__(self, module, nvidia_smi_path='nvidia-smi', driver_version_file='/proc/driver/nvidia/version',
                 required=False, timeout_s=DEFAULT_TIMEOUT_S):
        self.module = module
        self.nvidia_smi_path = nvidia_smi_path
        self.driver_version_file = driver_version_file
        self.required = required
        self.runner = NvidiaSmiRunner(module, nvidia_smi_path, timeout_s)
        self.gpus = []
        self.driver = {
            'driver_version': None,
            'cuda_version': None,
            'kernel_module_version': None,
            'mismatch': False,
            'message': '',
        }

    @property
    def result(self):
        return {
            'changed': False,
            'snapshot': inventory_snapshot(self.gpus, self.driver),
            'table': gpu_table(self.gpus, self.driver),
            'ansible_facts': {
                'gpulab_gpus': self.gpus,
                'gpulab_gpu_count': len(self.gpus),
                'gpulab_gpu_driver': self.driver,
            },
        }

    def read_kernel_module_version(self):
        if not os.path.exists(self.driver_version_file):
            return None
        try:
            with open(self.driver_version_file, 'rb') as version_file:
                # the version line is ASCII; other bytes must not end in a traceback
                return parse_kernel_module_version(version_file.read().decode('utf-8', 'replace'))
        except (IOError, OSError) as exc:
            self.module.fail_json(msg='cannot read %s: %s' % (self.driver_version_file, exc))
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg='%s: %s' % (self.driver_version_file, exc))

    def report_mismatch(self, kernel_module_version, stdout, stderr):
        nvml_version = parse_nvml_library_version(stdout + '\n' + stderr)
        self.driver.update(
            driver_version=nvml_version,
            kernel_module_version=kernel_module_version,
            mismatch=True,
            message=(
                'nvidia-smi cannot start: Driver/library version mismatch (NVML library %s, '
                'kernel module %s). The driver was upgraded without a reboot; reboot the host.'
                % (nvml_version or 'unknown', kernel_module_version or 'unknown')),
        )

    def gather(self):
        smi = self.runner.find()
        if smi is None:
            if self.required:
                self.module.fail_json(
                    msg='nvidia-smi (%s) not found, and required=true: install the NVIDIA driver '
                        'or set nvidia_smi_path' % self.nvidia_smi_path)
            self.driver['message'] = 'nvidia-smi (%s) not found: no GPU facts (CPU node)' % self.nvidia_smi_path
            return

        kernel_module_version = self.read_kernel_module_version()
        rc, stdout, stderr = self.runner.run(GPU_QUERY_ARGS, allow_mismatch=True)
        if rc != 0:
            self.report_mismatch(kernel_module_version, stdout, stderr)
            return
        mig_stdout = self.runner.run(MIG_QUERY_ARGS)[1]
        version_stdout = self.runner.run(VERSION_ARGS)[1]
        try:
            gpus = merge_mig_modes(parse_gpu_query(stdout), parse_mig_query(mig_stdout))
            self.driver.update(driver_facts(gpus, parse_smi_version(version_stdout), kernel_module_version))
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg=str(exc))
        missing = missing_gpus_message(self.required, len(gpus))
        if missing:
            self.module.fail_json(msg=missing)
        self.gpus = gpus
        if self.driver['mismatch']:
            self.driver['message'] = (
                'userspace driver %s differs from the loaded kernel module %s: reboot the host'
                % (self.driver['driver_version'], kernel_module_version))


class GpuResidency:
    """Runs the two nvidia-smi queries and reads the processes' cgroups and environments, for the
    unit or program each runs under (module_utils/service_process.py); modules gpu_residency, and
    gpu_facts with residency=true."""

    def __init__(self, module, nvidia_smi_path='nvidia-smi', timeout_s=DEFAULT_TIMEOUT_S, indices=None, proc_root='/proc'):
        self.module = module
        self.nvidia_smi_path = nvidia_smi_path
        self.indices = indices
        self.proc_root = proc_root
        self.runner = NvidiaSmiRunner(module, nvidia_smi_path, timeout_s)
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

    def gather(self, gpus=None):
        """gpus: the GPU query's answer when the caller ran it already (gpu_facts), else it runs here."""
        if self.runner.find() is None:
            self.module.fail_json(
                msg='nvidia-smi (%s) not found: GPU residency needs the NVIDIA driver; '
                    'install it or set nvidia_smi_path' % self.nvidia_smi_path)
        gpu_stdout = self.runner.run(GPU_QUERY_ARGS)[1] if gpus is None else None
        apps_stdout = self.runner.run(COMPUTE_APPS_QUERY_ARGS)[1]
        try:
            gpus = parse_gpu_query(gpu_stdout) if gpus is None else gpus
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


# The gpu_inventory option of the modules that read the node's GPUs in their own run (their
# documentation: doc fragment gpulab.inference.gpu_inventory).
GPU_INVENTORY_OPTION = dict(type='dict', options=dict(
    path=dict(type='path', required=True),
    nvidia_smi_path=dict(type='str', default='nvidia-smi'),
    driver_version_file=dict(type='path', default='/proc/driver/nvidia/version'),
    timeout_s=dict(type='int', default=DEFAULT_TIMEOUT_S),
))


def read_gpu_inventory(module, path, nvidia_smi_path='nvidia-smi', driver_version_file='/proc/driver/nvidia/version',
                       timeout_s=DEFAULT_TIMEOUT_S):
    """{gpus, gpu_count, driver, source}: gpu_preflight's inventory file, or nvidia-smi in check mode
    without it (the record gpu_preflight would have written); fails the module naming what to run."""
    if os.path.exists(path):
        try:
            with open(path, 'rb') as inventory_file:
                text = inventory_file.read().decode('utf-8', 'replace')
            inventory = parse_inventory(text, path)
        except (IOError, OSError) as exc:
            module.fail_json(msg='cannot read %s: %s' % (path, exc))
        except NvidiaSmiParseError as exc:
            module.fail_json(msg=str(exc))
        return dict(inventory, source=path)
    if not module.check_mode:
        module.fail_json(msg='%s is missing: role gpulab.inference.gpu_preflight writes it (the first play of '
                             'deploy.yml); run it on this node first' % path)
    facts = GpuFacts(module, nvidia_smi_path, driver_version_file, False, timeout_s)
    facts.gather()
    if facts.driver.get('mismatch'):
        module.fail_json(msg=facts.driver['message'])
    return dict(parse_inventory(module.jsonify(inventory_snapshot(facts.gpus, facts.driver)), 'nvidia-smi'),
                source='nvidia-smi')


def use_gpu_inventory(module, gpus_option, driver_option=None):
    """When the module's gpu_inventory option is set, put the GPUs of that file (read_gpu_inventory)
    in place of its GPU list option gpus_option, and its driver in place of driver_option where given."""
    given = module.params.get('gpu_inventory')
    if given is not None:
        inventory = read_gpu_inventory(
            module, given['path'], given['nvidia_smi_path'], given['driver_version_file'], given['timeout_s'])
        module.params[gpus_option] = inventory['gpus']
        if driver_option:
            module.params[driver_option] = inventory['driver']
