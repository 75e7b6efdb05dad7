# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference report as data and markdown, as pure functions (the plots are drawn by the
inference_report module from what these return).

The report reads like a paper's tables: residency per device with the aggregate and the
imbalance, prefill and decode, the utilisation fingerprint, the share of the memory-bandwidth
limit reached, and the exact server command lines and build id. Inputs a run does not have
(no memory plan yet, no vLLM) are left out with a line saying so, never guessed.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import DEFINITIONS
from ansible_collections.gpulab.inference.plugins.module_utils.gpu_trace import run_energy
from ansible_collections.gpulab.inference.plugins.module_utils.prometheus_series import report_section

MIB_PER_GIB = 1024.0

# Peak memory bandwidth in TB/s (10^12 bytes/s) by the name nvidia-smi reports, from NVIDIA's
# data sheets. A GPU missing here gets no bandwidth figure: the fraction is omitted, not guessed.
GPU_MEMORY_BANDWIDTH_TB_S = {
    'NVIDIA H200': 4.8,
    'NVIDIA H200 NVL': 4.8,
    'NVIDIA H100 80GB HBM3': 3.35,
    'NVIDIA H100 PCIe': 2.0,
    'NVIDIA H100 NVL': 3.9,
    'NVIDIA A100-SXM4-80GB': 2.039,
    'NVIDIA A100 80GB PCIe': 1.935,
    'NVIDIA A100-SXM4-40GB': 1.555,
    'NVIDIA L40S': 0.864,
    'NVIDIA RTX PRO 6000 Blackwell Workstation Edition': 1.792,
    'NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition': 1.792,
    'NVIDIA RTX PRO 6000 Blackwell Server Edition': 1.792,
    'NVIDIA GeForce RTX 5090': 1.792,
    'NVIDIA GeForce RTX 4090': 1.008,
}

PROCESS_KINDS = ('llama-server', 'rpc-server', 'vllm', 'other')
# What a unit's or an executable's name holds for each kind, the first match wins (the RPC server
# before the head: ggml-rpc-server).
PROCESS_MARKERS = (('rpc-server', 'rpc-server'), ('llama-server', 'llama-server'), ('vllm', 'vllm'))


def report_dir_name(inventory, timestamp):
    """`<inventory>-<timestamp>`, with anything but letters, digits, '.', '_' and '-' replaced."""
    safe = re.sub(r'[^A-Za-z0-9._-]+', '_', inventory or 'inventory').strip('_') or 'inventory'
    return '%s-%s' % (safe, timestamp)


REPORT_STAMP = re.compile(r'\A[0-9]{8}T[0-9]{6}Z\Z')


def reports_to_prune(names, inventory, keep):
    """The report directories of `inventory` beyond the `keep` newest, oldest first: names of the
    form report_dir_name(inventory, <UTC stamp>), compared by their stamp. Anything else in the
    directory (another inventory's reports, a file of the operator's) is never listed."""
    if keep < 1:
        raise ValueError('keep is %r: keep at least the report just written (1 or more)' % (keep,))
    prefix = report_dir_name(inventory, '')
    ours = sorted(name for name in names if name.startswith(prefix) and REPORT_STAMP.match(name[len(prefix):]))
    return ours[:max(0, len(ours) - keep)]


def trace_file_name(host):
    return 'trace-%s.json' % re.sub(r'[^A-Za-z0-9._-]+', '_', host)


def process_kind(process):
    """llama-server, rpc-server, vllm or other, from the systemd unit or the executable's name."""
    unit = process.get('systemd_unit') or ''
    path = process.get('process_name') or ''
    name = os.path.basename(path)
    for text in (unit, name):
        for marker, kind in PROCESS_MARKERS:
            if marker in text.lower():
                return kind
    # vLLM's engine holds the GPU memory as the Python of its environment
    # (/opt/gpulab/vllm/venv-0.24.0/bin/python3.12 where no unit names it).
    if re.search(r'(\A|/)[^/]*vllm[^/]*/', path.lower()):
        return 'vllm'
    return 'other'


