# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU utilisation traces: parsing nvidia-smi's loop output, the fingerprint of a trace and the
energy a run drew.

A trace is a list of samples (t_s, gpu_index, utilization_percent, memory_used_mib, power_w),
t_s in seconds from the trace's start; power_w is None where it was not read (a trace written
before power was sampled has four values a sample). The fingerprint of a GPU is what shows how busy it was and how
often it idled: peak, median, p10, mean, and the fraction of samples at 0 % (llama.cpp's
sequential dispatch over RPC leaves each GPU idle while the others compute).
"""

from __future__ import annotations

import datetime
import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import mean, percentile

# nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits -lms N
# (tests/unit/fixtures/gpu_trace/power-trace-h200.csv; util-trace-h200.csv, without power.draw,
# keeps the units). power.draw is the board's draw in W, averaged by the driver over about a second.
LOOP_FIELDS = ('timestamp', 'index', 'utilization.gpu', 'memory.used', 'power.draw')
LOOP_ARGS = ['--query-gpu=' + ','.join(LOOP_FIELDS), '--format=csv,noheader,nounits']
_TIMESTAMP_FORMAT = '%Y/%m/%d %H:%M:%S.%f'
_NUMBER_RE = re.compile(r'^\s*(\d+(?:\.\d+)?)\s*(%|MiB|W)?\s*\Z')


class TraceParseError(ValueError):
    """A line of nvidia-smi's loop output this parser cannot read."""


def parse_loop_line(line):
    """(epoch seconds, index, utilization %, memory used MiB, power W) of one loop line; None for a
    blank line. A line without power.draw (an older capture) has power None, as has any value
    nvidia-smi cannot read (N/A, [N/A])."""
    if not line.strip():
        return None
    fields = [field.strip() for field in line.split(',')]
    if len(fields) not in (len(LOOP_FIELDS) - 1, len(LOOP_FIELDS)):
        raise TraceParseError('expected %d fields (%s), got %d in line %r'
                              % (len(LOOP_FIELDS), ', '.join(LOOP_FIELDS), len(fields), line))
    try:
        stamp = datetime.datetime.strptime(fields[0], _TIMESTAMP_FORMAT)
    except ValueError:
        raise TraceParseError('timestamp %r is not YYYY/MM/DD HH:MM:SS.mmm in line %r' % (fields[0], line))
    if not fields[1].isdigit():
        raise TraceParseError('index %r is not a number in line %r' % (fields[1], line))
    epoch = (stamp - datetime.datetime(1970, 1, 1)).total_seconds()
    power = _number(fields[4], 'power.draw', line) if len(fields) == len(LOOP_FIELDS) else None
    return (epoch, int(fields[1]), _number(fields[2], 'utilization.gpu', line), _number(fields[3], 'memory.used', line),
            power)


def _number(value, field, line):
    if value in ('N/A', '[N/A]', '[Not Supported]'):
        return None
    match = _NUMBER_RE.match(value)
    if not match:
        raise TraceParseError('%s %r is not a number in line %r' % (field, value, line))
    number = float(match.group(1))
    return int(number) if number.is_integer() else number


def samples_from_loop(lines):
    """Samples of a whole loop output, t_s relative to its first line."""
    parsed = [row for row in (parse_loop_line(line) for line in lines) if row is not None]
    if not parsed:
        return []
    start = parsed[0][0]
    return [(round(epoch - start, 3), index, util, mem, power) for epoch, index, util, mem, power in parsed]


def fingerprint(samples, indices=None):
    """Per GPU (ordered by index): samples, peak, median, p10, mean, zero fraction, memory peak."""
    by_gpu = {}
    for sample in samples:
        index, util, mem = sample[1], sample[2], sample[3]
        if indices is not None and index not in indices:
            continue
        by_gpu.setdefault(index, ([], []))
        if util is not None:
            by_gpu[index][0].append(util)
        if mem is not None:
            by_gpu[index][1].append(mem)
    result = []
    for index in sorted(by_gpu):
        utils, mems = by_gpu[index]
        result.append({
            'index': index,
            'samples': len(utils),
            'utilization_peak': max(utils) if utils else None,
            'utilization_median': percentile(utils, 50),
            'utilization_p10': percentile(utils, 10),
            'utilization_mean': round(mean(utils), 2) if utils else None,
            'zero_fraction': round(sum(1 for u in utils if u == 0) / float(len(utils)), 4) if utils else None,
            'memory_used_peak_mib': max(mems) if mems else None,
        })
    return result


