# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's metrics collector: GPU and collection state as node exporter textfiles.

Every interval it asks nvidia-smi the queries gpu_facts and gpu_residency ask (their parsers,
module_utils/nvidia_smi.py) and one for the sensors (power, temperature, clocks), and reads the
files the plays leave on the node (docs/CONTRACTS.md): the build's BUILD_INFO.json, the drain's
state file, the RPC weight cache's record (its size against its bound, module_utils/rpc_cache.py),
the RPC manifest (is each server listening, module_utils/exposure.py), the benchmark's last-run
record. It writes two files into the node exporter's textfile directory, each whole or not at all
(module_utils/metrics_text.py). Role monitoring copies these files to the node with the
collection's package layout, so they import each other as they do here (standard library only).

The decisions are pure functions of text and data, tested on captured answers; `main` only runs
commands, reads files and writes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import calendar
import json
import os
import re
import shutil
import sys
import time

try:  # Python 3 on the nodes; the import sanity test loads this module under Python 3 too
    from http.client import HTTPConnection, HTTPException
except ImportError:  # pragma: no cover
    HTTPConnection = HTTPException = None

from ansible_collections.gpulab.inference.plugins.module_utils import endpoint_rule, exposure, nvidia_smi, rpc_cache
from ansible_collections.gpulab.inference.plugins.module_utils.metrics_text import family, render, write_atomic
# The guard's bounded runner: a command that does not finish in its limit is rc 124.
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_guard import run

# The sensors no gpu_facts query reads. nvidia-smi --help-query-gpu: power.draw in W (a float),
# temperature.gpu in degrees C, clocks.sm and clocks.mem in MHz (the current clocks).
SENSOR_QUERY_FIELDS = ('index', 'power.draw', 'temperature.gpu', 'clocks.sm', 'clocks.mem')
SENSOR_QUERY_ARGS = ['--query-gpu=' + ','.join(SENSOR_QUERY_FIELDS), nvidia_smi.CSV_FORMAT_ARG]
HEALTH_LIMIT_S = 3
DEFAULT_INTERVAL_S = 15
GPU_FILE = 'gpulab-gpu.prom'
STATE_FILE = 'gpulab-state.prom'
MIB = 1024 * 1024
MHZ = 1000 * 1000
# last-run.json's `headline` (report.headline) figures exported, with their metric and meaning.
BENCH_HEADLINE = (
    ('decode_tok_s', 'gpulab_bench_decode_tok_s', 'Decode speed of one stream in the last benchmark, tokens/s.'),
    ('prefill_tok_s', 'gpulab_bench_prefill_tok_s', 'Prefill speed of one stream in the last benchmark, tokens/s.'),
    ('ttft_s', 'gpulab_bench_ttft_seconds', 'Median time to first token of one stream in the last benchmark.'),
    ('best_aggregate_tok_s', 'gpulab_bench_best_aggregate_tok_s',
     'Best aggregate output speed over the concurrency sweep of the last benchmark, tokens/s.'),
)
_UTC_STAMP = re.compile(r'\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z')


class NodeMetricsError(ValueError):
    """An answer or a file the collector cannot read; the message names it."""


def _optional_float(value, field, line):
    value = value.strip()
    if nvidia_smi.is_not_available(value):
        return None
    try:
        return float(value)
    except ValueError:
        raise NodeMetricsError('nvidia-smi field %s is %r, expected a number or N/A, in line: %r'
                               % (field, value, line)) from None


