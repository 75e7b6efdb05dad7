#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_sampler
short_description: Sample the utilisation and memory of every NVIDIA GPU at a fixed interval
version_added: 0.1.0
description:
  - Samples utilisation, memory used and power draw (through NVML and C(nvidia-smi -lms);
    the one-shot query reads none) of each GPU every O(interval_ms) until O(stop_file)
    appears or O(duration_s) has passed, writes the raw trace to O(trace_path) (JSON) and
    returns each GPU's fingerprint - peak, median, p10 and mean utilisation and the fraction of
    samples at 0 %.
  - Meant to run with C(async) and C(poll=0) on every GPU node while a benchmark runs, then
    be stopped by creating O(stop_file) and collected with C(async_status).
  - Reads through NVML (the C(nvidia-ml-py) package) when it can be imported, else through
    C(nvidia-smi -lms) run in slices of a few seconds (so that the stop file is seen); where
    C(nvidia-smi) refuses C(-lms), it runs a one-shot query at every interval.
author:
  - gpulab.inference contributors (@gpulab)
options:
  trace_path:
    description:
      - File the raw trace is written to (atomically), JSON with the samples and their GPUs' names.
    type: path
    required: true
  stop_file:
    description:
      - Sampling ends once this file exists. Remove it before starting the sampler.
    type: path
  duration_s:
    description:
      - Longest time to sample, in seconds, whether or not O(stop_file) appears.
    type: int
    default: 600
  interval_ms:
    description:
      - Time between samples, in milliseconds (at least 50).
    type: int
    default: 200
  method:
    description:
      - V(auto) - NVML when importable, else C(nvidia-smi -lms), else one query per interval.
      - V(nvml), V(nvidia-smi-loop), V(nvidia-smi-poll) force one of them.
    type: str
    choices: [auto, nvml, nvidia-smi-loop, nvidia-smi-poll]
    default: auto
  nvidia_smi_path:
    description:
      - The C(nvidia-smi) to run, by name (looked up in E(PATH)) or absolute path.
    type: str
    default: nvidia-smi
  timeout_s:
    description:
      - Longest time one C(nvidia-smi) query may take, in seconds; a query that does not answer
        in time fails the task naming the GPU that hangs it, instead of sampling nothing. A
        C(-lms) slice that prints no sample within its slice counts as such a query.
    type: int
    default: 30
  gpus:
    description:
      - Indices of the GPUs to fingerprint; omit for all.
    type: list
    elements: int
attributes:
  check_mode:
    support: none
    description: Sampling takes the time it samples; in check mode the module is skipped.
  diff_mode:
    support: none
    description: Only the trace file is written.
seealso:
  - module: gpulab.inference.llm_benchmark
  - module: gpulab.inference.inference_report
"""

EXAMPLES = r"""
- name: Sample every GPU in the background until the stop file appears
  gpulab.inference.gpu_sampler:
    trace_path: /var/lib/gpulab/bench/gpu-trace.json
    stop_file: /var/lib/gpulab/bench/stop
    duration_s: 900
  async: 960
  poll: 0
  register: sampler_job

- name: Sample for ten seconds
  gpulab.inference.gpu_sampler:
    trace_path: /tmp/gpu-trace.json
    duration_s: 10
    interval_ms: 100
  register: sampler

- name: Collect the background sampler
  ansible.builtin.async_status:
    jid: "{{ sampler_job.ansible_job_id }}"
  register: sampler
  until: sampler.finished
  retries: 30
  delay: 2
"""

RETURN = r"""
sampler:
  description: How the GPUs were sampled and their fingerprints.
  returned: success
  type: dict
  contains:
    method:
      description: V(nvml), V(nvidia-smi-loop) or V(nvidia-smi-poll).
      type: str
      sample: nvidia-smi-loop
    interval_ms:
      description: The interval asked for.
      type: int
      sample: 200
    duration_s:
      description: How long sampling ran.
      type: float
      sample: 31.2
    samples:
      description: Samples in the trace, over all GPUs.
      type: int
      sample: 312
    stopped_by:
      description: V(stop_file) or V(duration).
      type: str
      sample: stop_file
    trace_path:
      description: The trace file.
      type: str
      sample: /var/lib/gpulab/bench/gpu-trace.json
    gpus:
      description: Fingerprint per GPU, ordered by index; utilisation in percent.
      type: list
      elements: dict
      sample:
        - index: 0
          name: NVIDIA H200
          samples: 156
          utilization_peak: 31
          utilization_median: 20.0
          utilization_p10: 0.0
          utilization_mean: 18.4
          zero_fraction: 0.12
          memory_used_peak_mib: 81920