def residency_table(residency_by_host):
    """One row per GPU (host order as given, then index): memory used, total, and by process kind.

    residency_by_host: host -> gpu_residency's `residency` (or None for a host without one).
    """
    rows = []
    for host in residency_by_host:
        residency = residency_by_host[host] or {}
        for gpu in residency.get('gpus') or []:
            kinds = dict((kind, 0) for kind in PROCESS_KINDS)
            for process in residency.get('processes') or []:
                if process.get('gpu_index') == gpu['index'] and process.get('used_memory_mib'):
                    kinds[process_kind(process)] += process['used_memory_mib']
            used = gpu.get('memory_used_mib')
            rows.append({
                'host': host,
                'index': gpu['index'],
                'name': gpu.get('name'),
                'memory_used_mib': used,
                'memory_total_mib': gpu.get('memory_total_mib'),
                'by_process_mib': kinds,
                'unattributed_mib': max(0, (used or 0) - sum(kinds.values())) if used is not None else None,
            })
    return rows


def residency_totals(rows):
    used = [row['memory_used_mib'] for row in rows if row['memory_used_mib'] is not None]
    if not used:
        return {'aggregate_used_gib': None, 'imbalance_gib': None, 'devices': len(rows)}
    return {
        'aggregate_used_gib': round(sum(used) / MIB_PER_GIB, 2),
        'imbalance_gib': round((max(used) - min(used)) / MIB_PER_GIB, 2),
        'devices': len(rows),
    }


# The process that holds a planned device's memory: an RPC device is its worker's rpc-server, a
# local one the head's llama-server.
PLAN_KIND_PROCESS = {'rpc': 'rpc-server', 'local': 'llama-server'}


def _error_percent(planned, measured):
    if measured is None or not planned:
        return None
    return round(100.0 * (measured - planned) / planned, 1)


def vllm_planned_per_gpu(vllm):
    """What plan.json (vllm_plan) puts on each GPU, in MiB: the weights of the largest stage, the KV
    cache (the pinned --kv-cache-memory-bytes, else the estimate) and the reserve for activations,
    CUDA graphs and communication. None without an estimate."""
    estimate = (vllm or {}).get('estimate') or {}
    if estimate.get('weights_mib') is None:
        return None
    pinned = vllm.get('kv_cache_memory_bytes')
    kv = pinned / MIB_PER_GIB / MIB_PER_GIB if pinned is not None else (estimate.get('kv_cache_gib') or 0) * MIB_PER_GIB
    reserve = (estimate.get('reserve_gib') or 0) * MIB_PER_GIB
    return {'weights_mib': estimate['weights_mib'], 'kv_cache_mib': round(kv, 1), 'compute_mib': round(reserve, 1),
            'total_mib': round(estimate['weights_mib'] + kv + reserve, 1), 'kv_pinned': pinned is not None}


def vllm_against_measured(vllm, rows):
    """Each GPU vLLM holds memory on, its plan next to what vLLM's processes hold there; one
    unmeasured row when no GPU shows vLLM (the residency was not read, or vLLM was not up)."""
    planned = vllm_planned_per_gpu(vllm)
    if planned is None:
        return []
    serving = [row for row in rows if row['by_process_mib'].get('vllm')]
    targets = [(row['host'], row['index'], row['by_process_mib']['vllm']) for row in serving] or [(None, None, None)]
    return [{'device': 'GPU%s' % index if index is not None else 'each GPU', 'host': host, 'gpu_index': index,
             'process': 'vllm', 'layers': vllm.get('label'),
             'planned_weights_mib': planned['weights_mib'], 'planned_kv_cache_mib': planned['kv_cache_mib'],
             'planned_compute_mib': planned['compute_mib'], 'planned_context_mib': None,
             'planned_mib': planned['total_mib'], 'measured_mib': measured,
             'error_percent': _error_percent(planned['total_mib'], measured)} for host, index, measured in targets]


def _split_text(split):
    return ','.join('%g' % v for v in split) if isinstance(split, list) else str(split)


def _label(labels, engine):
    """An engine's label from role common's engine table (gpulab_engines[...].label), else its name."""
    return (labels or {}).get(engine) or engine