def parse_sensor_query(output):
    """The answer to SENSOR_QUERY_ARGS as {index: {power_w, temperature_c, clock_sm_mhz, clock_mem_mhz}};
    a value the GPU does not report ([N/A], [Not Supported]) is None."""
    sensors = {}
    for line in (output or '').splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(',')]
        if len(fields) != len(SENSOR_QUERY_FIELDS):
            raise NodeMetricsError('nvidia-smi --query-gpu answered %d fields, expected %d (%s), in line: %r'
                                   % (len(fields), len(SENSOR_QUERY_FIELDS), ','.join(SENSOR_QUERY_FIELDS), line))
        index = _optional_float(fields[0], 'index', line)
        if index is None or index != int(index):
            raise NodeMetricsError('nvidia-smi field index is %r in line: %r' % (fields[0], line))
        if int(index) in sensors:
            raise NodeMetricsError('nvidia-smi --query-gpu listed GPU index %d twice' % int(index))
        sensors[int(index)] = {
            'power_w': _optional_float(fields[1], 'power.draw', line),
            'temperature_c': _optional_float(fields[2], 'temperature.gpu', line),
            'clock_sm_mhz': _optional_float(fields[3], 'clocks.sm', line),
            'clock_mem_mhz': _optional_float(fields[4], 'clocks.mem', line),
        }
    return sensors


def _gpu_labels(gpu):
    return {'gpu': str(gpu['index']), 'uuid': gpu['uuid'], 'name': gpu['name']}


def _per_gpu(gpus, value):
    """[(labels, value)] for the GPUs where value(gpu) is not None."""
    samples = []
    for gpu in gpus:
        measured = value(gpu)
        if measured is not None:
            samples.append((_gpu_labels(gpu), measured))
    return samples


def _scaled(value, factor):
    return None if value is None else value * factor


def gpu_families(gpus, sensors, processes):
    """Metric families of the GPUs (parse_gpu_query), their sensors (parse_sensor_query, {} when
    that query failed) and the processes holding memory on them (parse_compute_apps_query)."""
    sensors = sensors or {}

    def sensor(key, factor=1):
        return lambda gpu: _scaled((sensors.get(gpu['index']) or {}).get(key), factor)

    by_uuid = dict((gpu['uuid'], gpu) for gpu in gpus)
    process_samples = []
    for process in processes:
        gpu = by_uuid.get(process['gpu_uuid'])
        if gpu is None or process['used_memory_mib'] is None:
            continue
        labels = dict(_gpu_labels(gpu), pid=str(process['pid']), process=process['process_name'])
        process_samples.append((labels, process['used_memory_mib'] * MIB))
    return [
        family('gpulab_gpu_memory_used_bytes', 'GPU memory in use (nvidia-smi memory.used).', 'gauge',
               _per_gpu(gpus, lambda gpu: _scaled(gpu['memory_used_mib'], MIB))),
        family('gpulab_gpu_memory_total_bytes', 'GPU memory in all (nvidia-smi memory.total).', 'gauge',
               _per_gpu(gpus, lambda gpu: _scaled(gpu['memory_total_mib'], MIB))),
        family('gpulab_gpu_utilization_ratio', 'Share of the last sample period a kernel ran (utilization.gpu / 100).',
               'gauge', _per_gpu(gpus, lambda gpu: _scaled(gpu['utilization_gpu_pct'], 0.01))),
        family('gpulab_gpu_power_watts', 'Board power draw (power.draw).', 'gauge', _per_gpu(gpus, sensor('power_w'))),
        family('gpulab_gpu_temperature_celsius', 'GPU core temperature (temperature.gpu).', 'gauge',
               _per_gpu(gpus, sensor('temperature_c'))),
        family('gpulab_gpu_clock_sm_hertz', 'Current SM clock (clocks.sm).', 'gauge',
               _per_gpu(gpus, sensor('clock_sm_mhz', MHZ))),
        family('gpulab_gpu_clock_memory_hertz', 'Current memory clock (clocks.mem).', 'gauge',
               _per_gpu(gpus, sensor('clock_mem_mhz', MHZ))),
        family('gpulab_gpu_process_memory_used_bytes', 'GPU memory a process holds (nvidia-smi --query-compute-apps).',
               'gauge', process_samples),
    ]


