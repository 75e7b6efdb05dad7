"""Report data and markdown: residency by process, bandwidth fraction, absent inputs."""

import json

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import report, report_markdown

RESIDENCY = {
    'node-a': {'gpus': [{'index': 0, 'name': 'NVIDIA H200', 'memory_used_mib': 81920, 'memory_total_mib': 143771}],
               'processes': [{'pid': 1, 'process_name': '/opt/gpulab/llama.cpp/b1/bin/llama-server', 'gpu_index': 0,
                              'used_memory_mib': 81000, 'systemd_unit': 'gpulab-llama-server.service'}]},
    'node-b': {'gpus': [{'index': 0, 'name': 'NVIDIA H200', 'memory_used_mib': 77517, 'memory_total_mib': 143771},
                        {'index': 1, 'name': 'NVIDIA H200', 'memory_used_mib': 81920, 'memory_total_mib': 143771}],
               'processes': [{'pid': 2, 'process_name': 'ggml-rpc-server', 'gpu_index': 0, 'used_memory_mib': 77000,
                              'systemd_unit': 'gpulab-rpc-server@0.service'},
                             {'pid': 3, 'process_name': '/usr/bin/ggml-rpc-server', 'gpu_index': 1, 'used_memory_mib': 81000,
                              'systemd_unit': None}]},
}

LEVEL = {'concurrency': 1, 'requests': 4, 'requests_ok': 4, 'requests_failed': 0, 'errors': [],
         'ttft_s': {'mean': 0.06, 'p50': 0.05, 'p99': 0.09}, 'tpot_s': {'mean': 0.012, 'p50': 0.012, 'p99': 0.013},
         'itl_s': {'mean': 0.012, 'p50': 0.012, 'p99': 0.02}, 'prefill_tok_s': 337.0, 'decode_tok_s': 82.5,
         'decode_tok_s_cv_percent': 0.6, 'aggregate_output_tok_s': 80.0, 'reasoning_tokens': 0, 'answer_tokens': 512,
         'server': {'decode_tok_s': 83.0, 'prefill_tok_s': 340.0, 'decode_ratio': 0.99}}


def bench(levels):
    return {'engine': 'llama.cpp', 'model': 'm', 'base_url': 'http://127.0.0.1:8080', 'levels': levels, 'warnings': [],
            'prompt': {'tokens': 128, 'sizing': 'tokenizer'}, 'request': {'max_tokens': 128, 'ignore_eos': True, 'sampling': {}},
            'model_weights': {'architecture': 'minimax-m2', 'parameters': 228e9, 'weights_bytes': 243e9, 'bits_per_weight': 8.5,
                              'bytes_read_per_token': 11.6e9, 'expert_count': 256, 'expert_used_count': 8}}


def test_residency_by_process_aggregate_and_imbalance():
    rows = report.residency_table(RESIDENCY)
    assert [(r['host'], r['index']) for r in rows] == [('node-a', 0), ('node-b', 0), ('node-b', 1)]
    assert rows[0]['by_process_mib']['llama-server'] == 81000 and rows[0]['unattributed_mib'] == 920
    assert rows[2]['by_process_mib']['rpc-server'] == 81000
    assert report.residency_totals(rows) == {'aggregate_used_gib': 235.7, 'imbalance_gib': 4.3, 'devices': 3}


def test_bandwidth_fraction_over_a_sequential_split():
    rows = report.residency_table(RESIDENCY)
    result = report.bandwidth_limit(82.5, 11.6e9, rows)
    # three H200s in sequence: 11.6 GB at 4.8 TB/s whatever the shares
    assert result['limit_tok_s'] == pytest.approx(4.8e12 / 11.6e9, abs=0.1)
    assert result['fraction'] == pytest.approx(82.5 / (4.8e12 / 11.6e9), abs=1e-4)
    assert sum(d['share'] for d in result['devices']) == pytest.approx(1.0, abs=1e-3)


def test_bandwidth_fraction_with_mixed_gpus_weights_each_by_its_share():
    rows = [{'host': 'a', 'index': 0, 'name': 'NVIDIA H200', 'by_process_mib': {'llama-server': 100, 'rpc-server': 0, 'vllm': 0, 'other': 0}},
            {'host': 'b', 'index': 0, 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
             'by_process_mib': {'llama-server': 0, 'rpc-server': 300, 'vllm': 0, 'other': 0}}]
    result = report.bandwidth_limit(10.0, 1e9, rows)
    expected = 1.0 / (0.25 * 1e9 / 4.8e12 + 0.75 * 1e9 / 1.792e12)
    assert result['limit_tok_s'] == pytest.approx(expected, abs=0.1)


def test_bandwidth_is_omitted_not_guessed():
    rows = report.residency_table(RESIDENCY)
    rows[1]['name'] = 'NVIDIA Mystery GPU'
    assert report.bandwidth_limit(82.5, 11.6e9, rows) == {'omitted': 'memory bandwidth unknown for NVIDIA Mystery GPU'}
    assert 'no serving process' in report.bandwidth_limit(82.5, 1e9, report.residency_table(
        {'x': {'gpus': RESIDENCY['node-a']['gpus'], 'processes': []}}))['omitted']
    assert report.bandwidth_limit(None, 1e9, rows) == {'omitted': 'no decode figure'}
    assert 'no GGUF header' in report.bandwidth_limit(80.0, None, rows)['omitted']


