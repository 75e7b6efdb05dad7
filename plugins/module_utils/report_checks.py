# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of what inference_report reads, checked before any of it is used.

Its inputs come from other modules' results and from files written on the nodes (the traces,
memory-plan.json, BUILD_INFO.json, the benchmark's job status, llama-bench's JSON); a file that
was edited by hand, truncated or written by another version would otherwise end in a Python
error half way through the report. Each check names the input (and the host or file), the entry
and the field, with what was expected.

A spec maps a field to (kind, required): kind is one of KINDS, ('list', spec) for a list of
records, ('map', spec) for a nested record or ('row', kinds) for a list of fixed length. A
field that is present may be None unless its kind ends in '!'. ('rows', kinds, shortest) lets
rows leave out their last columns down to `shortest` values.
"""

from __future__ import annotations

KINDS = {
    'int': 'a whole number',
    'number': 'a number',
    'str': 'a string',
    'list': 'a list',
    'map': 'a mapping',
    'bool': 'true or false',
    'any': 'anything',
}

GPU = {'index': ('int!', True), 'name': ('str', False), 'memory_used_mib': ('number', False),
       'memory_total_mib': ('number', False)}
PROCESS = {'gpu_index': ('int', False), 'used_memory_mib': ('number', False), 'systemd_unit': ('str', False),
           'process_name': ('str', False)}
RESIDENCY = {'gpus': (('list', GPU), False), 'processes': (('list', PROCESS), False)}

SAMPLED_GPU = {'index': ('int!', True), 'name': ('str', False), 'samples': ('int', True),
               'utilization_peak': ('number', True), 'utilization_median': ('number', True),
               'utilization_p10': ('number', True), 'utilization_mean': ('number', True),
               'zero_fraction': ('number', True)}
SAMPLER = {'method': ('str', False), 'gpus': (('list', SAMPLED_GPU), False)}

# a trace sample: seconds, GPU index, utilisation %, memory used MiB, power W (absent from traces
# written before the sampler read power: four values a sample)
TRACE = {'gpu_names': ('map', False), 'started_epoch': ('number', False),
         'samples': (('rows', ('number!', 'int!', 'number', 'number', 'number'), 4), False)}

PERCENTILES = {'mean': ('number', False), 'p50': ('number', False), 'p99': ('number', False)}
LEVEL = {'concurrency': ('int!', True), 'requests_ok': ('int!', True), 'requests_failed': ('int!', True),
         'ttft_s': (('map!', PERCENTILES), True), 'tpot_s': (('map!', PERCENTILES), True),
         'itl_s': (('map!', PERCENTILES), True), 'prefill_tok_s': ('number', False), 'decode_tok_s': ('number', False),
         'decode_tok_s_cv_percent': ('number', False), 'aggregate_output_tok_s': ('number', True),
         'reasoning_tokens': ('int!', True), 'answer_tokens': ('int!', True),
         'request_rate': ('number', False), 'cached_prompt_tokens': ('int', False), 'output_tokens': ('int', False),
         'e2e_s': (('map', PERCENTILES), False), 'itl_token_s': (('map', PERCENTILES), False),
         'ci95': ('map', False), 'vllm': ('map', False),
         'goodput': (('map', {'requests_good': ('int!', True), 'request_goodput': ('number', False)}), False),
         'server': (('map', {'decode_tok_s': ('number', False), 'prefill_tok_s': ('number', False),
                             'decode_ratio': ('number', False)}), False)}
WEIGHTS = {'bytes_read_per_token': ('number', False), 'weights_bytes': ('number', False),
           'architecture': ('str', False)}
COMPARED = {'label': ('str', False), 'engine': ('str', False), 'levels': (('list', LEVEL), False),
            'rates': (('list', LEVEL), False), 'window_start_epoch': ('number', False), 'window_end_epoch': ('number', False)}
BENCHMARK = {'engine': ('str', False), 'compare': (('list', COMPARED), False), 'model': ('str', False), 'base_url': ('str', False),
             'levels': (('list', LEVEL), False), 'rates': (('list', LEVEL), False), 'requests': ('list', False),
             'conditions': (('map', {'window_start_epoch': ('number', False), 'window_end_epoch': ('number', False)}), False),
             'warnings': ('list', False), 'prompt': ('map', False),
             'request': ('map', False), 'model_weights': (('map', WEIGHTS), False)}

PLANNED_DEVICE = {'name': ('str', False), 'host': ('str', False), 'kind': ('str', False), 'gpu_index': ('int', False),
                  'total_mib': ('number', False), 'weights_mib': ('number', False), 'kv_cache_mib': ('number', False),
                  'compute_mib_estimate': ('number', False), 'context_mib': ('number', False)}
# a layout turned down or ranked lower, with what was found against it
ALTERNATIVE = {'label': ('str', False), 'findings': ('list', False)}
LLAMA_CHOICE = {'ctx_reason': ('str', False), 'split_reason': ('str', False), 'rejected': (('list', ALTERNATIVE), False)}
MEMORY_PLAN = {'devices': (('list', PLANNED_DEVICE), False), 'options': ('map', False), 'model_path': ('str', False),
               'n_gpu_layers': ('int', False), 'choice': (('map', LLAMA_CHOICE), False)}
VLLM_ESTIMATE = {'weights_mib': ('number', False), 'kv_cache_gib': ('number', False), 'reserve_gib': ('number', False)}
VLLM_CHOICE = {'reason': ('str', False), 'rejected': (('list', ALTERNATIVE), False),
               'alternatives': (('list', ALTERNATIVE), False)}
VLLM_PLAN = {'label': ('str', False), 'estimate': (('map', VLLM_ESTIMATE), False),
             'kv_cache_memory_bytes': ('int', False), 'choice': (('map', VLLM_CHOICE), False)}

BUILD_INFO = {'build_id': ('str', False)}

BENCH_RECORD = {'n_prompt': ('int', False), 'n_gen': ('int', False), 'avg_ts': ('number', False),
                'stddev_ts': ('number', False)}

TRANSPORT_RESULT = {'rdma': ('number', False), 'tcp': ('number', False), 'warning': ('str', False)}

# rpc_cache's query (its `status`), as role llama_rpc_server's entry point cache_status registers it
CACHE_STATUS = {'enabled': ('bool!', True), 'path': ('str', False), 'size_gib': ('number', False),
                'bound_gib': ('number', False), 'files': ('int', False), 'over_bound': ('bool', False),
                'summary': ('str', False)}

# what to do about a bad input, by where it came from
FIX_RESULT = 'run the bench step that produces it again'
FIX_FILE = 'fix or remove the file and run the bench step that writes it again'


class ReportInputError(ValueError):
    pass


def _kind_ok(value, kind):
    if kind == 'any':
        return True
    if kind in ('int', 'number') and isinstance(value, bool):
        return False
    if kind == 'int':
        return isinstance(value, int)
    if kind == 'number':
        return isinstance(value, (int, float))
    if kind == 'str':
        return isinstance(value, str)
    if kind == 'list':
        return isinstance(value, list)
    if kind == 'bool':
        return isinstance(value, bool)
    return isinstance(value, dict)  # map


def _describe(value):
    return '%r (%s)' % (value, type(value).__name__) if len(repr(value)) <= 60 else 'a %s' % type(value).__name__


def _fail(where, what, value, expected, fix):
    raise ReportInputError('%s: %s is %s, not %s; %s' % (where, what, _describe(value), expected, fix))


def check_value(value, kind, where, what, fix):
    """One value against one kind (a name of KINDS, or a ('list'|'map'|'rows', ...) tuple)."""
    nested = kind[1] if isinstance(kind, tuple) else None
    name = kind[0] if isinstance(kind, tuple) else kind
    required = name.endswith('!')
    name = name.rstrip('!')
    if value is None and not required:
        return
    if name == 'rows':
        shortest = kind[2] if len(kind) > 2 else len(nested)
        if not isinstance(value, list):
            _fail(where, what, value, KINDS['list'], fix)
        for position, row in enumerate(value):
            if not isinstance(row, list) or not shortest <= len(row) <= len(nested):
                count = '%d' % len(nested) if shortest == len(nested) else '%d to %d' % (shortest, len(nested))
                _fail(where, '%s entry %d' % (what, position), row, 'a list of %s values' % count, fix)
            for column, (item, item_kind) in enumerate(zip(row, nested)):
                check_value(item, item_kind, where, '%s entry %d value %d' % (what, position, column), fix)
        return
    if not _kind_ok(value, name):
        _fail(where, what, value, KINDS[name], fix)
    if nested is not None and name == 'list':
        for position, item in enumerate(value):
            check_record(item, nested, where, '%s entry %d' % (what, position), fix)
    elif nested is not None:
        check_record(value, nested, where, what, fix)


def check_record(record, spec, where, what, fix):
    """A mapping whose fields match spec (fields the spec does not name are not looked at)."""
    if not isinstance(record, dict):
        _fail(where, what, record, KINDS['map'], fix)
    for field, (kind, required) in spec.items():
        if field not in record:
            if required:
                raise ReportInputError('%s: %s has no %s; %s' % (where, what, field, fix))
            continue
        check_value(record[field], kind, where, '%s field %s' % (what, field), fix)


def check_per_host(value, spec, option, fix=FIX_RESULT):
    """An option mapping host -> record (or None, for a host that has none)."""
    if value is None:
        return
    if not isinstance(value, dict):
        _fail(option, 'the option', value, 'a mapping of host name to its result', fix)
    for host, record in value.items():
        if record is not None:
            check_record(record, spec, '%s of %s' % (option, host), 'the entry', fix)


def check_trace(trace, host, path):
    """A trace file as gpu_sampler writes it."""
    check_record(trace, TRACE, 'traces: the trace of %s at %s' % (host, path), 'the file', FIX_FILE)


def check_commands(commands):
    """commands: host -> the serving processes' command lines."""
    if commands is None:
        return
    for host, lines in commands.items():
        check_value(lines, 'list', 'commands of %s' % host, 'the entry', FIX_RESULT)
        for position, line in enumerate(lines or []):
            check_value(line, 'str!', 'commands of %s' % host, 'line %d' % position, FIX_RESULT)


