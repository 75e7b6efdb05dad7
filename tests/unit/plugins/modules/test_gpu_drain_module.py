"""gpu_drain with run_command and get_bin_path patched, a fake /proc and the state file under tmp_path."""

import json
import os
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.modules import gpu_drain
from module_harness import ExitJson, FailJson
from common_defaults import OWN_UNITS

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
SMI = '/usr/bin/nvidia-smi'
SYSTEMCTL = '/usr/bin/systemctl'
PODMAN = '/usr/bin/podman'
TIMEOUT = '/usr/bin/timeout'
GPU_QUERY = (SMI, '--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,'
             'memory.total,memory.used,memory.free,utilization.gpu', '--format=csv,noheader,nounits')
APPS_QUERY = (SMI, '--query-compute-apps=pid,process_name,gpu_uuid,used_memory', '--format=csv,noheader,nounits')
UUID_0 = 'GPU-5b0e6f3a-91c2-4e8d-a7f4-0c3d2b1e9a60'
UUID_1 = 'GPU-c84d1a97-2f6b-4b35-8e0a-7d91f5c2e3b4'
PODMAN_ID = '3f9c2a1e7b5d48c0a6e2f1d9b8c7a6e5d4c3b2a19f8e7d6c5b4a39281706f5e4'
LIST_UNITS = (SYSTEMCTL, 'list-units', '--type=service', '--state=active', '--plain', '--no-legend')


def gpu_csv(used_0, used_1):
    """The rtx-pro-6000-x2 lab profile's answer with the given memory.used."""
    return ('0, %s, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 00000000:21:00.0, 580.95.05, 12.0, '
            '97887, %d, %d, 0\n1, %s, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 00000000:C1:00.0, '
            '580.95.05, 12.0, 97887, %d, %d, 0\n' % (UUID_0, used_0, 97248 - used_0, UUID_1, used_1, 97248 - used_1))


APPS = ('100, /usr/bin/python3, %s, 4096\n'
        '200, /usr/bin/python3, %s, 6144\n'
        '300, /opt/gpulab/llama.cpp/current/bin/llama-server, %s, 20000\n'
        '400, python3, %s, 1024\n' % (UUID_0, UUID_1, UUID_0, UUID_1))
CGROUPS = {
    100: '0::/system.slice/gpu-embed.service\n',
    200: '0::/system.slice/whisper-asr.service\n',
    300: '0::/system.slice/gpulab-llama-server.service\n',
    400: (FIXTURES / 'synthetic' / 'cgroup-v2-session-scope.txt').read_text(),
}


def show(name):
    return (SYSTEMCTL, 'show', '--property=ActiveState,UnitFileState,LoadState,Transient', '--', name)


def unit(active='active', enabled='enabled', transient='no'):
    return (0, 'ActiveState=%s\nUnitFileState=%s\nLoadState=loaded\nTransient=%s\n' % (active, enabled, transient), '')


OK = (0, '', '')


class Answers(dict):
    """Maps a command tuple to an answer, a list of answers given in turn (the last one repeats),
    or a callable returning the answer."""

    def answer(self, command):
        value = self[command]
        if isinstance(value, list):
            return value.pop(0) if len(value) > 1 else value[0]
        if callable(value):
            return value()
        return value


def run(args, answers, tools=None, bounded=None):
    """bounded collects (coreutils timeout prefix, command) of every bounded call; the commands and
    answers are written without it."""
    tools = dict({'nvidia-smi': SMI, 'systemctl': SYSTEMCTL} if tools is None else tools, timeout=TIMEOUT)
    commands, warnings = [], []

    def run_command(self, command, *unused_args, **unused_kwargs):
        command = tuple(command)
        if command[0] == TIMEOUT:
            if bounded is not None:
                bounded.append((command[:3], command[3:]))
            command = command[3:]
        commands.append(command)
        return answers.answer(command)

    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        raise FailJson(kwargs)

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json), \
            mock.patch.object(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg)), \
            mock.patch.object(basic.AnsibleModule, 'run_command', run_command), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', side_effect=lambda name, *a, **k: tools.get(name)), \
            mock.patch.object(gpu_drain.time, 'sleep'):
        with pytest.raises((ExitJson, FailJson)) as raised:
            gpu_drain.main()
    return raised.type, raised.value.args[0], commands, warnings


