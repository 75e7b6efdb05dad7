"""gpu_facts with run_command and get_bin_path patched: exact command lines and facts."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi_runner
from ansible_collections.gpulab.inference.plugins.modules import gpu_facts
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
PROFILES = Path(__file__).resolve().parents[4] / 'molecule' / 'lab' / 'files' / 'nvidia-smi'
SMI = '/usr/bin/nvidia-smi'
TIMEOUT = '/usr/bin/timeout'


def bounded(command, timeout_s=30):
    """The command line the module runs: nvidia-smi under coreutils' timeout."""
    return [TIMEOUT, '--kill-after=5s', '%ds' % timeout_s] + list(command)


GPU_ARGS = ['--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,'
            'memory.total,memory.used,memory.free,utilization.gpu', '--format=csv,noheader,nounits']
MIG_ARGS = ['--query-gpu=index,mig.mode.current', '--format=csv,noheader,nounits']
GPU_QUERY = bounded([SMI] + GPU_ARGS)
MIG_QUERY = bounded([SMI] + MIG_ARGS)
VERSION = bounded([SMI, '--version'])


def run_module(args, answers, bin_path=SMI):
    """Run gpu_facts; answers maps a command tuple to (rc, stdout, stderr)."""
    bin_paths = {'nvidia-smi': bin_path, 'timeout': TIMEOUT}
    if bin_path is not None and bin_path != SMI:
        bin_paths[bin_path] = bin_path
    run = module_harness.run_module(gpu_facts.main, args, answers, bin_paths)
    return run.kind, run.result, run.commands, run.get_bin_path


def ok(text):
    return (0, text, '')


def h200_answers():
    return {
        tuple(GPU_QUERY): ok((FIXTURES / 'h200' / 'smi-query-gpu.csv').read_text().splitlines(True)[-1]),
        tuple(MIG_QUERY): ok('0, Disabled\n'),
        tuple(VERSION): ok((FIXTURES / 'h200-loaded' / 'version.txt').read_text()),
    }


def test_h200():
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    kind, result, commands, get_bin_path = run_module({'driver_version_file': str(version_file)}, h200_answers())
    assert kind is ExitJson
    assert commands == [GPU_QUERY, MIG_QUERY, VERSION]
    assert [call.args[0] for call in get_bin_path.call_args_list] == ['nvidia-smi', 'timeout']
    assert result['changed'] is False
    facts = result['ansible_facts']
    assert facts['gpulab_gpu_count'] == 1
    assert facts['gpulab_gpus'] == [{
        'index': 0, 'uuid': 'GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd', 'name': 'NVIDIA H200',
        'pci_bus_id': '00000000:00:06.0', 'driver_version': '580.159.04', 'compute_cap': '9.0',
        'cuda_arch': '90', 'memory_total_mib': 143771, 'memory_used_mib': 0, 'memory_free_mib': 143156,
        'utilization_gpu_pct': 0, 'mig_mode': 'Disabled',
    }]
    assert facts['gpulab_gpu_driver'] == {
        'driver_version': '580.159.04', 'cuda_version': '13.0', 'kernel_module_version': '580.159.04',
        'mismatch': False, 'message': '',
    }
    assert result['snapshot']['gpus'] == [{
        'index': 0, 'uuid': 'GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd', 'name': 'NVIDIA H200',
        'pci_bus_id': '00000000:00:06.0', 'compute_cap': '9.0', 'cuda_arch': '90', 'memory_total_mib': 143771}]
    assert result['snapshot']['gpu_count'] == 1
    assert result['table'][0] == '1 GPU(s), driver 580.159.04 (kernel module 580.159.04), CUDA 13.0'


def test_the_snapshot_is_kept_in_its_file_and_rewritten_only_when_it_moved(tmp_path):
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    path = tmp_path / 'state' / 'gpu-inventory.json'
    args = {'driver_version_file': str(version_file), 'snapshot_file': str(path)}
    kind, result, unused_commands, unused_bin_path = run_module(dict(args, _ansible_check_mode=True), h200_answers())
    assert kind is ExitJson
    assert (result['changed'], result['snapshot_written']) == (False, True)
    assert not path.parent.exists()
    kind, result, unused_commands, unused_bin_path = run_module(args, h200_answers())
    assert (result['changed'], result['snapshot_written']) == (False, True)
    assert json.loads(path.read_text()) == result['snapshot']
    # to_nice_json's layout, which the role wrote before: an upgrade does not rewrite the file
    assert path.read_text() == json.dumps(result['snapshot'], indent=4, sort_keys=True, separators=(',', ': ')) + '\n'
    assert path.stat().st_mode & 0o777 == 0o644 and path.parent.stat().st_mode & 0o777 == 0o755
    kind, result, unused_commands, unused_bin_path = run_module(args, h200_answers())
    assert (result['changed'], result['snapshot_written']) == (False, False)
    path.write_text('{"gpu_count": 8}\n')
    kind, result, unused_commands, unused_bin_path = run_module(args, h200_answers())
    assert result['snapshot_written'] is True
    assert json.loads(path.read_text())['gpu_count'] == 1
    blocked = tmp_path / 'blocked'
    blocked.write_text('a file where the directory should be')
    kind, result, unused_commands, unused_bin_path = run_module(
        dict(args, snapshot_file=str(blocked / 'gpu-inventory.json')), h200_answers())
    assert kind is FailJson
    assert result['msg'].startswith('%s cannot be written: ' % (blocked / 'gpu-inventory.json'))


