# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""report.md from the report's document (module_utils/report.py builds it): the summary, the
tables, the definitions, the warnings, the layout chosen. Pure functions on the document's dict."""

from __future__ import annotations

import json

from ansible_collections.gpulab.inference.plugins.module_utils.report import MIB_PER_GIB, vllm_planned_per_gpu


def _fmt(value, digits=1, unit=''):
    if value is None:
        return 'n/a'
    if isinstance(value, float):
        return ('%.*f' % (digits, value)) + unit
    return '%s%s' % (value, unit)


def _gib(mib):
    return 'n/a' if mib is None else '%.2f' % (mib / MIB_PER_GIB)


def _table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join(' --- ' for _h in header) + '|']
    lines.extend('| ' + ' | '.join(str(cell) for cell in row) + ' |' for row in rows)
    return lines


def _transport_summary(rows):
    if not rows:
        return 'n/a'
    text = '%d / %d' % (sum(r['rdma'] or 0 for r in rows), sum(r['tcp'] or 0 for r in rows))
    warned = sum(1 for r in rows if r['warning'])
    return text + (' (%d warning%s, see RPC transport)' % (warned, '' if warned == 1 else 's') if warned else '')


def _bench_summary(bench):
    if not bench:
        return 'not measured'
    return '%s %s tok/s, %s, %s ms' % (bench['test'], _fmt(bench['tok_s']), _fmt(bench['served_ratio'], 3),
                                       _fmt(bench['server_ms_per_token_over_bench'], 2))


def _ci(pair, digits=1, scale=1.0):
    if not pair:
        return '(n/a)'
    return '[%.*f, %.*f]' % (digits, scale * pair[0], digits, scale * pair[1])


def _ms(value, digits=2):
    return _fmt(None if value is None else 1000.0 * value, digits)


def _energy_summary(doc):
    energy = doc.get('energy')
    if not energy:
        return 'not measured: %s' % (doc.get('energy_omitted') or 'n/a')
    return '%s, %s' % (_fmt(energy['joules_per_output_token'], 3), _fmt(energy['output_tokens_per_joule'], 3))


def _goodput(level):
    good = level.get('goodput')
    if not good:
        return 'n/a'
    return '%s (%d of %d)' % (_fmt(good['request_goodput'], 2), good['requests_good'], level['requests'])


def level_rows(levels):
    return [(lv['concurrency'] if lv.get('request_rate') is None else '%s req/s (peak %s)' % (lv['request_rate'], lv['concurrency']),
             '%d/%d' % (lv['requests_ok'], lv['requests_failed']),
             _fmt(lv['ttft_s']['p50'], 3), _fmt(lv['ttft_s']['p99'], 3),
             '%s %s' % (_fmt(lv['ttft_s']['mean'], 3), _ci((lv.get('ci95') or {}).get('ttft_s_mean'), 3)),
             '%s %s' % (_ms(lv['tpot_s']['mean']), _ci((lv.get('ci95') or {}).get('tpot_s_mean'), 2, 1000.0)),
             _ms(lv['itl_s']['p50']), _ms(lv['itl_s']['p99']), _ms((lv.get('itl_token_s') or {}).get('p50')),
             _fmt((lv.get('e2e_s') or {}).get('p50'), 3), _fmt(lv.get('cached_prompt_tokens')),
             _fmt(lv['prefill_tok_s']),
             '%s %s' % (_fmt(lv['decode_tok_s']), _ci((lv.get('ci95') or {}).get('decode_tok_s'))),
             _fmt(lv['decode_tok_s_cv_percent'], 2), _fmt(lv['aggregate_output_tok_s']), _goodput(lv),
             _fmt((lv.get('server') or {}).get('decode_tok_s')))
            for lv in levels]


LEVEL_HEADER = ('concurrency', 'ok/failed', 'TTFT p50 s', 'TTFT p99 s', 'TTFT mean s [95 % CI]', 'TPOT mean ms [95 % CI]',
                'ITL p50 ms (chunk)', 'ITL p99 ms (chunk)', 'ITL p50 ms (token)', 'E2E p50 s', 'prompt tokens cached',
                'prefill tok/s', 'decode tok/s per stream [95 % CI]', 'spread %', 'aggregate tok/s', 'goodput req/s',
                'llama-server decode tok/s')