def fake_proc(tmp_path, cgroups=None, fds=None):
    proc = tmp_path / 'proc'
    proc.mkdir()
    for pid, text in (CGROUPS if cgroups is None else cgroups).items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / 'cgroup').write_text(text)
        (proc / str(pid) / 'stat').write_text('%d (python3) S 1 %d' % (pid, pid))
    for pid, (name, targets) in (fds or {}).items():
        (proc / str(pid) / 'fd').mkdir()
        (proc / str(pid) / 'comm').write_text(name + '\n')
        for number, target in enumerate(targets):
            os.symlink(target, str(proc / str(pid) / 'fd' / str(number)))
    return str(proc)


def drain_args(tmp_path, **extra):
    args = {'state': 'drained', 'keep': ['whisper-asr'], 'own_units': OWN_UNITS,
            'state_file': str(tmp_path / 'drain-state.json'), 'wait_timeout_s': 0}
    args.update(extra)
    if 'proc_root' not in args:
        args['proc_root'] = fake_proc(tmp_path)
    return args


def drain_answers(state_file, embed='active'):
    def stop_embed():
        # written before anything is stopped
        assert json.loads(Path(state_file).read_text())['phase'] == 'stopping'
        return OK

    return Answers({
        GPU_QUERY: [(0, gpu_csv(24096, 7168), ''), (0, gpu_csv(20000, 7168), '')],
        APPS_QUERY: (0, APPS, ''),
        show('gpu-embed.service'): unit(embed),
        show('whisper-asr.service'): unit(),
        show('gpulab-llama-server.service'): unit(),
        (SYSTEMCTL, 'stop', '--', 'gpu-embed.service'): stop_embed,
    })


def write_state(path, entries, phase='drained'):
    path.write_text(json.dumps({'schema': 'gpulab.inference.gpu_drain/1', 'phase': phase,
                                'created': '2026-11-30T11:00:00Z', 'updated': '2026-11-30T11:00:00Z',
                                'entries': entries, 'killed': []}))


def entry(name, enabled='enabled', active=True, gpus=None):
    return {'key': 'systemd:' + name, 'kind': 'systemd', 'name': name, 'was_active': active,
            'was_enabled': enabled, 'gpus_mib': gpus or {}}


# --- drain ---------------------------------------------------------------------------------------

def test_drain_stops_what_is_not_kept_after_writing_the_state(tmp_path):
    args = drain_args(tmp_path)
    kind, result, commands, warnings = run(args, drain_answers(args['state_file']))
    assert kind is ExitJson, result
    assert result['changed'] is True
    stops = [c for c in commands if c[1] == 'stop']
    assert stops == [(SYSTEMCTL, 'stop', '--', 'gpu-embed.service')]
    actions = dict((c['key'], c['action']) for c in result['consumers'])
    assert actions == {'systemd:gpu-embed.service': 'stop', 'systemd:whisper-asr.service': 'keep',
                       'systemd:gpulab-llama-server.service': 'own', 'process:400': 'report'}
    assert result['stopped'] == ['systemd:gpu-embed.service']
    assert warnings == ['GPU process(es) 400 (process:400): no systemd unit, container or supervisord program '
                        'manages it; left running (kill_unmanaged is false)']
    state = json.loads(Path(args['state_file']).read_text())
    assert state['phase'] == 'drained'
    assert state['entries'] == [entry('gpu-embed.service', gpus={UUID_0: 4096})]
    assert result['drain_state'] == state
    assert result['vram_freed'][0] == {'index': 0, 'uuid': UUID_0, 'used_before_mib': 24096,
                                       'used_after_mib': 20000, 'freed_mib': 4096}
    assert result['vram_freed'][1]['freed_mib'] == 0
    assert result['summary'][-1] == 'GPU 0 freed 4096 MiB (24096 -> 20000 MiB used)'


def test_a_process_with_a_name_that_is_not_utf8_is_read_without_a_traceback(tmp_path):
    args = drain_args(tmp_path)
    for stat in Path(args['proc_root']).glob('*/stat'):
        pid = stat.parent.name
        stat.write_bytes(b'%s (py\xff\xfethon) S 1 %s' % (pid.encode(), pid.encode()))
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is ExitJson, result
    assert result['stopped'] == ['systemd:gpu-embed.service']