def _results_by_host(option, value):
    """The (host, registered result) pairs of an option that maps host names to results; none when unset."""
    if value is None:
        return []
    if not isinstance(value, dict):
        _fail(option, 'the option', value, 'a mapping of host name to its result', FIX_RESULT)
    return value.items()


def check_rpc_transport(transport):
    """rpc_transport: host -> a looped result whose results name their server under the loop var."""
    for host, registered in _results_by_host('rpc_transport', transport):
        where = 'rpc_transport of %s' % host
        if registered is None:
            continue
        check_record(registered, {'results': ('list', False)}, where, 'the entry', FIX_RESULT)
        for position, result in enumerate(registered.get('results') or []):
            if not isinstance(result, dict) or result.get('skipped') or 'rdma' not in result:
                continue  # the report passes these over
            what = 'results entry %d' % position
            check_record(result, TRANSPORT_RESULT, where, what, FIX_RESULT)
            loop_var = result.get('ansible_loop_var') or 'item'
            check_value(result.get(loop_var), ('map', {'name': ('str', False)}), where,
                        '%s field %s' % (what, loop_var), FIX_RESULT)


def check_rpc_cache(cache):
    """rpc_cache: host -> rpc_cache's query result; a skipped one, or one without a status, is passed over."""
    for host, registered in _results_by_host('rpc_cache', cache):
        if not isinstance(registered, dict) or 'status' not in registered:
            continue  # the report passes these over
        check_value(registered['status'], ('map!', CACHE_STATUS), 'rpc_cache of %s' % host, 'the field status',
                    FIX_RESULT)


