"""report_checks: every input of inference_report in the shape the report reads, and each bad
shape named by input, host or file, entry and field."""

import copy

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import report, report_markdown
from ansible_collections.gpulab.inference.plugins.module_utils.report_checks import (
    ReportInputError,
    check_inputs,
    check_trace,
)

from test_report import LEVEL, RESIDENCY as TWO_HOSTS, bench

RESIDENCY = {'node-a': TWO_HOSTS['node-b']}
BENCH = bench([LEVEL, dict(LEVEL, concurrency=2), dict(LEVEL, concurrency=4)])
SAMPLER = {'node-a': {'method': 'nvidia-smi-loop', 'gpus': [
    {'index': 0, 'name': 'NVIDIA H200', 'samples': 26, 'utilization_peak': 65, 'utilization_median': 51.0,
     'utilization_p10': 0.0, 'utilization_mean': 35.0, 'zero_fraction': 0.3846, 'memory_used_peak_mib': 18135}]}}
TRACE = {'host': 'node-a', 'method': 'nvidia-smi-loop', 'interval_ms': 100, 'gpu_names': {'0': 'NVIDIA H200'},
         'samples': [[0.0, 0, 51, 18033], [0.1, 0, None, None]]}

PLAN = {'model_path': '/m.gguf', 'options': {'ctx_size': 4096},
        'devices': [{'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'gpu_index': 0, 'total_mib': 9000,
                     'weights_mib': 8000, 'kv_cache_mib': 500, 'compute_mib_estimate': 400, 'context_mib': 100,
                     'layer_range': '0-15'}]}
TRANSPORT = {'node-b': {'results': [{'item': {'name': 'gpulab-rpc-server@0'}, 'rdma': 1, 'tcp': 0, 'warning': ''},
                                    {'skipped': True}]}}
CACHE = {'node-b': {'changed': False, 'status': {
    'enabled': True, 'path': '/var/cache/gpulab/rpc/rpc', 'size_bytes': 1 << 30, 'size_gib': 1.0, 'files': 3,
    'max_bytes': 2 << 30, 'bound_gib': 2.0, 'free_bytes': 1 << 40, 'over_bound': False, 'summary': 'line'}},
    'node-a': {'skipped': True}}
GOOD = {'rpc_cache': CACHE, 'residency': RESIDENCY, 'sampler': SAMPLER, 'benchmark': BENCH, 'memory_plan': PLAN,
        'build_info': {'build_id': 'b1', 'cuda': True}, 'vllm': {'model': 'x'},
        'commands': {'node-a': ['llama-server -m m.gguf']}, 'rpc_transport': TRANSPORT,
        'llama_bench': [{'n_prompt': 0, 'n_gen': 128, 'avg_ts': 80.0, 'stddev_ts': 0.4}, 'not a record']}


def with_change(option, change):
    params = copy.deepcopy(GOOD)
    change(params) if option is None else change(params[option])
    return params


def test_the_inputs_of_a_real_run_pass():
    check_inputs(copy.deepcopy(GOOD))
    check_inputs({})
    check_trace(TRACE, 'node-a', '/stage/node-a.json')


def setitem(path, value):
    """A change that sets params[...path...] = value."""
    def change(record):
        for key in path[:-1]:
            record = record[key]
        record[path[-1]] = value
    return change