def layout_choices(memory_plan=None, vllm=None, labels=None):
    """The layout each engine runs, why, and what it turned down with the findings (report.json
    `layouts`): llama.cpp's from memory-plan.json (its `choice`, null when the operator set the
    split and the context), vLLM's from plan.json's `choice`. labels: engine name -> label."""
    out = []
    if memory_plan:
        choice = memory_plan.get('choice') or None
        options = memory_plan.get('options') or {}
        layout = 'tensor split %s (%s), context %s, %s GPU layers' % (
            _split_text(memory_plan.get('tensor_split')),
            ', '.join('%s %s' % (d.get('name'), d.get('layer_range') or '-') for d in memory_plan.get('devices') or []),
            options.get('ctx_size', 'n/a'), memory_plan.get('n_gpu_layers', 'n/a'))
        if choice:
            reasons = [choice.get('ctx_reason'), choice.get('split_reason')]
        else:
            reasons = ['llama_server_tensor_split %s and llama_server_ctx_size %s as set' % (
                _split_text(options.get('tensor_split')), options.get('ctx_size', 'n/a'))]
        rejected = [{'label': '%s %s' % (r.get('label'), _split_text(r.get('tensor_split'))),
                     'findings': [str(f) for f in r.get('findings') or []]} for r in (choice or {}).get('rejected') or []]
        out.append({'engine': 'llama_cpp', 'label': _label(labels, 'llama_cpp'), 'layout': layout,
                    'reasons': [r for r in reasons if r],
                    'rejected': rejected, 'alternatives': []})
    if vllm:
        choice = vllm.get('choice') or {}
        pinned = vllm.get('kv_cache_memory_bytes')
        layout = '%s, max_model_len %s, KV cache %s' % (
            vllm.get('label') or 'n/a', vllm.get('max_model_len', 'n/a'),
            'pinned at %d bytes per GPU' % pinned if pinned is not None else "sized by vLLM's profiling")
        out.append({'engine': 'vllm', 'label': _label(labels, 'vllm'), 'layout': layout,
                    'reasons': [choice['reason']] if choice.get('reason') else [],
                    'rejected': [{'label': r.get('label'), 'findings': [str(f) for f in r.get('findings') or []]}
                                 for r in choice.get('rejected') or []],
                    'alternatives': [{'label': r.get('label'), 'findings': [str(f) for f in r.get('findings') or []]}
                                     for r in choice.get('alternatives') or []]})
    return out


def _backend_sampling(commands):
    """on or off where a llama-server command line was read (its --backend-sampling), else None."""
    lines = [line for host_lines in (commands or {}).values() for line in host_lines or [] if 'llama-server' in line]
    if not lines:
        return None
    return 'on' if any('--backend-sampling' in line.split() for line in lines) else 'off'


def serving_intent(memory_plan=None, vllm=None, labels=None, commands=None):
    """What gpulab_serving_intent set for each engine (report.json `serving_intent`): the intent, the
    target concurrency and each value with its reason, from memory-plan.json's `intent` (llama.cpp's
    slots; its backend sampling as the head's command line shows it) and plan.json's `intent` (vLLM's
    batch settings and the layout's reason). An engine whose plan records no intent is left out."""
    out = []
    record = (memory_plan or {}).get('intent') if isinstance(memory_plan, dict) else None
    if record:
        options = memory_plan.get('options') or {}
        choice = memory_plan.get('choice') or {}
        settings = [{'setting': 'llama_server_parallel', 'value': record.get('parallel'),
                     'reason': record.get('parallel_reason')},
                    {'setting': 'llama_server_ctx_size', 'value': options.get('ctx_size'),
                     'reason': choice.get('ctx_reason') or 'as set'}]
        sampling = _backend_sampling(commands)
        if sampling is not None:
            settings.append({'setting': 'llama_server_backend_sampling', 'value': sampling,
                             'reason': "the head's command line (auto: on under interactive where the output layer "
                                       "is on one of the head's GPUs, off under throughput)"})
        out.append({'engine': 'llama_cpp', 'label': _label(labels, 'llama_cpp'), 'intent': record.get('intent'),
                    'concurrency': record.get('concurrency'), 'settings': settings})
    record = (vllm or {}).get('intent') if isinstance(vllm, dict) else None
    if record:
        reasons = record.get('reasons') or {}
        by_intent = set(record.get('set_by_intent') or [])
        sizes = record.get('cudagraph_capture_sizes')
        graphs = (' '.join('%s' % size for size in sizes) if sizes
                  else 'up to %s' % record['max_cudagraph_capture_size'] if record.get('max_cudagraph_capture_size')
                  else 'none')
        settings = [{'setting': 'vllm_server_%s' % name, 'value': value, 'reason': reasons.get(name),
                     'by_intent': name in by_intent}
                    for name, value in (('max_num_seqs', record.get('max_num_seqs')),
                                        ('max_num_batched_tokens', record.get('max_num_batched_tokens')),
                                        ('cudagraph_capture_sizes', graphs))]
        if record.get('layout_reason'):
            settings.append({'setting': 'layout', 'value': vllm.get('label'), 'reason': record['layout_reason']})
        out.append({'engine': 'vllm', 'label': _label(labels, 'vllm'), 'intent': record.get('intent'),
                    'concurrency': record.get('concurrency'), 'settings': settings})
    return out


