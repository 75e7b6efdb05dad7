"""gpu_sampler with the lab's fake nvidia-smi (one-shot queries only) and a loop replaying a real trace."""

import json
import os
import stat
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.modules import gpu_sampler

from module_harness import ExitJson, FailJson, _exit_json, _fail_json

REPO = Path(__file__).resolve().parents[4]
FAKE_SMI = REPO / 'molecule' / 'lab' / 'files' / 'fake-nvidia-smi'
PROFILES = REPO / 'molecule' / 'lab' / 'files' / 'nvidia-smi'
CAPTURE = REPO / 'tests' / 'unit' / 'fixtures' / 'gpu_trace' / 'util-trace-h200.csv'


def run(args, env=None):
    with patch_module_args(args), mock.patch.dict(os.environ, env or {}), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        with pytest.raises((ExitJson, FailJson)) as raised:
            gpu_sampler.main()
    return raised.type, raised.value.args[0]


def fake_smi(tmp_path, runs_log=None):
    """The lab's fake nvidia-smi, run with this interpreter (its shebang is the lab's python3);
    with runs_log, each run that ended appends a line there."""
    wrapper = tmp_path / 'nvidia-smi'
    if runs_log is None:
        wrapper.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, FAKE_SMI))
    else:
        wrapper.write_text('#!/bin/sh\n%s %s "$@"\nrc=$?\necho >> %s\nexit $rc\n' % (sys.executable, FAKE_SMI, runs_log))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def after_runs(runs_log, count, action, timeout_s=120):
    """In a thread: action() once nvidia-smi has ended count runs (a loaded machine takes its time)."""
    def wait_then_act():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if runs_log.exists() and len(runs_log.read_text().splitlines()) >= count:
                break
            time.sleep(0.05)
        action()
    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_poll_fallback_with_the_lab_fake_stops_at_the_stop_file(tmp_path):
    stop = tmp_path / 'stop'
    # Seven runs of nvidia-smi: the refused -lms, then enough polls for four samples.
    runs_log = tmp_path / 'smi-runs'
    waiter = after_runs(runs_log, 7, stop.touch)
    kind, result = run({'trace_path': str(tmp_path / 'trace.json'), 'stop_file': str(stop), 'duration_s': 300,
                        'interval_ms': 100, 'nvidia_smi_path': fake_smi(tmp_path, runs_log)},
                       env={'GPULAB_FAKE_NVIDIA_SMI_DIR': str(PROFILES / 'rtx-pro-6000-x2')})
    waiter.join()
    assert kind is ExitJson, result
    sampler = result['sampler']
    # the fake refuses -lms (as it refuses every command line it has no answer for)
    assert sampler['method'] == 'nvidia-smi-poll' and sampler['stopped_by'] == 'stop_file'
    assert [g['index'] for g in sampler['gpus']] == [0, 1]
    assert sampler['gpus'][0]['name'] == 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition'
    assert sampler['gpus'][0]['utilization_peak'] == 0 and sampler['gpus'][0]['zero_fraction'] == 1.0
    trace = json.loads((tmp_path / 'trace.json').read_text())
    assert trace['method'] == 'nvidia-smi-poll' and len(trace['samples']) == sampler['samples'] >= 4


def test_loop_reads_nvidia_smi_lms(tmp_path):
    """A loop that replays the real H200 trace (TEST DOUBLE written here) answers -lms."""
    smi = tmp_path / 'nvidia-smi'
    smi.write_text('#!/bin/sh\n'
                   'case "$1" in --query-gpu=index,uuid*) '
                   'echo "0, GPU-x, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, 0, 143156, 0"; exit 0;; esac\n'
                   'cat %s\nexec sleep 30\n' % CAPTURE)
    smi.chmod(0o755)
    kind, result = run({'trace_path': str(tmp_path / 'trace.json'), 'duration_s': 2, 'nvidia_smi_path': str(smi)})
    assert kind is ExitJson, result
    sampler = result['sampler']
    assert sampler['method'] == 'nvidia-smi-loop' and sampler['stopped_by'] == 'duration'
    assert sampler['samples'] == 26
    assert sampler['gpus'][0]['utilization_peak'] == 65 and sampler['gpus'][0]['name'] == 'NVIDIA H200'