def test_second_drain_changes_nothing(tmp_path):
    args = drain_args(tmp_path)
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service', gpus={UUID_0: 4096})])
    before = state_file.read_text()
    answers = drain_answers(args['state_file'], embed='inactive')
    answers[APPS_QUERY] = (0, ''.join(line + '\n' for line in APPS.splitlines()[1:]), '')
    kind, result, commands, unused_warnings = run(args, answers)
    assert kind is ExitJson, result
    assert result['changed'] is False
    assert [c for c in commands if c[1] == 'stop'] == []
    assert state_file.read_text() == before


def test_second_drain_adds_new_consumers_and_keeps_the_recorded_state(tmp_path):
    cgroups = dict(CGROUPS)
    cgroups[500] = '0::/system.slice/gpu-notebook.service\n'
    args = drain_args(tmp_path, proc_root=fake_proc(tmp_path, cgroups))
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service', gpus={UUID_0: 4096})])
    answers = drain_answers(args['state_file'], embed='inactive')
    answers[APPS_QUERY] = (0, '500, python3, %s, 2048\n' % UUID_1, '')
    answers[show('gpu-notebook.service')] = unit(enabled='disabled')
    answers[(SYSTEMCTL, 'stop', '--', 'gpu-notebook.service')] = OK
    answers[GPU_QUERY] = [(0, gpu_csv(0, 2048), ''), (0, gpu_csv(0, 0), '')]
    kind, result, commands, unused_warnings = run(args, answers)
    assert kind is ExitJson, result
    assert result['changed'] is True
    assert [c for c in commands if c[1] == 'stop'] == [(SYSTEMCTL, 'stop', '--', 'gpu-notebook.service')]
    state = json.loads(state_file.read_text())
    assert state['entries'] == [entry('gpu-embed.service', gpus={UUID_0: 4096}),
                                entry('gpu-notebook.service', 'disabled', gpus={UUID_1: 2048})]
    assert state['created'] == '2026-11-30T11:00:00Z'
    assert result['unmatched_keep'] == ['whisper-asr']


def test_interrupted_drain_is_resumed_not_overwritten(tmp_path):
    # The earlier run wrote its list and stopped gpu-notebook, then died before gpu-embed.
    args = drain_args(tmp_path, keep=['whisper-asr'])
    state_file = tmp_path / 'drain-state.json'
    recorded = [entry('gpu-notebook.service', 'disabled'), entry('gpu-embed.service', gpus={UUID_0: 4096})]
    write_state(state_file, recorded, phase='stopping')
    answers = drain_answers(args['state_file'])
    answers[show('gpu-notebook.service')] = unit('inactive', 'disabled')
    kind, result, commands, unused_warnings = run(args, answers)
    assert kind is ExitJson, result
    assert [c for c in commands if c[1] == 'stop'] == [(SYSTEMCTL, 'stop', '--', 'gpu-embed.service')]
    state = json.loads(state_file.read_text())
    assert state['entries'] == recorded
    assert state['phase'] == 'drained'


def test_corrupt_state_file_fails_with_its_path_and_is_left_alone(tmp_path):
    args = drain_args(tmp_path)
    state_file = tmp_path / 'drain-state.json'
    state_file.write_text('{"schema": "gpulab.inference.gpu_drain/1", "entries": [')
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is FailJson
    assert result['msg'].startswith('drain state file %s is corrupt: not JSON' % state_file)
    assert commands == []
    assert state_file.read_text() == '{"schema": "gpulab.inference.gpu_drain/1", "entries": ['


def test_missing_state_directory_is_created_before_the_state_file(tmp_path):
    args = drain_args(tmp_path, state_file=str(tmp_path / 'missing' / 'deeper' / 'drain-state.json'))
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is ExitJson, result
    assert (tmp_path / 'missing' / 'deeper').is_dir()
    assert oct((tmp_path / 'missing' / 'deeper').stat().st_mode & 0o777) == '0o755'
    assert json.loads((tmp_path / 'missing' / 'deeper' / 'drain-state.json').read_text())['phase'] == 'drained'


def test_state_directory_that_cannot_be_created_fails_before_stopping(tmp_path):
    (tmp_path / 'regular').write_text('a file, not a directory')
    args = drain_args(tmp_path, state_file=str(tmp_path / 'regular' / 'drain-state.json'))
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is FailJson
    assert result['msg'].startswith('drain state directory %s cannot be created or written (' % (tmp_path / 'regular'))
    assert 'Nothing was stopped' in result['msg'] and 'gpu_drain_state_file' in result['msg']
    assert [c for c in commands if c[1] == 'stop'] == []
    assert commands == []