# (id, option, change, the start of the message, words in it)
BAD_SHAPES = [
    ('residency_not_a_mapping', None, setitem(['residency'], ['node-a']), 'residency: the option is',
     ['not a mapping of host name']),
    ('residency_entry_a_string', 'residency', setitem(['node-a'], 'gpus'), 'residency of node-a: the entry is',
     ["'gpus' (str), not a mapping"]),
    ('residency_gpus_a_mapping', 'residency', setitem(['node-a', 'gpus'], {'0': {}}),
     'residency of node-a: the entry field gpus is', ['not a list']),
    ('residency_gpu_a_number', 'residency', setitem(['node-a', 'gpus', 0], 7),
     'residency of node-a: the entry field gpus entry 0 is 7 (int), not a mapping', []),
    ('residency_gpu_without_index', 'residency', lambda r: r['node-a']['gpus'][0].pop('index'),
     'residency of node-a: the entry field gpus entry 0 has no index', ['run the bench step']),
    ('residency_index_a_string', 'residency', setitem(['node-a', 'gpus', 0, 'index'], '0'),
     "residency of node-a: the entry field gpus entry 0 field index is '0' (str), not a whole number", []),
    ('residency_index_null', 'residency', setitem(['node-a', 'gpus', 0, 'index'], None),
     'residency of node-a: the entry field gpus entry 0 field index is None', []),
    ('residency_used_a_string', 'residency', setitem(['node-a', 'gpus', 0, 'memory_used_mib'], '18033 MiB'),
     'residency of node-a: the entry field gpus entry 0 field memory_used_mib is', ['not a number']),
    ('residency_used_a_bool', 'residency', setitem(['node-a', 'gpus', 0, 'memory_total_mib'], True),
     'residency of node-a: the entry field gpus entry 0 field memory_total_mib is True (bool), not a number', []),
    ('residency_name_a_list', 'residency', setitem(['node-a', 'gpus', 0, 'name'], ['H200']),
     'residency of node-a: the entry field gpus entry 0 field name is', ['not a string']),
    ('residency_process_a_string', 'residency', setitem(['node-a', 'processes', 1], 'ggml-rpc-server'),
     'residency of node-a: the entry field processes entry 1 is', ['not a mapping']),
    ('residency_process_memory_a_string', 'residency', setitem(['node-a', 'processes', 0, 'used_memory_mib'], 'x'),
     'residency of node-a: the entry field processes entry 0 field used_memory_mib', ['not a number']),
    ('residency_process_gpu_a_float', 'residency', setitem(['node-a', 'processes', 0, 'gpu_index'], 0.5),
     'residency of node-a: the entry field processes entry 0 field gpu_index is 0.5', ['not a whole number']),
    ('residency_process_unit_a_number', 'residency', setitem(['node-a', 'processes', 0, 'systemd_unit'], 3),
     'residency of node-a: the entry field processes entry 0 field systemd_unit', ['not a string']),
    ('sampler_entry_a_list', 'sampler', setitem(['node-a'], [1, 2]), 'sampler of node-a: the entry is',
     ['not a mapping']),
    ('sampler_gpus_a_string', 'sampler', setitem(['node-a', 'gpus'], 'none'),
     'sampler of node-a: the entry field gpus is', ['not a list']),
    ('sampler_gpu_a_string', 'sampler', setitem(['node-a', 'gpus', 0], 'GPU 0'),
     'sampler of node-a: the entry field gpus entry 0 is', ['not a mapping']),
    ('sampler_gpu_without_samples', 'sampler', lambda s: s['node-a']['gpus'][0].pop('samples'),
     'sampler of node-a: the entry field gpus entry 0 has no samples', []),
    ('sampler_peak_a_string', 'sampler', setitem(['node-a', 'gpus', 0, 'utilization_peak'], '65 %'),
     'sampler of node-a: the entry field gpus entry 0 field utilization_peak', ['not a number']),
    ('sampler_method_a_number', 'sampler', setitem(['node-a', 'method'], 1),
     'sampler of node-a: the entry field method', ['not a string']),
    ('benchmark_a_list', None, setitem(['benchmark'], []), 'benchmark (the benchmark job\'s status file): the record',
     ['not a mapping', 'fix or remove the file']),
    ('benchmark_level_a_number', 'benchmark', setitem(['levels', 1], 2),
     "benchmark (the benchmark job's status file): the record field levels entry 1 is 2 (int)", ['not a mapping']),
    ('benchmark_level_without_concurrency', 'benchmark', lambda b: b['levels'][0].pop('concurrency'),
     "benchmark (the benchmark job's status file): the record field levels entry 0 has no concurrency", []),
    ('benchmark_ttft_a_number', 'benchmark', setitem(['levels', 0, 'ttft_s'], 0.05),
     "benchmark (the benchmark job's status file): the record field levels entry 0 field ttft_s", ['not a mapping']),
    ('benchmark_p50_a_string', 'benchmark', setitem(['levels', 0, 'itl_s', 'p50'], 'fast'),
     "benchmark (the benchmark job's status file): the record field levels entry 0 field itl_s field p50",
     ['not a number']),
    ('benchmark_server_a_string', 'benchmark', setitem(['levels', 2, 'server'], 'llama'),
     "benchmark (the benchmark job's status file): the record field levels entry 2 field server", ['not a mapping']),
    ('benchmark_weights_bytes_a_string', 'benchmark', setitem(['model_weights'], {'bytes_read_per_token': '4 GB'}),
     "benchmark (the benchmark job's status file): the record field model_weights field bytes_read_per_token",
     ['not a number']),
    ('memory_plan_a_list', None, setitem(['memory_plan'], [1]), 'memory_plan (memory-plan.json): the file is',
     ['not a mapping']),
    ('memory_plan_device_a_string', 'memory_plan', setitem(['devices', 0], 'RPC0'),
     'memory_plan (memory-plan.json): the file field devices entry 0 is', ['not a mapping']),
    ('memory_plan_total_a_string', 'memory_plan', setitem(['devices', 0, 'total_mib'], '9000'),
     'memory_plan (memory-plan.json): the file field devices entry 0 field total_mib', ['not a number']),
    ('memory_plan_gpu_a_string', 'memory_plan', setitem(['devices', 0, 'gpu_index'], 'GPU0'),
     'memory_plan (memory-plan.json): the file field devices entry 0 field gpu_index', ['not a whole number']),
    ('memory_plan_options_a_list', 'memory_plan', setitem(['options'], ['ctx']),
     'memory_plan (memory-plan.json): the file field options', ['not a mapping']),
    ('build_info_build_id_a_number', 'build_info', setitem(['build_id'], 12),
     'build_info (BUILD_INFO.json): the file field build_id is 12 (int), not a string', []),
    ('vllm_a_string', None, setitem(['vllm'], 'vllm 0.24'), 'vllm (the vLLM plan file): the file is',
     ['not a mapping']),
    ('memory_plan_rejected_a_string', 'memory_plan', setitem(['choice'], {'rejected': ['equal']}),
     'memory_plan (memory-plan.json): the file field choice field rejected entry 0 is', ['not a mapping']),
    ('vllm_weights_a_string', 'vllm', setitem(['estimate'], {'weights_mib': '27 GiB'}),
     'vllm (the vLLM plan file): the file field estimate field weights_mib', ['not a number']),
    ('vllm_rejected_findings_a_string', 'vllm', setitem(['choice'], {'rejected': [{'label': 'TP=8', 'findings': 'no'}]}),
     'vllm (the vLLM plan file): the file field choice field rejected entry 0 field findings', ['not a list']),
    ('commands_a_string', 'commands', setitem(['node-a'], 'llama-server -m m.gguf'),
     'commands of node-a: the entry is', ['not a list']),
    ('commands_line_a_number', 'commands', setitem(['node-a', 0], 42),
     'commands of node-a: line 0 is 42 (int), not a string', []),
    ('rpc_transport_a_list', None, setitem(['rpc_transport'], []), 'rpc_transport: the option is', ['not a mapping']),
    ('rpc_transport_results_a_string', 'rpc_transport', setitem(['node-b', 'results'], 'ok'),
     'rpc_transport of node-b: the entry field results', ['not a list']),
    ('rpc_transport_server_a_string', 'rpc_transport', setitem(['node-b', 'results', 0, 'item'], 'gpulab-rpc-server@0'),
     'rpc_transport of node-b: results entry 0 field item is', ['not a mapping']),
    ('rpc_transport_rdma_a_string', 'rpc_transport', setitem(['node-b', 'results', 0, 'tcp'], 'none'),
     'rpc_transport of node-b: results entry 0 field tcp', ['not a number']),
    ('rpc_cache_a_list', None, setitem(['rpc_cache'], ['node-b']), 'rpc_cache: the option is', ['not a mapping']),
    ('rpc_cache_status_a_string', 'rpc_cache', setitem(['node-b', 'status'], 'ok'),
     "rpc_cache of node-b: the field status is 'ok' (str), not a mapping", ['run the bench step']),
    ('rpc_cache_size_a_string', 'rpc_cache', setitem(['node-b', 'status', 'size_gib'], '1 GiB'),
     'rpc_cache of node-b: the field status field size_gib', ['not a number']),
    ('rpc_cache_enabled_a_string', 'rpc_cache', setitem(['node-b', 'status', 'enabled'], 'yes'),
     "rpc_cache of node-b: the field status field enabled is 'yes' (str), not true or false", []),
    ('rpc_cache_without_enabled', 'rpc_cache', lambda c: c['node-b']['status'].pop('enabled'),
     'rpc_cache of node-b: the field status has no enabled', []),
    ('llama_bench_n_gen_a_string', 'llama_bench', setitem([0, 'n_gen'], '128'),
     'llama_bench (llama-bench -o json): record 0 field n_gen', ['not a whole number']),
    ('llama_bench_avg_ts_a_string', 'llama_bench', setitem([0, 'avg_ts'], 'fast'),
     'llama_bench (llama-bench -o json): record 0 field avg_ts', ['not a number']),
]


