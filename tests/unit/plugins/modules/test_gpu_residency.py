"""gpu_residency with run_command and get_bin_path patched, and a fake /proc under tmp_path."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi_runner
from ansible_collections.gpulab.inference.plugins.modules import gpu_residency
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
SMI = '/usr/bin/nvidia-smi'
TIMEOUT = '/usr/bin/timeout'


def bounded(command, timeout_s=30):
    """The command line the module runs: nvidia-smi under coreutils' timeout."""
    return [TIMEOUT, '--kill-after=5s', '%ds' % timeout_s] + list(command)


GPU_QUERY = bounded([SMI, '--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,'
                     'memory.total,memory.used,memory.free,utilization.gpu', '--format=csv,noheader,nounits'])
APPS_QUERY = bounded([SMI, '--query-compute-apps=pid,process_name,gpu_uuid,used_memory', '--format=csv,noheader,nounits'])
H200_LOADED_UUID = 'GPU-6091723c-1489-8531-612c-d2c983e2ea71'


def run_module(args, answers, bin_path=SMI):
    """Run gpu_residency; answers maps a command tuple to (rc, stdout, stderr)."""
    run = module_harness.run_module(gpu_residency.main, args, answers, {'nvidia-smi': bin_path, 'timeout': TIMEOUT})
    return run.kind, run.result, run.commands, run.warnings


def fixture(relative):
    return (FIXTURES / relative).read_text()


def fake_proc(tmp_path, cgroups):
    """A /proc with a cgroup file for each pid in cgroups."""
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / 'cgroup').write_text(text)
    return str(tmp_path)


def mig_answers():
    return {
        tuple(GPU_QUERY): (0, fixture('synthetic/query-gpu-mig-enabled.csv'), ''),
        tuple(APPS_QUERY): (0, fixture('synthetic/query-compute-apps-mig.csv'), ''),
    }


def test_h200_busy_capture_one_process_exited(tmp_path):
    # pid 484 runs in a systemd service; pid 485 exited between the query and the cgroup read.
    proc_root = fake_proc(tmp_path, {484: fixture('synthetic/cgroup-v2-system-service.txt')})
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-busy.csv'), ''),
        tuple(APPS_QUERY): (0, fixture('h200-loaded/query-compute-apps-busy.csv'), ''),
    }
    kind, result, commands, warnings = run_module({'proc_root': proc_root}, answers)
    assert kind is ExitJson
    assert commands == [GPU_QUERY, APPS_QUERY]
    assert (result['changed'], warnings) == (False, [])
    residency = result['residency']
    assert residency['processes'] == [
        {'pid': 485, 'process_name': 'python3', 'gpu_index': 0, 'gpu_uuid': H200_LOADED_UUID,
         'used_memory_mib': 1634, 'systemd_unit': None, 'supervisor_program': None,
         'exited': True},
        {'pid': 484, 'process_name': 'python3', 'gpu_index': 0, 'gpu_uuid': H200_LOADED_UUID,
         'used_memory_mib': 3682, 'systemd_unit': 'gpulab-rpc-server@0.service',
         'supervisor_program': None, 'exited': False},
    ]
    assert residency['gpus'][0]['memory_used_mib'] == 5331
    assert (residency['aggregate_used_gib'], residency['imbalance_gib']) == (5.21, 0.0)


def test_no_processes(tmp_path):
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-idle.csv'), ''),
        tuple(APPS_QUERY): (0, fixture('h200-loaded/query-compute-apps-idle.csv'), ''),
    }
    kind, result, unused, unused_warnings = run_module({'proc_root': str(tmp_path)}, answers)
    assert kind is ExitJson
    assert result['residency']['processes'] == []
    assert result['residency']['aggregate_used_gib'] == 0.0


def test_gpus_option_selects(tmp_path):
    proc_root = fake_proc(tmp_path, {4243: fixture('synthetic/cgroup-v2-user-service.txt')})
    kind, result, unused, unused_warnings = run_module({'gpus': [1], 'proc_root': proc_root}, mig_answers())
    assert kind is ExitJson
    residency = result['residency']
    assert [gpu['index'] for gpu in residency['gpus']] == [1]
    assert [(p['pid'], p['systemd_unit'], p['used_memory_mib']) for p in residency['processes']] == [
        (4243, 'llama-server.service', 9812)]
    assert (residency['aggregate_used_gib'], residency['imbalance_gib']) == (9.58, 0.0)


def test_gpus_option_unknown_index_lists_existing(tmp_path):
    kind, result, unused, unused_warnings = run_module({'gpus': [0, 3], 'proc_root': str(tmp_path)}, mig_answers())
    assert kind is FailJson
    assert result['msg'] == 'gpus: no GPU with index 3 on this host; existing indices: 0, 1'


