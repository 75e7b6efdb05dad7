"""Parsers of nvidia-smi answers, fed with real H200 captures and hand-written edge cases."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    build_residency,
    driver_facts,
    is_nvml_mismatch,
    merge_mig_modes,
    parse_compute_apps_query,
    parse_gpu_query,
    parse_inventory,
    parse_kernel_module_version,
    parse_mig_query,
    parse_nvml_library_version,
    parse_smi_version,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
FIXTURES = REPO_ROOT / 'tests' / 'unit' / 'fixtures' / 'nvidia-smi'
FAKE_SMI = REPO_ROOT / 'molecule' / 'lab' / 'files' / 'fake-nvidia-smi'
PROFILES = REPO_ROOT / 'molecule' / 'lab' / 'files' / 'nvidia-smi'

H200_UUID = 'GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd'
H200_LOADED_UUID = 'GPU-6091723c-1489-8531-612c-d2c983e2ea71'


def fixture(relative):
    return (FIXTURES / relative).read_text()


# --- GPU query -------------------------------------------------------------------------------

def test_gpu_query_h200_capture_last_line():
    # The shared capture's last line is the answer to exactly the query gpu_facts issues.
    last_line = fixture('h200/smi-query-gpu.csv').splitlines()[-1]
    assert parse_gpu_query(last_line) == [{
        'index': 0,
        'uuid': H200_UUID,
        'name': 'NVIDIA H200',
        'pci_bus_id': '00000000:00:06.0',
        'driver_version': '580.159.04',
        'compute_cap': '9.0',
        'cuda_arch': '90',
        'memory_total_mib': 143771,
        'memory_used_mib': 0,
        'memory_free_mib': 143156,
        'utilization_gpu_pct': 0,
    }]


def test_gpu_query_h200_header_matches_fields():
    # The captured header of the same query names the fields in the order the parser expects.
    header = fixture('h200-loaded/query-gpu-header.csv').splitlines()[0]
    names = [name.split(' [')[0] for name in header.split(', ')]
    assert tuple(names) == nvidia_smi.GPU_QUERY_FIELDS


def test_gpu_query_h200_busy_capture():
    gpu = parse_gpu_query(fixture('h200-loaded/query-gpu-busy.csv'))[0]
    assert (gpu['uuid'], gpu['memory_used_mib'], gpu['memory_free_mib']) == (H200_LOADED_UUID, 5331, 137826)


def test_gpu_query_empty_answer_is_no_gpu():
    assert parse_gpu_query('') == []
    assert parse_gpu_query('\n') == []


def test_gpu_query_mig_parent_memory_is_none():
    gpus = parse_gpu_query(fixture('synthetic/query-gpu-mig-enabled.csv'))
    assert [gpu['index'] for gpu in gpus] == [0, 1]
    assert (gpus[0]['memory_total_mib'], gpus[0]['memory_used_mib'],
            gpus[0]['memory_free_mib'], gpus[0]['utilization_gpu_pct']) == (None, None, None, None)
    assert (gpus[1]['memory_used_mib'], gpus[1]['utilization_gpu_pct']) == (9812, 37)


def test_gpu_query_not_supported_is_none():
    gpu = parse_gpu_query(fixture('synthetic/query-gpu-not-supported.csv'))[0]
    assert gpu['utilization_gpu_pct'] is None
    assert (gpu['compute_cap'], gpu['cuda_arch'], gpu['memory_used_mib']) == ('8.9', '89', 1731)


def test_gpu_query_sorted_by_index():
    lines = fixture('synthetic/query-gpu-mig-enabled.csv').splitlines()
    assert [gpu['index'] for gpu in parse_gpu_query('\n'.join(reversed(lines)))] == [0, 1]


@pytest.mark.parametrize('value', ['N/A', '[N/A]', '[Not Supported]', '[Unknown Error]', '[Insufficient Permissions]'])
def test_not_available_markers(value):
    assert nvidia_smi.is_not_available(value)


@pytest.mark.parametrize('value', ['0', 'NA', 'abc', '[', ''])
def test_values_that_are_not_markers(value):
    assert not nvidia_smi.is_not_available(value)


def test_gpu_query_wrong_field_count_names_line():
    line = '0, GPU-x, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, 0, 143156'
    with pytest.raises(NvidiaSmiParseError, match=r'answered 9 fields, expected 10') as raised:
        parse_gpu_query(line)
    assert repr(line) in str(raised.value)


def test_gpu_query_non_numeric_memory_names_field_and_line():
    line = '0, %s, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, lots, 143156, 0' % H200_UUID
    with pytest.raises(NvidiaSmiParseError, match=r"memory\.used is 'lots'") as raised:
        parse_gpu_query(line)
    assert repr(line) in str(raised.value)


def test_gpu_query_bad_compute_cap():
    line = '0, %s, NVIDIA H200, 00000000:00:06.0, 580.159.04, sm90, 143771, 0, 143156, 0' % H200_UUID
    with pytest.raises(NvidiaSmiParseError, match=r"compute_cap is 'sm90'"):
        parse_gpu_query(line)


def test_gpu_query_duplicate_index():
    line = fixture('h200/smi-query-gpu.csv').splitlines()[-1]
    with pytest.raises(NvidiaSmiParseError, match='index twice'):
        parse_gpu_query(line + '\n' + line)


def test_gpu_query_na_uuid_is_an_error():
    line = '0, [N/A], NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, 0, 143156, 0'
    with pytest.raises(NvidiaSmiParseError, match='uuid is empty or N/A'):
        parse_gpu_query(line)


# --- MIG mode --------------------------------------------------------------------------------

def test_mig_query():
    assert parse_mig_query(fixture('synthetic/query-gpu-mig-enabled-mode.csv')) == {0: 'Enabled', 1: 'Disabled'}
    assert parse_mig_query(fixture('synthetic/query-gpu-mig-not-supported.csv')) == {0: None}


def test_mig_query_captured_format():
    # Captured with mig.mode.current,mig.mode.pending: the value format is the same.
    current = fixture('h200-loaded/query-gpu-mig-current-pending.csv').rsplit(',', 1)[0]
    assert parse_mig_query(current) == {0: 'Disabled'}


def test_mig_query_rejects_unknown_mode():
    with pytest.raises(NvidiaSmiParseError, match="mig.mode.current is 'Sometimes'"):
        parse_mig_query('0, Sometimes')


def test_merge_mig_modes():
    gpus = parse_gpu_query(fixture('synthetic/query-gpu-mig-enabled.csv'))
    merged = merge_mig_modes(gpus, {0: 'Enabled'})
    assert [gpu['mig_mode'] for gpu in merged] == ['Enabled', None]
    assert 'mig_mode' not in gpus[0]


# --- compute apps ----------------------------------------------------------------------------

def test_compute_apps_busy_capture():
    assert parse_compute_apps_query(fixture('h200-loaded/query-compute-apps-busy.csv')) == [
        {'pid': 485, 'process_name': 'python3', 'gpu_uuid': H200_LOADED_UUID, 'used_memory_mib': 1634},
        {'pid': 484, 'process_name': 'python3', 'gpu_uuid': H200_LOADED_UUID, 'used_memory_mib': 3682},
    ]


def test_compute_apps_idle_capture_is_empty():
    assert fixture('h200-loaded/query-compute-apps-idle.csv') == ''
    assert parse_compute_apps_query('') == []


def test_compute_apps_mig_used_memory_na():
    processes = parse_compute_apps_query(fixture('synthetic/query-compute-apps-mig.csv'))
    assert [(p['pid'], p['used_memory_mib']) for p in processes] == [(4242, None), (4243, 9812)]
    assert processes[0]['process_name'] == '/opt/gpulab/llama.cpp/current/bin/ggml-rpc-server'


def test_compute_apps_process_name_with_comma():
    processes = parse_compute_apps_query('77, /opt/a,b/server, %s, 12' % H200_UUID)
    assert processes == [{'pid': 77, 'process_name': '/opt/a,b/server', 'gpu_uuid': H200_UUID, 'used_memory_mib': 12}]


def test_compute_apps_too_few_fields():
    with pytest.raises(NvidiaSmiParseError, match=r"fewer than 4 fields .* in line: '485, python3'"):
        parse_compute_apps_query('485, python3')


def test_compute_apps_non_numeric_memory():
    line = '485, python3, %s, 1.5 GiB' % H200_UUID
    with pytest.raises(NvidiaSmiParseError, match=r"used_memory is '1.5 GiB'") as raised:
        parse_compute_apps_query(line)
    assert repr(line) in str(raised.value)


def test_compute_apps_non_numeric_pid():
    with pytest.raises(NvidiaSmiParseError, match=r"pid is 'abc'"):
        parse_compute_apps_query('abc, python3, %s, 12' % H200_UUID)


# --- versions and mismatch -------------------------------------------------------------------

def test_smi_version_capture():
    assert parse_smi_version(fixture('h200-loaded/version.txt')) == {
        'smi_version': '580.159.04', 'nvml_version': '580.159',
        'driver_version': '580.159.04', 'cuda_version': '13.0',
    }


def test_smi_version_cuda_not_found():
    parsed = parse_smi_version('NVIDIA-SMI version  : 580.105.06\nCUDA Version        : Not Found\n')
    assert (parsed['smi_version'], parsed['cuda_version'], parsed['driver_version']) == ('580.105.06', None, None)


def test_smi_version_garbage_cuda():
    with pytest.raises(NvidiaSmiParseError, match="cuda_version 'thirteen'"):
        parse_smi_version('CUDA Version : thirteen\n')


def test_kernel_module_version_open_capture():
    assert parse_kernel_module_version(fixture('h200-loaded/proc-driver-nvidia-version')) == '580.159.04'


def test_kernel_module_version_proprietary():
    assert parse_kernel_module_version(fixture('synthetic/proc-driver-nvidia-version-proprietary')) == '580.159.04'


@pytest.mark.parametrize('line, version', [
    ('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.84  Thu Jul 17 2026', '595.84'),
    ('NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build', '580.95.05'),
    ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04', '580.159.04'),
])
def test_kernel_module_version_formats(line, version):
    assert parse_kernel_module_version(line + '\n') == version


def test_kernel_module_version_unreadable():
    with pytest.raises(NvidiaSmiParseError, match='cannot find the kernel module version'):
        parse_kernel_module_version('NVRM version: something else\n')
    with pytest.raises(NvidiaSmiParseError, match='no "NVRM version:" line'):
        parse_kernel_module_version('hello\n')


def test_nvml_mismatch_detection():
    text = fixture('synthetic/nvml-mismatch.txt')
    assert is_nvml_mismatch(text)
    assert is_nvml_mismatch('', text)
    assert not is_nvml_mismatch(fixture('h200-loaded/error-no-devices.txt'))
    assert parse_nvml_library_version(text) == '580.95'
    assert parse_nvml_library_version('Failed to initialize NVML: Driver/library version mismatch\n') is None


def test_driver_facts_agree():
    gpus = parse_gpu_query(fixture('h200/smi-query-gpu.csv').splitlines()[-1])
    facts = driver_facts(gpus, parse_smi_version(fixture('h200-loaded/version.txt')), '580.159.04')
    assert facts == {'driver_version': '580.159.04', 'cuda_version': '13.0',
                     'kernel_module_version': '580.159.04', 'mismatch': False}


def test_driver_facts_mismatch_and_fallback():
    smi_version = {'driver_version': '580.95.05', 'cuda_version': '13.0'}
    assert driver_facts([], smi_version, '580.159.04')['mismatch'] is True
    assert driver_facts([], smi_version, None)['mismatch'] is False


# --- cgroups and residency -------------------------------------------------------------------

def _mig_residency(indices=None, cgroups=None):
    gpus = parse_gpu_query(fixture('synthetic/query-gpu-mig-enabled.csv'))
    processes = parse_compute_apps_query(fixture('synthetic/query-compute-apps-mig.csv'))
    return build_residency(gpus, processes, indices, cgroups)


def test_residency_busy_capture():
    gpus = parse_gpu_query(fixture('h200-loaded/query-gpu-busy.csv'))
    processes = parse_compute_apps_query(fixture('h200-loaded/query-compute-apps-busy.csv'))
    cgroups = {484: fixture('synthetic/cgroup-v2-system-service.txt'), 485: None}
    residency = build_residency(gpus, processes, None, cgroups)
    assert residency['gpus'] == [{'index': 0, 'uuid': H200_LOADED_UUID, 'name': 'NVIDIA H200',
                                  'memory_used_mib': 5331, 'memory_total_mib': 143771, 'memory_free_mib': 137826}]
    assert residency['processes'] == [
        {'pid': 485, 'process_name': 'python3', 'gpu_index': 0, 'gpu_uuid': H200_LOADED_UUID,
         'used_memory_mib': 1634, 'systemd_unit': None, 'supervisor_program': None,
         'exited': True},
        {'pid': 484, 'process_name': 'python3', 'gpu_index': 0, 'gpu_uuid': H200_LOADED_UUID,
         'used_memory_mib': 3682, 'systemd_unit': 'gpulab-rpc-server@0.service',
         'supervisor_program': None, 'exited': False},
    ]
    assert residency['aggregate_used_gib'] == 5.21  # 5331 / 1024
    assert residency['imbalance_gib'] == 0.0


def test_residency_mig_parent_counts_as_unknown():
    residency = _mig_residency(cgroups={4242: '', 4243: ''})
    assert residency['aggregate_used_gib'] == 9.58  # only GPU 1's 9812 MiB is known
    assert residency['imbalance_gib'] == 0.0
    assert [p['gpu_index'] for p in residency['processes']] == [0, 1]
    assert [p['exited'] for p in residency['processes']] == [False, False]


def test_residency_imbalance_two_gpus():
    gpus = parse_gpu_query(fixture('synthetic/query-gpu-mig-enabled.csv'))
    gpus[0].update(memory_used_mib=18033)
    residency = build_residency(gpus, [], None, {})
    assert residency['aggregate_used_gib'] == round((18033 + 9812) / 1024, 2) == 27.19
    assert residency['imbalance_gib'] == round((18033 - 9812) / 1024, 2) == 8.03


def test_residency_selection_filters_gpus_and_processes():
    residency = _mig_residency(indices=[1], cgroups={4243: fixture('synthetic/cgroup-v2-system-service.txt')})
    assert [gpu['index'] for gpu in residency['gpus']] == [1]
    assert [(p['pid'], p['systemd_unit']) for p in residency['processes']] == [(4243, 'gpulab-rpc-server@0.service')]


def test_residency_unknown_index_lists_existing():
    with pytest.raises(ValueError, match='no GPU with index 2, 5 on this host; existing indices: 0, 1'):
        _mig_residency(indices=[5, 2, 0])


def test_residency_process_on_unlisted_gpu():
    gpus = parse_gpu_query(fixture('h200/smi-query-gpu.csv').splitlines()[-1])
    stray = parse_compute_apps_query('99, python3, GPU-00000000-0000-0000-0000-000000000000, 100')
    all_gpus = build_residency(gpus, stray, None, {99: ''})
    assert [(p['pid'], p['gpu_index']) for p in all_gpus['processes']] == [(99, None)]
    assert build_residency(gpus, stray, [0], {99: ''})['processes'] == []


def test_residency_no_gpus():
    assert build_residency([], [], None, {}) == {
        'gpus': [], 'processes': [], 'aggregate_used_gib': 0.0, 'imbalance_gib': 0.0}


# --- the fake nvidia-smi of the container lab agrees with the parsers --------------------------

def run_fake(profile_dir, args):
    env = dict(os.environ, GPULAB_FAKE_NVIDIA_SMI_DIR=str(profile_dir))
    return subprocess.run([sys.executable, str(FAKE_SMI)] + list(args), env=env,
                          capture_output=True, text=True, check=False)


EXPECTED_PROFILES = {
    'h200': (['NVIDIA H200'], '9.0', '90', 143771, '580.159.04'),
    'rtx-pro-6000-x2': (['NVIDIA RTX PRO 6000 Blackwell Workstation Edition'] * 2, '12.0', '120', 97887, '580.95.05'),
    'rtx-pro-6000-maxq': (['NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition'], '12.0', '120', 97887, '580.95.05'),
}


def test_every_profile_is_tested():
    assert sorted(p.name for p in PROFILES.iterdir() if p.is_dir()) == sorted(EXPECTED_PROFILES)


@pytest.mark.parametrize('profile', sorted(EXPECTED_PROFILES))
def test_fake_profile_parses(profile):
    names, compute_cap, cuda_arch, total_mib, driver = EXPECTED_PROFILES[profile]
    profile_dir = PROFILES / profile
    answers = {}
    for key, args in (('gpu', nvidia_smi.GPU_QUERY_ARGS), ('mig', nvidia_smi.MIG_QUERY_ARGS),
                      ('apps', nvidia_smi.COMPUTE_APPS_QUERY_ARGS), ('version', nvidia_smi.VERSION_ARGS)):
        completed = run_fake(profile_dir, args)
        assert (completed.returncode, completed.stderr) == (0, ''), completed.stdout
        answers[key] = completed.stdout
    gpus = merge_mig_modes(parse_gpu_query(answers['gpu']), parse_mig_query(answers['mig']))
    assert [gpu['name'] for gpu in gpus] == names
    assert [gpu['index'] for gpu in gpus] == list(range(len(names)))
    assert len({gpu['uuid'] for gpu in gpus}) == len({gpu['pci_bus_id'] for gpu in gpus}) == len(names)
    assert {(gpu['compute_cap'], gpu['cuda_arch'], gpu['memory_total_mib'], gpu['mig_mode']) for gpu in gpus} == {
        (compute_cap, cuda_arch, total_mib, 'Disabled')}
    assert parse_compute_apps_query(answers['apps']) == []
    kernel = parse_kernel_module_version((profile_dir / 'proc-driver-nvidia-version').read_text())
    assert driver_facts(gpus, parse_smi_version(answers['version']), kernel) == {
        'driver_version': driver, 'cuda_version': '13.0', 'kernel_module_version': driver, 'mismatch': False}
    # -L and plain nvidia-smi name the same GPUs.
    listing = run_fake(profile_dir, ['-L']).stdout
    assert [line.split('(UUID: ')[1].rstrip(')') for line in listing.splitlines()] == [gpu['uuid'] for gpu in gpus]
    plain = run_fake(profile_dir, []).stdout
    assert 'Driver Version: %s' % driver in plain and 'CUDA Version: 13.0' in plain
    assert all(len(line) == 91 for line in plain.splitlines()[1:] if line)


def test_fake_h200_replays_capture_byte_for_byte():
    profile_dir = PROFILES / 'h200'
    assert run_fake(profile_dir, nvidia_smi.GPU_QUERY_ARGS).stdout == fixture('h200/smi-query-gpu.csv').splitlines(True)[-1]
    assert run_fake(profile_dir, []).stdout == fixture('h200/smi-plain.txt')
    assert run_fake(profile_dir, ['--version']).stdout == fixture('h200-loaded/version.txt')


def test_fake_mismatch(tmp_path):
    (tmp_path / 'mismatch').write_text('580.95\n')
    completed = run_fake(tmp_path, nvidia_smi.GPU_QUERY_ARGS)
    assert completed.returncode == nvidia_smi.NVML_MISMATCH_RC
    assert completed.stdout == fixture('synthetic/nvml-mismatch.txt')
    assert is_nvml_mismatch(completed.stdout, completed.stderr)


def test_fake_unknown_option_like_real_tool():
    completed = run_fake(PROFILES / 'h200', ['--bogus'])
    assert (completed.returncode, completed.stdout) == (255, fixture('h200-loaded/error-unknown-option.txt'))


def test_fake_unanswered_query_fails():
    completed = run_fake(PROFILES / 'h200', ['--query-gpu=index', '--format=csv'])
    assert completed.returncode == 2
    assert 'test double' in completed.stdout and '--query-gpu=index --format=csv' in completed.stdout


# --- snapshot and table ------------------------------------------------------------------------

def _h200_gpus():
    return merge_mig_modes(parse_gpu_query(fixture('h200/smi-query-gpu.csv').splitlines()[-1]), {0: 'Disabled'})


H200_DRIVER = {'driver_version': '580.159.04', 'kernel_module_version': '580.159.04', 'cuda_version': '13.0',
               'mismatch': False, 'message': ''}


def test_snapshot_keeps_identity_only():
    assert nvidia_smi.inventory_snapshot(_h200_gpus(), H200_DRIVER) == {
        'managed_by': 'gpulab.inference', 'driver_version': '580.159.04', 'kernel_module_version': '580.159.04',
        'cuda_version': '13.0', 'gpu_count': 1,
        'gpus': [{'index': 0, 'uuid': H200_UUID, 'name': 'NVIDIA H200', 'pci_bus_id': '00000000:00:06.0',
                  'compute_cap': '9.0', 'cuda_arch': '90', 'memory_total_mib': 143771}],
    }


def test_snapshot_of_a_cpu_node():
    driver = {'driver_version': None, 'kernel_module_version': None, 'cuda_version': None}
    assert nvidia_smi.inventory_snapshot([], driver) == {
        'managed_by': 'gpulab.inference', 'driver_version': None, 'kernel_module_version': None,
        'cuda_version': None, 'gpu_count': 0, 'gpus': []}


def test_table_lines():
    assert nvidia_smi.gpu_table(_h200_gpus(), H200_DRIVER) == [
        '1 GPU(s), driver 580.159.04 (kernel module 580.159.04), CUDA 13.0',
        'GPU  name                                                       cc     arch      memory used/total  util',
        '0    NVIDIA H200                                                9.0    sm_90          0/143771 MiB    0%',
    ]


def test_table_shows_not_available_as_dash():
    gpus = parse_gpu_query(fixture('synthetic/query-gpu-mig-enabled.csv'))
    lines = nvidia_smi.gpu_table(gpus, {'driver_version': None, 'kernel_module_version': None, 'cuda_version': None})
    assert lines[0] == '%d GPU(s), driver - (kernel module -), CUDA -' % len(gpus)
    assert lines[2] == '0    NVIDIA H200                                                9.0    sm_90          -/     - MiB    -%'
    assert lines[3] == '1    NVIDIA H200                                                9.0    sm_90       9812/143771 MiB   37%'
    assert 'None' not in ''.join(lines)


INVENTORY_GPU = {'index': 1, 'uuid': 'GPU-1', 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
                 'pci_bus_id': '00000000:02:00.0', 'compute_cap': '12.0', 'cuda_arch': '120', 'memory_total_mib': 97887}


def inventory_text(**changes):
    data = {'managed_by': 'gpulab.inference', 'driver_version': '580.95.05', 'kernel_module_version': '580.95.05',
            'cuda_version': '13.0', 'gpu_count': 2, 'gpus': [INVENTORY_GPU, dict(INVENTORY_GPU, index=0, uuid='GPU-0')]}
    data.update(changes)
    return json.dumps(data)


def test_parse_inventory_orders_by_index_and_keeps_the_snapshot_keys():
    inventory = parse_inventory(inventory_text(), '/var/lib/gpulab/gpu-inventory.json')
    assert [gpu['index'] for gpu in inventory['gpus']] == [0, 1]
    assert inventory['gpus'][1] == INVENTORY_GPU
    assert inventory['gpu_count'] == 2
    assert inventory['driver'] == {'driver_version': '580.95.05', 'kernel_module_version': '580.95.05',
                                   'cuda_version': '13.0'}
    # a CPU node: no GPU, no driver
    cpu = parse_inventory(inventory_text(gpus=[], gpu_count=0, driver_version=None, kernel_module_version=None,
                                         cuda_version=None), 'f')
    assert cpu == {'gpus': [], 'gpu_count': 0,
                   'driver': {'driver_version': None, 'kernel_module_version': None, 'cuda_version': None}}


@pytest.mark.parametrize('text, message', [
    ('[1', 'is not JSON'),
    (json.dumps({'gpus': []}), 'is not a GPU inventory of gpulab.inference (no managed_by)'),
    (inventory_text(gpus=None), 'has no gpus list'),
    (inventory_text(gpus=[1]), 'gpus entry 0 is not an object'),
    (inventory_text(gpus=[INVENTORY_GPU, INVENTORY_GPU]), 'gpus entry 1 index 1 is not a GPU index'),
    (inventory_text(gpus=[dict(INVENTORY_GPU, index=True)]), 'gpus entry 0 index True is not a GPU index'),
    (inventory_text(gpus=[dict(INVENTORY_GPU, compute_cap='12')], gpu_count=1), "gpus entry 0 compute_cap '12' is not what nvidia-smi"),
    (inventory_text(gpus=[dict(INVENTORY_GPU, name='x\ny')], gpu_count=1), "gpus entry 0 name 'x\\ny' is not"),
    (inventory_text(gpus=[dict(INVENTORY_GPU, memory_total_mib='97887')], gpu_count=1),
     "gpus entry 0 memory_total_mib '97887' is not a whole number of MiB"),
    (inventory_text(gpu_count=3), 'says gpu_count 3 but lists 2 GPU(s)'),
    (inventory_text(cuda_version=13), 'cuda_version 13 is not a version'),
])
def test_parse_inventory_names_what_is_wrong(text, message):
    with pytest.raises(NvidiaSmiParseError) as error:
        parse_inventory(text, '/var/lib/gpulab/gpu-inventory.json')
    assert str(error.value).startswith('/var/lib/gpulab/gpu-inventory.json ' + message)
    assert str(error.value).endswith('; run gpu_preflight on the node again (it rewrites the file)')


def test_residency_names_the_supervisord_program_of_a_process():
    """Under supervisord no systemd unit names the collection's servers: the program does."""
    gpus = parse_gpu_query(fixture('h200-loaded/query-gpu-busy.csv'))
    processes = parse_compute_apps_query(fixture('h200-loaded/query-compute-apps-busy.csv'))
    cgroups = {484: '0::/\n', 485: '0::/\n'}
    environs = {484: fixture('synthetic/environ-supervisord-rpc-server.txt'), 485: None}
    residency = build_residency(gpus, processes, None, cgroups, environs)
    assert [(p['pid'], p['systemd_unit'], p['supervisor_program']) for p in residency['processes']] == [
        (485, None, None), (484, None, 'gpulab-rpc-server-0')]