def check_llama_bench(records):
    """llama-bench's -o json: a list of records (other shapes mean 'not measured')."""
    if not isinstance(records, list):
        return
    for position, record in enumerate(records):
        if isinstance(record, dict):
            check_record(record, BENCH_RECORD, 'llama_bench (llama-bench -o json)', 'record %d' % position, FIX_FILE)


def check_inputs(params):
    """Every input of inference_report the report reads; raises ReportInputError on the first bad one."""
    check_per_host(params.get('residency'), RESIDENCY, 'residency')
    check_per_host(params.get('sampler'), SAMPLER, 'sampler')
    if params.get('benchmark') is not None:
        check_record(params['benchmark'], BENCHMARK, 'benchmark (the benchmark job\'s status file)', 'the record',
                     FIX_FILE)
    if params.get('memory_plan'):
        check_record(params['memory_plan'], MEMORY_PLAN, 'memory_plan (memory-plan.json)', 'the file', FIX_FILE)
    if params.get('build_info') is not None:
        check_record(params['build_info'], BUILD_INFO, 'build_info (BUILD_INFO.json)', 'the file', FIX_FILE)
    if params.get('vllm'):
        check_record(params['vllm'], VLLM_PLAN, 'vllm (the vLLM plan file)', 'the file', FIX_FILE)
    check_commands(params.get('commands'))
    check_rpc_transport(params.get('rpc_transport'))
    check_rpc_cache(params.get('rpc_cache'))
    check_llama_bench(params.get('llama_bench'))