def plan_against_measured(memory_plan, rows, vllm=None):
    """Each planned device next to what its process holds on its GPU after the start.

    memory_plan: memory-plan.json (devices with host, kind, gpu_index and the planned MiB);
    rows: residency_table's rows; vllm: plan.json (vllm_against_measured, after llama.cpp's).
    measured_mib is None where the device has no GPU (a CPU RPC server) or its GPU was not read;
    error_percent is (measured - planned) / planned.
    """
    by_gpu = dict(((row['host'], row['index']), row) for row in rows)
    result = []
    for device in (memory_plan or {}).get('devices') or []:
        process = PLAN_KIND_PROCESS.get(device.get('kind'))
        row = by_gpu.get((device.get('host'), device.get('gpu_index')))
        measured = None
        if row is not None and process is not None and device.get('gpu_index') is not None:
            measured = row['by_process_mib'].get(process)
        planned = device.get('total_mib')
        error = _error_percent(planned, measured)
        result.append({
            'device': device.get('name'), 'host': device.get('host'), 'gpu_index': device.get('gpu_index'),
            'process': process, 'layers': device.get('layer_range'),
            'planned_weights_mib': device.get('weights_mib'), 'planned_kv_cache_mib': device.get('kv_cache_mib'),
            'planned_compute_mib': device.get('compute_mib_estimate'), 'planned_context_mib': device.get('context_mib'),
            'planned_mib': planned, 'measured_mib': measured, 'error_percent': error,
        })
    return result + vllm_against_measured(vllm, rows)


def rpc_transport_table(transport_by_host):
    """One row per RPC server: connections over RDMA and TCP since it started, whether its build
    negotiates RDMA, and the warning when RDMA was expected and a connection stayed on TCP.

    transport_by_host: host -> what the bench step registered for gpulab.inference.roce_rpc_transport
    looped over the host's RPC servers ({'results': [{<loop var>: {'name': ...}, 'rdma': ..., ...}]}),
    or a skipped result for a host without RPC servers.
    """
    rows = []
    for host in transport_by_host or {}:
        for result in (transport_by_host[host] or {}).get('results') or []:
            if not isinstance(result, dict) or result.get('skipped') or 'rdma' not in result:
                continue
            rows.append({
                'host': host,
                'server': (result.get(result.get('ansible_loop_var') or 'item') or {}).get('name'),
                'rdma': result.get('rdma'),
                'tcp': result.get('tcp'),
                'rdma_capable': result.get('rdma_capable'),
                'warning': result.get('warning') or '',
            })
    return rows


def rpc_cache_section(cache_by_host, vllm=None):
    """Each RPC worker's weight cache as the bench step read it (role llama_rpc_server's entry point
    cache_status, module rpc_cache's query) and one line for what the table leaves out.

    cache_by_host: host -> that registered result ({'status': {...}}); a host without one (None, a
    skipped result) is passed over. vllm: the vLLM plan, given when vLLM serves (no RPC servers).
    Returns {'workers': [rows of the workers whose cache is on], 'note': a sentence or None}."""
    rows, off = [], []
    for host in sorted(cache_by_host or {}):
        registered = cache_by_host[host]
        status = registered.get('status') if isinstance(registered, dict) else None
        if not isinstance(status, dict):
            continue
        if not status.get('enabled'):
            off.append(host)
            continue
        rows.append({'host': host, 'path': status.get('path'), 'size_gib': status.get('size_gib'),
                     'bound_gib': status.get('bound_gib'), 'files': status.get('files'),
                     'over_bound': bool(status.get('over_bound')), 'summary': status.get('summary')})
    note = None
    if vllm:
        note = 'vLLM serves this run: there is no RPC weight cache.'
    elif not rows and not off:
        note = 'No RPC worker\'s weight cache was read: this run has no RPC workers.'
    elif off:
        note = 'The weight cache is off (llama_rpc_server_cache_enabled is false) on %s.' % (
            'every RPC worker' if not rows else ', '.join(off))
    return {'workers': [] if vllm else rows, 'note': note}