def test_process_on_unlisted_gpu_warns(tmp_path):
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-idle.csv'), ''),
        tuple(APPS_QUERY): (0, '99, python3, GPU-00000000-0000-0000-0000-000000000000, 100\n', ''),
    }
    kind, result, unused, warnings = run_module({'proc_root': str(tmp_path)}, answers)
    assert kind is ExitJson
    assert result['residency']['processes'][0]['gpu_index'] is None
    assert warnings == ['process 99 (python3) holds memory on GPU GPU-00000000-0000-0000-0000-000000000000, '
                        'which the GPU query did not list']


def test_missing_nvidia_smi_fails():
    kind, result, commands, unused_warnings = run_module({}, {}, bin_path=None)
    assert kind is FailJson
    assert commands == []
    assert 'nvidia-smi (nvidia-smi) not found' in result['msg']


def test_nvml_mismatch_fails_with_output():
    answers = {tuple(GPU_QUERY): (18, fixture('synthetic/nvml-mismatch.txt'), '')}
    kind, result, commands, unused_warnings = run_module({}, answers)
    assert kind is FailJson
    assert commands == [GPU_QUERY]
    assert result['rc'] == 18 and 'Driver/library version mismatch' in result['msg']


def test_malformed_compute_apps_fails(tmp_path):
    answers = mig_answers()
    answers[tuple(APPS_QUERY)] = (0, '4242, python3, GPU-x, lots\n', '')
    kind, result, unused, unused_warnings = run_module({'proc_root': str(tmp_path)}, answers)
    assert kind is FailJson
    assert "used_memory is 'lots'" in result['msg'] and "'4242, python3, GPU-x, lots'" in result['msg']


# --- bad input: a clear message naming the option or field, no traceback -----------------------

def with_apps(text):
    answers = mig_answers()
    answers[tuple(APPS_QUERY)] = (0, text, '')
    return answers


def with_gpus(text):
    answers = mig_answers()
    answers[tuple(GPU_QUERY)] = (0, text, '')
    return answers


BAD_INPUTS = [
    # (id, module args, answers, words the message must hold)
    ('unknown GPU index', {'gpus': [7]}, mig_answers(), ['gpus: no GPU with index 7', 'existing indices: 0, 1']),
    ('negative GPU index', {'gpus': [-1]}, mig_answers(), ['gpus: no GPU with index -1']),
    ('GPU index not a number', {'gpus': ['first']}, {}, ['gpus']),
    ('GPU row without index', {}, with_gpus(', GPU-x, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 1, 0, 1, 0\n'),
     ["field index is ''"]),
    ('non-UTF-8 GPU name', {}, with_gpus('0, GPU-x, NVIDIA \udcc3H200, 00000000:00:06.0, 580.159.04, 9.0, 1, 0, 1, 0\n'),
     ['field name holds bytes that are not UTF-8', '\\xc3']),
    ('process row without pid', {}, with_apps(', python3, GPU-x, 10\n'), ["field pid is ''"]),
    ('process pid N/A', {}, with_apps('N/A, python3, GPU-x, 10\n'), ['field pid is N/A']),
    ('process memory not a number', {}, with_apps('42, python3, GPU-x, lots\n'), ["used_memory is 'lots'"]),
    ('process row too short', {}, with_apps('42, python3\n'), ['answered fewer than 4 fields']),
    ('timeout_s zero', {'timeout_s': 0}, {}, ['timeout_s=0 must be a positive number of seconds']),
    ('unknown option', {'gpu': [0]}, {}, ['gpu']),
]


@pytest.mark.parametrize('args, answers, words', [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_fails_clearly(tmp_path, args, answers, words):
    kind, result, unused, unused_warnings = run_module(dict({'proc_root': str(tmp_path)}, **args), answers)
    assert kind is FailJson
    for word in words:
        assert word in result['msg']
    json.dumps(result)


def test_non_utf8_process_name_and_cgroup_are_reported_escaped(tmp_path):
    (tmp_path / '42').mkdir()
    (tmp_path / '42' / 'cgroup').write_bytes(b'0::/system.slice/gpulab-rpc-server@0.service\n1:name=\xff:/x\n')
    uuid = 'GPU-6091723c-1489-8531-612c-d2c983e2ea71'
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-idle.csv'), ''),
        tuple(APPS_QUERY): (0, '42, /opt/b\udce9in/llama, %s, 10\n' % uuid, ''),
    }
    kind, result, unused, unused_warnings = run_module({'proc_root': str(tmp_path)}, answers)
    assert kind is ExitJson
    (process,) = result['residency']['processes']
    assert (process['process_name'], process['systemd_unit']) == ('/opt/b\\xe9in/llama', 'gpulab-rpc-server@0.service')
    json.dumps(result)


def test_hanging_compute_apps_query_names_the_gpu(tmp_path, monkeypatch):
    (tmp_path / '0000:00:06.0').mkdir()
    monkeypatch.setattr(nvidia_smi_runner, 'DRIVER_GPUS_DIR', str(tmp_path))
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-idle.csv'), ''),
        tuple(APPS_QUERY): (137, '', ''),
        tuple(bounded([SMI, '-i', '0000:00:06.0', '--query-gpu=index,pci.bus_id', '--format=csv,noheader,nounits'], 10)):
            (124, '', ''),
    }
    kind, result, unused, unused_warnings = run_module({}, answers)
    assert kind is FailJson
    assert 'GPU 0000:00:06.0 does not answer on its own' in result['msg']