def side_by_side_lines(doc):
    endpoints = doc.get('side_by_side') or []
    if not endpoints:
        return []
    described = ['%s (%s, %s, %s; %s J per output token over its sweeps)'
                 % (e['label'], e['engine'], e['model'], e['base_url'], _fmt(e['joules_per_output_token'], 4))
                 for e in endpoints]
    out = ['', '### Endpoints side by side', '',
           'The same prompts (seed and sizes above), levels and rates against each endpoint in turn, on the same '
           'nodes: %s.' % ', '.join(described), '']
    rows = []
    for position, level in enumerate((endpoints[0]['levels'] or []) + (endpoints[0]['rates'] or [])):
        for endpoint in endpoints:
            others = (endpoint['levels'] or []) + (endpoint['rates'] or [])
            if position >= len(others):
                continue
            lv = others[position]
            rows.append((level_name_short(lv), endpoint['label'], '%d/%d' % (lv['requests_ok'], lv['requests_failed']),
                         _fmt(lv['ttft_s']['p50'], 3), _ms(lv['tpot_s']['mean']), _ms(lv['itl_s']['p50']),
                         _ms((lv.get('itl_token_s') or {}).get('p50')), _fmt(lv['decode_tok_s']),
                         _fmt(lv['aggregate_output_tok_s']), _fmt(lv.get('cached_prompt_tokens')), _goodput(lv)))
    out += _table(('level', 'endpoint', 'ok/failed', 'TTFT p50 s', 'TPOT mean ms', 'ITL p50 ms (chunk)',
                   'ITL p50 ms (token)', 'decode tok/s per stream', 'aggregate tok/s', 'prompt tokens cached',
                   'goodput req/s'), rows)
    return out


def level_name_short(level):
    if level.get('request_rate') is not None:
        return '%s req/s' % level['request_rate']
    return 'concurrency %d' % level['concurrency']


def conditions_lines(doc):
    cond = doc.get('conditions') or {}
    bench = doc.get('benchmark') or {}
    prompt = bench.get('prompt') or {}
    objective = bench.get('objective') or {}
    rows = [
        ('profile', cond.get('profile') or 'n/a'),
        ('requests (sweeps), warm-up requests', '%s, %s' % (cond.get('requests'), cond.get('warmup_requests', 'n/a'))),
        ('requests per level', cond.get('requests_per_level', 'n/a')),
        ('prompts', '%s of %s tokens (%s, %s to %s, at most %s off), seed %s (%s)' % (
            prompt.get('prompts', 'n/a'), prompt.get('target_tokens', 'n/a'), prompt.get('sizing', 'n/a'),
            _fmt(prompt.get('tokens_min')), _fmt(prompt.get('tokens_max')), _fmt(prompt.get('max_error_tokens')),
            prompt.get('seed', 'n/a'), prompt.get('seed_source', 'n/a'))),
        ('prompt tokens the server took from its cache', '%s of %s' % (cond.get('cached_prompt_tokens'),
                                                                       cond.get('prompt_tokens'))),
        ('objective (goodput)', 'TTFT <= %s s, TPOT <= %s ms'
         % (_fmt(objective.get('slo_ttft_s')), _fmt(objective.get('slo_tpot_ms')))),
        ('head load average before, after (1, 5, 15 min; %s CPUs)' % cond.get('cpu_count', 'n/a'),
         '%s, %s' % (cond.get('load_average_before') or 'n/a', cond.get('load_average_after') or 'n/a')),
        ('GPUs holding the served model', cond.get('serving_gpus', 'n/a')),
    ]
    out = _table(('condition', 'value'), rows)
    for warning in cond.get('spread_warnings') or []:
        out += ['', '**Spread warning:** %s' % warning]
    return out


def definitions_lines(doc):
    return _table(('figure', 'key', 'definition', 'vllm bench serve', 'GuideLLM'),
                  [(d['figure'], '`%s`' % d['key'], d['definition'], d['vllm_bench_serve'], d['guidellm'])
                   for d in doc.get('definitions') or []])