def bandwidth_limit(decode_tok_s, bytes_per_token, rows):
    """Share of the memory-bandwidth limit a decode rate reaches, or why it is omitted.

    Each token reads its weights once; with layers split over devices that run one after the
    other (llama.cpp's RPC split), the limit is 1 / sum_i(bytes_i / bandwidth_i), where
    bytes_i is the share of bytes_per_token on device i, taken as its share of the memory the
    serving processes (llama-server, rpc-server, vllm) hold.
    """
    if not decode_tok_s:
        return {'omitted': 'no decode figure'}
    if not bytes_per_token:
        return {'omitted': 'the model weights are unknown (no GGUF header read)'}
    serving = []
    for row in rows:
        held = sum(row['by_process_mib'][kind] for kind in ('llama-server', 'rpc-server', 'vllm'))
        if held:
            serving.append((row, held))
    if not serving:
        return {'omitted': 'no serving process holds GPU memory, so the weights cannot be placed on devices'}
    unknown = sorted(set(row['name'] or '?' for row, _held in serving if row['name'] not in GPU_MEMORY_BANDWIDTH_TB_S))
    if unknown:
        return {'omitted': 'memory bandwidth unknown for %s' % ', '.join(unknown)}
    total = float(sum(held for _row, held in serving))
    seconds = sum((held / total) * bytes_per_token / (GPU_MEMORY_BANDWIDTH_TB_S[row['name']] * 1e12)
                  for row, held in serving)
    limit = 1.0 / seconds
    return {
        'limit_tok_s': round(limit, 1),
        'fraction': round(decode_tok_s / limit, 4),
        'decode_tok_s': decode_tok_s,
        'bytes_per_token': bytes_per_token,
        'devices': [{'host': row['host'], 'index': row['index'], 'name': row['name'],
                     'share': round(held / total, 4), 'bandwidth_tb_s': GPU_MEMORY_BANDWIDTH_TB_S[row['name']]}
                    for row, held in serving],
    }


def utilisation_table(sampler_by_host):
    rows = []
    for host in sampler_by_host:
        sampler = sampler_by_host[host] or {}
        for gpu in sampler.get('gpus') or []:
            row = dict(gpu)
            row['host'] = host
            row['method'] = sampler.get('method')
            rows.append(row)
    return rows


def headline(benchmark):
    """The figures a reader looks for first: concurrency 1 prefill/decode, the sweep's best aggregate."""
    if not benchmark or not benchmark.get('levels'):
        return None
    levels = benchmark['levels']
    first = levels[0]
    best = max(levels, key=lambda level: level.get('aggregate_output_tok_s') or 0)
    server = first.get('server') or {}
    return {
        'concurrency': first['concurrency'],
        'prefill_tok_s': first.get('prefill_tok_s'),
        'decode_tok_s': first.get('decode_tok_s'),
        'decode_tok_s_cv_percent': first.get('decode_tok_s_cv_percent'),
        'ttft_s': (first.get('ttft_s') or {}).get('p50'),
        'ci95': first.get('ci95') or {},
        'cached_prompt_tokens': first.get('cached_prompt_tokens'),
        'goodput': first.get('goodput'),
        'server_prefill_tok_s': server.get('prefill_tok_s'),
        'server_decode_tok_s': server.get('decode_tok_s'),
        'decode_ratio': server.get('decode_ratio'),
        'best_aggregate_tok_s': best.get('aggregate_output_tok_s'),
        'best_aggregate_concurrency': best['concurrency'],
        'aggregate_rises': all((b.get('aggregate_output_tok_s') or 0) > (a.get('aggregate_output_tok_s') or 0)
                               for a, b in zip(levels, levels[1:])),
        # A sparse MoE model can dip at concurrency 2 (two tokens read about twice the expert
        # weights) and still gain at the widest level; the gain says how much batching bought.
        'aggregate_gain': _ratio(best.get('aggregate_output_tok_s'), first.get('aggregate_output_tok_s')),
    }


