"""gpu_residency with run_command and get_bin_path patched, and a fake /proc under tmp_path."""

from pathlib import Path

from ansible_collections.gpulab.inference.plugins.modules import gpu_residency
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
SMI = '/usr/bin/nvidia-smi'
GPU_QUERY = [SMI, '--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,'
             'memory.total,memory.used,memory.free,utilization.gpu', '--format=csv,noheader,nounits']
APPS_QUERY = [SMI, '--query-compute-apps=pid,process_name,gpu_uuid,used_memory', '--format=csv,noheader,nounits']
H200_LOADED_UUID = 'GPU-6091723c-1489-8531-612c-d2c983e2ea71'


def run_module(args, answers, bin_path=SMI):
    """Run gpu_residency; answers maps a command tuple to (rc, stdout, stderr)."""
    run = module_harness.run_module(gpu_residency.main, args, answers, bin_path)
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
         'used_memory_mib': 1634, 'systemd_unit': None, 'exited': True},
        {'pid': 484, 'process_name': 'python3', 'gpu_index': 0, 'gpu_uuid': H200_LOADED_UUID,
         'used_memory_mib': 3682, 'systemd_unit': 'gpulab-rpc-server@0.service', 'exited': False},
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
