"""gpu_inventory: the file gpu_preflight wrote, checked; nvidia-smi only in check mode without it."""

import json

from ansible_collections.gpulab.inference.plugins.modules import gpu_inventory
import module_harness
from module_harness import ExitJson, FailJson
from test_gpu_facts import FIXTURES, GPU_QUERY, SMI, TIMEOUT, h200_answers

H200 = {'index': 0, 'uuid': 'GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd', 'name': 'NVIDIA H200',
        'pci_bus_id': '00000000:00:06.0', 'compute_cap': '9.0', 'cuda_arch': '90', 'memory_total_mib': 143771}
SNAPSHOT = {'managed_by': 'gpulab.inference', 'driver_version': '580.159.04', 'kernel_module_version': '580.159.04',
            'cuda_version': '13.0', 'gpu_count': 1, 'gpus': [H200]}


def run(args, answers=None):
    return module_harness.run_module(gpu_inventory.main, args, answers or {}, {'nvidia-smi': SMI, 'timeout': TIMEOUT})


def test_reads_the_file_and_runs_nothing(tmp_path):
    path = tmp_path / 'gpu-inventory.json'
    path.write_text(json.dumps(SNAPSHOT))
    result = run({'path': str(path)})
    assert result.kind is ExitJson, result.result
    assert result.result['gpus'] == [H200]
    assert result.result['gpu_count'] == 1
    assert result.result['driver'] == {'driver_version': '580.159.04', 'kernel_module_version': '580.159.04',
                                       'cuda_version': '13.0'}
    assert result.result['source'] == str(path)
    assert result.result['changed'] is False
    assert result.commands == []


def test_a_missing_file_fails_naming_the_role_that_writes_it(tmp_path):
    result = run({'path': str(tmp_path / 'gpu-inventory.json')})
    assert result.kind is FailJson
    assert result.result['msg'] == ('%s is missing: role gpulab.inference.gpu_preflight writes it (the first play of '
                                    'deploy.yml); run it on this node first' % (tmp_path / 'gpu-inventory.json'))


def test_check_mode_without_the_file_reads_nvidia_smi_into_the_same_record(tmp_path):
    version_file = FIXTURES / 'h200-loaded' / 'proc-driver-nvidia-version'
    result = run({'path': str(tmp_path / 'gpu-inventory.json'), 'driver_version_file': str(version_file),
                  '_ansible_check_mode': True}, h200_answers())
    assert result.kind is ExitJson, result.result
    assert result.result['source'] == 'nvidia-smi'
    assert result.commands[0] == GPU_QUERY
    assert result.result['gpus'] == [H200]
    assert result.result['driver']['cuda_version'] == '13.0'
    assert not (tmp_path / 'gpu-inventory.json').exists()


def test_required_refuses_a_node_without_gpus(tmp_path):
    path = tmp_path / 'gpu-inventory.json'
    path.write_text(json.dumps(dict(SNAPSHOT, gpus=[], gpu_count=0)))
    assert run({'path': str(path)}).result['gpus'] == []
    result = run({'path': str(path), 'required': True})
    assert result.kind is FailJson
    assert result.result['msg'].startswith('%s lists no GPU (required=true)' % path)


def test_a_broken_file_is_named(tmp_path):
    path = tmp_path / 'gpu-inventory.json'
    path.write_text('{"managed_by": "gpulab.inference", "gpus": [')
    result = run({'path': str(path)})
    assert result.kind is FailJson
    assert result.result['msg'].startswith('%s is not JSON' % path)
    assert result.result['msg'].endswith('run gpu_preflight on the node again (it rewrites the file)')
