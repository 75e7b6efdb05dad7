"""inference_report writes report.md, report.json and three PNGs; absent inputs and no matplotlib."""

import json
import struct
from unittest import mock

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
                  'build_info': {'build_id': 'b1'}, 'commands': {'node-a': ['llama-server -m m.gguf']}})
    assert run.kind is ExitJson, run.result
    out = tmp_path / 'reports' / 'lab-20261130T120000Z'
    assert run.result['report_dir'] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ['report.json', 'report.md', 'residency.png', 'throughput.png',
                                                     'trace-node-a.json', 'utilisation.png']
    for name in ('residency.png', 'throughput.png', 'utilisation.png'):
        width, height = png_size(out / name)
        assert width >= 600 and height >= 400
    doc = json.loads((out / 'report.json').read_text())
    assert doc['headline']['aggregate_rises'] is True
    assert doc['residency']['totals']['devices'] == 1
    assert '| best aggregate tok/s | 150.0 at concurrency 4 (1.88x concurrency 1) |' in run.result['summary']
    assert 'vLLM is not part of this run.' in (out / 'report.md').read_text()
    # the same directory twice is refused, nothing overwritten
    again = report({'output_dir': str(tmp_path / 'reports'), 'inventory_name': 'lab', 'timestamp': '20261130T120000Z'})
    assert again.kind is FailJson and 'exists already' in again.result['msg']


def test_report_without_any_input(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo'})
    assert run.kind is ExitJson, run.result
    assert len(list((tmp_path).glob('demo-*/*.png'))) == 3


def test_missing_matplotlib_is_a_clear_error(tmp_path):
    with mock.patch.object(inference_report, 'plt', None):
        run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo'})
    assert run.kind is FailJson
    assert 'matplotlib' in run.result['msg'] and 'pip install matplotlib' in run.result['msg']
    assert list(tmp_path.iterdir()) == []


def test_unreadable_trace_is_named(tmp_path):
    run = report({'output_dir': str(tmp_path), 'inventory_name': 'demo', 'traces': {'node-b': str(tmp_path / 'none.json')}})
    assert run.kind is FailJson and run.result['msg'].startswith('traces: cannot read the trace of node-b at ')