def test_supervisord_program_read_from_the_environment(tmp_path):
    # pid 484 runs under supervisord (no systemd unit in its cgroup); 485 exited: no environ to read
    proc_root = fake_proc(tmp_path, {484: '0::/\n'})
    (tmp_path / '484' / 'environ').write_bytes(fixture('synthetic/environ-supervisord-rpc-server.txt').encode())
    answers = {
        tuple(GPU_QUERY): (0, fixture('h200-loaded/query-gpu-busy.csv'), ''),
        tuple(APPS_QUERY): (0, fixture('h200-loaded/query-compute-apps-busy.csv'), ''),
    }
    kind, result, unused, warnings = run_module({'proc_root': proc_root}, answers)
    assert kind is ExitJson and warnings == []
    assert [(p['pid'], p['systemd_unit'], p['supervisor_program'], p['exited'])
            for p in result['residency']['processes']] == [
        (485, None, None, True), (484, None, 'gpulab-rpc-server-0', False)]


def test_each_look_adds_to_the_kept_services_history(tmp_path):
    """A kept service (here a user's llama-server.service, 9812 MiB on GPU 1) is written to the history
    file with what it holds; a later look that does not see it keeps the figure; no change is reported."""
    (tmp_path / 'proc').mkdir()
    proc_root = fake_proc(tmp_path / 'proc', {4243: fixture('synthetic/cgroup-v2-user-service.txt')})
    history_file = tmp_path / 'state' / 'kept-room.json'
    args = {'proc_root': proc_root, 'keep': ['llama-server'], 'kept_history_file': str(history_file)}
    kind, result, unused, unused_warnings = run_module(args, mig_answers())
    assert kind is ExitJson, result
    assert result['changed'] is False
    assert result['kept_history']['llama-server']['gpus'] == {'1': 9812}
    written = json.loads(history_file.read_text())
    assert written['managed_by'] == 'gpulab.inference'
    assert written['services'] == result['kept_history']
    # the service is down at the next look: its figure stays
    idle = {tuple(GPU_QUERY): (0, fixture('synthetic/query-gpu-mig-enabled.csv'), ''), tuple(APPS_QUERY): (0, '', '')}
    kind, result, unused, unused_warnings = run_module(args, idle)
    assert kind is ExitJson, result
    assert result['kept_history']['llama-server']['gpus'] == {'1': 9812}
    assert json.loads(history_file.read_text())['services']['llama-server']['gpus'] == {'1': 9812}


def test_the_history_is_not_written_in_check_mode_nor_on_a_node_that_keeps_nothing(tmp_path):
    proc_root = fake_proc(tmp_path, {4243: fixture('synthetic/cgroup-v2-user-service.txt')})
    history_file = tmp_path / 'kept-room.json'
    args = {'proc_root': proc_root, 'keep': ['llama-server'], 'kept_history_file': str(history_file),
            '_ansible_check_mode': True}
    kind, result, unused, unused_warnings = run_module(args, mig_answers())
    assert kind is ExitJson, result
    assert result['kept_history']['llama-server']['gpus'] == {'1': 9812}
    assert not history_file.exists()
    kind, result, unused, unused_warnings = run_module(dict(args, keep=[], _ansible_check_mode=False), mig_answers())
    assert (kind, result['kept_history']) == (ExitJson, {})
    assert not history_file.exists()


def test_a_history_file_that_is_not_the_record_fails_naming_it(tmp_path):
    proc_root = fake_proc(tmp_path, {4243: fixture('synthetic/cgroup-v2-user-service.txt')})
    history_file = tmp_path / 'kept-room.json'
    history_file.write_text('{"services": ')
    kind, result, unused, unused_warnings = run_module(
        {'proc_root': proc_root, 'keep': ['llama-server'], 'kept_history_file': str(history_file)}, mig_answers())
    assert kind is FailJson
    assert result['msg'].startswith('kept services history %s is not JSON' % history_file)
    assert history_file.read_text() == '{"services": '
