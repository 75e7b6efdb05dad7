#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_report
short_description: Write the inference report - markdown, JSON and plots - from the facts of a bench run
version_added: 0.1.0
description:
  - Runs on the controller (C(delegate_to=localhost)). Writes C(<output_dir>/<inventory>-<timestamp>/)
    with C(report.md), C(report.json) and five PNG plots - GPU memory residency per device
    stacked by process (llama-server, RPC servers, vLLM, other), utilisation over time per GPU,
    decode throughput versus concurrency, TTFT and TPOT percentiles per level, and tokens per
    second per GPU against per stream (Pareto); C(bench-summary.json), each level under
    C(vllm bench serve)'s result keys; C(requests.jsonl), one line per request; and each host's
    utilisation trace as C(trace-<host>.json). A plot without data says why (no GPU on this node).
  - The throughput, latency and Pareto plots draw every endpoint of a side-by-side run (O(benchmark)'s
    C(compare)), one colour per endpoint, named by its label; the Pareto plot draws each endpoint's own front.
  - The serving intent each plan records (O(memory_plan)'s and O(vllm)'s C(intent)) and what it set, each value
    with its reason, in a section of its own; engines named by O(engine_labels).
  - The markdown defines each figure once (TTFT, TPOT, ITL per chunk and per token, E2E, per-stream
    and aggregate decode, goodput) with its name in C(vllm bench serve) and GuideLLM, gives the
    run's conditions (requests, warm-up, profile, load average, prompt seed, cached prompt tokens,
    spread warnings), 95% intervals, goodput, and the energy the GPUs drew over the sweeps from
    the samplers' power draw (joules per output token, tokens per joule, per GPU and in all).
  - The markdown gives per-device residency with aggregate and imbalance, prefill and decode at
    concurrency 1 with llama-server's own figures, the whole sweep, the utilisation fingerprint,
    the share of the memory-bandwidth limit reached (omitted for GPUs whose bandwidth is not in
    the collection's table), the server command lines and the build id.
  - Every input is optional; a section without input says so (a run without a memory plan or
    without vLLM still gets a report).
  - The RPC weight cache of each worker - directory, GiB held, its bound, files, whether it is over
    the bound - from O(rpc_cache), or one line saying why there is none.
  - Each input, and each trace file, is checked for the shape the report reads before anything is
    written; one that is not (a hand-edited or truncated file, an entry that is not a mapping, a
    field of the wrong type) fails naming the input, the host or file, the entry and the field.
  - Needs matplotlib on the controller.
author:
  - gpulab.inference contributors (@gpulab)
requirements:
  - matplotlib (on the controller)
options:
  output_dir:
    description: Directory under which the report's directory is created.
    type: path
    required: true
  inventory_name:
    description: Names the report's directory together with O(timestamp).
    type: str
    required: true
  warnings:
    description: Sentences said first in the report, e.g. an API served off loopback without a key by the operator's choice.
    type: list
    elements: str
    default: []
  keep:
    description:
      - Report directories of O(inventory_name) kept in O(output_dir), the new one included; older ones are
        removed, oldest first (C(bench_report_keep)). Other directories and files there are left alone.
    type: int
    default: 20
  timestamp:
    description: UTC time stamp in the directory name; empty takes the current time (C(YYYYMMDDTHHMMSSZ)).
    type: str
    default: ""
  benchmark:
    description: The C(benchmark) return value of M(gpulab.inference.llm_benchmark).
    type: dict
  residency:
    description: Host name to the C(residency) return value of M(gpulab.inference.gpu_residency).
    type: dict
  sampler:
    description: Host name to the C(sampler) return value of M(gpulab.inference.gpu_sampler).
    type: dict
  traces:
    description: Host name to the path, on the controller, of that host's trace file (fetched).
    type: dict
  build_info:
    description: The served build's C(BUILD_INFO.json).
    type: dict
  commands:
    description: Host name to the command lines of the serving processes on it.
    type: dict
  memory_plan:
    description:
      - The memory plan (C(memory-plan.json)), when one was made; the report puts each planned
        device next to what its process holds on its GPU (MiB and error %), and shows the layout
        with its C(choice) - the reasons and the splits turned down with their findings - and the serving intent
        it records (C(intent) - the intent, the target concurrency, the slots it set and why).
    type: raw
  vllm:
    description:
      - The vLLM plan (C(/etc/gpulab/vllm/plan.json)), when vLLM serves; the report shows the layout
        with its C(choice) - the reason, the layouts turned down and those ranked lower - and each
        GPU's planned weights, KV cache (the pinned bytes) and reserve next to what vLLM holds there, and the
        serving intent it records (C(intent) - each batch setting it set with its reason, the layout's reason).
    type: raw
  llama_bench:
    description:
      - llama-bench's C(-o json) records for the served build, model and layout, when they were measured; the
        summary puts its decode figure beside the served one, with the server's time per token over it.
    type: raw
  rpc_transport:
    description:
      - Host name to what M(gpulab.inference.roce_rpc_transport) registered, looped over the host's
        RPC servers (C(results), one per server with its C(name) under the loop variable); hosts without RPC servers may
        give a skipped result. The report lists the RDMA and TCP connections per server and the
        warning when a RoCE fabric fell back to TCP.
    type: raw
  rpc_cache:
    description:
      - Host name to what role C(llama_rpc_server)'s entry point C(cache_status) registered on each RPC worker
        (M(gpulab.inference.rpc_cache) with C(state=query)); the report gives each
        worker's weight cache - directory, GiB held, bound, files, over its bound - or one line saying why there is
        none (vLLM, no RPC workers, the cache off). Results without a C(status) (skipped) are passed over.
    type: raw
  prometheus:
    description:
      - Where Prometheus runs (role C(monitoring)) - C(source), what the report names it by - with C(window) and
        C(queries) of the filter C(gpulab.inference.prometheus_range_queries) and C(results), what
        M(ansible.builtin.uri) registered for each query, in order. The report's section From Prometheus gives per
        GPU the utilisation, power and memory Prometheus recorded over the run (peak, median, the share of points at
        0 %) beside the sampler's fingerprint, and says each query that failed; a failed query never fails the
        report. Left out where Prometheus is not deployed; the report then says so and has no such section.
    type: dict
  engine_labels:
    description:
      - Engine name to the label the report names it by (role C(common)'s C(gpulab_engines[...].label)), for the
        layout and serving-intent sections; an engine not listed is named by its table name.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written; the summary is still returned.
  diff_mode:
    support: none
    description: Writes a new directory every run; no diff.
seealso:
  - module: gpulab.inference.llm_benchmark
  - module: gpulab.inference.gpu_sampler
  - module: gpulab.inference.gpu_residency
"""

EXAMPLES = r"""
- name: Write the report on the controller
  gpulab.inference.inference_report:
    output_dir: "{{ playbook_dir }}/../reports"
    inventory_name: lab
    benchmark: "{{ bench.benchmark }}"
    residency: "{{ {'node-a': residency.residency} }}"
  delegate_to: localhost
  run_once: true
  register: report

- name: Print the summary
  ansible.builtin.debug:
    msg: "{{ report.summary }}"
"""

RETURN = r"""
report_dir:
  description: The report's directory.
  returned: success
  type: str
  sample: /src/gpulab/reports/lab-20261130T120000Z
pruned:
  description: Older report directories of the inventory removed (to be removed in check mode), oldest first.
  returned: success
  type: list
  elements: str
  sample: [lab-20261101T080000Z]
files:
  description: Paths of what was written.
  returned: success
  type: dict
  sample:
    markdown: /src/gpulab/reports/lab-20261130T120000Z/report.md
    json: /src/gpulab/reports/lab-20261130T120000Z/report.json
    residency_png: /src/gpulab/reports/lab-20261130T120000Z/residency.png
    utilisation_png: /src/gpulab/reports/lab-20261130T120000Z/utilisation.png
    throughput_png: /src/gpulab/reports/lab-20261130T120000Z/throughput.png
    latency_png: /src/gpulab/reports/lab-20261130T120000Z/latency.png
    pareto_png: /src/gpulab/reports/lab-20261130T120000Z/pareto.png
    bench_summary: /src/gpulab/reports/lab-20261130T120000Z/bench-summary.json
    requests: /src/gpulab/reports/lab-20261130T120000Z/requests.jsonl
summary:
  description: The summary table, one markdown line per item.
  returned: always
  type: list
  elements: str
headline:
  description:
    - Prefill and decode at the lowest concurrency, the best aggregate, whether aggregate rises with
      concurrency at every step, and aggregate_gain (best aggregate over the lowest concurrency's).
  returned: always
  type: dict
bandwidth:
  description: The share of the memory-bandwidth limit reached, or why it is omitted.
  returned: always
  type: dict
"""

import datetime
import json
import os
import shutil
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpulab.inference.plugins.module_utils import report, report_markdown
from ansible_collections.gpulab.inference.plugins.module_utils.report_checks import (
    ReportInputError,
    check_inputs,
    check_trace,
)

IMAGES = {'residency': 'residency.png', 'utilisation': 'utilisation.png', 'throughput': 'throughput.png',
          'latency': 'latency.png', 'pareto': 'pareto.png', 'requests': 'requests.jsonl'}
COLOURS = {'llama-server': '#1f77b4', 'rpc-server': '#ff7f0e', 'vllm': '#2ca02c', 'other': '#9467bd',
           'not attributed': '#c7c7c7'}
# One colour per endpoint of a side-by-side run, in the report's order (matplotlib's first four).
ENDPOINT_COLOURS = ('#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd')

try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
    MATPLOTLIB_IMPORT_ERROR = traceback.format_exc()
else:
    MATPLOTLIB_IMPORT_ERROR = None


def _no_data(axis, text):
    axis.text(0.5, 0.5, text, ha='center', va='center', fontsize=12, transform=axis.transAxes)
    axis.set_xticks([])
    axis.set_yticks([])


def draw_residency(doc, path):
    labels, stacks, totals = report.residency_bars(doc)
    fig, axis = plt.subplots(figsize=(max(7, 1.5 * len(labels) + 3), 5))
    if not labels:
        _no_data(axis, 'no GPU residency was read')
    else:
        xs = list(range(len(labels)))
        bottoms = [0.0] * len(labels)
        for kind, values in stacks:
            axis.bar(xs, values, width=0.5, bottom=bottoms, label=kind, color=COLOURS.get(kind))
            bottoms = [b + v for b, v in zip(bottoms, values)]
        axis.hlines(totals, [x - 0.3 for x in xs], [x + 0.3 for x in xs], colors='black', linewidth=2, label='capacity')
        for x, used in zip(xs, bottoms):
            axis.annotate('%.2f GiB' % used, (x, used), textcoords='offset points', xytext=(0, 4), ha='center', fontsize=9)
        axis.set_xticks(xs)
        axis.set_xticklabels(labels, rotation=15)
        axis.set_xlim(-0.7, len(labels) - 0.3)
        axis.set_ylim(0, max(totals + bottoms) * 1.12 or 1)
        axis.set_ylabel('GPU memory (GiB)')
        axis.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=9)
    idle = report.idle_gpus_reason(doc)
    if labels and idle:
        axis.text(0.5, 0.5, idle, ha='center', va='center', fontsize=10, transform=axis.transAxes, wrap=True)
    totals_doc = doc['residency']['totals']
    axis.set_title('GPU memory residency by process\naggregate %s GiB, imbalance %s GiB' % (
        totals_doc['aggregate_used_gib'], totals_doc['imbalance_gib']), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_utilisation(doc, traces, path):
    series = []
    for host in sorted(traces):
        trace = traces[host]
        names = trace.get('gpu_names') or {}
        by_gpu = {}
        for sample in trace.get('samples') or []:
            t_s, index, util = sample[0], sample[1], sample[2]
            if util is not None:
                by_gpu.setdefault(index, ([], []))
                by_gpu[index][0].append(t_s)
                by_gpu[index][1].append(util)
        for index in sorted(by_gpu):
            series.append(('%s GPU %s (%s)' % (host, index, names.get(str(index), '?')), by_gpu[index]))
    fig, axes = plt.subplots(max(len(series), 1), 1, figsize=(10, max(4.0, 2.2 * len(series) + 1.2)), sharex=True, squeeze=False)
    idle = report.idle_gpus_reason(doc)
    if not series:
        _no_data(axes[0][0], 'no utilisation trace' + ('' if not idle else ': ' + idle))
    for (label, (times, utils)), row in zip(series, axes):
        axis = row[0]
        axis.fill_between(times, utils, step='post', alpha=0.35, color='#1f77b4')
        axis.step(times, utils, where='post', color='#1f77b4', linewidth=1)
        ordered = sorted(utils)
        median = ordered[len(ordered) // 2]
        axis.axhline(median, color='#d62728', linestyle='--', linewidth=1, label='median')
        zero = 100.0 * sum(1 for u in utils if u == 0) / len(utils)
        axis.set_title('%s - peak %s %%, median %s %%, %.0f %% of samples at 0' % (label, max(utils), median, zero),
                       fontsize=9, loc='left')
        axis.set_ylim(0, 105)
        axis.set_ylabel('util %')
        axis.legend(loc='upper right', fontsize=8)
        if idle and not any(utils):
            axis.text(0.5, 0.5, idle, ha='center', va='center', fontsize=9, transform=axis.transAxes)
    axes[-1][0].set_xlabel('seconds since sampling started')
    fig.suptitle('GPU utilisation while the benchmark ran', fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _named(endpoint, text, several):
    """A legend entry: the endpoint's label first when the plot draws more than one."""
    return '%s: %s' % (endpoint, text) if several else text


def _concurrency_axis(axis, series):
    levels = sorted(set(x for data in series for x in data['concurrency']))
    axis.set_xscale('log', base=2)
    axis.set_xticks(levels)
    axis.set_xticklabels([str(x) for x in levels])
    axis.set_xlabel('concurrent streams')


def _nan(values):
    return [v if v is not None else float('nan') for v in values]


def draw_throughput(doc, path):
    """Aggregate (solid) and per-stream decode (dashed) against concurrency, one colour per endpoint."""
    series = [data for data in report.throughput_series(doc) if data['concurrency']]
    fig, axis = plt.subplots(figsize=(8, 5) if len(series) > 1 else (7, 4.5))
    if not series:
        _no_data(axis, 'no benchmark was run')
    else:
        several = len(series) > 1
        top_by_level = {}
        for data in series:
            for x, y in zip(data['concurrency'], data['aggregate_tok_s']):
                if y is not None:
                    top_by_level.setdefault(x, []).append(y)
        for number, data in enumerate(series):
            colour = ENDPOINT_COLOURS[number % len(ENDPOINT_COLOURS)]
            xs = data['concurrency']
            axis.plot(xs, _nan(data['aggregate_tok_s']), marker='o', color=colour,
                      label=_named(data['label'], 'aggregate output tok/s', several))
            axis.plot(xs, _nan(data['decode_tok_s']), marker='s', linestyle='--', color=colour,
                      label=_named(data['label'], 'decode tok/s per stream (client)', several))
            if any(v is not None for v in data['server_decode_tok_s']):
                axis.plot(xs, _nan(data['server_decode_tok_s']), marker='x', linestyle=':', color=colour,
                          label=_named(data['label'], 'decode tok/s per stream (llama-server timings)', several))
            for x, y in zip(xs, data['aggregate_tok_s']):
                if y is not None:
                    # the highest aggregate at a level is labelled above its point, the others below,
                    # so that two endpoints' figures do not meet
                    top = y >= max(top_by_level.get(x, [y]))
                    axis.annotate('%.1f' % y, (x, y), textcoords='offset points', xytext=(6, 6 if top else -13),
                                  ha='left', fontsize=9, color=colour)
        _concurrency_axis(axis, series)
        axis.set_ylabel('tokens per second')
        highest = max([v for data in series for v in data['aggregate_tok_s'] + data['decode_tok_s'] if v is not None] or [1])
        axis.set_ylim(0, highest * 1.15)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8 if several else 9, loc='upper left' if several else 'lower left')
    what = (' and '.join(data['label'] for data in series) if len(series) > 1
            else '%s, %s' % (doc.get('engine') or 'n/a', os.path.basename(doc.get('model') or 'n/a')))
    axis.set_title('Decode throughput versus concurrency\n%s' % what, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_latency(doc, path):
    """TTFT and TPOT, p50 (solid) and p99 (dashed), one colour per endpoint."""
    series = [data for data in report.latency_series(doc) if data['concurrency']]
    fig, (ttft, tpot) = plt.subplots(1, 2, figsize=(10, 4.5))
    if not series:
        _no_data(ttft, 'no benchmark was run')
        _no_data(tpot, 'no benchmark was run')
    else:
        several = len(series) > 1
        for axis, p50_key, p99_key, label in ((ttft, 'ttft_p50_s', 'ttft_p99_s', 'TTFT (s)'),
                                              (tpot, 'tpot_p50_ms', 'tpot_p99_ms', 'TPOT, first token excluded (ms)')):
            for number, data in enumerate(series):
                colour = ENDPOINT_COLOURS[number % len(ENDPOINT_COLOURS)]
                axis.plot(data['concurrency'], _nan(data[p50_key]), marker='o', color=colour,
                          label=_named(data['label'], 'p50', several))
                axis.plot(data['concurrency'], _nan(data[p99_key]), marker='^', linestyle='--', color=colour,
                          label=_named(data['label'], 'p99', several))
            _concurrency_axis(axis, series)
            axis.set_ylabel(label)
            axis.set_ylim(bottom=0)
            axis.grid(True, alpha=0.3)
            axis.legend(fontsize=9)
    fig.suptitle('Latency percentiles per concurrency level (definitions in report.md)', fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_pareto(doc, path):
    """Each endpoint's levels in its colour, its own front as a line; points on a front are filled."""
    data, why = report.pareto_series(doc)
    fig, axis = plt.subplots(figsize=(7, 4.5))
    if data is None:
        _no_data(axis, 'no Pareto plot:\n' + why.replace(': ', ':\n', 1))
    else:
        several = len(data['endpoints']) > 1
        for number, endpoint in enumerate(data['endpoints']):
            colour = ENDPOINT_COLOURS[number % len(ENDPOINT_COLOURS)] if several else '#1f77b4'
            front_colour = colour if several else '#d62728'
            frontier = set(endpoint['frontier'])
            for point in endpoint['points']:
                on_front = point['label'] in frontier
                fill = front_colour if on_front else ('white' if several else colour)
                axis.scatter(point['per_gpu_tok_s'], point['per_stream_tok_s'], color=fill,
                             edgecolors=front_colour if on_front else colour, zorder=3)
                axis.annotate(point['label'], (point['per_gpu_tok_s'], point['per_stream_tok_s']),
                              textcoords='offset points', xytext=(4, 4), fontsize=9, color=colour if several else 'black')
            front = sorted((p for p in endpoint['points'] if p['label'] in frontier), key=lambda p: p['per_gpu_tok_s'])
            axis.plot([p['per_gpu_tok_s'] for p in front], [p['per_stream_tok_s'] for p in front], color=front_colour,
                      linewidth=1, label=_named(endpoint['label'], 'Pareto front (no level beats it on both axes)', several))
        points = [p for endpoint in data['endpoints'] for p in endpoint['points']]
        axis.set_xlabel('output tok/s per GPU (aggregate / %d GPUs)' % data['gpus'])
        axis.set_ylabel('decode tok/s per stream')
        axis.set_xlim(0, 1.15 * max(p['per_gpu_tok_s'] for p in points))
        axis.set_ylim(0, 1.15 * max(p['per_stream_tok_s'] for p in points))
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8 if several else 9, loc='upper right' if several else 'lower left')
    axis.set_title('Throughput per GPU against speed per stream', fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_traces(module, paths):
    traces = {}
    for host, path in (paths or {}).items():
        try:
            with open(path) as handle:
                traces[host] = json.load(handle)
        except (IOError, OSError, ValueError) as exc:
            module.fail_json(msg='traces: cannot read the trace of %s at %s: %s' % (host, path, exc))
        try:
            check_trace(traces[host], host, path)
        except ReportInputError as exc:
            module.fail_json(msg=str(exc))
    return traces


def main():
    module = AnsibleModule(
        argument_spec=dict(
            output_dir=dict(type='path', required=True),
            inventory_name=dict(type='str', required=True),
            timestamp=dict(type='str', default=''),
            keep=dict(type='int', default=20),
            warnings=dict(type='list', elements='str', default=[]),
            benchmark=dict(type='dict'),
            residency=dict(type='dict'),
            sampler=dict(type='dict'),
            traces=dict(type='dict'),
            build_info=dict(type='dict'),
            commands=dict(type='dict'),
            memory_plan=dict(type='raw'),
            rpc_transport=dict(type='raw'),
            vllm=dict(type='raw'),
            llama_bench=dict(type='raw'),
            rpc_cache=dict(type='raw'),
            engine_labels=dict(type='dict', default={}),
            prometheus=dict(type='dict'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if plt is None:
        module.fail_json(msg=missing_required_lib('matplotlib', reason='to draw the report\'s plots on the controller')
                         + ' (pip install matplotlib into the Python that runs ansible-playbook; requirements.txt pins it)',
                         exception=MATPLOTLIB_IMPORT_ERROR)
    try:
        check_inputs(params)
    except ReportInputError as exc:
        module.fail_json(msg=str(exc))
    traces = read_traces(module, params['traces'])
    now = datetime.datetime.now(datetime.timezone.utc)
    timestamp = params['timestamp'] or now.strftime('%Y%m%dT%H%M%SZ')
    doc = report.build_document(params['inventory_name'], now.strftime('%Y-%m-%d %H:%M:%S UTC'),
                                benchmark=params['benchmark'], residency=params['residency'], sampler=params['sampler'],
                                build_info=params['build_info'], commands=params['commands'],
                                memory_plan=params['memory_plan'], vllm=params['vllm'],
                                rpc_transport=params['rpc_transport'], llama_bench=params['llama_bench'], traces=traces,
                                warnings=params['warnings'], rpc_cache=params['rpc_cache'],
                                engine_labels=params['engine_labels'], prometheus=params['prometheus'])
    report_dir = os.path.join(params['output_dir'], report.report_dir_name(params['inventory_name'], timestamp))
    files = dict((key, os.path.join(report_dir, name)) for key, name in
                 (('markdown', 'report.md'), ('json', 'report.json'), ('residency_png', IMAGES['residency']),
                  ('utilisation_png', IMAGES['utilisation']), ('throughput_png', IMAGES['throughput']),
                  ('latency_png', IMAGES['latency']), ('pareto_png', IMAGES['pareto']),
                  ('bench_summary', 'bench-summary.json'), ('requests', IMAGES['requests'])))
    try:
        existing = os.listdir(params['output_dir']) if os.path.isdir(params['output_dir']) else []
        pruned = report.reports_to_prune(existing + [os.path.basename(report_dir)], params['inventory_name'], params['keep'])
    except (OSError, ValueError) as exc:
        module.fail_json(msg='keep: %s' % exc)
    result = dict(changed=not module.check_mode, report_dir=report_dir, files=files, pruned=pruned,
                  summary=report_markdown.summary_lines(doc), headline=doc['headline'] or {}, bandwidth=doc['bandwidth'])
    if module.check_mode:
        module.exit_json(**result)
    if os.path.exists(report_dir):
        module.fail_json(msg='%s exists already: give another timestamp or remove it' % report_dir)
    try:
        os.makedirs(params['output_dir'], exist_ok=True)
        staging = tempfile.mkdtemp(prefix='.report-', dir=params['output_dir'])
    except OSError as exc:
        module.fail_json(msg='output_dir: cannot create a directory in %s: %s' % (params['output_dir'], exc))
    try:
        with open(os.path.join(staging, 'report.json'), 'w') as handle:
            json.dump(doc, handle, indent=2, sort_keys=True)
        with open(os.path.join(staging, 'report.md'), 'w') as handle:
            handle.write(report_markdown.render_markdown(doc, IMAGES))
        draw_residency(doc, os.path.join(staging, IMAGES['residency']))
        draw_utilisation(doc, traces, os.path.join(staging, IMAGES['utilisation']))
        draw_throughput(doc, os.path.join(staging, IMAGES['throughput']))
        draw_latency(doc, os.path.join(staging, IMAGES['latency']))
        draw_pareto(doc, os.path.join(staging, IMAGES['pareto']))
        with open(os.path.join(staging, 'bench-summary.json'), 'w') as handle:
            json.dump(report.vllm_summary(doc), handle, indent=2, sort_keys=True)
        with open(os.path.join(staging, IMAGES['requests']), 'w') as handle:
            handle.write(report.request_lines((params['benchmark'] or {}).get('requests')))
        for host, trace in traces.items():
            with open(os.path.join(staging, report.trace_file_name(host)), 'w') as handle:
                json.dump(trace, handle)
        os.chmod(staging, 0o755)
        os.rename(staging, report_dir)
    except Exception as exc:  # pylint: disable=broad-except
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg='writing the report failed: %s' % exc, exception=traceback.format_exc())
    # Only once the new report is in place: a failed run never costs an old one.
    for name in pruned:
        shutil.rmtree(os.path.join(params['output_dir'], name), ignore_errors=True)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
