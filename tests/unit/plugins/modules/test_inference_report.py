"""inference_report writes report.md, report.json and three PNGs; absent inputs and no matplotlib."""

import json
import struct
from unittest import mock

import pytest

from ansible_collections.gpulab.inference.plugins.modules import inference_report

from module_harness import ExitJson, FailJson, run_module
from report_inputs import BENCH, RESIDENCY, SAMPLER, trace


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n', path
    return struct.unpack('>II', data[16:24])


def report(args):
    return run_module(inference_report.main, args, answers={}, bin_path=None)


def test_full_report(tmp_path):
    trace_path = tmp_path / 'node-a.json'
    trace_path.write_text(trace())
    run = report({'output_dir': str(tmp_path / 'reports'), 'inventory_name': 'lab', 'timestamp': '20261130T120000Z',
                  'benchmark': BENCH, 'residency': RESIDENCY, 'sampler': SAMPLER, 'traces': {'node-a': str(trace_path)},
                  'build_info': {'build_id': 'b1'}, 'commands': {'node-a': ['llama-server -m m.gguf']},
                  'rpc_cache': {'node-b': {'changed': False, 'status': {
                      'enabled': True, 'path': '/var/cache/gpulab/rpc/rpc', 'size_gib': 7.5, 'bound_gib': 40.0,
                      'files': 120, 'over_bound': False, 'summary': 'line'}}}})
    assert run.kind is ExitJson, run.result
    out = tmp_path / 'reports' / 'lab-20261130T120000Z'
    assert run.result['report_dir'] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ['bench-summary.json', 'latency.png', 'pareto.png', 'report.json',
                                                     'report.md', 'requests.jsonl', 'residency.png', 'throughput.png',
                                                     'trace-node-a.json', 'utilisation.png']
    for name in ('residency.png', 'throughput.png', 'utilisation.png', 'latency.png', 'pareto.png'):
        width, height = png_size(out / name)
        assert width >= 600 and height >= 400
    doc = json.loads((out / 'report.json').read_text())
    assert doc['headline']['aggregate_rises'] is True
    assert doc['residency']['totals']['devices'] == 1
    assert '| best aggregate tok/s | 150.0 at concurrency 4 (1.88x concurrency 1) |' in run.result['summary']
    assert 'vLLM is not part of this run.' in (out / 'report.md').read_text()
    assert doc['rpc_cache']['workers'][0]['size_gib'] == 7.5
    assert '| node-b | /var/cache/gpulab/rpc/rpc | 7.50 | 40.00 | 120 | no |' in (out / 'report.md').read_text()
    # the same directory twice is refused, nothing overwritten
    again = report({'output_dir': str(tmp_path / 'reports'), 'inventory_name': 'lab', 'timestamp': '20261130T120000Z'})
    assert again.kind is FailJson and 'exists already' in again.result['msg']


