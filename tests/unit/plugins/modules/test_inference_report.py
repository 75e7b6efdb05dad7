"""inference_report writes report.md, report.json and three PNGs; absent inputs and no matplotlib."""

import json
import struct
from unittest import mock

import pytest

from ansible_collections.gpulab.inference.plugins.modules import inference_report

from module_harness import ExitJson, FailJson, run_module
from report_inputs import BENCH, RESIDENCY, SAMPLER, level, trace


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
    assert json.loads((out / 'report.json').read_text())['prometheus'] is None and '## From Prometheus' not in text


def test_prometheus_answers_become_the_section_and_a_refused_query_fails_nothing(tmp_path):
    queries = [{'figure': 'memory', 'expr': 'gpulab_gpu_memory_used_bytes / 1024^3', 'url': 'http://127.0.0.1:9090/q'}]
    refused = {'status': -1, 'msg': 'Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>'}
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo', 'prometheus': {
        'source': 'http://127.0.0.1:9090 on node-a', 'window': {'start_epoch': 1.0, 'end_epoch': 61.0, 'step_s': 15.0},
        'queries': queries, 'results': [refused]}})
    assert run.kind is ExitJson, run.result
    (out,) = list(tmp_path.glob('demo-*'))
    section = json.loads((out / 'report.json').read_text())['prometheus']
    assert section['gpus'] == [] and section['errors'] == [
        'memory (gpulab_gpu_memory_used_bytes / 1024^3): ' + refused['msg']]
    assert '**Prometheus did not give a series:** memory' in (out / 'report.md').read_text()


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


def side_by_side_benchmark():
    """llama.cpp measured first, vLLM compared: the same levels, vLLM faster per stream and in all."""
    # vLLM reports no server-side timings (level's server figures are llama-server's)
    vllm = [dict(level(c, a, d), server=None) for c, a, d in ((1, 119.0, 380.2), (2, 300.0, 330.0), (4, 765.1, 287.9))]
    return dict(BENCH, label='llama.cpp', conditions={'window_start_epoch': 1000.0, 'window_end_epoch': 1010.0},
                compare=[{'label': 'vLLM', 'engine': 'vllm', 'model': 'M', 'base_url': 'http://127.0.0.1:8000',
                          'levels': vllm, 'rates': [], 'window_start_epoch': 1010.0, 'window_end_epoch': 1020.0}])


def drawn(draw, doc, path):
    """The figure a draw_* function made (kept open), and its axes' legend texts."""
    with mock.patch.object(inference_report.plt, 'close') as close:
        draw(doc, str(path))
    fig = close.call_args[0][0]
    legends = [[t.get_text() for t in axis.get_legend().get_texts()] for axis in fig.axes if axis.get_legend()]
    inference_report.plt.close(fig)
    return fig, legends


def test_a_side_by_side_runs_plots_draw_each_endpoint(tmp_path):
    from ansible_collections.gpulab.inference.plugins.module_utils import report as report_data
    doc = report_data.build_document('lab', 'now', benchmark=side_by_side_benchmark(), residency=RESIDENCY)
    fig, (legend,) = drawn(inference_report.draw_throughput, doc, tmp_path / 'throughput.png')
    assert legend == ['llama.cpp: aggregate output tok/s', 'llama.cpp: decode tok/s per stream (client)',
                      'llama.cpp: decode tok/s per stream (llama-server timings)',
                      'vLLM: aggregate output tok/s', 'vLLM: decode tok/s per stream (client)']
    lines = fig.axes[0].get_lines()
    assert list(lines[3].get_ydata()) == [119.0, 300.0, 765.1]
    assert lines[0].get_color() != lines[3].get_color()
    assert fig.axes[0].get_title().endswith('llama.cpp and vLLM')
    _fig, legends = drawn(inference_report.draw_latency, doc, tmp_path / 'latency.png')
    assert legends == [['llama.cpp: p50', 'llama.cpp: p99', 'vLLM: p50', 'vLLM: p99']] * 2
    fig, (legend,) = drawn(inference_report.draw_pareto, doc, tmp_path / 'pareto.png')
    assert legend == ['llama.cpp: Pareto front (no level beats it on both axes)',
                      'vLLM: Pareto front (no level beats it on both axes)']
    # six points, three per endpoint; vLLM's are the highest on both axes
    offsets = [tuple(c.get_offsets()[0]) for c in fig.axes[0].collections]
    assert len(offsets) == 6 and max(offsets) == (765.1, 287.9)


def test_one_endpoints_plots_keep_their_plain_legends(tmp_path):
    from ansible_collections.gpulab.inference.plugins.module_utils import report as report_data
    doc = report_data.build_document('lab', 'now', benchmark=BENCH, residency=RESIDENCY)
    _fig, (legend,) = drawn(inference_report.draw_throughput, doc, tmp_path / 'throughput.png')
    assert legend[0] == 'aggregate output tok/s'
    _fig, (legend,) = drawn(inference_report.draw_pareto, doc, tmp_path / 'pareto.png')
    assert legend == ['Pareto front (no level beats it on both axes)']


def test_a_side_by_side_report_writes_the_three_plots(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'lab', 'timestamp': '20261207T050000Z',
                  'benchmark': side_by_side_benchmark(), 'residency': RESIDENCY})
    assert run.kind is ExitJson, run.result
    out = tmp_path / 'lab-20261207T050000Z'
    for name in ('throughput.png', 'latency.png', 'pareto.png'):
        width, height = png_size(out / name)
        assert width >= 600 and height >= 400
    doc = json.loads((out / 'report.json').read_text())
    assert [e['label'] for e in doc['side_by_side']] == ['llama.cpp', 'vLLM']