def test_headline_and_rising_aggregate():
    second = dict(LEVEL, concurrency=8, aggregate_output_tok_s=354.6, decode_tok_s=44.3)
    head = report.headline(bench([LEVEL, second]))
    assert head['decode_tok_s'] == 82.5 and head['best_aggregate_concurrency'] == 8 and head['aggregate_rises']
    assert not report.headline(bench([second, LEVEL]))['aggregate_rises']
    assert head['aggregate_gain'] == 4.43  # 354.6 / 80.0
    # a dip at concurrency 2 (a sparse MoE model), a gain at the widest level
    dip = dict(LEVEL, concurrency=2, aggregate_output_tok_s=64.0)
    widest = dict(LEVEL, concurrency=4, aggregate_output_tok_s=97.6)
    mixed = report.headline(bench([LEVEL, dip, widest]))
    assert (mixed['aggregate_rises'], mixed['aggregate_gain'], mixed['best_aggregate_concurrency']) == (False, 1.22, 4)
    assert report.headline(None) is None


def test_markdown_with_every_input():
    doc = report.build_document('lab', '2026-11-30 12:00:00 UTC', benchmark=bench([LEVEL]), residency=RESIDENCY,
                                sampler={'node-a': {'method': 'nvml', 'gpus': [
                                    {'index': 0, 'name': 'NVIDIA H200', 'samples': 100, 'utilization_peak': 31,
                                     'utilization_median': 20.0, 'utilization_p10': 0.0, 'utilization_mean': 18.0,
                                     'zero_fraction': 0.12, 'memory_used_peak_mib': 81920}]}},
                                build_info={'build_id': 'b8070-0c1e570-cuda90', 'cuda': True, 'cuda_architectures': '90'},
                                commands={'node-a': ['/opt/gpulab/llama.cpp/b/bin/llama-server -m /m.gguf --rpc 10.0.0.2:50052']})
    text = report_markdown.render_markdown(doc, {'residency': 'residency.png', 'utilisation': 'utilisation.png',
                                                 'throughput': 'throughput.png'})
    assert '| node-b | 1 | NVIDIA H200 | 80.00 | 140.40 | 0.00 | 79.10 | 0.00 | 0.00 |' in text
    assert 'Aggregate 235.70 GiB over 3 devices; imbalance (most minus least used) 4.30 GiB.' in text
    assert ('| 1 | 4/0 | 0.050 | 0.090 | 0.060 (n/a) | 12.00 (n/a) | 12.00 | 20.00 | n/a | n/a | n/a | 337.0 | 82.5 (n/a) '
            '| 0.60 | 80.0 | n/a | 83.0 |') in text
    assert '| node-a | 0 | NVIDIA H200 | 100 | 31 | 20.0 | 0.0 | 18.0 | 12.0 % |' in text
    assert '% of the limit of 413.8 tok/s' in text
    assert '- node-a: `/opt/gpulab/llama.cpp/b/bin/llama-server -m /m.gguf --rpc 10.0.0.2:50052`' in text
    assert 'Build b8070-0c1e570-cuda90' in text
    assert 'No memory plan was given for this run.' in text and 'vLLM is not part of this run.' in text
    assert '![throughput](throughput.png)' in text


def test_markdown_without_any_input():
    doc = report.build_document('demo', 'now')
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    for line in ('No residency was read.', 'No benchmark was run.', 'No utilisation was sampled.',
                 'Omitted: no decode figure.', 'No command lines were read.'):
        assert line in text
    assert '| decode tok/s (concurrency 1, spread) | n/a (n/a %) |' in report_markdown.summary_lines(doc)


def test_report_dir_name_is_safe():
    assert report.report_dir_name('lab', '20261130T120000Z') == 'lab-20261130T120000Z'
    assert report.report_dir_name('../x y', 't') == '.._x_y-t'


PLAN = {'model_path': '/m-00001-of-00002.gguf', 'options': {'ctx_size': 8192, 'parallel': 4}, 'tensor_split': [1.0, 1.0, 1.0],
        'n_gpu_layers': 63, 'kv_cells': 2048, 'kv_streams': 4,
        'devices': [
            {'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'gpu_index': 0, 'layer_range': '0-30', 'weights_mib': 70000.0,
             'kv_cache_mib': 4000.0, 'compute_mib_estimate': 800.0, 'context_mib': 720.0, 'total_mib': 75520.0},
            {'name': 'RPC1', 'host': 'node-c', 'kind': 'rpc', 'gpu_index': None, 'layer_range': '31-40', 'weights_mib': 100.0,
             'kv_cache_mib': 10.0, 'compute_mib_estimate': 5.0, 'context_mib': 0.0, 'total_mib': 115.0},
            {'name': 'CUDA0', 'host': 'node-a', 'kind': 'local', 'gpu_index': 0, 'layer_range': '41-61', 'weights_mib': 76000.0,
             'kv_cache_mib': 3000.0, 'compute_mib_estimate': 900.0, 'context_mib': 720.0, 'total_mib': 80620.0}]}


def test_plan_against_measured_per_device_and_process():
    rows = report.residency_table(RESIDENCY)
    compared = report.plan_against_measured(PLAN, rows)
    assert [(c['device'], c['process'], c['planned_mib'], c['measured_mib'], c['error_percent']) for c in compared] == [
        ('RPC0', 'rpc-server', 75520.0, 77000, 2.0),
        ('RPC1', 'rpc-server', 115.0, None, None),      # a CPU RPC server: no GPU to measure
        ('CUDA0', 'llama-server', 80620.0, 81000, 0.5)]
    assert report.plan_against_measured(None, rows) == []
    # a planned GPU the residency did not read is not measured, not zero
    assert report.plan_against_measured(PLAN, [])[0]['measured_mib'] is None


def test_markdown_puts_planned_next_to_measured():
    doc = report.build_document('lab', 'now', residency=RESIDENCY, memory_plan=PLAN)
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert '## Memory plan against measured' in text
    assert 'context 8192 over 4 slots (2048 KV cells x 4 streams)' in text
    assert '| RPC0 | node-b | 0 | rpc-server | 0-30 | 70000 | 4000 | 800 | 720 | 75520 | 77000 | 2.0 |' in text
    assert '| RPC1 | node-c | - | rpc-server | 31-40 | 100 | 10 | 5 | 0 | 115 | n/a | n/a |' in text
    assert '"kv_cells"' not in text  # no raw JSON any more