def test_report_without_any_input(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo'})
    assert run.kind is ExitJson, run.result
    assert len(list((tmp_path).glob('demo-*/*.png'))) == 5
    (out,) = list(tmp_path.glob('demo-*'))
    assert (out / 'requests.jsonl').read_text() == ''
    assert json.loads((out / 'bench-summary.json').read_text())['levels'] == []
    text = (out / 'report.md').read_text()
    assert 'No benchmark was run.' in text and 'Not measured: the benchmark recorded no sweep window.' in text
    assert "No RPC worker's weight cache was read: this run has no RPC workers." in text


def test_missing_matplotlib_is_a_clear_error(tmp_path):
    with mock.patch.object(inference_report, 'plt', None):
        run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo'})
    assert run.kind is FailJson
    assert 'matplotlib' in run.result['msg'] and 'pip install matplotlib' in run.result['msg']
    assert list(tmp_path.iterdir()) == []


def test_unreadable_trace_is_named(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo', 'traces': {'node-b': str(tmp_path / 'none.json')}})
    assert run.kind is FailJson and run.result['msg'].startswith('traces: cannot read the trace of node-b at ')


BAD_REPORT_INPUTS = [
    ('residency_entry_not_a_mapping', {'residency': {'node-a': ['gpus']}},
     "residency of node-a: the entry is ['gpus'] (list), not a mapping"),
    ('residency_gpu_index_a_string', {'residency': {'node-a': {'gpus': [{'index': 'zero'}]}}},
     "residency of node-a: the entry field gpus entry 0 field index is 'zero' (str), not a whole number"),
    ('sampler_entry_not_a_mapping', {'sampler': {'node-a': 'nvidia-smi-loop'}},
     "sampler of node-a: the entry is 'nvidia-smi-loop' (str), not a mapping"),
    ('sampler_peak_a_string', {'sampler': {'node-a': {'gpus': [dict(SAMPLER['node-a']['gpus'][0], utilization_peak='hi')]}}},
     "sampler of node-a: the entry field gpus entry 0 field utilization_peak is 'hi' (str), not a number"),
    ('memory_plan_devices_a_mapping', {'memory_plan': {'devices': {'RPC0': {}}}},
     'memory_plan (memory-plan.json): the file field devices is'),
]


@pytest.mark.parametrize('inputs, start', [c[1:] for c in BAD_REPORT_INPUTS], ids=[c[0] for c in BAD_REPORT_INPUTS])
def test_a_bad_input_fails_naming_it_and_writes_nothing(tmp_path, inputs, start):
    run = report(dict({'output_dir': str(tmp_path / 'reports'), 'inventory_name': 'lab'}, **inputs))
    assert run.kind is FailJson, run.result
    assert run.result['msg'].startswith(start), run.result['msg']
    assert not (tmp_path / 'reports').exists()


@pytest.mark.parametrize('content, start', [
    ('[1, 2]', 'the file is [1, 2] (list), not a mapping'),
    ('{"samples": [[0.0, 0, 51]]}', 'the file field samples entry 0 is [0.0, 0, 51] (list), not a list of 4 to 5 values'),
    ('{"samples": [[0.0, "0", 51, 1]]}', "the file field samples entry 0 value 1 is '0' (str), not a whole number"),
])
def test_a_trace_file_of_the_wrong_shape_is_named(tmp_path, content, start):
    trace_path = tmp_path / 'node-a.json'
    trace_path.write_text(content)
    run = report({'output_dir': str(tmp_path / 'reports'), 'inventory_name': 'lab', 'traces': {'node-a': str(trace_path)}})
    assert run.kind is FailJson, run.result
    assert run.result['msg'].startswith('traces: the trace of node-a at %s: %s' % (trace_path, start)), run.result['msg']
    assert not (tmp_path / 'reports').exists()


def test_only_the_newest_reports_of_the_inventory_are_kept(tmp_path):
    for stamp in ('20261101T080000Z', '20261102T080000Z', '20261103T080000Z'):
        (tmp_path / ('lab-' + stamp)).mkdir()
    (tmp_path / 'other-20261101T080000Z').mkdir()
    (tmp_path / 'lab-notes').mkdir()
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'lab', 'timestamp': '20261104T080000Z', 'keep': 2})
    assert run.kind is ExitJson, run.result
    assert run.result['pruned'] == ['lab-20261101T080000Z', 'lab-20261102T080000Z']
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith('.')) == [
        'lab-20261103T080000Z', 'lab-20261104T080000Z', 'lab-notes', 'other-20261101T080000Z']


def test_keep_below_one_is_refused_before_anything_is_written(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'lab', 'keep': 0})
    assert run.kind is FailJson
    assert run.result['msg'].startswith('keep: keep is 0: keep at least the report just written')
    assert list(tmp_path.iterdir()) == []


def test_a_warning_heads_the_report(tmp_path):
    said = 'node-a serves its API without a key on 10.0.0.1 (llama_server_allow_unauthenticated is true): every host ...'
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'lab', 'warnings': [said]})
    assert run.kind is ExitJson, run.result
    (out,) = list(tmp_path.glob('lab-*'))
    text = (out / 'report.md').read_text()
    assert text.index('**Warning:** ' + said) < text.index('## GPU memory residency')
    assert json.loads((out / 'report.json').read_text())['warnings'] == [said]