@pytest.mark.parametrize('option, change, start, words', [c[1:] for c in BAD_SHAPES], ids=[c[0] for c in BAD_SHAPES])
def test_a_bad_shape_is_named_by_input_entry_and_field(option, change, start, words):
    params = with_change(option, change)
    with pytest.raises(ReportInputError) as raised:
        check_inputs(params)
    message = str(raised.value)
    assert message.startswith(start), message
    for word in words:
        assert word in message, message


def test_each_bad_shape_would_otherwise_break_the_report_or_pass_silently():
    """The checks guard something: each bad input either fails in build_document/render_markdown
    with a Python error or is accepted; after the check neither can happen."""
    broken = 0
    for case_id, option, change, unused_start, unused_words in BAD_SHAPES:
        params = with_change(option, change)
        try:
            doc = report.build_document('lab', 'now', benchmark=params['benchmark'], residency=params['residency'],
                                        sampler=params['sampler'], build_info=params['build_info'],
                                        commands=params['commands'], memory_plan=params['memory_plan'],
                                        vllm=params['vllm'], rpc_transport=params['rpc_transport'],
                                        llama_bench=params['llama_bench'], rpc_cache=params['rpc_cache'])
            report_markdown.render_markdown(doc, {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png'})
        except (TypeError, KeyError, AttributeError, ValueError, IndexError):
            broken += 1
    assert broken >= 20


# (id, trace, start of the message)
BAD_TRACES = [
    ('trace_a_list', [[0.0, 0, 51, 100]], 'the file is [[0.0, 0, 51, 100]] (list), not a mapping'),
    ('samples_a_mapping', {'samples': {'0': 1}}, 'the file field samples is'),
    ('sample_too_short', {'samples': [[0.0, 0, 51]]}, 'the file field samples entry 0 is [0.0, 0, 51] (list), '
                                                      'not a list of 4 to 5 values'),
    ('sample_a_number', {'samples': [5]}, 'the file field samples entry 0 is 5 (int), not a list of 4 to 5 values'),
    ('sample_index_a_string', {'samples': [[0.0, 'GPU0', 51, 100]]},
     "the file field samples entry 0 value 1 is 'GPU0' (str), not a whole number"),
    ('sample_time_null', {'samples': [[None, 0, 51, 100]]}, 'the file field samples entry 0 value 0 is None'),
    ('sample_util_a_string', {'samples': [[0.0, 0, '51%', 100]]},
     "the file field samples entry 0 value 2 is '51%' (str), not a number"),
    ('gpu_names_a_list', {'gpu_names': ['H200'], 'samples': []}, 'the file field gpu_names is'),
]


@pytest.mark.parametrize('trace_doc, start', [c[1:] for c in BAD_TRACES], ids=[c[0] for c in BAD_TRACES])
def test_a_bad_trace_file_is_named_by_host_path_and_sample(trace_doc, start):
    with pytest.raises(ReportInputError) as raised:
        check_trace(trace_doc, 'node-a', '/stage/node-a.json')
    assert str(raised.value).startswith('traces: the trace of node-a at /stage/node-a.json: ' + start), str(raised.value)
    assert str(raised.value).endswith('fix or remove the file and run the bench step that writes it again')


def test_a_long_value_is_named_by_its_type_only():
    params = copy.deepcopy(GOOD)
    params['residency']['node-a']['gpus'][0]['name'] = ['x' * 200]
    with pytest.raises(ReportInputError) as raised:
        check_inputs(params)
    assert 'field name is a list, not a string' in str(raised.value)


def test_traces_with_and_without_power_pass_and_a_rate_level_is_checked():
    check_trace({'samples': [[0.0, 0, 5, 100], [0.2, 0, 6, 100, 81.2], [0.4, 0, 6, 100, None]]}, 'node-a', '/t.json')
    with pytest.raises(ReportInputError, match="samples entry 0 value 4 is 'hot' \\(str\\), not a number"):
        check_trace({'samples': [[0.0, 0, 5, 100, 'hot']]}, 'node-a', '/t.json')
    rate = dict(LEVEL, request_rate='fast')
    with pytest.raises(ReportInputError, match="field rates entry 0 field request_rate is 'fast' \\(str\\), not a number"):
        check_inputs({'benchmark': dict(bench([LEVEL]), rates=[rate])})
    with pytest.raises(ReportInputError, match='field conditions field window_start_epoch is'):
        check_inputs({'benchmark': dict(bench([LEVEL]), conditions={'window_start_epoch': 'noon'})})