def trace_document(host, method, interval_ms, started_epoch, samples, gpu_names=None):
    """The trace file's content (JSON), read back by the report."""
    return json.dumps({
        'host': host,
        'method': method,
        'interval_ms': interval_ms,
        'started_epoch': started_epoch,
        'gpu_names': gpu_names or {},
        'fields': ['t_s', 'index', 'utilization_percent', 'memory_used_mib', 'power_w'],
        'samples': [list(sample) for sample in samples],
    }, separators=(',', ':'))


def energy(samples, start_s, end_s):
    """Energy each GPU drew between start_s and end_s (seconds on the trace's clock): its power
    samples integrated with the trapezoid rule, the first and last interval cut at the window's
    edges by linear interpolation. Time before a GPU's first or after its last power sample is
    not counted; covered_s says how much of the window was.

    Returns per GPU (ordered by index) joules, mean_power_w, power_samples, covered_s; GPUs
    without any power sample are left out.
    """
    by_gpu = {}
    for sample in samples:
        if len(sample) > 4 and sample[4] is not None:
            by_gpu.setdefault(sample[1], []).append((float(sample[0]), float(sample[4])))
    result = []
    for index in sorted(by_gpu):
        points = sorted(by_gpu[index])
        joules = covered = 0.0
        for (t0, p0), (t1, p1) in zip(points, points[1:]):
            low, high = max(t0, start_s), min(t1, end_s)
            if high <= low or t1 <= t0:
                continue
            slope = (p1 - p0) / (t1 - t0)
            joules += (high - low) * ((p0 + slope * (low - t0)) + (p0 + slope * (high - t0))) / 2.0
            covered += high - low
        inside = [p for t, p in points if start_s <= t <= end_s]
        result.append({'index': index, 'joules': round(joules, 3), 'covered_s': round(covered, 3),
                       'power_samples': len(inside),
                       'mean_power_w': round(joules / covered, 2) if covered > 0 else None})
    return result


def run_energy(traces, window_start_epoch, window_end_epoch, output_tokens):
    """Energy of a benchmark run over every host's trace: per GPU and in all, joules per output
    token and output tokens per joule. traces: host -> trace document (started_epoch puts the
    window on its clock; hosts' clocks are taken as synchronised). Returns (record, None) or
    (None, why there is no figure)."""
    if window_start_epoch is None or window_end_epoch is None or window_end_epoch <= window_start_epoch:
        return None, 'the benchmark recorded no sweep window'
    gpus = []
    for host in sorted(traces or {}):
        trace = traces[host] or {}
        started = trace.get('started_epoch')
        if not isinstance(started, (int, float)):
            continue
        names = trace.get('gpu_names') or {}
        for gpu in energy(trace.get('samples') or [], window_start_epoch - started, window_end_epoch - started):
            gpu.update({'host': host, 'name': names.get(str(gpu['index']))})
            if output_tokens:
                gpu['joules_per_output_token'] = round(gpu['joules'] / output_tokens, 4)
                gpu['output_tokens_per_joule'] = round(output_tokens / gpu['joules'], 4) if gpu['joules'] > 0 else None
            gpus.append(gpu)
    if not traces:
        return None, 'no GPU trace was read'
    if not gpus:
        methods = sorted(set((traces[h] or {}).get('method') or '?' for h in traces or {}))
        return None, ('no power draw was sampled (sampler %s): no GPU on this node, or a sampler that reads no '
                      'power' % (', '.join(methods) or 'none'))
    total = sum(gpu['joules'] for gpu in gpus)
    return {
        'window_s': round(window_end_epoch - window_start_epoch, 3),
        'joules': round(total, 3),
        'output_tokens': output_tokens,
        'joules_per_output_token': round(total / output_tokens, 4) if output_tokens else None,
        'output_tokens_per_joule': round(output_tokens / total, 4) if total > 0 else None,
        'gpus': gpus,
    }, None