def test_check_mode_creates_no_state_directory_and_says_changed(tmp_path):
    # nothing to stop (gpu-embed kept too): the directory alone makes the change
    args = drain_args(tmp_path, state_file=str(tmp_path / 'missing' / 'drain-state.json'),
                      keep=['whisper-asr', 'gpu-embed'], _ansible_check_mode=True)
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is ExitJson, result
    assert (result['changed'], result['stopped']) == (True, [])
    assert not (tmp_path / 'missing').exists()


def test_check_mode_reports_and_changes_nothing(tmp_path):
    args = drain_args(tmp_path, _ansible_check_mode=True)
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']))
    assert kind is ExitJson, result
    assert (result['changed'], result['stopped']) == (True, ['systemd:gpu-embed.service'])
    assert [c for c in commands if c[1] == 'stop'] == []
    assert not (tmp_path / 'drain-state.json').exists()


def test_memory_that_does_not_fall_fails_and_keeps_the_state(tmp_path):
    args = drain_args(tmp_path)
    answers = drain_answers(args['state_file'])
    answers[GPU_QUERY] = (0, gpu_csv(24096, 7168), '')
    kind, result, unused_commands, unused_warnings = run(args, answers)
    assert kind is FailJson
    assert result['msg'].startswith('GPU memory did not fall within 0 s: GPU 0 uses 24096 MiB, expected at most 20512.')
    assert json.loads((tmp_path / 'drain-state.json').read_text())['phase'] == 'stopping'


def test_every_nvidia_smi_call_is_bounded(tmp_path):
    args = drain_args(tmp_path, nvidia_smi_timeout_s=12)
    bounded = []
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']), bounded=bounded)
    assert kind is ExitJson, result
    smi_calls = [c for c in commands if c[0] == SMI]
    assert len(smi_calls) >= 3
    assert set(prefix for prefix, command in bounded if command[0] == SMI) == {(TIMEOUT, '--kill-after=5s', '12s')}


def test_every_command_is_bounded_and_a_stop_gets_the_longer_limit(tmp_path):
    args = drain_args(tmp_path)
    bounded = []
    kind, result, commands, unused_warnings = run(args, drain_answers(args['state_file']), bounded=bounded)
    assert kind is ExitJson, result
    assert [command for unused, command in bounded] == commands
    limits = dict((command, prefix[2]) for prefix, command in bounded if command[0] == SYSTEMCTL)
    assert limits[(SYSTEMCTL, 'stop', '--', 'gpu-embed.service')] == '300s'
    assert limits[show('gpu-embed.service')] == '30s'


def test_a_stop_that_hangs_fails_by_name_with_what_was_stopped_before(tmp_path):
    args = drain_args(tmp_path)
    answers = drain_answers(args['state_file'])
    answers[(SYSTEMCTL, 'stop', '--', 'gpu-embed.service')] = (124, '', '')
    kind, result, unused_commands, unused_warnings = run(args, answers)
    assert kind is FailJson, result
    assert result['msg'].startswith('`%s stop -- gpu-embed.service` did not finish within 300 s and was stopped: '
                                    'systemd:gpu-embed.service did not stop: check its stop/start timeout' % SYSTEMCTL)
    assert str(tmp_path / 'drain-state.json') in result['msg']
    assert 'Traceback' not in result['msg']


def test_a_gpu_that_hangs_after_the_stop_fails_the_drain_with_what_was_stopped(tmp_path):
    args = drain_args(tmp_path)
    answers = drain_answers(args['state_file'])
    answers[GPU_QUERY] = [(0, gpu_csv(24096, 7168), ''), (124, '', '')]
    kind, result, unused_commands, unused_warnings = run(args, answers)
    assert kind is FailJson
    assert 'did not answer within 30 s (nvidia_smi_timeout_s)' in result['msg'], result['msg']
    assert result['stopped'] == ['systemd:gpu-embed.service']
    assert json.loads((tmp_path / 'drain-state.json').read_text())['entries'][0]['name'] == 'gpu-embed.service'