def collector_families(name, results, now):
    """Whether each query or file of this collector pass worked ({what: bool}), and when it ran."""
    return [
        family('gpulab_collector_success', 'Whether the metrics collector could read this source in its last pass.',
               'gauge', [({'collector': name, 'source': source}, 1 if ok else 0) for source, ok in sorted(results.items())]),
        family('gpulab_collector_last_run_timestamp_seconds', 'When the metrics collector last wrote this file.',
               'gauge', [({'collector': name}, round(now, 3))]),
    ]


def _load_json(text, what):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise NodeMetricsError('%s is not JSON: %s' % (what, exc)) from None


def build_families(build_info_text):
    """gpulab_build_info{build_id} 1 from BUILD_INFO.json (no sample without a build)."""
    info = _load_json(build_info_text, 'BUILD_INFO.json')
    samples = []
    if info is not None:
        build = info.get('build_id') if isinstance(info, dict) else None
        if not isinstance(build, str) or not re.match(r'\A[0-9a-f]{4,64}\Z', build):
            raise NodeMetricsError('BUILD_INFO.json build_id %r is not a hex build id' % (build,))
        samples.append(({'build_id': build}, 1))
    return [family('gpulab_build_info', 'The llama.cpp build this node runs (current/BUILD_INFO.json).', 'gauge', samples)]


def utc_stamp_seconds(stamp):
    """Epoch seconds of a '%Y-%m-%dT%H:%M:%SZ' stamp (the drain's and the benchmark's), or None."""
    if not isinstance(stamp, str) or not _UTC_STAMP.match(stamp):
        return None
    return calendar.timegm(time.strptime(stamp, '%Y-%m-%dT%H:%M:%SZ'))


def drain_families(state_text, mtime):
    """Whether the drain's state file is present, since when (its `created`, else the file's time)
    and how many services it lists as stopped."""
    present = state_text is not None
    samples_since, samples_entries = [], []
    if present:
        try:
            state = json.loads(state_text)
        except ValueError:
            state = None  # a torn or foreign file: present, since the file's time
        state = state if isinstance(state, dict) else {}
        since = utc_stamp_seconds(state.get('created'))
        samples_since.append(({}, since if since is not None else round(mtime or 0)))
        entries = state.get('entries')
        samples_entries.append(({}, len(entries) if isinstance(entries, list) else 0))
    return [
        family('gpulab_drain_state_present', 'Whether the drain state file is present: services are stopped for the '
               'collection and not yet restored.', 'gauge', [({}, 1 if present else 0)]),
        family('gpulab_drain_since_timestamp_seconds', 'When the present drain began.', 'gauge', samples_since),
        family('gpulab_drain_entries', 'Services the present drain stopped.', 'gauge', samples_entries),
    ]


def rpc_cache_families(status):
    """The RPC weight cache against its bound, from rpc_cache.cache_status (None: not a worker)."""
    size, bound, files, over = [], [], [], []
    if status is not None:
        size.append(({}, status['size_bytes']))
        files.append(({}, status['files']))
        over.append(({}, 1 if status['over_bound'] else 0))
        if status.get('max_bytes') is not None:
            bound.append(({}, status['max_bytes']))
    return [
        family('gpulab_rpc_cache_size_bytes', "Bytes in the RPC servers' weight cache.", 'gauge', size),
        family('gpulab_rpc_cache_bound_bytes', 'The bound the last deploy kept the weight cache to.', 'gauge', bound),
        family('gpulab_rpc_cache_files', 'Tensor files in the weight cache.', 'gauge', files),
        family('gpulab_rpc_cache_over_bound', 'Whether the weight cache holds more than its bound.', 'gauge', over),
    ]