def energy_lines(doc):
    energy = doc.get('energy')
    if not energy:
        return ['Not measured: %s.' % (doc.get('energy_omitted') or 'n/a')]
    out = ['Board power draw sampled by the GPU sampler (nvidia-smi power.draw or NVML), integrated over the sweeps\' '
           '%s s; idle draw included, so a GPU the model does not use still counts. %s J in all for %s output tokens: '
           '%s J per output token, %s output tokens per J.' % (
               _fmt(energy['window_s']), _fmt(energy['joules']), energy['output_tokens'],
               _fmt(energy['joules_per_output_token'], 4), _fmt(energy['output_tokens_per_joule'], 4)), '']
    out += _table(('host', 'GPU', 'name', 'J', 'mean W', 'J per output token', 'output tokens per J', 'seconds covered',
                   'power samples'),
                  [(g['host'], g['index'], g.get('name') or 'n/a', _fmt(g['joules']), _fmt(g['mean_power_w']),
                    _fmt(g.get('joules_per_output_token'), 4), _fmt(g.get('output_tokens_per_joule'), 4),
                    _fmt(g['covered_s']), g['power_samples'])
                   for g in energy['gpus']])
    return out


def _zero_percent(fraction):
    return _fmt(None if fraction is None else 100.0 * fraction, 1, ' %')


def prometheus_lines(doc):
    """'From Prometheus': the dashboard's GPU series over the run's minutes beside the sampler's
    fingerprint of the same GPU; [] where Prometheus is not deployed."""
    section = doc.get('prometheus')
    if not section:
        return []
    window = section.get('window') or {}
    out = ['', '## From Prometheus', '',
           'The dashboard\'s series (%s) as Prometheus at %s recorded them over the run\'s %s s, a point every %s s '
           '(bench_prometheus_step_s, the scrape interval: coarser than the sampler\'s, so a burst between two scrapes '
           'is missed), beside the sampler\'s fingerprint of the same GPU.' % (
               ', '.join('%s `%s`' % item for item in sorted((section.get('expressions') or {}).items())),
               section.get('source') or 'n/a',
               _fmt(None if not window else round(window['end_epoch'] - window['start_epoch'], 1)),
               _fmt(window.get('step_s'))), '']
    for error in section.get('errors') or []:
        out += ['**Prometheus did not give a series:** %s' % error, '']
    if section.get('gpus'):
        out += _table(('node', 'GPU', 'name', 'points', 'peak %', 'median %', 'at 0 %', 'sampler peak / median / at 0 %',
                       'power peak W', 'power median W', 'memory peak GiB', 'sampler memory peak GiB'),
                      [(g['node'], g['gpu'], g.get('name') or 'n/a', g['points'], _fmt(g.get('utilisation_peak'), 0),
                        _fmt(g.get('utilisation_median')), _zero_percent(g.get('utilisation_zero_fraction')),
                        'n/a' if not g.get('sampler') else '%s / %s / %s' % (
                            _fmt(g['sampler']['utilisation_peak'], 0), _fmt(g['sampler']['utilisation_median']),
                            _zero_percent(g['sampler']['utilisation_zero_fraction'])),
                        _fmt(g.get('power_peak')), _fmt(g.get('power_median')), _gib(g.get('memory_peak')),
                        _gib((g.get('sampler') or {}).get('memory_peak'))) for g in section['gpus']])
    return out


def summary_lines(doc):
    """The short table `make demo` prints: what was served and how fast."""
    head = doc.get('headline') or {}
    totals = doc['residency']['totals']
    bandwidth = doc.get('bandwidth') or {}
    rows = [
        ('engine / model', '%s / %s' % (doc.get('engine') or 'n/a', doc.get('model') or 'n/a')),
        ('build', (doc.get('build') or {}).get('build_id') or 'n/a'),
        ('GPU memory used (aggregate, imbalance)',
         '%s GiB, %s GiB' % (_fmt(totals['aggregate_used_gib'], 2), _fmt(totals['imbalance_gib'], 2))),
        ('prefill tok/s (concurrency %s)' % head.get('concurrency', 1), _fmt(head.get('prefill_tok_s'))),
        ('decode tok/s (concurrency %s, spread)' % head.get('concurrency', 1),
         '%s (%s %%)' % (_fmt(head.get('decode_tok_s')), _fmt(head.get('decode_tok_s_cv_percent'), 2))),
        ('TTFT p50 s (concurrency %s), mean and its 95 %% interval' % head.get('concurrency', 1),
         '%s, %s %s' % (_fmt(head.get('ttft_s'), 3), _fmt(((doc.get('benchmark') or {}).get('levels') or [{}])[0]
                                                          .get('ttft_s', {}).get('mean'), 3),
                        _ci((head.get('ci95') or {}).get('ttft_s_mean'), 3))),
        ('prompt tokens cached (concurrency %s)' % head.get('concurrency', 1), _fmt(head.get('cached_prompt_tokens'))),
        ('decode tok/s by llama-server, ratio', '%s, %s' % (_fmt(head.get('server_decode_tok_s')), _fmt(head.get('decode_ratio'), 3))),
        ('llama-bench decode, served / llama-bench, server ms per token over it', _bench_summary(doc.get('llama_bench'))),
        ('best aggregate tok/s', '%s at concurrency %s (%sx concurrency %s)' % (
            _fmt(head.get('best_aggregate_tok_s')), head.get('best_aggregate_concurrency', 'n/a'),
            _fmt(head.get('aggregate_gain'), 2), head.get('concurrency', 1))),
        ('memory-bandwidth limit reached', _fmt(100.0 * bandwidth['fraction'], 1, ' %') if 'fraction' in bandwidth
         else 'omitted: %s' % bandwidth.get('omitted', 'n/a')),
        ('energy J per output token, output tokens per J', _energy_summary(doc)),
        ('RPC connections over RDMA / TCP', _transport_summary(doc.get('rpc_transport') or [])),
        ('serving intent', ', '.join('%s %s' % (e['label'], e['intent']) for e in doc.get('serving_intent') or [])
         or 'not recorded'),
    ]
    return _table(('figure', 'value'), rows)


