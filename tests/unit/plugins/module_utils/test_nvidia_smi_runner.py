"""The one nvidia-smi runner: every call under coreutils' timeout, and a call that hangs answered
with the GPU (PCI bus id) that does not answer on its own."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi_runner
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import GPU_QUERY_ARGS, timeout_message
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import NvidiaSmiRunner

SMI = '/usr/bin/nvidia-smi'
TIMEOUT = '/usr/bin/timeout'
BUS_A = '0000:41:00.0'
BUS_B = '0000:c1:00.0'


class Failed(Exception):
    pass


class FakeModule:
    """Only what the runner uses: get_bin_path, run_command (answered from a table), fail_json."""

    def __init__(self, answers, bin_paths=None):
        self.answers = answers
        self.bin_paths = {'nvidia-smi': SMI, 'timeout': TIMEOUT} if bin_paths is None else bin_paths
        self.commands = []

    def get_bin_path(self, name, required=False):
        path = self.bin_paths.get(name)
        if path is None and required:
            raise Failed({'msg': 'Failed to find required executable "%s"' % name})
        return path

    def run_command(self, command):
        self.commands.append(list(command))
        return self.answers[tuple(command)]

    def fail_json(self, **kwargs):
        raise Failed(kwargs)


def bounded(args, timeout_s=30):
    return [TIMEOUT, '--kill-after=5s', '%ds' % timeout_s, SMI] + list(args)


def probe(bus_id, timeout_s=10):
    return tuple(bounded(['-i', bus_id, '--query-gpu=index,pci.bus_id', '--format=csv,noheader,nounits'], timeout_s))


def gpus_dir(tmp_path, *bus_ids):
    for bus_id in bus_ids:
        (tmp_path / bus_id).mkdir()
    return str(tmp_path)


def test_every_call_runs_under_timeout():
    module = FakeModule({tuple(bounded(['--version'])): (0, 'DRIVER version : 580.159.04\n', '')})
    runner = NvidiaSmiRunner(module)
    assert runner.find() == SMI
    assert runner.run(['--version']) == (0, 'DRIVER version : 580.159.04\n', '')
    assert module.commands == [bounded(['--version'])]


def test_timeout_option_is_used():
    module = FakeModule({tuple(bounded(['--version'], 7)): (0, '', '')})
    runner = NvidiaSmiRunner(module, timeout_s=7)
    runner.find()
    runner.run(['--version'])
    assert module.commands == [bounded(['--version'], 7)]


def test_no_nvidia_smi_is_none_and_needs_no_timeout_binary():
    module = FakeModule({}, bin_paths={})
    assert NvidiaSmiRunner(module).find() is None


@pytest.mark.parametrize('timeout_s', [0, -1, None, True])
def test_timeout_must_be_positive(timeout_s):
    with pytest.raises(Failed) as raised:
        NvidiaSmiRunner(FakeModule({}), timeout_s=timeout_s).find()
    assert raised.value.args[0]['msg'] == 'timeout_s=%r must be a positive number of seconds' % (timeout_s,)


@pytest.mark.parametrize('rc', [124, 137])
def test_a_hanging_gpu_is_named(tmp_path, rc):
    answers = {
        tuple(bounded(GPU_QUERY_ARGS)): (rc, '', ''),
        probe(BUS_A): (0, '0, 00000000:41:00.0\n', ''),
        probe(BUS_B): (124, '', ''),
    }
    module = FakeModule(answers)
    runner = NvidiaSmiRunner(module, gpus_dir=gpus_dir(tmp_path, BUS_B, BUS_A))
    runner.find()
    with pytest.raises(Failed) as raised:
        runner.run(GPU_QUERY_ARGS)
    msg = raised.value.args[0]['msg']
    assert msg.startswith('%s %s did not answer within 30 s (timeout_s): GPU %s does not answer on its own'
                          % (SMI, ' '.join(GPU_QUERY_ARGS), BUS_B))
    assert BUS_A not in msg
    assert raised.value.args[0]['rc'] == rc
    assert module.commands[1:] == [list(probe(BUS_A)), list(probe(BUS_B))]


def test_probes_get_the_shorter_timeout(tmp_path):
    answers = {tuple(bounded(['--version'], 5)): (124, '', ''), probe(BUS_A, 5): (0, '', '')}
    module = FakeModule(answers)
    runner = NvidiaSmiRunner(module, timeout_s=5, gpus_dir=gpus_dir(tmp_path, BUS_A))
    runner.find()
    with pytest.raises(Failed) as raised:
        runner.run(['--version'])
    assert 'yet each of its GPUs (%s) answers on its own' % BUS_A in raised.value.args[0]['msg']


def test_timeout_without_driver_gpu_list(tmp_path):
    module = FakeModule({tuple(bounded(['--version'])): (124, '', '')})
    runner = NvidiaSmiRunner(module, gpus_dir=str(tmp_path / 'absent'))
    runner.find()
    with pytest.raises(Failed) as raised:
        runner.run(['--version'])
    assert 'lists no GPU under /proc/driver/nvidia/gpus' in raised.value.args[0]['msg']


def test_failure_names_the_command_without_the_timeout_wrapper():
    module = FakeModule({tuple(bounded(['-L'])): (6, 'No devices were found\n', '')})
    runner = NvidiaSmiRunner(module)
    runner.find()
    with pytest.raises(Failed) as raised:
        runner.run(['-L'])
    result = raised.value.args[0]
    assert result['msg'] == '%s -L failed (rc=6): No devices were found' % SMI
    assert (result['rc'], result['stdout'], result['cmd']) == (6, 'No devices were found\n', bounded(['-L']))


def test_mismatch_passes_only_when_allowed():
    text = 'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n'
    module = FakeModule({tuple(bounded(['--version'])): (18, text, '')})
    runner = NvidiaSmiRunner(module)
    runner.find()
    assert runner.run(['--version'], allow_mismatch=True)[0] == 18
    with pytest.raises(Failed):
        runner.run(['--version'])


def test_missing_timeout_binary_fails_clearly():
    module = FakeModule({}, bin_paths={'nvidia-smi': SMI})
    with pytest.raises(Failed) as raised:
        NvidiaSmiRunner(module).find()
    assert 'timeout' in raised.value.args[0]['msg']


def test_timeout_message_wording():
    assert timeout_message(['nvidia-smi', '-L'], 3, [('a', True), ('b', False), ('c', False)]).startswith(
        'nvidia-smi -L did not answer within 3 s (timeout_s): GPU b, c does not answer on its own either')


def test_default_gpus_dir_is_the_kernel_module_list():
    assert nvidia_smi_runner.DRIVER_GPUS_DIR == '/proc/driver/nvidia/gpus'
    assert NvidiaSmiRunner(FakeModule({})).gpus_dir == '/proc/driver/nvidia/gpus'