def test_path_option_and_two_gpus():
    profile = PROFILES / 'rtx-pro-6000-x2'
    smi = '/usr/local/bin/nvidia-smi'
    answers = {
        tuple(bounded([smi] + GPU_ARGS)): ok((profile / 'query-gpu.csv').read_text()),
        tuple(bounded([smi] + MIG_ARGS)): ok((profile / 'query-gpu-mig.csv').read_text()),
        tuple(bounded([smi, '--version'])): ok((profile / 'version.txt').read_text()),
    }
    args = {'nvidia_smi_path': smi, 'driver_version_file': str(profile / 'proc-driver-nvidia-version')}
    kind, result, commands, get_bin_path = run_module(args, answers, bin_path=smi)
    assert kind is ExitJson
    assert get_bin_path.call_args_list[0].args == (smi,)
    assert commands[0][3] == smi
    facts = result['ansible_facts']
    assert facts['gpulab_gpu_count'] == 2
    assert [(g['index'], g['cuda_arch'], g['memory_total_mib']) for g in facts['gpulab_gpus']] == [
        (0, '120', 97887), (1, '120', 97887)]
    assert facts['gpulab_gpu_driver']['driver_version'] == '580.95.05'
    assert facts['gpulab_gpu_driver']['mismatch'] is False


def test_no_nvidia_smi_is_a_cpu_node(tmp_path):
    kind, result, commands, unused = run_module({'driver_version_file': str(tmp_path / 'absent')}, {}, bin_path=None)
    assert kind is ExitJson
    assert commands == []
    facts = result['ansible_facts']
    assert (facts['gpulab_gpus'], facts['gpulab_gpu_count']) == ([], 0)
    assert facts['gpulab_gpu_driver']['mismatch'] is False
    assert facts['gpulab_gpu_driver']['driver_version'] is None
    assert 'not found' in facts['gpulab_gpu_driver']['message']


def test_no_nvidia_smi_fails_when_required():
    kind, result, commands, unused = run_module({'required': True}, {}, bin_path=None)
    assert kind is FailJson
    assert commands == []
    assert result['msg'].startswith('nvidia-smi (nvidia-smi) not found, and required=true')


def test_driver_library_mismatch_does_not_fail():
    mismatch = (FIXTURES / 'synthetic' / 'nvml-mismatch.txt').read_text()
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    answers = {tuple(GPU_QUERY): (18, mismatch, '')}
    kind, result, commands, unused = run_module({'driver_version_file': str(version_file)}, answers)
    assert kind is ExitJson
    assert commands == [GPU_QUERY]
    facts = result['ansible_facts']
    assert (facts['gpulab_gpus'], facts['gpulab_gpu_count']) == ([], 0)
    driver = facts['gpulab_gpu_driver']
    assert (driver['mismatch'], driver['driver_version'], driver['kernel_module_version'], driver['cuda_version']) == (
        True, '580.95', '580.159.04', None)
    assert 'Driver/library version mismatch' in driver['message'] and 'reboot' in driver['message']


def test_other_failure_reports_rc_and_output():
    answers = {tuple(GPU_QUERY): (6, 'No devices were found\n', '')}
    kind, result, unused, unused_mock = run_module({'driver_version_file': '/nonexistent'}, answers)
    assert kind is FailJson
    assert (result['rc'], result['stdout'], result['stderr']) == (6, 'No devices were found\n', '')
    assert 'rc=6' in result['msg'] and 'No devices were found' in result['msg']


def test_failure_of_a_follow_up_query_fails():
    answers = h200_answers()
    answers[tuple(MIG_QUERY)] = (2, 'Field "mig.mode.current" is not a valid field to query.\n\n', '')
    kind, result, unused, unused_mock = run_module({'driver_version_file': '/nonexistent'}, answers)
    assert kind is FailJson
    assert result['rc'] == 2


