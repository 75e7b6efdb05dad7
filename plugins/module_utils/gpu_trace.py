# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU utilisation traces: parsing nvidia-smi's loop output and the fingerprint of a trace.

A trace is a list of samples (t_s, gpu_index, utilization_percent, memory_used_mib), t_s in
seconds from the trace's start. The fingerprint of a GPU is what shows how busy it was and how
often it idled: peak, median, p10, mean, and the fraction of samples at 0 % (llama.cpp's
sequential dispatch over RPC leaves each GPU idle while the others compute).
"""

from __future__ import annotations

import datetime
import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import mean, percentile

# nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms N
# (with units dropped; the capture /work/shared/fixtures/llama.cpp-h200/util-trace.csv keeps them)
LOOP_FIELDS = ('timestamp', 'index', 'utilization.gpu', 'memory.used')
LOOP_ARGS = ['--query-gpu=' + ','.join(LOOP_FIELDS), '--format=csv,noheader,nounits']
_TIMESTAMP_FORMAT = '%Y/%m/%d %H:%M:%S.%f'
_NUMBER_RE = re.compile(r'^\s*(\d+(?:\.\d+)?)\s*(%|MiB)?\s*\Z')


class TraceParseError(ValueError):
    """A line of nvidia-smi's loop output this parser cannot read."""


def parse_loop_line(line):
    """(epoch seconds, index, utilization %, memory used MiB) of one loop line; None for a blank line.

    Utilization or memory that nvidia-smi cannot read (N/A, [N/A]) is None.
    """
    if not line.strip():
        return None
    fields = [field.strip() for field in line.split(',')]
    if len(fields) != len(LOOP_FIELDS):
        raise TraceParseError('expected %d fields (%s), got %d in line %r'
                              % (len(LOOP_FIELDS), ', '.join(LOOP_FIELDS), len(fields), line))
    try:
        stamp = datetime.datetime.strptime(fields[0], _TIMESTAMP_FORMAT)
    except ValueError:
        raise TraceParseError('timestamp %r is not YYYY/MM/DD HH:MM:SS.mmm in line %r' % (fields[0], line))
    if not fields[1].isdigit():
        raise TraceParseError('index %r is not a number in line %r' % (fields[1], line))
    epoch = (stamp - datetime.datetime(1970, 1, 1)).total_seconds()
    return epoch, int(fields[1]), _number(fields[2], 'utilization.gpu', line), _number(fields[3], 'memory.used', line)


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
    return [(round(epoch - start, 3), index, util, mem) for epoch, index, util, mem in parsed]


def fingerprint(samples, indices=None):
    """Per GPU (ordered by index): samples, peak, median, p10, mean, zero fraction, memory peak."""
    by_gpu = {}
    for _t, index, util, mem in samples:
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
        'fields': ['t_s', 'index', 'utilization_percent', 'memory_used_mib'],
        'samples': [list(sample) for sample in samples],
    }, separators=(',', ':'))