def llama_bench_against_served(records, served_decode_tok_s):
    """llama-bench's decode figure for the served build, model and layout (its `-o json` records),
    beside what the server decoded at concurrency 1: their ratio and the server's time per token
    over llama-bench's (1/served - 1/bench, ms). None without a tg record."""
    if not isinstance(records, list):
        return None
    tg = [r for r in records if isinstance(r, dict) and not r.get('n_prompt') and r.get('n_gen')
          and isinstance(r.get('avg_ts'), (int, float)) and r['avg_ts'] > 0]
    if not tg:
        return None
    record = max(tg, key=lambda r: r['n_gen'])
    bench = float(record['avg_ts'])
    out = {'test': 'tg%d' % record['n_gen'], 'tok_s': round(bench, 1),
           'stddev_tok_s': round(float(record.get('stddev_ts') or 0), 1),
           'served_ratio': None, 'server_ms_per_token_over_bench': None}
    if served_decode_tok_s:
        out['served_ratio'] = round(float(served_decode_tok_s) / bench, 3)
        out['server_ms_per_token_over_bench'] = round(1000.0 / served_decode_tok_s - 1000.0 / bench, 2)
    return out


def _ratio(numerator, denominator):
    if not numerator or not denominator:
        return None
    return round(float(numerator) / denominator, 2)


def serving_gpus(rows):
    """GPUs on which a serving process (llama-server, rpc-server, vllm) holds memory."""
    return [row for row in rows if any(row['by_process_mib'][kind] for kind in ('llama-server', 'rpc-server', 'vllm'))]


def run_conditions(benchmark, rows):
    """What a reader needs to judge the figures: requests, warm-up, profile, host load, the
    prompts' seed and cached tokens, and the spread warnings."""
    bench = benchmark or {}
    conditions = dict(bench.get('conditions') or {})
    prompt = bench.get('prompt') or {}
    levels = (bench.get('levels') or []) + (bench.get('rates') or [])
    conditions.update({
        'prompt_seed': prompt.get('seed'),
        'prompt_seed_source': prompt.get('seed_source'),
        'requests': sum(level.get('requests') or 0 for level in levels),
        'cached_prompt_tokens': sum(level.get('cached_prompt_tokens') or 0 for level in levels),
        'prompt_tokens': sum((level.get('vllm') or {}).get('total_input_tokens') or 0 for level in levels),
        'serving_gpus': len(serving_gpus(rows)),
        'spread_warnings': [w for w in bench.get('warnings') or [] if 'spreads' in w],
    })
    return conditions


def definitions():
    """DEFINITIONS as records (report.json; report.md renders the same)."""
    return [dict(zip(('figure', 'key', 'definition', 'vllm_bench_serve', 'guidellm'), entry)) for entry in DEFINITIONS]


def vllm_summary(doc):
    """bench-summary.json: each level of both sweeps under `vllm bench serve`'s result keys,
    with the run's identity, so that a notebook reads it beside vLLM's own --save-result files."""
    bench = doc.get('benchmark') or {}
    out = {'inventory': doc['inventory'], 'created': doc['created'], 'backend': bench.get('engine'),
           'model_id': bench.get('model'), 'base_url': bench.get('base_url'),
           'prompt': bench.get('prompt'), 'request': bench.get('request'), 'objective': bench.get('objective'),
           'energy': doc.get('energy'), 'levels': []}
    endpoints = [(bench.get('label') or bench.get('engine'), bench)] + [(c.get('label'), c) for c in bench.get('compare') or []]
    for label, endpoint in endpoints:
        for level in (endpoint.get('levels') or []) + (endpoint.get('rates') or []):
            entry = {'endpoint': label, 'backend': endpoint.get('engine'),
                     'max_concurrency': None if level.get('request_rate') is not None else level['concurrency'],
                     'request_rate': level.get('request_rate') if level.get('request_rate') is not None else 'inf'}
            entry.update(level.get('vllm') or {})
            out['levels'].append(entry)
    return out


def request_lines(requests):
    """requests.jsonl: one JSON object a line, as pandas.read_json(lines=True) reads it."""
    return ''.join(json.dumps(record, sort_keys=True) + '\n' for record in requests or [])