def rpc_server_families(manifest_text, sockets):
    """gpulab_rpc_server_up per endpoint of the RPC manifest (servers.json): 1 while a socket
    listens on its address (or a wildcard one) and port (exposure.listening_sockets' entries)."""
    manifest = _load_json(manifest_text, 'the RPC manifest')
    samples = []
    if manifest is not None:
        if not isinstance(manifest, dict) or not isinstance(manifest.get('endpoints'), list):
            raise NodeMetricsError('the RPC manifest has no endpoints list')
        address = manifest.get('address')
        for position, endpoint in enumerate(manifest['endpoints']):
            port = endpoint.get('port') if isinstance(endpoint, dict) else None
            if isinstance(port, bool) or not isinstance(port, int):
                raise NodeMetricsError('the RPC manifest endpoints entry %d has no port' % position)
            listening = any(item['port'] == port and item['address'] in (address, '0.0.0.0', '::')
                            for item in sockets)
            samples.append(({'instance_index': str(endpoint.get('instance', position)), 'port': str(port)},
                            1 if listening else 0))
    return [family('gpulab_rpc_server_up', 'Whether the ggml RPC server of the manifest listens on its port.',
                   'gauge', samples)]


def firewall_families(table, loaded):
    """gpulab_rpc_firewall_table_loaded{table}: None when this node has no RPC firewall to check."""
    samples = [] if loaded is None else [({'table': table}, 1 if loaded else 0)]
    return [family('gpulab_rpc_firewall_table_loaded', "Whether the RPC servers' nftables table is loaded.",
                   'gauge', samples)]


def health_families(url, healthy):
    """gpulab_head_healthy{url}: None when this node serves no API."""
    samples = [] if healthy is None else [({'url': url}, 1 if healthy else 0)]
    return [family('gpulab_head_healthy', "Whether the head's health URL answers 200.", 'gauge', samples)]


def bench_families(last_run_text):
    """When the last benchmark finished and its headline figures (last-run.json's optional
    `headline`, report.headline's keys), for the alert on a decode speed below it."""
    record = _load_json(last_run_text, 'last-run.json')
    record = record if isinstance(record, dict) else {}
    finished = utc_stamp_seconds(record.get('finished'))
    headline = record.get('headline') if isinstance(record.get('headline'), dict) else {}
    families = [family('gpulab_bench_finished_timestamp_seconds', 'When the last benchmark finished.', 'gauge',
                       [] if finished is None else [({}, finished)])]
    for key, name, help_text in BENCH_HEADLINE:
        value = headline.get(key)
        usable = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        families.append(family(name, help_text, 'gauge', [({}, float(value))] if usable else []))
    return families


# ---- on the node -----------------------------------------------------------------------------

def read_text(path):
    """A file's text, or None when there is none (or no path)."""
    if not path:
        return None
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def gpu_pass(args, log):
    results, gpus, sensors, processes = {}, [], {}, []
    for source, query, parse in (('gpu', nvidia_smi.GPU_QUERY_ARGS, nvidia_smi.parse_gpu_query),
                                 ('sensors', SENSOR_QUERY_ARGS, parse_sensor_query),
                                 ('processes', nvidia_smi.COMPUTE_APPS_QUERY_ARGS, nvidia_smi.parse_compute_apps_query)):
        rc, out, err = run([args.nvidia_smi] + query)
        try:
            if rc != 0:
                raise NodeMetricsError('%s exited %d: %s' % (args.nvidia_smi, rc, (err or out).strip()[:300]))
            value = parse(out)
        except ValueError as exc:
            log('%s: %s' % (source, exc))
            results[source] = False
            continue
        results[source] = True
        if source == 'gpu':
            gpus = value
        elif source == 'sensors':
            sensors = value
        else:
            processes = value
    return gpu_families(gpus, sensors, processes) + collector_families('gpu', results, time.time())


def _cache_status(record_path):
    record = rpc_cache.parse_record(read_text(record_path))
    if record_path is None or not os.path.exists(record_path):
        return None
    files = []
    if record is not None:
        try:
            names = os.listdir(record['path'])
        except (IOError, OSError):
            names = []
        for name in names:
            if rpc_cache.is_cache_file(name):
                try:
                    files.append({'name': name, 'size_bytes': os.stat(os.path.join(record['path'], name)).st_size})
                except OSError:
                    continue  # removed since the listing
    try:
        stat = os.statvfs(record['path'] if record is not None else os.path.dirname(record_path))
        free = stat.f_bavail * stat.f_frsize
    except (IOError, OSError):
        free = 0
    return rpc_cache.cache_status(record, files, free)