def test_hidden_consumer_and_podman_container(tmp_path):
    cgroups = {
        600: '0::/machine.slice/libpod-%s.scope/container\n' % PODMAN_ID,
        700: '0::/system.slice/gpu-batch.service\n',
        800: '0::/system.slice/nvidia-persistenced.service\n',
    }
    fds = {700: ('python3', ['/dev/nvidiactl', '/dev/nvidia1', '/dev/null']),
           800: ('nvidia-persistenced', ['/dev/nvidia0', '/dev/nvidia1'])}
    args = drain_args(tmp_path, proc_root=fake_proc(tmp_path, cgroups, fds), keep=[])
    answers = Answers({
        GPU_QUERY: [(0, gpu_csv(8192, 0), ''), (0, gpu_csv(0, 0), '')],
        APPS_QUERY: (0, '600, /usr/bin/python3, %s, 8192\n' % UUID_0, ''),
        (PODMAN, 'ps', '--no-trunc', '--format', '{{.ID}} {{.Names}}'): (0, PODMAN_ID + ' vllm-embed\n', ''),
        show('gpu-batch.service'): unit(),
        (PODMAN, 'stop', PODMAN_ID): OK,
        (SYSTEMCTL, 'stop', '--', 'gpu-batch.service'): OK,
    })
    tools = {'nvidia-smi': SMI, 'systemctl': SYSTEMCTL, 'podman': PODMAN}
    kind, result, commands, unused_warnings = run(args, answers, tools)
    assert kind is ExitJson, result
    consumers = dict((c['key'], c) for c in result['consumers'])
    assert sorted(consumers) == ['container:podman:' + PODMAN_ID, 'systemd:gpu-batch.service']
    assert consumers['container:podman:' + PODMAN_ID]['name'] == 'vllm-embed'
    assert consumers['systemd:gpu-batch.service']['devices'] == ['/dev/nvidia1']
    assert [c for c in commands if c[1] == 'stop'] == [(PODMAN, 'stop', PODMAN_ID),
                                                       (SYSTEMCTL, 'stop', '--', 'gpu-batch.service')]
    state = json.loads((tmp_path / 'drain-state.json').read_text())
    assert state['entries'][0] == {'key': 'container:podman:' + PODMAN_ID, 'kind': 'container', 'name': 'vllm-embed',
                                   'runtime': 'podman', 'id': PODMAN_ID, 'was_active': True, 'was_enabled': None,
                                   'gpus_mib': {UUID_0: 8192}}


def test_kill_unmanaged(tmp_path):
    args = drain_args(tmp_path, kill_unmanaged=True)
    answers = drain_answers(args['state_file'])
    answers[GPU_QUERY] = [(0, gpu_csv(24096, 7168), ''), (0, gpu_csv(20000, 6144), '')]
    with mock.patch.object(gpu_drain.os, 'kill') as kill:
        kind, result, unused_commands, unused_warnings = run(args, answers)
    assert kind is ExitJson, result
    assert kill.call_args_list == [mock.call(400, gpu_drain.signal.SIGTERM)]
    assert result['killed'] == [400]
    assert [k['pid'] for k in json.loads((tmp_path / 'drain-state.json').read_text())['killed']] == [400]


# --- restore -------------------------------------------------------------------------------------

def restore_args(tmp_path, **extra):
    args = {'state': 'restored', 'state_file': str(tmp_path / 'drain-state.json'), 'wait_timeout_s': 0}
    args.update(extra)
    return args


def test_restore_starts_in_reverse_order_and_puts_back_enablement(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service'), entry('gpu-notebook.service', 'disabled'),
                             entry('gpu-idle.service', active=False)])
    answers = Answers({
        LIST_UNITS: (0, 'gpulab-rpc-server@0.service loaded active running x\n'
                        'gpulab-llama-server.service loaded active running x\nwhisper-asr.service loaded active running x\n', ''),
        (SYSTEMCTL, 'stop', '--', 'gpulab-llama-server.service'): OK,
        (SYSTEMCTL, 'stop', '--', 'gpulab-rpc-server@0.service'): OK,
        show('gpu-notebook.service'): [unit('inactive', 'enabled'), unit('active', 'enabled')],
        show('gpu-embed.service'): [unit('inactive'), unit('active')],
        (SYSTEMCTL, 'start', '--', 'gpu-notebook.service'): OK,
        (SYSTEMCTL, 'start', '--', 'gpu-embed.service'): OK,
        (SYSTEMCTL, 'disable', '--', 'gpu-notebook.service'): OK,
    })
    kind, result, commands, unused_warnings = run(
        restore_args(tmp_path, stop_units=['gpulab-llama-server.service', 'gpulab-rpc-server@*.service']), answers)
    assert kind is ExitJson, result
    changes = [c[1:] for c in commands if c[1] in ('stop', 'start', 'enable', 'disable')]
    assert changes == [('stop', '--', 'gpulab-llama-server.service'), ('stop', '--', 'gpulab-rpc-server@0.service'),
                       ('start', '--', 'gpu-notebook.service'), ('disable', '--', 'gpu-notebook.service'),
                       ('start', '--', 'gpu-embed.service')]
    assert result['restored'] == ['systemd:gpu-notebook.service', 'systemd:gpu-embed.service']
    assert result['units_stopped'] == ['gpulab-llama-server.service', 'gpulab-rpc-server@0.service']
    assert (result['changed'], result['drain_state']) == (True, None)
    assert not state_file.exists()