def endpoints_side_by_side(benchmark, traces):
    """The first endpoint and each compared one (llm_benchmark's compare), with the energy of its
    own sweeps' window; [] without a comparison."""
    bench = benchmark or {}
    if not bench.get('compare'):
        return []
    cond = bench.get('conditions') or {}
    entries = [dict(bench, window_start_epoch=cond.get('window_start_epoch'), window_end_epoch=cond.get('window_end_epoch'))]
    entries += bench['compare']
    out = []
    for entry in entries:
        levels, rates = entry.get('levels') or [], entry.get('rates') or []
        energy, _why = run_energy(traces or {}, entry.get('window_start_epoch'), entry.get('window_end_epoch'),
                                  sum(lv.get('output_tokens') or 0 for lv in levels + rates))
        out.append({'label': entry.get('label') or entry.get('engine'), 'engine': entry.get('engine'),
                    'model': entry.get('model'), 'base_url': entry.get('base_url'), 'levels': levels, 'rates': rates,
                    'joules_per_output_token': (energy or {}).get('joules_per_output_token')})
    return out


def build_document(inventory, created, benchmark=None, residency=None, sampler=None, build_info=None,
                   commands=None, memory_plan=None, vllm=None, rpc_transport=None, llama_bench=None, traces=None,
                   warnings=None, rpc_cache=None, engine_labels=None, prometheus=None):
    """Everything the report says, as one JSON-able dict (report.json). Each request's record is
    left to requests.jsonl. warnings: what the deployment wants said at the top (an API the
    operator chose to serve without a key). engine_labels: engine name -> label (role common's
    engine table), for the layout and serving-intent sections. prometheus: the run's range queries
    and Prometheus's answers (module_utils/prometheus_series.py), None where it is not deployed."""
    rows = residency_table(residency or {})
    benchmark = dict(benchmark) if benchmark else None
    if benchmark is not None:
        benchmark.pop('requests', None)
    weights = (benchmark or {}).get('model_weights') or {}
    head = headline(benchmark)
    conditions = run_conditions(benchmark, rows)
    output_tokens = sum(level.get('output_tokens') or 0
                        for level in ((benchmark or {}).get('levels') or []) + ((benchmark or {}).get('rates') or []))
    energy, energy_omitted = run_energy(traces or {}, conditions.get('window_start_epoch'),
                                        conditions.get('window_end_epoch'), output_tokens)
    utilisation = utilisation_table(sampler or {})
    return {
        'inventory': inventory,
        'created': created,
        'warnings': list(warnings or []),
        'engine': (benchmark or {}).get('engine'),
        'model': (benchmark or {}).get('model'),
        'model_weights': weights or None,
        'build': build_info or None,
        'commands': commands or {},
        'residency': {'devices': rows, 'totals': residency_totals(rows)},
        'benchmark': benchmark,
        'conditions': conditions,
        'definitions': definitions(),
        'side_by_side': endpoints_side_by_side(benchmark, traces),
        'headline': head,
        'utilisation': utilisation,
        'prometheus': report_section(prometheus, utilisation),
        'energy': energy,
        'energy_omitted': energy_omitted,
        'bandwidth': bandwidth_limit((head or {}).get('decode_tok_s'), weights.get('bytes_read_per_token'), rows),
        'memory_plan': memory_plan or None,
        'layouts': layout_choices(memory_plan, vllm, engine_labels),
        'serving_intent': serving_intent(memory_plan, vllm, engine_labels, commands),
        'plan_against_measured': plan_against_measured(memory_plan, rows, vllm),
        'rpc_transport': rpc_transport_table(rpc_transport),
        'rpc_cache': rpc_cache_section(rpc_cache, vllm),
        'vllm': vllm or None,
        'llama_bench': llama_bench_against_served(llama_bench, (head or {}).get('decode_tok_s')),
    }


# --------------------------------------------------------------------------- plot data
def residency_bars(doc):
    """Labels and stacked GiB per process kind (plus the memory no process accounts for)."""
    rows = doc['residency']['devices']
    labels = ['%s GPU %s' % (r['host'], r['index']) for r in rows]
    stacks = []
    for kind in PROCESS_KINDS:
        stacks.append((kind, [r['by_process_mib'][kind] / MIB_PER_GIB for r in rows]))
    stacks.append(('not attributed', [(r['unattributed_mib'] or 0) / MIB_PER_GIB for r in rows]))
    totals = [(r['memory_total_mib'] or 0) / MIB_PER_GIB for r in rows]
    return labels, [s for s in stacks if any(s[1])], totals