def render_markdown(doc, images):
    """report.md. images: kind (residency, utilisation, throughput, latency, pareto; requests for
    the JSON lines) -> file name beside it."""
    out = ['# Inference report: %s' % doc['inventory'], '',
           'Created %s. Engine %s, model %s, build %s.' % (
               doc['created'], doc.get('engine') or 'n/a', doc.get('model') or 'n/a',
               (doc.get('build') or {}).get('build_id') or 'n/a'), '',
           '## Summary', '']
    for warning in doc.get('warnings') or []:
        out += ['**Warning:** %s' % warning, '']
    out += summary_lines(doc)
    out += ['', '## GPU memory residency', '']
    rows = doc['residency']['devices']
    if rows:
        out += _table(('host', 'GPU', 'name', 'used GiB', 'total GiB', 'llama-server GiB', 'rpc-server GiB', 'vllm GiB',
                       'other GiB'),
                      [(r['host'], r['index'], r['name'], _gib(r['memory_used_mib']), _gib(r['memory_total_mib']),
                        _gib(r['by_process_mib']['llama-server']), _gib(r['by_process_mib']['rpc-server']),
                        _gib(r['by_process_mib']['vllm']), _gib(r['by_process_mib']['other'])) for r in rows])
        totals = doc['residency']['totals']
        out += ['', 'Aggregate %s GiB over %d devices; imbalance (most minus least used) %s GiB.' % (
            _fmt(totals['aggregate_used_gib'], 2), totals['devices'], _fmt(totals['imbalance_gib'], 2))]
    else:
        out.append('No residency was read.')
    out += ['', '![residency](%s)' % images['residency'], '', '## Throughput and latency', '']
    bench = doc.get('benchmark')
    if bench and bench.get('levels'):
        prompt = bench.get('prompt') or {}
        request = bench.get('request') or {}
        out += ['Endpoint %s, prompts of %s tokens (%s), %s output tokens per request, ignore_eos %s, sampling %s. '
                'Every figure is named in Definitions below; each request is a line of %s.' % (
                    bench.get('base_url'), prompt.get('tokens') or prompt.get('target_tokens'), prompt.get('sizing'),
                    request.get('max_tokens'), request.get('ignore_eos'), request.get('sampling') or 'server defaults',
                    images.get('requests', 'requests.jsonl')), '']
        out += _table(LEVEL_HEADER, level_rows(bench['levels']))
        if bench.get('rates'):
            out += ['', 'Request-rate sweep: Poisson arrivals at each rate, no limit on concurrency (the peak in '
                    'flight in parentheses).', '']
            out += _table(('request rate',) + LEVEL_HEADER[1:], level_rows(bench['rates']))
        reasoning = sum(lv['reasoning_tokens'] for lv in bench['levels'])
        if reasoning:
            out += ['', 'Reasoning tokens %d, answer tokens %d.' % (
                reasoning, sum(lv['answer_tokens'] for lv in bench['levels']))]
        for warning in bench.get('warnings') or []:
            out += ['', '**Warning:** %s' % warning]
        out += side_by_side_lines(doc)
    else:
        out.append('No benchmark was run.')
    out += ['', '![throughput](%s)' % images['throughput'], '', '![latency](%s)' % images.get('latency', 'latency.png'), '',
            '![pareto](%s)' % images.get('pareto', 'pareto.png'), '', '## Run conditions', '']
    out += conditions_lines(doc)
    out += ['', '## Definitions', '']
    out += definitions_lines(doc)
    out += ['', '## Utilisation fingerprint', '']
    util = doc.get('utilisation') or []
    if util:
        out += _table(('host', 'GPU', 'name', 'samples', 'peak %', 'median %', 'p10 %', 'mean %', 'at 0 %'),
                      [(u['host'], u['index'], u.get('name') or 'n/a', u['samples'], _fmt(u['utilization_peak'], 0),
                        _fmt(u['utilization_median'], 1), _fmt(u['utilization_p10'], 1), _fmt(u['utilization_mean'], 1),
                        _fmt(None if u['zero_fraction'] is None else 100.0 * u['zero_fraction'], 1, ' %')) for u in util])
        methods = sorted(set(u['method'] for u in util if u.get('method')))
        out += ['', 'Sampled with %s while the benchmark ran.' % ', '.join(methods)]
    else:
        out.append('No utilisation was sampled.')
    if doc.get('prometheus') is None:
        out += ['', 'Prometheus is not deployed (gpulab_monitoring_enabled is off), so there is no section From '
                'Prometheus; the sampler above read every GPU of the run, nothing is lost.']
    out += ['', '![utilisation](%s)' % images['utilisation']]
    out += prometheus_lines(doc)
    out += ['', '## Energy', '']
    out += energy_lines(doc)
    out += ['', '## Memory-bandwidth limit', '']
    bandwidth = doc.get('bandwidth') or {}
    weights = doc.get('model_weights') or {}
    if 'fraction' in bandwidth:
        out += ['Decode %s tok/s x %.3f GB read per token = %.1f %% of the limit of %s tok/s set by the devices\' '
                'memory bandwidth (%s).' % (
                    _fmt(bandwidth['decode_tok_s']), bandwidth['bytes_per_token'] / 1e9, 100.0 * bandwidth['fraction'],
                    _fmt(bandwidth['limit_tok_s']),
                    ', '.join('%s GPU %s %s TB/s, %.0f %% of the weights' % (d['host'], d['index'], d['bandwidth_tb_s'],
                                                                             100 * d['share'])
                              for d in bandwidth['devices']))]
    else:
        out.append('Omitted: %s.' % bandwidth.get('omitted', 'n/a'))
    if weights:
        out += ['', 'Model: %s, %s parameters, %.2f GiB of weights (%s bits per weight), %.3f GB read per token '
                '(%s of %s experts used).' % (
                    weights.get('architecture'), weights.get('parameters'), weights.get('weights_bytes', 0) / 2.0 ** 30,
                    weights.get('bits_per_weight'), weights.get('bytes_read_per_token', 0) / 1e9,
                    weights.get('expert_used_count') or '-', weights.get('expert_count') or '-')]
    out += ['', '## Serving intent', '']
    out += intent_lines(doc)
    out += ['', '## Layout', '']
    out += layout_lines(doc)
    out += ['', '## Memory plan against measured', '']
    plan = doc.get('memory_plan')
    planned_vllm = vllm_planned_per_gpu(doc.get('vllm'))
    if plan:
        options = plan.get('options') or {}
        out += ['Planned for %s: context %s over %s slots (%s KV cells x %s streams), tensor split %s, '
                'n_gpu_layers %s. Measured: what the device\'s process holds on its GPU after the start.' % (
                    plan.get('model_path') or 'n/a', options.get('ctx_size', 'n/a'), options.get('parallel', 'n/a'),
                    plan.get('kv_cells', 'n/a'), plan.get('kv_streams', 'n/a'), plan.get('tensor_split', 'n/a'),
                    plan.get('n_gpu_layers', 'n/a')), '']
    if planned_vllm:
        out += ['Planned for vLLM %s: per GPU the weights of the largest stage, the KV cache (%s) and the reserve for '
                'activations, CUDA graphs and communication. Measured: what vLLM\'s processes hold on the GPU.' % (
                    doc['vllm'].get('label') or 'n/a',
                    'pinned with --kv-cache-memory-bytes' if planned_vllm['kv_pinned'] else "vLLM's profiling, estimated"),
                '']
    if plan or planned_vllm:
        out += _table(('device', 'host', 'GPU', 'process', 'layers', 'weights MiB', 'KV MiB', 'compute MiB (est.)',
                       'context MiB', 'planned MiB', 'measured MiB', 'error %'),
                      [(r['device'], r['host'] or '-', '-' if r['gpu_index'] is None else r['gpu_index'],
                        r['process'] or '-', r['layers'] or '-', _fmt(r['planned_weights_mib'], 0),
                        _fmt(r['planned_kv_cache_mib'], 0), _fmt(r['planned_compute_mib'], 0),
                        _fmt(r['planned_context_mib'], 0), _fmt(r['planned_mib'], 0), _fmt(r['measured_mib'], 0),
                        _fmt(r['error_percent'], 1)) for r in doc.get('plan_against_measured') or []])
    else:
        out.append('No memory plan was given for this run.')
    out += ['', '## RPC transport', '']
    transport = doc.get('rpc_transport') or []
    if transport:
        out += _table(('host', 'RPC server', 'RDMA connections', 'TCP connections', 'build negotiates RDMA'),
                      [(t['host'], t['server'] or '-', _fmt(t['rdma']), _fmt(t['tcp']),
                        'n/a' if t['rdma_capable'] is None else ('yes' if t['rdma_capable'] else 'no'))
                       for t in transport])
        out += ['', 'Connections since each RPC server started, from its log.']
        for row in transport:
            if row['warning']:
                out += ['', '**Warning:** %s' % row['warning']]
    else:
        out.append('No RPC server log was read.')
    out += ['', '## RPC weight cache', '']
    out += rpc_cache_lines(doc.get('rpc_cache') or {})
    out += ['', '## vLLM', '']
    out.append('```\n%s\n```' % _pretty(doc['vllm']) if doc.get('vllm') else 'vLLM is not part of this run.')
    out += ['', '## Build and command lines', '']
    build = doc.get('build') or {}
    if build:
        out += ['Build %s (CUDA %s, architectures %s).'
                % (build.get('build_id'), build.get('cuda'), build.get('cuda_architectures') or 'n/a'), '']
    commands = doc.get('commands') or {}
    if commands:
        for host in commands:
            for line in commands[host]:
                out += ['- %s: `%s`' % (host, line.replace('`', "'"))]
    else:
        out.append('No command lines were read.')
    return '\n'.join(out) + '\n'