def test_missing_nvidia_smi_and_bad_options(tmp_path):
    kind, result = run({'trace_path': str(tmp_path / 't.json'), 'nvidia_smi_path': '/nonexistent/nvidia-smi', 'duration_s': 1})
    assert kind is FailJson and result['msg'].startswith('nvidia-smi (/nonexistent/nvidia-smi) not found')
    kind, result = run({'trace_path': str(tmp_path / 't.json'), 'interval_ms': 10})
    assert kind is FailJson and result['msg'] == 'interval_ms must be 50 or more, got 10'
    kind, result = run({'trace_path': str(tmp_path / 'no' / 't.json')})
    assert kind is FailJson and 'does not exist; create it first' in result['msg']
    kind, result = run({'trace_path': str(tmp_path / 't.json'), 'method': 'nvml'})
    assert kind is FailJson and 'nvidia-ml-py' in result['msg']


NAMES_ANSWER = ('case "$1" in --query-gpu=index,uuid*) '
                'echo "0, GPU-x, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, 0, 143156, 0"; exit 0;; esac\n')


def script(tmp_path, body):
    smi = tmp_path / 'nvidia-smi'
    smi.write_text('#!/bin/sh\n' + body)
    smi.chmod(0o755)
    return str(smi)


@pytest.mark.parametrize('method, body', [
    ('auto', 'exec sleep 60\n'),                        # the first query hangs
    ('nvidia-smi-poll', 'exec sleep 60\n'),
    ('nvidia-smi-loop', NAMES_ANSWER + 'exec sleep 60\n'),  # -lms prints nothing
])
def test_a_hanging_nvidia_smi_fails_in_bounded_time_instead_of_sampling_nothing(tmp_path, method, body):
    started = time.monotonic()
    kind, result = run({'trace_path': str(tmp_path / 'trace.json'), 'duration_s': 30, 'timeout_s': 1,
                        'method': method, 'nvidia_smi_path': script(tmp_path, body)})
    assert kind is FailJson, result
    assert time.monotonic() - started < 15
    assert 'did not answer within' in result['msg']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['nvidia-smi']


@pytest.mark.parametrize('setup, message', [
    (lambda t: (t / 'trace.json').mkdir(), 'trace_path %s/trace.json is a directory'),
    (lambda t: (t / 'stop').touch(), 'stop_file %s/stop exists before sampling started'),
])
def test_output_paths_are_checked_before_sampling(tmp_path, setup, message):
    setup(tmp_path)
    started = time.monotonic()
    kind, result = run({'trace_path': str(tmp_path / 'trace.json'), 'stop_file': str(tmp_path / 'stop'),
                        'duration_s': 30, 'nvidia_smi_path': script(tmp_path, 'exit 1\n')})
    assert kind is FailJson, result
    assert time.monotonic() - started < 5
    assert message % tmp_path in result['msg']
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.trace-')]


@pytest.mark.parametrize('timeout_s', [0, -5])
def test_timeout_below_one_second_is_refused(tmp_path, timeout_s):
    kind, result = run({'trace_path': str(tmp_path / 'trace.json'), 'timeout_s': timeout_s})
    assert kind is FailJson and result['msg'] == 'timeout_s must be 1 or more, got %d' % timeout_s


def test_a_trace_path_that_cannot_be_written_leaves_no_temp_file(tmp_path):
    # A directory appears at trace_path while sampling (after the check before the work).
    trace = tmp_path / 'trace.json'
    stop = tmp_path / 'stop'

    def make_dir_and_stop():
        trace.mkdir()
        stop.touch()

    # After three runs of nvidia-smi at least one sample was taken, however slow the machine is.
    runs_log = tmp_path / 'smi-runs'
    waiter = after_runs(runs_log, 3, make_dir_and_stop)
    kind, result = run({'trace_path': str(trace), 'stop_file': str(stop), 'duration_s': 120, 'interval_ms': 100,
                        'method': 'nvidia-smi-poll', 'nvidia_smi_path': fake_smi(tmp_path, runs_log)},
                       env={'GPULAB_FAKE_NVIDIA_SMI_DIR': str(PROFILES / 'rtx-pro-6000-x2')})
    waiter.join()
    assert kind is FailJson, result
    assert result['msg'].startswith('trace_path %s cannot be written' % trace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['nvidia-smi', 'smi-runs', 'stop', 'trace.json']
