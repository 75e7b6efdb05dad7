"""GPU traces: nvidia-smi loop lines (real H200 capture) and utilisation fingerprints."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gpu_trace
from ansible_collections.gpulab.inference.plugins.module_utils.gpu_trace import TraceParseError

CAPTURE = Path(__file__).resolve().parents[3] / 'unit' / 'fixtures' / 'gpu_trace' / 'util-trace-h200.csv'


def test_real_h200_loop_capture_with_units():
    samples = gpu_trace.samples_from_loop(CAPTURE.read_text().splitlines())
    assert len(samples) == 26
    assert samples[0] == (0.0, 0, 0, 18033)
    assert samples[2] == (0.203, 0, 51, 18035)
    assert samples[-1][0] == pytest.approx(2.509)
    (gpu,) = gpu_trace.fingerprint(samples)
    assert gpu['index'] == 0 and gpu['samples'] == 26
    assert gpu['utilization_peak'] == 65
    assert gpu['zero_fraction'] == pytest.approx(10 / 26.0, abs=1e-4)
    assert gpu['utilization_median'] == 51.0
    assert gpu['utilization_p10'] == 0.0
    assert gpu['memory_used_peak_mib'] == 18135


def test_nounits_lines_and_not_available_values():
    epoch, index, util, mem = gpu_trace.parse_loop_line('2026/11/29 10:44:59.488, 1, 37, 81920')
    assert (index, util, mem) == (1, 37, 81920)
    assert gpu_trace.parse_loop_line('2026/11/29 10:44:59.488, 1, [N/A], N/A')[2:] == (None, None)
    assert gpu_trace.parse_loop_line('  ') is None
    assert epoch == pytest.approx(1795949099.488)


@pytest.mark.parametrize('line, message', [
    ('2026/11/29 10:44:59.488, 0, 0 %', r'expected 4 fields \(timestamp, index, utilization.gpu, memory.used\), got 3'),
    ('yesterday, 0, 0, 1', "timestamp 'yesterday' is not YYYY/MM/DD"),
    ('2026/11/29 10:44:59.488, x, 0, 1', "index 'x' is not a number"),
    ('2026/11/29 10:44:59.488, 0, busy, 1', "utilization.gpu 'busy' is not a number"),
])
def test_malformed_lines_are_named(line, message):
    with pytest.raises(TraceParseError, match=message):
        gpu_trace.parse_loop_line(line)


def test_fingerprint_per_gpu_and_selection():
    samples = [(0.0, 0, 0, 10), (0.0, 1, 30, 20), (0.1, 0, 20, 11), (0.1, 1, 28, 20), (0.2, 0, 0, 11), (0.2, 1, None, None)]
    gpus = gpu_trace.fingerprint(samples)
    assert [g['index'] for g in gpus] == [0, 1]
    assert gpus[0]['zero_fraction'] == pytest.approx(0.6667, abs=1e-4)
    assert gpus[1]['samples'] == 2 and gpus[1]['utilization_peak'] == 30 and gpus[1]['zero_fraction'] == 0.0
    assert [g['index'] for g in gpu_trace.fingerprint(samples, [1])] == [1]


def test_trace_document_round_trips():
    doc = json.loads(gpu_trace.trace_document('node-a', 'nvml', 200, 1.5, [(0.0, 0, 5, 100)], {'0': 'NVIDIA H200'}))
    assert doc['samples'] == [[0.0, 0, 5, 100]] and doc['gpu_names'] == {'0': 'NVIDIA H200'}
    assert doc['fields'] == ['t_s', 'index', 'utilization_percent', 'memory_used_mib']
