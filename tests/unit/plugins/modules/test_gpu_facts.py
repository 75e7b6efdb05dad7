"""gpu_facts with run_command and get_bin_path patched: exact command lines and facts."""

from pathlib import Path

from ansible_collections.gpulab.inference.plugins.modules import gpu_facts
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
PROFILES = Path(__file__).resolve().parents[4] / 'molecule' / 'lab' / 'files' / 'nvidia-smi'
SMI = '/usr/bin/nvidia-smi'
GPU_QUERY = [SMI, '--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,'
             'memory.total,memory.used,memory.free,utilization.gpu', '--format=csv,noheader,nounits']
MIG_QUERY = [SMI, '--query-gpu=index,mig.mode.current', '--format=csv,noheader,nounits']
VERSION = [SMI, '--version']


def run_module(args, answers, bin_path=SMI):
    """Run gpu_facts; answers maps a command tuple to (rc, stdout, stderr)."""
    run = module_harness.run_module(gpu_facts.main, args, answers, bin_path)
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
    get_bin_path.assert_called_once_with('nvidia-smi')
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


def test_path_option_and_two_gpus():
    profile = PROFILES / 'rtx-pro-6000-x2'
    smi = '/usr/local/bin/nvidia-smi'
    answers = {
        tuple([smi] + GPU_QUERY[1:]): ok((profile / 'query-gpu.csv').read_text()),
        tuple([smi] + MIG_QUERY[1:]): ok((profile / 'query-gpu-mig.csv').read_text()),
        (smi, '--version'): ok((profile / 'version.txt').read_text()),
    }
    args = {'nvidia_smi_path': smi, 'driver_version_file': str(profile / 'proc-driver-nvidia-version')}
    kind, result, commands, get_bin_path = run_module(args, answers, bin_path=smi)
    assert kind is ExitJson
    get_bin_path.assert_called_once_with(smi)
    assert commands[0][0] == smi
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