def test_restore_without_state_file_is_a_no_op(tmp_path):
    kind, result, commands, unused_warnings = run(restore_args(tmp_path), Answers())
    assert kind is ExitJson
    assert (result['changed'], result['restored'], commands) == (False, [], [])


def test_restore_of_a_service_that_does_not_come_back_keeps_the_state(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service')])
    answers = Answers({show('gpu-embed.service'): unit('failed'),
                       (SYSTEMCTL, 'start', '--', 'gpu-embed.service'): OK})
    kind, result, unused_commands, unused_warnings = run(restore_args(tmp_path), answers)
    assert kind is FailJson
    assert result['msg'] == ('started but not running after 0 s: systemd:gpu-embed.service; %s is kept, so a '
                             'later restore tries again' % state_file)
    assert state_file.exists()


def test_restore_check_mode(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service')])
    answers = Answers({show('gpu-embed.service'): unit('inactive')})
    kind, result, commands, unused_warnings = run(restore_args(tmp_path, _ansible_check_mode=True), answers)
    assert kind is ExitJson
    assert (result['changed'], result['restored']) == (True, ['systemd:gpu-embed.service'])
    assert [c for c in commands if c[1] == 'start'] == []
    assert state_file.exists()


def test_restore_with_corrupt_state_fails(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [dict(entry('x.service'), kind='process')])
    kind, result, commands, unused_warnings = run(restore_args(tmp_path), Answers())
    assert kind is FailJson
    assert "entries[0] kind is 'process'" in result['msg'] and str(state_file) in result['msg']
    assert commands == []


@pytest.mark.parametrize('content', [b'{"schema": "gpulab.inference.gpu_drain/1\xe9"}', b'\xff\xfe'])
@pytest.mark.parametrize('mode', ['drain', 'restore'])
def test_state_file_that_is_not_utf8_fails_with_its_path_and_is_left_alone(tmp_path, content, mode):
    state_file = tmp_path / 'drain-state.json'
    state_file.write_bytes(content)
    if mode == 'drain':
        args = drain_args(tmp_path)
        answers = drain_answers(args['state_file'])
    else:
        args, answers = restore_args(tmp_path), Answers()
    kind, result, commands, unused_warnings = run(args, answers)
    assert kind is FailJson, result
    assert result['msg'].startswith('drain state file %s is corrupt: byte ' % state_file)
    assert 'is not UTF-8' in result['msg']
    assert [c for c in commands if c[1] in ('stop', 'start')] == []
    assert state_file.read_bytes() == content


def test_negative_timeout_is_refused(tmp_path):
    kind, result, commands, unused_warnings = run(restore_args(tmp_path, wait_timeout_s=-1), Answers())
    assert (kind, result['msg'], commands) == (FailJson, 'wait_timeout_s is -1; give 0 or more', [])


def test_hidden_consumer_from_the_h200_capture_is_reported(tmp_path):
    # nvidia-smi inside a container often lists no process; the captured CUDA process still
    # holds /dev/nvidia0 (and nvidiactl, nvidia-uvm) open, so the drain finds and reports it.
    captured = FIXTURES / 'h200-cuda-fds'
    targets = [line.split(' -> ')[1] for line in (captured / 'fd-links-cuda-process.txt').read_text().splitlines()]
    pid = int((captured / 'query-compute-apps-ctypes.csv').read_text().split(',')[0])
    proc_root = fake_proc(tmp_path, {pid: (captured / 'cgroup-cuda-process.txt').read_text()},
                          {pid: ('python3', targets)})
    answers = Answers({GPU_QUERY: (0, (FIXTURES / 'h200-loaded' / 'query-gpu-busy.csv').read_text(), ''),
                       APPS_QUERY: (0, '', '')})
    kind, result, commands, warnings = run(drain_args(tmp_path, proc_root=proc_root, keep=[]), answers)
    assert kind is ExitJson, result
    assert result['consumers'] == [{
        'key': 'process:%d' % pid, 'kind': 'process', 'cgroup': '/process_api/d3f3785375623cba2a77677cb5aab8e3',
        'pids': [pid], 'process_names': ['python3'], 'gpus': {}, 'devices': ['/dev/nvidia0'],
        'memory_unknown': False, 'action': 'report',
        'reason': 'no systemd unit, container or supervisord program manages it; left running (kill_unmanaged is false)'}]
    assert (result['changed'], [c for c in commands if c[1] == 'stop']) == (False, [])
    assert len(warnings) == 1 and warnings[0].startswith('GPU process(es) %d (process:%d)' % (pid, pid))
    assert not (tmp_path / 'drain-state.json').exists()


# --- restore under supervisord (supervisorctl answers captured from supervisor 4.3.0) -------------

SUPERVISORCTL = '/opt/gpulab/supervisor/bin/supervisorctl'
SUPERVISOR_CONFIG = '/etc/gpulab/supervisord.conf'
CTL = (SUPERVISORCTL, '-c', SUPERVISOR_CONFIG)
CAPTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'supervisorctl'
OWN_PATTERNS = ['gpulab-llama-server.service', 'gpulab-rpc-server@[0-9]*.service', 'gpulab-vllm.service']


def captured(name, rc):
    return (rc, (CAPTURES / name).read_text(), '')


def program_entry(name):
    return {'key': 'supervisor:' + name, 'kind': 'supervisor', 'name': name, 'was_active': True,
            'was_enabled': None, 'gpus_mib': {}}


def container_entry():
    return {'key': 'container:podman:' + PODMAN_ID, 'kind': 'container', 'name': 'comfyui', 'runtime': 'podman',
            'id': PODMAN_ID, 'was_active': True, 'was_enabled': None, 'gpus_mib': {}}


def supervisor_restore_args(tmp_path, **extra):
    args = dict({'stop_units': OWN_PATTERNS, 'service_manager': 'supervisor', 'supervisorctl_path': SUPERVISORCTL,
                 'supervisor_config': SUPERVISOR_CONFIG}, **extra)
    return restore_args(tmp_path, **args)


def test_restore_without_systemd_stops_the_programs_then_starts_programs_and_containers(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [program_entry('asr:whisper'), container_entry(), program_entry('gpu-notebook')])
    answers = Answers({
        # the own programs run, gpu-notebook is stopped; after its start it runs, asr:whisper is
        # stopped; after its start it runs (status-mixed again)
        CTL + ('status',): [captured('status-mixed.txt', 3), captured('status-mixed.txt', 3),
                            captured('status-own-stopped.txt', 3), captured('status-own-stopped.txt', 3),
                            captured('status-mixed.txt', 3)],
        CTL + ('stop', 'gpulab-llama-server'): (0, 'gpulab-llama-server: stopped\n', ''),
        CTL + ('stop', 'gpulab-rpc-server-0'): (0, 'gpulab-rpc-server-0: stopped\n', ''),
        CTL + ('start', 'gpu-notebook'): (0, 'gpu-notebook: started\n', ''),
        CTL + ('start', 'asr:whisper'): (0, 'asr:whisper: started\n', ''),
        (PODMAN, 'inspect', '--format', '{{.State.Running}}', PODMAN_ID): [(0, 'false\n', ''), (0, 'true\n', '')],
        (PODMAN, 'start', PODMAN_ID): (0, PODMAN_ID + '\n', ''),
    })
    kind, result, commands, unused_warnings = run(
        supervisor_restore_args(tmp_path), answers,
        tools={'nvidia-smi': SMI, SUPERVISORCTL: SUPERVISORCTL, 'podman': PODMAN})
    assert kind is ExitJson, result
    changes = [c for c in commands if 'stop' in c or 'start' in c]
    assert changes == [CTL + ('stop', 'gpulab-llama-server'), CTL + ('stop', 'gpulab-rpc-server-0'),
                       CTL + ('start', 'gpu-notebook'), (PODMAN, 'start', PODMAN_ID), CTL + ('start', 'asr:whisper')]
    assert result['units_stopped'] == ['gpulab-llama-server', 'gpulab-rpc-server-0']
    assert result['restored'] == ['supervisor:gpu-notebook', 'container:podman:' + PODMAN_ID, 'supervisor:asr:whisper']
    assert (result['changed'], result['drain_state']) == (True, None)
    assert not state_file.exists()
    assert not any(c[0] == SYSTEMCTL for c in commands)


def test_restore_under_supervisord_on_a_systemd_host_stops_programs_and_starts_units(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [entry('gpu-embed.service')])
    answers = Answers({
        CTL + ('status',): captured('status-mixed.txt', 3),
        CTL + ('stop', 'gpulab-llama-server'): (0, 'gpulab-llama-server: stopped\n', ''),
        CTL + ('stop', 'gpulab-rpc-server-0'): (0, 'gpulab-rpc-server-0: stopped\n', ''),
        show('gpu-embed.service'): [unit('inactive'), unit('active')],
        (SYSTEMCTL, 'start', '--', 'gpu-embed.service'): OK,
    })
    kind, result, commands, unused_warnings = run(
        supervisor_restore_args(tmp_path), answers,
        tools={'nvidia-smi': SMI, 'systemctl': SYSTEMCTL, SUPERVISORCTL: SUPERVISORCTL})
    assert kind is ExitJson, result
    assert LIST_UNITS not in commands
    assert result['units_stopped'] == ['gpulab-llama-server', 'gpulab-rpc-server-0']
    assert result['restored'] == ['systemd:gpu-embed.service']
    assert not state_file.exists()


def test_restore_with_supervisord_down_stops_nothing(tmp_path):
    kind, result, commands, unused_warnings = run(
        supervisor_restore_args(tmp_path), Answers({CTL + ('status',): captured('status-down.txt', 4)}),
        tools={'nvidia-smi': SMI, SUPERVISORCTL: SUPERVISORCTL})
    assert kind is ExitJson, result
    assert (result['changed'], result['units_stopped'], commands) == (False, [], [CTL + ('status',)])


def test_restore_whose_manager_is_missing_still_starts_the_drained_programs_then_fails(tmp_path):
    # service_manager systemd (gpulab_service_manager auto without facts) on a host without systemd
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [program_entry('gpu-notebook')])
    answers = Answers({
        CTL + ('status',): [captured('status-mixed.txt', 3), captured('status-own-stopped.txt', 3)],
        CTL + ('start', 'gpu-notebook'): (0, 'gpu-notebook: started\n', ''),
    })
    kind, result, commands, unused_warnings = run(
        supervisor_restore_args(tmp_path, service_manager='systemd'), answers,
        tools={'nvidia-smi': SMI, SUPERVISORCTL: SUPERVISORCTL})
    assert kind is FailJson, result
    assert result['msg'] == (
        "systemctl not found, so the collection's services (gpulab-llama-server.service, "
        "gpulab-rpc-server@[0-9]*.service, gpulab-vllm.service) were not stopped: service_manager is systemd; "
        "set gpulab_service_manager to the manager that runs them on this host; the drained services were started again")
    assert result['restored'] == ['supervisor:gpu-notebook']
    assert CTL + ('start', 'gpu-notebook') in commands
    assert not state_file.exists()


def test_restore_of_a_program_supervisord_does_not_know_fails_by_name_and_keeps_the_state(tmp_path):
    state_file = tmp_path / 'drain-state.json'
    write_state(state_file, [program_entry('nosuch')])
    answers = Answers({
        CTL + ('status',): captured('status-own-stopped.txt', 3),
        CTL + ('start', 'nosuch'): captured('start-no-such.txt', 1),
    })
    kind, result, unused_commands, unused_warnings = run(
        restore_args(tmp_path, supervisorctl_path=SUPERVISORCTL, supervisor_config=SUPERVISOR_CONFIG), answers,
        tools={'nvidia-smi': SMI, SUPERVISORCTL: SUPERVISORCTL})
    assert kind is FailJson, result
    assert result['msg'].startswith('%s -c %s start nosuch failed (rc=1): nosuch: ERROR (no such process)'
                                    % (SUPERVISORCTL, SUPERVISOR_CONFIG))
    assert state_file.exists()