TRANSPORT = {
    'node-a': {'skipped': True, 'changed': False},
    'node-b': {'results': [
        {'ansible_loop_var': '__bench_rpc_server', '__bench_rpc_server': {'name': 'gpulab-rpc-server@0.service'},
         'rdma_capable': True, 'rdma': 2, 'tcp': 0, 'warning': '', 'connections': []},
        {'ansible_loop_var': '__bench_rpc_server', '__bench_rpc_server': {'name': 'gpulab-rpc-server@1.service'},
         'rdma_capable': True, 'rdma': 0, 'tcp': 2, 'connections': [],
         'warning': 'node-b gpulab-rpc-server@1.service: 2 of 2 RPC connections stayed on TCP; check GGML_RDMA_DEV'}]},
}


def test_rpc_transport_per_server_with_the_fallback_warned():
    rows = report.rpc_transport_table(TRANSPORT)
    assert [(r['host'], r['server'], r['rdma'], r['tcp']) for r in rows] == [
        ('node-b', 'gpulab-rpc-server@0.service', 2, 0), ('node-b', 'gpulab-rpc-server@1.service', 0, 2)]
    doc = report.build_document('lab', 'now', rpc_transport=TRANSPORT)
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert '| node-b | gpulab-rpc-server@1.service | 0 | 2 | yes |' in text
    assert '**Warning:** node-b gpulab-rpc-server@1.service: 2 of 2 RPC connections stayed on TCP' in text
    assert '| RPC connections over RDMA / TCP | 2 / 2 (1 warning, see RPC transport) |' in report_markdown.summary_lines(doc)
    assert report.rpc_transport_table({}) == [] and 'No RPC server log was read.' in report_markdown.render_markdown(
        report.build_document('lab', 'now'), {'residency': 'r', 'utilisation': 'u', 'throughput': 't'})


def cache_status(path, size_gib, bound_gib, files, enabled=True):
    """rpc_cache's query as role llama_rpc_server's entry point cache_status registers it."""
    status = {'enabled': enabled, 'path': path, 'size_bytes': int(size_gib * (1 << 30)), 'size_gib': size_gib,
              'files': files, 'max_bytes': int(bound_gib * (1 << 30)), 'bound_gib': bound_gib,
              'free_bytes': 1 << 40, 'over_bound': size_gib > bound_gib, 'summary': 'line'}
    return {'changed': False, 'status': status, 'path': path}


CACHE = {'node-b': cache_status('/var/cache/gpulab/rpc/rpc', 13.25, 50.0, 291),
         'node-c': cache_status('/srv/cache/rpc', 61.5, 60.0, 1204)}