def rpc_cache_lines(section):
    """Each RPC worker's weight cache against the bound its last deploy recorded, or the line that
    says why there is none (module_utils/report.py rpc_cache_section)."""
    out = []
    workers = section.get('workers') or []
    if workers:
        out += _table(('host', 'directory', 'GiB held', 'bound GiB', 'files', 'over its bound'),
                      [(w['host'], w['path'] or 'no record', _fmt(w['size_gib'], 2), _fmt(w['bound_gib'], 2),
                        _fmt(w['files']), 'yes' if w['over_bound'] else 'no') for w in workers])
    if section.get('note'):
        out += ([''] if out else []) + [section['note']]
    return out or ['No RPC weight cache was read.']


def layout_lines(doc):
    """The chosen layout of each engine, its reasons, and the alternatives turned down or ranked lower."""
    layouts = doc.get('layouts') or []
    if not layouts:
        return ['No layout was recorded (no memory-plan.json or vLLM plan.json was read).']
    out = []
    for entry in layouts:
        out += ['%s: %s.' % (entry.get('label') or entry['engine'], entry['layout']), '']
        out += ['- why: %s' % reason for reason in entry['reasons']]
        for label, items in (('turned down', entry['rejected']), ('valid, ranked lower', entry['alternatives'])):
            out += ['- %s: %s: %s' % (label, item['label'], '; '.join(item['findings']) or 'n/a') for item in items]
        if not entry['rejected'] and not entry['alternatives']:
            out.append('- no alternative was weighed')
        out.append('')
    return out[:-1]


def intent_lines(doc):
    """The serving intent each engine's plan records and what it set, each value with its reason."""
    entries = doc.get('serving_intent') or []
    if not entries:
        return ['No serving intent was recorded (no memory-plan.json or vLLM plan.json with an intent was read).']
    out = []
    for entry in entries:
        out += ['%s: serving intent %s, target concurrency %s.' % (entry['label'], entry['intent'], entry['concurrency']), '']
        out += _table(('setting', 'value', 'why'),
                      [(s['setting'], s['value'] if s['value'] is not None else 'n/a', s.get('reason') or 'n/a')
                       for s in entry['settings']])
        out.append('')
    return out[:-1]


def _pretty(value):
    return json.dumps(value, indent=2, sort_keys=True)