def test_malformed_answer_fails_naming_the_line():
    answers = h200_answers()
    answers[tuple(GPU_QUERY)] = ok('0, GPU-x, NVIDIA H200\n')
    kind, result, unused, unused_mock = run_module({'driver_version_file': '/nonexistent'}, answers)
    assert kind is FailJson
    assert "answered 3 fields, expected 10" in result['msg'] and "'0, GPU-x, NVIDIA H200'" in result['msg']


def test_unreadable_driver_version_file_fails(tmp_path):
    bad = tmp_path / 'version'
    bad.write_text('garbage\n')
    kind, result, unused, unused_mock = run_module({'driver_version_file': str(bad)}, h200_answers())
    assert kind is FailJson
    assert result['msg'].startswith(str(bad)) and 'NVRM version' in result['msg']


def test_userspace_and_kernel_differ_without_nvml_error(tmp_path):
    version_file = tmp_path / 'version'
    version_file.write_text('NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n')
    kind, result, unused, unused_mock = run_module({'driver_version_file': str(version_file)}, h200_answers())
    driver = result['ansible_facts']['gpulab_gpu_driver']
    assert (kind, driver['mismatch'], driver['kernel_module_version']) == (ExitJson, True, '580.95.05')
    assert 'reboot' in driver['message']


def test_check_mode_runs_the_same_queries():
    args = {'_ansible_check_mode': True, 'driver_version_file': '/nonexistent'}
    kind, result, commands, unused = run_module(args, h200_answers())
    assert kind is ExitJson
    assert commands == [GPU_QUERY, MIG_QUERY, VERSION]
    assert result['ansible_facts']['gpulab_gpu_count'] == 1


# --- bad input: a clear message naming the option or field, no traceback -----------------------

H200_ROW = ('0, GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, '
            '143771, 0, 143156, 0\n')


def with_gpu_row(row):
    answers = h200_answers()
    answers[tuple(GPU_QUERY)] = ok(row)
    return answers


BAD_INPUTS = [
    # (id, module args, answers, words the message must hold)
    ('row without index', {}, with_gpu_row(H200_ROW.replace('0, GPU-', ', GPU-', 1)),
     ["field index is ''", 'expected an integer']),
    ('index N/A', {}, with_gpu_row(H200_ROW.replace('0, GPU-', 'N/A, GPU-', 1)), ['field index is N/A']),
    ('non-UTF-8 GPU name', {}, with_gpu_row(H200_ROW.replace('NVIDIA H200', 'NVIDIA H\udcff200')),
     ['field name holds bytes that are not UTF-8', 'H\\xff200']),
    ('non-UTF-8 uuid', {}, with_gpu_row(H200_ROW.replace('GPU-fdf5', 'GPU-\udce9df5')), ['field uuid holds bytes']),
    ('memory.total not a number', {}, with_gpu_row(H200_ROW.replace('143771', 'lots')), ["memory.total is 'lots'"]),
    ('compute_cap garbage', {}, with_gpu_row(H200_ROW.replace(' 9.0,', ' nine,')), ["compute_cap is 'nine'"]),
    ('index twice', {}, with_gpu_row(H200_ROW + H200_ROW), ['listed a GPU index twice']),
    ('too few fields', {}, with_gpu_row('0, GPU-x\n'), ['answered 2 fields, expected 10']),
    ('zero GPUs with required', {'required': True}, with_gpu_row(''), ['lists no GPU, and required=true']),
    ('timeout_s zero', {'timeout_s': 0}, {}, ['timeout_s=0 must be a positive number of seconds']),
    ('timeout_s negative', {'timeout_s': -3}, {}, ['timeout_s=-3 must be a positive number of seconds']),
    ('timeout_s not a number', {'timeout_s': 'soon'}, {}, ['timeout_s']),
    ('required not a bool', {'required': 'maybe'}, {}, ['required']),
    ('unknown option', {'nvidia_smi': '/bin/true'}, {}, ['nvidia_smi']),
]