def plot_endpoints(doc):
    """The endpoints the plots draw, each (label, its sweep): every endpoint of a side-by-side run
    (llm_benchmark's compare), else the one benchmarked, named by its label or engine."""
    if doc.get('side_by_side'):
        return [(entry['label'], entry) for entry in doc['side_by_side']]
    bench = doc.get('benchmark') or {}
    if not bench:
        return []
    return [(bench.get('label') or bench.get('engine') or 'endpoint', bench)]


def throughput_series(doc):
    """Per endpoint, its concurrency levels' aggregate and per-stream decode (and llama-server's
    own decode where the server reported it)."""
    out = []
    for label, entry in plot_endpoints(doc):
        levels = entry.get('levels') or []
        out.append({
            'label': label,
            'concurrency': [lv['concurrency'] for lv in levels],
            'aggregate_tok_s': [lv['aggregate_output_tok_s'] for lv in levels],
            'decode_tok_s': [lv['decode_tok_s'] for lv in levels],
            'server_decode_tok_s': [(lv.get('server') or {}).get('decode_tok_s') for lv in levels],
        })
    return out


def latency_series(doc):
    """Per endpoint, TTFT and TPOT percentiles per concurrency level, for the latency plot."""
    out = []
    for label, entry in plot_endpoints(doc):
        levels = entry.get('levels') or []
        out.append({
            'label': label,
            'concurrency': [lv['concurrency'] for lv in levels],
            'ttft_p50_s': [lv['ttft_s']['p50'] for lv in levels],
            'ttft_p99_s': [lv['ttft_s']['p99'] for lv in levels],
            'tpot_p50_ms': [None if lv['tpot_s']['p50'] is None else 1000.0 * lv['tpot_s']['p50'] for lv in levels],
            'tpot_p99_ms': [None if lv['tpot_s']['p99'] is None else 1000.0 * lv['tpot_s']['p99'] for lv in levels],
        })
    return out


def pareto_series(doc):
    """Per endpoint and level, output tokens per second per GPU (aggregate over the GPUs holding the
    served model) against tokens per second per stream, with each endpoint's own front;
    ({gpus, endpoints: [{label, points, frontier}]}, None) or (None, why it cannot be drawn)."""
    endpoints = plot_endpoints(doc)
    if not any((entry.get('levels') or []) + (entry.get('rates') or []) for _label, entry in endpoints):
        return None, 'no benchmark was run'
    gpus = (doc.get('conditions') or {}).get('serving_gpus')
    if not gpus:
        return None, 'no GPU holds the served model (no GPU on this node, or the server runs on the CPU): tokens per GPU are undefined'
    out = []
    for label, entry in endpoints:
        levels = (entry.get('levels') or []) + (entry.get('rates') or [])
        points = [{'label': ('c%d' % lv['concurrency']) if lv.get('request_rate') is None else '%s req/s' % lv['request_rate'],
                   'per_gpu_tok_s': round(lv['aggregate_output_tok_s'] / gpus, 2),
                   'per_stream_tok_s': lv['decode_tok_s']}
                  for lv in levels if lv.get('aggregate_output_tok_s') and lv.get('decode_tok_s')]
        if points:
            out.append({'label': label, 'points': points, 'frontier': pareto_front(points)})
    if not out:
        return None, 'no level decoded'
    return {'gpus': gpus, 'endpoints': out}, None


def pareto_front(points):
    """Labels of the points no other point beats on both axes (more per GPU and more per stream)."""
    front = []
    for point in points:
        beaten = any(other is not point and other['per_gpu_tok_s'] >= point['per_gpu_tok_s']
                     and other['per_stream_tok_s'] >= point['per_stream_tok_s']
                     and (other['per_gpu_tok_s'], other['per_stream_tok_s']) != (point['per_gpu_tok_s'], point['per_stream_tok_s'])
                     for other in points)
        if not beaten:
            front.append(point['label'])
    return front


def idle_gpus_reason(doc):
    """Why the GPU plots are flat, when they are: no serving process holds GPU memory (a CPU lab, a
    server on the CPU). None when the model is on a GPU."""
    rows = doc['residency']['devices']
    if not rows:
        return 'no GPU on this node: nvidia-smi read none'
    if not serving_gpus(rows):
        return 'no serving process holds GPU memory: the server runs on the CPU, or there is no GPU on this node'
    return None