"""

import math
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils import bench_stats, gpu_trace
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import bounded_argv, timed_out
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    GPU_QUERY_ARGS,
    NvidiaSmiParseError,
    parse_gpu_query,
    timeout_message,
)
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import NvidiaSmiRunner

MIN_INTERVAL_MS = 50
# nvidia-smi -lms runs in slices this long; the stop file is checked between them.
LOOP_SLICE_S = 2
TIMEOUT_RC = 124  # coreutils timeout: the command was stopped at the end of its slice


class Sampler:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.interval_s = self.params['interval_ms'] / 1000.0
        self.started = time.time()
        self.deadline = time.monotonic() + self.params['duration_s']
        self.stopped_by = 'duration'
        self.names = {}
        self.runner = NvidiaSmiRunner(module, self.params['nvidia_smi_path'], self.params['timeout_s'])

    def should_stop(self):
        stop_file = self.params['stop_file']
        if stop_file and os.path.exists(stop_file):
            self.stopped_by = 'stop_file'
            return True
        return time.monotonic() >= self.deadline

    def smi(self):
        path = self.runner.find()
        if path is None:
            self.module.fail_json(msg='nvidia-smi (%s) not found: sampling GPUs needs the NVIDIA driver; '
                                      'install it or set nvidia_smi_path' % self.params['nvidia_smi_path'])
        return path

    def gpu_names(self, smi):
        stdout = self.runner.run(GPU_QUERY_ARGS)[1]
        try:
            return dict((gpu['index'], gpu['name']) for gpu in parse_gpu_query(stdout))
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg=str(exc))

    def sample_nvml(self, pynvml):
        pynvml.nvmlInit()
        try:
            handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
            for index, handle in handles:
                name = pynvml.nvmlDeviceGetName(handle)
                self.names[index] = name.decode() if isinstance(name, bytes) else name
            samples = []
            start = time.monotonic()
            while not self.should_stop():
                now = round(time.monotonic() - start, 3)
                for index, handle in handles:
                    util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    mem = pynvml.nvmlDeviceGetMemoryInfo(handle).used // (1024 * 1024)
                    samples.append((now, index, util, mem, self.nvml_power(pynvml, handle)))
                time.sleep(self.interval_s)
            return samples
        finally:
            pynvml.nvmlShutdown()

    @staticmethod
    def nvml_power(pynvml, handle):
        """The board's power draw in W (NVML gives mW), None where the GPU does not report it."""
        try:
            return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except pynvml.NVMLError:
            return None

    def sample_loop(self, smi):
        """nvidia-smi -lms in slices of LOOP_SLICE_S seconds (coreutils timeout ends each), so that
        the stop file is seen between slices; None when this nvidia-smi refuses -lms."""
        timeout = self.module.get_bin_path('timeout', required=True)
        lines = []
        while not self.should_stop():
            slice_s = max(1, min(LOOP_SLICE_S, int(math.ceil(self.deadline - time.monotonic()))))
            loop = [smi] + gpu_trace.LOOP_ARGS + ['-lms', str(self.params['interval_ms'])]
            # SIGINT: nvidia-smi ends its loop and prints what it has.
            command = bounded_argv(timeout, slice_s, loop, signal='INT')
            rc, stdout, stderr = self.module.run_command(command)
            # -lms prints its first sample at once: a slice cut off with nothing printed hung.
            if timed_out(rc) and not stdout.strip():
                self.module.fail_json(msg=timeout_message(loop, slice_s, self.runner.probe_gpus()),
                                      rc=rc, stderr=stderr, cmd=command)
            if rc not in (0, TIMEOUT_RC):
                if not lines and self.params['method'] == 'auto':
                    return None
                self.module.fail_json(msg='%s failed (rc=%d): %s' % (' '.join(command), rc, (stdout + stderr).strip()[-500:]))
            lines.extend(stdout.splitlines())
        try:
            return gpu_trace.samples_from_loop(lines)
        except gpu_trace.TraceParseError as exc:
            self.module.fail_json(msg='nvidia-smi -lms: %s' % exc)

    def sample_poll(self, smi):
        samples = []
        start = time.monotonic()
        while not self.should_stop():
            now = round(time.monotonic() - start, 3)
            stdout = self.runner.run(GPU_QUERY_ARGS)[1]
            try:
                gpus = parse_gpu_query(stdout)
            except NvidiaSmiParseError as exc:
                self.module.fail_json(msg=str(exc))
            for gpu in gpus:
                # the one-shot query reads no power draw: the report says energy was not measured
                samples.append((now, gpu['index'], gpu['utilization_gpu_pct'], gpu['memory_used_mib'], None))
            time.sleep(max(0.0, self.interval_s - (time.monotonic() - start - now)))
        return samples

    def run(self):
        method = self.params['method']
        pynvml = None
        if method in ('auto', 'nvml'):
            try:
                import pynvml  # pylint: disable=import-outside-toplevel
            except ImportError:
                if method == 'nvml':
                    self.module.fail_json(msg='method=nvml: the Python module pynvml (package nvidia-ml-py) is not '
                                              'importable on this host; install it or use method=auto')
        if pynvml is not None:
            used, samples = 'nvml', self.sample_nvml(pynvml)
        else:
            smi = self.smi()
            self.names = self.gpu_names(smi)
            samples = None
            if method in ('auto', 'nvidia-smi-loop'):
                used, samples = 'nvidia-smi-loop', self.sample_loop(smi)
            if samples is None:
                used, samples = 'nvidia-smi-poll', self.sample_poll(smi)
        duration = round(time.time() - self.started, 3)
        if not samples:
            self.module.fail_json(msg='%s took no sample in %.1f s (stopped by %s); nothing was written to %s: check '
                                      'that the GPUs answer (nvidia-smi) and that stop_file is not created early'
                                      % (used, duration, self.stopped_by, self.params['trace_path']))
        try:
            atomic_write(self.params['trace_path'], gpu_trace.trace_document(
                os.uname()[1], used, self.params['interval_ms'], self.started, samples,
                dict((str(k), v) for k, v in self.names.items())), 0o644, prefix='.trace-', suffix='')
        except OSError as exc:
            self.module.fail_json(
                msg='trace_path %s cannot be written: %s' % (self.params['trace_path'], exc.strerror or exc))
        gpus = gpu_trace.fingerprint(samples, self.params['gpus'])
        for gpu in gpus:
            gpu['name'] = self.names.get(gpu['index'])
        return {
            'method': used,
            'interval_ms': self.params['interval_ms'],
            'duration_s': duration,
            'samples': len(samples),
            'stopped_by': self.stopped_by,
            'trace_path': self.params['trace_path'],
            'gpus': gpus,
        }


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            trace_path=dict(type='path', required=True),
            stop_file=dict(type='path'),
            duration_s=dict(type='int', default=600),
            interval_ms=dict(type='int', default=200),
            method=dict(type='str', default='auto', choices=['auto', 'nvml', 'nvidia-smi-loop', 'nvidia-smi-poll']),
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            gpus=dict(type='list', elements='int'),
            timeout_s=dict(type='int', default=30),
        ),
        supports_check_mode=False,
    )


def main():
    module = build_module()
    if module.params['interval_ms'] < MIN_INTERVAL_MS:
        module.fail_json(msg='interval_ms must be %d or more, got %d' % (MIN_INTERVAL_MS, module.params['interval_ms']))
    if module.params['duration_s'] < 1:
        module.fail_json(msg='duration_s must be 1 or more, got %d' % module.params['duration_s'])
    problem = bench_stats.output_path_problem(module.params['trace_path'], 'trace_path')
    if problem:
        module.fail_json(msg=problem)
    stop_file = module.params['stop_file']
    if stop_file and os.path.lexists(stop_file):
        module.fail_json(msg='stop_file %s exists before sampling started, so nothing would be sampled; remove it '
                             'first' % stop_file)
    if module.params['timeout_s'] < 1:
        module.fail_json(msg='timeout_s must be 1 or more, got %d' % module.params['timeout_s'])
    module.exit_json(changed=True, sampler=Sampler(module).run())


if __name__ == '__main__':
    main()