@pytest.mark.parametrize('args, answers, words', [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_fails_clearly(args, answers, words):
    kind, result, unused, unused_mock = run_module(dict({'driver_version_file': '/nonexistent'}, **args), answers)
    assert kind is FailJson
    for word in words:
        assert word in result['msg']
    json.dumps(result)  # the result reaches the controller as JSON: nothing in it may break that


def test_hanging_gpu_is_named(tmp_path, monkeypatch):
    (tmp_path / '0000:00:06.0').mkdir()
    monkeypatch.setattr(nvidia_smi_runner, 'DRIVER_GPUS_DIR', str(tmp_path))
    answers = {
        tuple(GPU_QUERY): (124, '', ''),
        tuple(bounded([SMI, '-i', '0000:00:06.0', '--query-gpu=index,pci.bus_id', '--format=csv,noheader,nounits'], 10)):
            (124, '', ''),
    }
    kind, result, commands, unused = run_module({'driver_version_file': '/nonexistent'}, answers)
    assert kind is FailJson
    assert 'did not answer within 30 s (timeout_s): GPU 0000:00:06.0 does not answer on its own' in result['msg']
    assert len(commands) == 2


def test_non_utf8_driver_version_file_is_a_clear_error(tmp_path):
    bad = tmp_path / 'version'
    bad.write_bytes(b'\xff\xfe garbage\n')
    kind, result, unused, unused_mock = run_module({'driver_version_file': str(bad)}, h200_answers())
    assert kind is FailJson
    assert result['msg'].startswith(str(bad)) and 'NVRM version' in result['msg']
    json.dumps(result)


APPS_QUERY = bounded([SMI, '--query-compute-apps=pid,process_name,gpu_uuid,used_memory', '--format=csv,noheader,nounits'])


def test_residency_in_the_same_run():
    answers = dict(h200_answers())
    answers[tuple(APPS_QUERY)] = ok((FIXTURES / 'h200-loaded' / 'query-compute-apps-idle.csv').read_text())
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    kind, result, commands, unused = run_module({'driver_version_file': str(version_file), 'residency': True}, answers)
    assert kind is ExitJson, result
    # the GPU query gpu_facts ran serves the residency too
    assert commands == [GPU_QUERY, MIG_QUERY, VERSION, APPS_QUERY]
    assert result['residency']['processes'] == []
    assert [gpu['index'] for gpu in result['residency']['gpus']] == [0]
    assert result['ansible_facts']['gpulab_gpu_count'] == 1


def test_residency_is_not_read_without_gpus_or_by_default(tmp_path):
    kind, result, commands, unused = run_module({'residency': True}, {}, bin_path=None)
    assert kind is ExitJson and 'residency' not in result and commands == []
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    kind, result, commands, unused = run_module({'driver_version_file': str(version_file)}, h200_answers())
    assert kind is ExitJson and 'residency' not in result and APPS_QUERY not in commands


def test_residency_is_not_read_on_a_driver_mismatch():
    mismatch = (FIXTURES / 'synthetic' / 'nvml-mismatch.txt').read_text()
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    kind, result, commands, unused = run_module({'driver_version_file': str(version_file), 'residency': True},
                                                {tuple(GPU_QUERY): (18, mismatch, '')})
    assert kind is ExitJson and commands == [GPU_QUERY] and 'residency' not in result
    assert result['ansible_facts']['gpulab_gpu_driver']['mismatch'] is True


def test_a_driver_mismatch_leaves_the_last_snapshot_as_it_was(tmp_path):
    """An upgrade without a reboot is refused by gpu_preflight: the record of the working driver stays."""
    path = tmp_path / 'gpu-inventory.json'
    path.write_text('{"driver_version": "580.159.04"}\n')
    mismatch = (FIXTURES / 'synthetic' / 'nvml-mismatch.txt').read_text()
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    kind, result, unused_commands, unused = run_module(
        {'driver_version_file': str(version_file), 'snapshot_file': str(path)}, {tuple(GPU_QUERY): (18, mismatch, '')})
    assert kind is ExitJson and result['ansible_facts']['gpulab_gpu_driver']['mismatch'] is True
    assert result['snapshot_written'] is False
    assert path.read_text() == '{"driver_version": "580.159.04"}\n'


def test_the_preflight_s_look_keeps_the_kept_services_history(tmp_path):
    """A kept service seen earlier and not running now keeps its figure in the file; the look is
    no change."""
    answers = dict(h200_answers())
    answers[tuple(APPS_QUERY)] = ok((FIXTURES / 'h200-loaded' / 'query-compute-apps-idle.csv').read_text())
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    history_file = tmp_path / 'kept-room.json'
    earlier = {'asr': {'gpus': {'0': 40960}, 'seen_at': '2026-12-06T10:00:00Z'}}
    history_file.write_text(json.dumps({'managed_by': 'gpulab.inference', 'services': earlier}))
    kind, result, unused, unused_warnings = run_module(
        {'driver_version_file': str(version_file), 'residency': True, 'keep': ['asr'],
         'kept_history_file': str(history_file)}, answers)
    assert kind is ExitJson, result
    assert result['changed'] is False
    assert result['kept_history'] == earlier
    assert json.loads(history_file.read_text())['services'] == earlier