IMAGES = {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'}


def test_rpc_cache_per_worker_with_its_bound():
    section = report.rpc_cache_section(CACHE)
    assert section['note'] is None
    assert [(w['host'], w['path'], w['size_gib'], w['bound_gib'], w['files'], w['over_bound'])
            for w in section['workers']] == [('node-b', '/var/cache/gpulab/rpc/rpc', 13.25, 50.0, 291, False),
                                             ('node-c', '/srv/cache/rpc', 61.5, 60.0, 1204, True)]
    text = report_markdown.render_markdown(report.build_document('lab', 'now', rpc_cache=CACHE), IMAGES)
    part = text.split('## RPC weight cache\n\n')[1].split('\n\n## ')[0]
    assert part.splitlines() == [
        '| host | directory | GiB held | bound GiB | files | over its bound |',
        '| --- | --- | --- | --- | --- | --- |',
        '| node-b | /var/cache/gpulab/rpc/rpc | 13.25 | 50.00 | 291 | no |',
        '| node-c | /srv/cache/rpc | 61.50 | 60.00 | 1204 | yes |']


def test_rpc_cache_off_on_one_worker_is_named_below_the_table():
    cache = dict(CACHE, **{'node-c': cache_status('/srv/cache/rpc', 2.0, 60.0, 3, enabled=False)})
    section = report.rpc_cache_section(cache)
    assert [w['host'] for w in section['workers']] == ['node-b']
    assert section['note'] == 'The weight cache is off (llama_rpc_server_cache_enabled is false) on node-c.'
    lines = report_markdown.rpc_cache_lines(section)
    assert lines[-2:] == ['', 'The weight cache is off (llama_rpc_server_cache_enabled is false) on node-c.']


@pytest.mark.parametrize('cache, vllm, line', [
    ({'node-b': cache_status('/c', 1.0, 2.0, 1, enabled=False)}, None,
     'The weight cache is off (llama_rpc_server_cache_enabled is false) on every RPC worker.'),
    ({}, None, "No RPC worker's weight cache was read: this run has no RPC workers."),
    (None, None, "No RPC worker's weight cache was read: this run has no RPC workers."),
    ({'node-b': {'skipped': True}, 'node-c': 'not a result'}, None,
     "No RPC worker's weight cache was read: this run has no RPC workers."),
    ({}, {'label': 'TP=2'}, 'vLLM serves this run: there is no RPC weight cache.'),
    (CACHE, {'label': 'TP=2'}, 'vLLM serves this run: there is no RPC weight cache.'),
])
def test_without_a_cache_to_show_the_report_says_why_in_one_line(cache, vllm, line):
    section = report.rpc_cache_section(cache, vllm)
    assert section == {'workers': [], 'note': line}
    text = report_markdown.render_markdown(report.build_document('lab', 'now', rpc_cache=cache, vllm=vllm), IMAGES)
    assert '## RPC weight cache\n\n%s\n\n## vLLM' % line in text


def test_a_worker_without_a_record_shows_no_bound():
    cache = {'node-b': {'status': dict(cache_status(None, 0.0, 0.0, 0)['status'], max_bytes=None, bound_gib=None)}}
    assert report_markdown.rpc_cache_lines(report.rpc_cache_section(cache))[2] == '| node-b | no record | 0.00 | n/a | 0 | no |'


@pytest.mark.parametrize('process, kind', [
    # vLLM's engine core under supervisord, as nvidia-smi named it on an H200 (2026-12-01)
    ({'process_name': '/opt/gpulab/vllm/venv-0.24.0/bin/python3.12', 'systemd_unit': None}, 'vllm'),
    ({'process_name': '/usr/bin/python3', 'systemd_unit': 'gpulab-vllm.service'}, 'vllm'),
    ({'process_name': '/opt/vllm-test-double/bin/vllm', 'systemd_unit': None}, 'vllm'),
    ({'process_name': '/opt/gpulab/llama.cpp/builds/b1/bin/llama-server', 'systemd_unit': None}, 'llama-server'),
    ({'process_name': '/usr/bin/python3', 'systemd_unit': None}, 'other'),
    ({'process_name': '/home/u/vllm_notes.py', 'systemd_unit': None}, 'vllm'),
    ({'process_name': '/srv/asr/bin/python3', 'systemd_unit': 'whisper.service'}, 'other'),
])
def test_process_kind_finds_vllm_by_its_environment(process, kind):
    assert report.process_kind(process) == kind


# llama-bench -o json records as the H200 run of 2026-12-01 wrote them (62-layer model, all local)
LLAMA_BENCH_62 = [
    {'n_prompt': 128, 'n_gen': 0, 'avg_ts': 2904.3, 'stddev_ts': 807.1},
    {'n_prompt': 512, 'n_gen': 0, 'avg_ts': 5475.0, 'stddev_ts': 667.2},
    {'n_prompt': 0, 'n_gen': 128, 'avg_ts': 113.4, 'stddev_ts': 1.6},
]


def test_llama_bench_beside_the_served_decode():
    bench = report.llama_bench_against_served(LLAMA_BENCH_62, 98.9)
    assert bench == {'test': 'tg128', 'tok_s': 113.4, 'stddev_tok_s': 1.6, 'served_ratio': 0.872,
                     'server_ms_per_token_over_bench': 1.29}
    assert report_markdown._bench_summary(bench) == 'tg128 113.4 tok/s, 0.872, 1.29 ms'


@pytest.mark.parametrize('records', [None, {}, [], [{'n_prompt': 512, 'n_gen': 0, 'avg_ts': 5475.0}],
                                     [{'n_prompt': 0, 'n_gen': 128, 'avg_ts': 'fast'}], ['tg128']])
def test_llama_bench_without_a_decode_record_is_not_measured(records):
    assert report.llama_bench_against_served(records, 98.9) is None
    assert report_markdown._bench_summary(None) == 'not measured'


def test_llama_bench_without_a_served_figure_keeps_its_own():
    bench = report.llama_bench_against_served(LLAMA_BENCH_62, None)
    assert bench['tok_s'] == 113.4 and bench['served_ratio'] is None


def measured_levels():
    """Two levels and a rate computed by bench_stats from hand-made streams (2 tokens a chunk)."""
    from ansible_collections.gpulab.inference.plugins.module_utils import bench_stats
    from ansible_collections.gpulab.inference.plugins.module_utils.sse import StreamRecord

    def request(start, gap, cached=0):
        rec = StreamRecord(start)
        rec.token_times = [start + 0.2 + gap * i for i in range(4)]
        rec.content_chunks, rec.content, rec.finish_reason, rec.done = 4, 'x', 'length', True
        rec.usage = {'completion_tokens': 7, 'prompt_tokens': 20, 'prompt_tokens_details': {'cached_tokens': cached}}
        rec.end = rec.token_times[-1] + 0.02
        return bench_stats.request_metrics(rec)

    one = bench_stats.level_summary(1, [request(0.0, 0.1), request(1.0, 0.1, cached=3)], 2.0, 1.0, 60.0, seed=1)
    two = bench_stats.level_summary(2, [request(0.0, 0.2), request(0.0, 0.2)], 1.0, 1.0, 60.0, seed=1)
    rate = bench_stats.level_summary(None, [request(0.0, 0.1), request(0.05, 0.1)], 0.6, 1.0, 60.0, seed=1,
                                     request_rate=4.0)
    return [one, two], [rate]


def test_definitions_conditions_energy_and_the_vllm_summary():
    levels, rates = measured_levels()
    benchmark = dict(bench(levels), rates=rates, requests=[{'level': 'concurrency 1', 'label': 'c1-0', 'ok': True}],
                     prompt={'target_tokens': 20, 'tokens': 20, 'tokens_min': 19, 'tokens_max': 21, 'max_error_tokens': 1,
                             'seed': 42, 'seed_source': 'fresh', 'sizing': 'tokenizer', 'prompts': 7},
                     objective={'slo_ttft_s': 1.0, 'slo_tpot_ms': 60.0},
                     conditions={'profile': 'full', 'warmup_requests': 1, 'requests_per_level': 2, 'cpu_count': 2,
                                 'load_average_before': [0.5, 0.4, 0.3], 'load_average_after': [1.5, 0.6, 0.3],
                                 'window_start_epoch': 1005.0, 'window_end_epoch': 1015.0})
    # node-a's GPU draws 100 W, node-b's two 200 W each, sampled from 1000 to 1020
    traces = {'node-a': {'started_epoch': 1000.0, 'method': 'nvml', 'gpu_names': {'0': 'NVIDIA H200'},
                         'samples': [[0.0, 0, 50, 1, 100.0], [20.0, 0, 50, 1, 100.0]]},
              'node-b': {'started_epoch': 1000.0, 'method': 'nvidia-smi-loop',
                         'samples': [[0.0, 0, 5, 1, 200.0], [20.0, 0, 5, 1, 200.0], [0.0, 1, 5, 1, 200.0], [20.0, 1, 5, 1, 200.0]]}}
    doc = report.build_document('lab', 'now', benchmark=benchmark, residency=RESIDENCY, traces=traces)
    assert 'requests' not in doc['benchmark'] and 'requests' in benchmark  # the lines go to requests.jsonl
    energy = doc['energy']
    assert (energy['joules'], energy['output_tokens']) == (5000.0, 42)
    assert energy['joules_per_output_token'] == pytest.approx(5000.0 / 42, abs=1e-3)
    assert [(g['host'], g['index'], g['joules']) for g in energy['gpus']] == [
        ('node-a', 0, 1000.0), ('node-b', 0, 2000.0), ('node-b', 1, 2000.0)]
    cond = doc['conditions']
    assert (cond['requests'], cond['cached_prompt_tokens'], cond['prompt_tokens'], cond['serving_gpus']) == (6, 3, 120, 3)
    assert cond['prompt_seed'] == 42 and cond['profile'] == 'full'
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    for needle in ('## Definitions', '| TPOT | `tpot_s` |', 'inter_token_latency_ms', '| E2E latency | `e2e_s` |',
                   '## Run conditions', '| profile | full |', 'seed 42 (fresh)',
                   '| prompt tokens the server took from its cache | 3 of 120 |',
                   '| head load average before, after (1, 5, 15 min; 2 CPUs) | [0.5, 0.4, 0.3], [1.5, 0.6, 0.3] |',
                   '## Energy', '5000.0 J in all for 42 output tokens', '| node-b | 1 | n/a | 2000.0 | 200.0 |',
                   'Request-rate sweep', '| 4.0 req/s (peak 2) |', '![latency](latency.png)', '![pareto](pareto.png)'):
        assert needle in text, needle
    summary = report_markdown.summary_lines(doc)
    assert '| energy J per output token, output tokens per J | 119.048, 0.008 |' in summary
    assert '| prompt tokens cached (concurrency 1) | 3 |' in summary
    out = report.vllm_summary(doc)
    assert [(lv['max_concurrency'], lv['request_rate']) for lv in out['levels']] == [(1, 'inf'), (2, 'inf'), (None, 4.0)]
    first = out['levels'][0]
    for key in ('mean_ttft_ms', 'median_ttft_ms', 'p99_ttft_ms', 'mean_tpot_ms', 'median_tpot_ms', 'p99_tpot_ms',
                'mean_itl_ms', 'median_itl_ms', 'p99_itl_ms', 'mean_e2el_ms', 'output_throughput', 'request_throughput',
                'request_goodput', 'completed', 'total_output_tokens'):
        assert first[key] is not None, key
    assert first['mean_ttft_ms'] == pytest.approx(200.0) and first['median_itl_ms'] == pytest.approx(100.0)
    assert (first['completed'], first['output_throughput'], first['request_throughput']) == (2, 7.0, 1.0)
    assert report.request_lines(benchmark['requests']) == '{"label": "c1-0", "level": "concurrency 1", "ok": true}\n'


def test_pareto_points_and_why_a_plot_is_empty():
    levels, rates = measured_levels()
    doc = report.build_document('lab', 'now', benchmark=dict(bench(levels), rates=rates), residency=RESIDENCY)
    data, why = report.pareto_series(doc)
    assert why is None and data['gpus'] == 3
    (only,) = data['endpoints']
    assert only['label'] == 'llama.cpp'
    by_label = dict((p['label'], p) for p in only['points'])
    assert by_label['c1']['per_gpu_tok_s'] == round(7.0 / 3, 2) and by_label['c2']['per_gpu_tok_s'] == round(14.0 / 3, 2)
    # the rate level decodes as fast per stream as c1 (20 tok/s) and yields more per GPU than c2
    assert by_label['4.0 req/s']['per_stream_tok_s'] == 20.0 and by_label['c2']['per_stream_tok_s'] == 10.0
    assert only['frontier'] == ['4.0 req/s']
    assert report.pareto_front([{'label': 'a', 'per_gpu_tok_s': 1, 'per_stream_tok_s': 1},
                                {'label': 'b', 'per_gpu_tok_s': 2, 'per_stream_tok_s': 2}]) == ['b']
    cpu = {'node-a': {'gpus': [{'index': 0, 'name': 'NVIDIA H200', 'memory_used_mib': 0, 'memory_total_mib': 143771}],
                      'processes': []}}
    cpu_doc = report.build_document('lab', 'now', benchmark=bench(levels), residency=cpu)
    assert report.pareto_series(cpu_doc)[1].startswith('no GPU holds the served model (no GPU on this node')
    assert report.idle_gpus_reason(cpu_doc).startswith('no serving process holds GPU memory')
    assert report.idle_gpus_reason(report.build_document('lab', 'now')) == 'no GPU on this node: nvidia-smi read none'
    assert report.idle_gpus_reason(doc) is None
    assert cpu_doc['energy'] is None and cpu_doc['energy_omitted'] == 'the benchmark recorded no sweep window'
    (series,) = report.latency_series(doc)
    assert series['concurrency'] == [1, 2] and series['tpot_p50_ms'][1] == pytest.approx(0.2 * 3 / 6 * 1000)
    assert report.pareto_series(report.build_document('lab', 'now')) == (None, 'no benchmark was run')
    assert report.throughput_series(report.build_document('lab', 'now')) == []


def test_every_plot_series_holds_each_endpoint_of_a_side_by_side_run():
    levels, rates = measured_levels()
    slower = [dict(lv, decode_tok_s=lv['decode_tok_s'] / 2, aggregate_output_tok_s=lv['aggregate_output_tok_s'] * 3,
                   ttft_s=dict(lv['ttft_s'], p50=lv['ttft_s']['p50'] / 4)) for lv in levels]
    benchmark = dict(bench(levels), rates=rates, label='llama.cpp',
                     compare=[{'label': 'vLLM', 'engine': 'vllm', 'model': 'M', 'base_url': 'http://127.0.0.1:8000',
                               'levels': slower, 'rates': []}])
    doc = report.build_document('lab', 'now', benchmark=benchmark, residency=RESIDENCY)
    assert [label for label, _entry in report.plot_endpoints(doc)] == ['llama.cpp', 'vLLM']
    first, second = report.throughput_series(doc)
    assert (first['label'], second['label']) == ('llama.cpp', 'vLLM')
    assert first['concurrency'] == second['concurrency'] == [1, 2]
    assert second['aggregate_tok_s'] == [3 * a for a in first['aggregate_tok_s']]
    assert second['decode_tok_s'] == [d / 2 for d in first['decode_tok_s']]
    assert [s['label'] for s in report.latency_series(doc)] == ['llama.cpp', 'vLLM']
    assert report.latency_series(doc)[1]['ttft_p50_s'] == [t / 4 for t in report.latency_series(doc)[0]['ttft_p50_s']]
    data, why = report.pareto_series(doc)
    assert why is None and [e['label'] for e in data['endpoints']] == ['llama.cpp', 'vLLM']
    # each endpoint's points and its own front: the rate level is llama.cpp's alone
    assert [p['label'] for p in data['endpoints'][0]['points']] == ['c1', 'c2', '4.0 req/s']
    assert [p['label'] for p in data['endpoints'][1]['points']] == ['c1', 'c2']
    assert data['endpoints'][1]['points'][0]['per_gpu_tok_s'] == round(3 * 7.0 / 3, 2)
    assert data['endpoints'][0]['frontier'] == ['4.0 req/s']
    assert data['endpoints'][1]['frontier'] == ['c1', 'c2']


def test_two_endpoints_side_by_side_with_the_energy_of_each_ones_sweeps():
    levels, rates = measured_levels()
    slower = [dict(lv, decode_tok_s=lv['decode_tok_s'] / 2) for lv in levels]
    benchmark = dict(bench(levels), rates=rates, label='llama.cpp',
                     conditions={'window_start_epoch': 1000.0, 'window_end_epoch': 1010.0},
                     compare=[{'label': 'vllm', 'engine': 'vllm', 'model': 'M', 'base_url': 'http://127.0.0.1:8000',
                               'levels': slower, 'rates': [], 'window_start_epoch': 1010.0, 'window_end_epoch': 1030.0}])
    # 100 W for the first endpoint's 10 s, 300 W for the second's 20 s
    trace = {'started_epoch': 1000.0, 'method': 'nvml',
             'samples': [[0.0, 0, 9, 1, 100.0], [10.0, 0, 9, 1, 100.0], [10.001, 0, 9, 1, 300.0], [30.0, 0, 9, 1, 300.0]]}
    doc = report.build_document('lab', 'now', benchmark=benchmark, residency=RESIDENCY, traces={'node-a': trace})
    first, second = doc['side_by_side']
    assert (first['label'], second['label']) == ('llama.cpp', 'vllm')
    # 1,000 J over 42 tokens; about 6,000 J over the 28 tokens of the second endpoint's two levels
    assert first['joules_per_output_token'] == pytest.approx(1000.0 / 42, abs=0.05)
    assert second['joules_per_output_token'] == pytest.approx(6000.0 / 28, rel=0.01)
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert '### Endpoints side by side' in text
    assert 'vllm (vllm, M, http://127.0.0.1:8000; 214.' in text
    rows = [line for line in text.splitlines() if line.startswith('| concurrency 1 |')]
    assert [row.split(' | ')[1] for row in rows] == ['llama.cpp', 'vllm']
    assert rows[0].split(' | ')[7] == '20.0' and rows[1].split(' | ')[7] == '10.0'
    assert [row.split(' | ')[1] for row in text.splitlines() if row.startswith('| 4.0 req/s |')] == ['llama.cpp']
    out = report.vllm_summary(doc)
    assert [(lv['endpoint'], lv['max_concurrency']) for lv in out['levels']] == [
        ('llama.cpp', 1), ('llama.cpp', 2), ('llama.cpp', None), ('vllm', 1), ('vllm', 2)]
    assert report.build_document('lab', 'now', benchmark=bench(levels))['side_by_side'] == []


def test_reports_to_prune_keeps_the_newest_of_the_inventory_only():
    names = ['lab-20261103T080000Z', 'lab-20261101T080000Z', 'lab-20261102T080000Z', 'lab-x', 'lab2-20261101T080000Z']
    assert report.reports_to_prune(names, 'lab', 1) == ['lab-20261101T080000Z', 'lab-20261102T080000Z']
    assert report.reports_to_prune(names, 'lab', 3) == []
    assert report.reports_to_prune(names, 'lab/ x', 1) == []


# ---------------------------------------------------------------- the layout each engine runs

LLAMA_CHOICE = {'ctx_size': 8192, 'tensor_split': [19.0, 22.0, 22.0],
                'ctx_reason': 'auto: 8192 tokens, the largest context that fits with the margin (trained 196608)',
                'split_reason': 'auto: whole-layer split 19,22,22 (RPC0 0-18, CUDA0 19-40, CUDA1 41-61+out) keeps at '
                                'least 2300 MiB beyond the margin on every device (tightest RPC0)',
                'rejected': [{'label': 'equal', 'tensor_split': [1.0, 1.0, 1.0], 'layer_ranges': ['0-20', '21-41', '42-61+out'],
                              'fits': False, 'smallest_headroom_mib': -900.0, 'tightest': 'RPC0',
                              'findings': ['RPC0 would overflow by 900 MiB (79000 MiB planned, 86000 MiB free, 1024 MiB margin)',
                                           '3200 MiB less on its tightest device than auto']}]}
VLLM_PLAN = {'label': 'TP=8+EP', 'max_model_len': 196608, 'kv_cache_memory_bytes': 20 * 1024 ** 3,
             'estimate': {'weights_mib': 27800.0, 'kv_cache_gib': 21.5, 'reserve_gib': 4.0},
             'choice': {'reason': 'auto: TP=8+EP uses all 8 GPUs and passes vLLM\'s rules',
                        'rejected': [{'label': 'TP=8', 'layout': {}, 'rules': ['expert_shard_vs_block'],
                                      'findings': ['1536 / 8 = 192 is not a multiple of the FP8 block size 128']},
                                     {'label': 'TP=4', 'layout': {}, 'rules': ['gpus'], 'findings': ['4 GPUs stay idle']}],
                        'alternatives': [{'label': 'TP=4+DP=2+EP', 'findings': ['valid, ranked lower: 3 requests']}]}}
VLLM_RESIDENCY = {'node-a': {'gpus': [{'index': i, 'name': 'NVIDIA H200', 'memory_used_mib': 58000,
                                       'memory_total_mib': 143771} for i in range(2)],
                             'processes': [{'pid': 10 + i, 'process_name': '/opt/gpulab/vllm/venv-0.24.0/bin/python3.12',
                                            'gpu_index': i, 'used_memory_mib': 53000 + 1000 * i} for i in range(2)]}}


def test_llama_cpp_layout_gives_the_reasons_and_what_was_turned_down():
    layouts = report.layout_choices(dict(PLAN, tensor_split=[19.0, 22.0, 22.0], choice=LLAMA_CHOICE))
    assert len(layouts) == 1 and layouts[0]['engine'] == 'llama_cpp'
    assert layouts[0]['layout'] == ('tensor split 19,22,22 (RPC0 0-30, RPC1 31-40, CUDA0 41-61), context 8192, '
                                    '63 GPU layers')
    assert layouts[0]['reasons'] == [LLAMA_CHOICE['ctx_reason'], LLAMA_CHOICE['split_reason']]
    assert layouts[0]['rejected'] == [{'label': 'equal 1,1,1', 'findings': LLAMA_CHOICE['rejected'][0]['findings']}]
    # the operator set both: the plan has no choice, and the report says they were set
    plain = report.layout_choices(dict(PLAN, options=dict(PLAN['options'], tensor_split='3,2,2')))[0]
    assert plain['reasons'] == ['llama_server_tensor_split 3,2,2 and llama_server_ctx_size 8192 as set']
    assert plain['rejected'] == [] and report.layout_choices() == []


def test_vllm_layout_gives_the_reason_the_rejected_and_the_lower_ranked():
    layout = report.layout_choices(vllm=VLLM_PLAN)[0]
    assert layout['engine'] == 'vllm'
    assert layout['layout'] == 'TP=8+EP, max_model_len 196608, KV cache pinned at 21474836480 bytes per GPU'
    assert [r['label'] for r in layout['rejected']] == ['TP=8', 'TP=4']
    assert layout['rejected'][0]['findings'] == ['1536 / 8 = 192 is not a multiple of the FP8 block size 128']
    assert layout['alternatives'] == [{'label': 'TP=4+DP=2+EP', 'findings': ['valid, ranked lower: 3 requests']}]
    unpinned = report.layout_choices(vllm=dict(VLLM_PLAN, kv_cache_memory_bytes=None, choice={}))[0]
    assert unpinned['layout'].endswith("KV cache sized by vLLM's profiling") and unpinned['reasons'] == []


def test_vllm_planned_against_measured_per_gpu():
    rows = report.residency_table(VLLM_RESIDENCY)
    compared = report.plan_against_measured(None, rows, VLLM_PLAN)
    # 27800 MiB of weights + the pinned 20480 MiB of KV cache + 4096 MiB of reserve
    assert [(c['device'], c['host'], c['planned_mib'], c['measured_mib'], c['error_percent']) for c in compared] == [
        ('GPU0', 'node-a', 52376.0, 53000, 1.2), ('GPU1', 'node-a', 52376.0, 54000, 3.1)]
    assert compared[0]['planned_kv_cache_mib'] == 20480.0 and compared[0]['process'] == 'vllm'
    # without pinning the estimate's KV cache counts
    assert report.vllm_planned_per_gpu(dict(VLLM_PLAN, kv_cache_memory_bytes=None))['total_mib'] == 27800.0 + 22016 + 4096
    # vLLM seen on no GPU: one row, planned and not measured
    assert [(c['device'], c['measured_mib']) for c in report.plan_against_measured(None, [], VLLM_PLAN)] == [
        ('each GPU', None)]
    assert report.plan_against_measured(None, rows, {'label': 'TP=1'}) == []


# role common's engine table's labels, as role bench hands them to the report
LABELS = {'llama_cpp': 'llama.cpp', 'vllm': 'vLLM'}


def test_markdown_shows_the_layout_and_vllm_planned_next_to_measured():
    doc = report.build_document('lab', 'now', residency=VLLM_RESIDENCY, vllm=VLLM_PLAN, engine_labels=LABELS)
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    section = text.split('## Layout\n')[1].split('## Memory plan against measured')[0]
    assert 'vLLM: TP=8+EP, max_model_len 196608, KV cache pinned at 21474836480 bytes per GPU.' in section
    # without the table's labels an engine is named by its table name
    unlabelled = report_markdown.layout_lines(report.build_document('lab', 'now', vllm=VLLM_PLAN))
    assert unlabelled[0] == 'vllm: TP=8+EP, max_model_len 196608, KV cache pinned at 21474836480 bytes per GPU.'
    assert "- why: auto: TP=8+EP uses all 8 GPUs and passes vLLM's rules" in section
    assert '- turned down: TP=8: 1536 / 8 = 192 is not a multiple of the FP8 block size 128' in section
    assert '- valid, ranked lower: TP=4+DP=2+EP: valid, ranked lower: 3 requests' in section
    assert 'Planned for vLLM TP=8+EP' in text and 'pinned with --kv-cache-memory-bytes' in text
    assert '| GPU1 | node-a | 1 | vllm | TP=8+EP | 27800 | 20480 | 4096 | n/a | 52376 | 54000 | 3.1 |' in text
    assert doc['layouts'][0]['engine'] == 'vllm'
    llama = report_markdown.render_markdown(report.build_document('lab', 'now', memory_plan=dict(PLAN, choice=LLAMA_CHOICE)),
                                            {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert '- turned down: equal 1,1,1: RPC0 would overflow by 900 MiB' in llama
    assert '- why: %s' % LLAMA_CHOICE['split_reason'] in llama
    bare = report_markdown.render_markdown(report.build_document('lab', 'now'),
                                           {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert 'No layout was recorded' in bare


# ---------------------------------------------------------------- the serving intent

LLAMA_INTENT = {'intent': 'interactive', 'concurrency': 4, 'parallel': 1,
                'parallel_reason': 'auto, serving intent interactive: one slot, so the one stream has the whole context '
                                   'and shares no batch'}
VLLM_INTENT = {'intent': 'throughput', 'concurrency': 64, 'max_num_seqs': 1024, 'max_num_batched_tokens': 8192,
               'cudagraph_capture_sizes': None, 'max_cudagraph_capture_size': 512,
               'reasons': {'max_num_seqs': 'auto, throughput: 1024 sequences per engine',
                           'max_num_batched_tokens': 'vllm_server_max_num_batched_tokens 8192 as set',
                           'cudagraph_capture_sizes': "auto, throughput: vLLM's sizes up to 512"},
               'set_by_intent': ['max_num_seqs', 'cudagraph_capture_sizes'],
               'layout_reason': 'serving intent throughput: ranked for the highest aggregate'}


def test_the_report_states_each_engines_intent_and_what_it_set():
    plan = dict(PLAN, choice=LLAMA_CHOICE, intent=LLAMA_INTENT)
    commands = {'node-a': ['/opt/gpulab/llama.cpp/b1/bin/llama-server -m m.gguf --parallel 1 --backend-sampling']}
    doc = report.build_document('lab', 'now', memory_plan=plan, vllm=dict(VLLM_PLAN, intent=VLLM_INTENT),
                                commands=commands, engine_labels=LABELS)
    llama, vllm = doc['serving_intent']
    assert (llama['label'], llama['intent'], llama['concurrency']) == ('llama.cpp', 'interactive', 4)
    assert llama['settings'] == [
        {'setting': 'llama_server_parallel', 'value': 1, 'reason': LLAMA_INTENT['parallel_reason']},
        {'setting': 'llama_server_ctx_size', 'value': 8192, 'reason': LLAMA_CHOICE['ctx_reason']},
        {'setting': 'llama_server_backend_sampling', 'value': 'on', 'reason': llama['settings'][2]['reason']}]
    assert (vllm['label'], vllm['intent'], vllm['concurrency']) == ('vLLM', 'throughput', 64)
    assert [(s['setting'], s['value'], s.get('by_intent')) for s in vllm['settings']] == [
        ('vllm_server_max_num_seqs', 1024, True), ('vllm_server_max_num_batched_tokens', 8192, False),
        ('vllm_server_cudagraph_capture_sizes', 'up to 512', True), ('layout', 'TP=8+EP', None)]
    assert vllm['settings'][1]['reason'] == 'vllm_server_max_num_batched_tokens 8192 as set'
    assert vllm['settings'][3]['reason'] == VLLM_INTENT['layout_reason']
    text = report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    section = text.split('## Serving intent\n')[1].split('## Layout')[0]
    assert 'llama.cpp: serving intent interactive, target concurrency 4.' in section
    assert '| llama_server_parallel | 1 | %s |' % LLAMA_INTENT['parallel_reason'] in section
    assert "| llama_server_backend_sampling | on | the head's command line" in section
    assert 'vLLM: serving intent throughput, target concurrency 64.' in section
    assert "| vllm_server_cudagraph_capture_sizes | up to 512 | auto, throughput: vLLM's sizes up to 512 |" in section
    assert '| serving intent | llama.cpp interactive, vLLM throughput |' in report_markdown.summary_lines(doc)
    assert json.loads(json.dumps(doc))['serving_intent'] == doc['serving_intent']


def test_an_interactive_vllm_plan_lists_its_graph_sizes_and_backend_sampling_off_is_read():
    interactive = dict(VLLM_INTENT, intent='interactive', max_num_seqs=8, cudagraph_capture_sizes=[1, 2, 4, 8],
                       max_cudagraph_capture_size=None)
    (vllm,) = report.serving_intent(vllm=dict(VLLM_PLAN, intent=interactive))
    assert vllm['label'] == 'vllm' and vllm['settings'][2]['value'] == '1 2 4 8'
    (llama,) = report.serving_intent(memory_plan=dict(PLAN, intent=dict(LLAMA_INTENT, intent='throughput', parallel=4)),
                                     commands={'node-a': ['llama-server -m m.gguf --parallel 4']}, labels=LABELS)
    assert [s['value'] for s in llama['settings']] == [4, 8192, 'off']
    # no command line read: backend sampling is not stated; a plan without an intent: nothing
    (bare,) = report.serving_intent(memory_plan=dict(PLAN, intent=LLAMA_INTENT))
    assert [s['setting'] for s in bare['settings']] == ['llama_server_parallel', 'llama_server_ctx_size']
    assert report.serving_intent(memory_plan=PLAN, vllm=VLLM_PLAN) == []
    text = report_markdown.render_markdown(report.build_document('lab', 'now'),
                                           {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
    assert 'No serving intent was recorded' in text
