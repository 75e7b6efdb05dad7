"""GPU traces: nvidia-smi loop lines (real H200 capture) and utilisation fingerprints."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gpu_trace
from ansible_collections.gpulab.inference.plugins.module_utils.gpu_trace import TraceParseError

FIXTURES = Path(__file__).resolve().parents[3] / 'unit' / 'fixtures' / 'gpu_trace'
CAPTURE = FIXTURES / 'util-trace-h200.csv'
POWER_CAPTURE = FIXTURES / 'power-trace-h200.csv'


def test_real_h200_loop_capture_with_units():
    samples = gpu_trace.samples_from_loop(CAPTURE.read_text().splitlines())
    assert len(samples) == 26
    assert samples[0] == (0.0, 0, 0, 18033, None)
    assert samples[2] == (0.203, 0, 51, 18035, None)
    assert samples[-1][0] == pytest.approx(2.509)
    (gpu,) = gpu_trace.fingerprint(samples)
    assert gpu['index'] == 0 and gpu['samples'] == 26
    assert gpu['utilization_peak'] == 65
    assert gpu['zero_fraction'] == pytest.approx(10 / 26.0, abs=1e-4)
    assert gpu['utilization_median'] == 51.0
    assert gpu['utilization_p10'] == 0.0
    assert gpu['memory_used_peak_mib'] == 18135


def test_nounits_lines_and_not_available_values():
    epoch, index, util, mem, power = gpu_trace.parse_loop_line('2026/11/29 10:44:59.488, 1, 37, 81920')
    assert (index, util, mem, power) == (1, 37, 81920, None)
    assert gpu_trace.parse_loop_line('2026/11/29 10:44:59.488, 1, [N/A], N/A, [N/A]')[2:] == (None, None, None)
    assert gpu_trace.parse_loop_line('2026/11/29 10:44:59.488, 1, 37 %, 81920 MiB, 127.76 W')[4] == 127.76
    assert gpu_trace.parse_loop_line('  ') is None
    assert epoch == pytest.approx(1795949099.488)


@pytest.mark.parametrize('line, message', [
    ('2026/11/29 10:44:59.488, 0, 0 %', r'expected 5 fields \(timestamp, index, utilization.gpu, memory.used, power.draw\), got 3'),
    ('2026/11/29 10:44:59.488, 0, 0, 1, 80.1, 3', 'expected 5 fields'),
    ('2026/11/29 10:44:59.488, 0, 0, 1, hot', "power.draw 'hot' is not a number"),
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
    assert doc['fields'] == ['t_s', 'index', 'utilization_percent', 'memory_used_mib', 'power_w']


def test_energy_of_a_real_h200_power_capture():
    # idle at about 81 W, a 4 s matmul at about 690 W, then idle at about 128 W (tests/unit/fixtures/gpu_trace/README.md)
    samples = gpu_trace.samples_from_loop(POWER_CAPTURE.read_text().splitlines())
    assert samples[0][4] == 81.16 and max(s[4] for s in samples) == 705.16
    (whole,) = gpu_trace.energy(samples, 0.0, samples[-1][0])
    # hand check: the trapezoid sum of the capture, computed apart from the module
    by_hand = sum((b[0] - a[0]) * (a[4] + b[4]) / 2.0 for a, b in zip(samples, samples[1:]))
    assert whole['joules'] == pytest.approx(by_hand, abs=0.01)
    assert whole['covered_s'] == pytest.approx(samples[-1][0], abs=1e-3)
    assert 80 < whole['mean_power_w'] < 705
    # the driver averages power over about a second: it ramps up under load, then holds
    plateau = [s[0] for s in samples if s[4] > 680]
    (load,) = gpu_trace.energy(samples, plateau[0], plateau[-1])
    assert load['mean_power_w'] == pytest.approx(691, abs=5)
    (idle,) = gpu_trace.energy(samples, 0.5, 8.0)
    assert idle['mean_power_w'] == pytest.approx(81.1, abs=0.3)


def test_energy_cuts_the_window_between_samples():
    # 100 W at t=0 rising linearly to 200 W at t=10 (GPU 0); GPU 1 has no power samples
    samples = [(0.0, 0, 0, 1, 100.0), (10.0, 0, 0, 1, 200.0), (0.0, 1, 0, 1, None), (10.0, 1, 0, 1, None),
               (0.0, 2, 0, 1)]
    (gpu,) = gpu_trace.energy(samples, 2.5, 7.5)
    # the mean of 125 W and 175 W over 5 s
    assert (gpu['index'], gpu['joules'], gpu['covered_s'], gpu['mean_power_w'], gpu['power_samples']) == (0, 750.0, 5.0, 150.0, 0)
    # beyond the last sample nothing is counted, and covered_s says so
    (late,) = gpu_trace.energy(samples, 5.0, 20.0)
    assert (late['joules'], late['covered_s']) == (875.0, 5.0)


def test_run_energy_per_gpu_and_in_all():
    trace_a = {'started_epoch': 1000.0, 'method': 'nvml', 'gpu_names': {'0': 'NVIDIA H200'},
               'samples': [[0.0, 0, 0, 1, 100.0], [20.0, 0, 0, 1, 100.0], [0.0, 1, 0, 1, 300.0], [20.0, 1, 0, 1, 300.0]]}
    trace_b = {'started_epoch': 1002.0, 'method': 'nvml', 'samples': [[0.0, 0, 0, 1, 50.0], [20.0, 0, 0, 1, 50.0]]}
    record, why = gpu_trace.run_energy({'node-a': trace_a, 'node-b': trace_b}, 1005.0, 1015.0, 2000)
    assert why is None
    assert [(g['host'], g['index'], g['joules']) for g in record['gpus']] == [
        ('node-a', 0, 1000.0), ('node-a', 1, 3000.0), ('node-b', 0, 500.0)]
    assert record['gpus'][0]['name'] == 'NVIDIA H200' and record['gpus'][1]['joules_per_output_token'] == 1.5
    assert record['gpus'][2]['output_tokens_per_joule'] == 4.0
    assert (record['joules'], record['joules_per_output_token'], record['output_tokens_per_joule']) == (4500.0, 2.25, 0.4444)
    none, why = gpu_trace.run_energy({'node-a': {'started_epoch': 1.0, 'method': 'nvidia-smi-poll',
                                                 'samples': [[0.0, 0, 0, 1, None]]}}, 1.0, 2.0, 10)
    assert none is None and why.startswith('no power draw was sampled (sampler nvidia-smi-poll)')
    assert gpu_trace.run_energy({}, None, None, 10) == (None, 'the benchmark recorded no sweep window')
    assert gpu_trace.run_energy({}, 1.0, 2.0, 10) == (None, 'no GPU trace was read')