def _healthy(url):
    """One GET of the head's health URL (plain HTTP on the node itself): True on 200.

    http.client, not urllib: this runs as the collector's own program, without ansible-core's
    module_utils.urls, and a health check wants no redirects or proxies from the environment."""
    try:
        scheme, host, port, path = endpoint_rule.parse_url(url, 'health_url')
        if scheme != 'http':
            return False
        connection = HTTPConnection(host, port or 80, timeout=HEALTH_LIMIT_S)
        try:
            connection.request('GET', path or '/')
            return connection.getresponse().status == 200
        finally:
            connection.close()
    except (HTTPException, OSError, ValueError):
        return False


def state_pass(args, log):
    results, families = {}, []

    def source(name, build):
        try:
            families.extend(build())
            results[name] = True
        except (ValueError, KeyError, TypeError) as exc:
            log('%s: %s' % (name, exc))
            results[name] = False

    source('build', lambda: build_families(read_text(args.build_info)))

    def drain():
        try:
            mtime = os.stat(args.drain_state).st_mtime
        except (OSError, TypeError):
            mtime = None
        return drain_families(read_text(args.drain_state), mtime)
    source('drain', drain)
    source('rpc_cache', lambda: rpc_cache_families(_cache_status(args.rpc_cache_record)))

    def servers():
        sockets = []
        for table in ('tcp', 'tcp6'):
            text = read_text('/proc/net/' + table)
            if text is not None:
                sockets += exposure.listening_sockets(text, '/proc/net/' + table)
        return rpc_server_families(read_text(args.rpc_manifest), sockets)
    source('rpc_servers', servers)

    def firewall():
        if not args.nft_table:
            return firewall_families(None, None)
        nft = shutil.which('nft') or '/usr/sbin/nft'
        rc = run([nft, 'list', 'table', 'inet', args.nft_table])[0]
        return firewall_families(args.nft_table, rc == 0)
    source('rpc_firewall', firewall)
    source('health', lambda: health_families(args.health_url, _healthy(args.health_url) if args.health_url else None))
    source('bench', lambda: bench_families(read_text(args.bench_last_run)))
    return families + collector_families('state', results, time.time())


def parse_args(argv):
    parser = argparse.ArgumentParser(description='Write GPU and gpulab.inference state metrics for the node exporter.')
    parser.add_argument('--textfile-dir', required=True, help="the node exporter's textfile collector directory")
    parser.add_argument('--nvidia-smi', default='nvidia-smi')
    parser.add_argument('--build-info')
    parser.add_argument('--drain-state')
    parser.add_argument('--rpc-cache-record')
    parser.add_argument('--rpc-manifest')
    parser.add_argument('--bench-last-run')
    parser.add_argument('--nft-table', help='the RPC firewall table to check (workers with the firewall)')
    parser.add_argument('--health-url', help="the head's health URL (the engine's health_path), probed every pass")
    parser.add_argument('--interval-s', type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument('--once', action='store_true', help='write both files once, then exit')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def log(message):
        sys.stderr.write('gpulab-metrics: %s\n' % message)
        sys.stderr.flush()

    while True:
        started = time.time()
        for name, collect in ((GPU_FILE, gpu_pass), (STATE_FILE, state_pass)):
            try:
                write_atomic(os.path.join(args.textfile_dir, name), render(collect(args, log)))
            except (IOError, OSError, ValueError) as exc:
                log('%s not written: %s' % (name, exc))
        if args.once:
            return 0
        time.sleep(max(1.0, args.interval_s - (time.time() - started)))


if __name__ == '__main__':
    # run on the node as a program (its wrapper script), not as part of a module
    raise SystemExit(main())
