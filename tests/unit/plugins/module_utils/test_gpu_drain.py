"""Drain decisions: owners from captured and hand-written /proc/PID/cgroup files, keep patterns,
the decision table, the state file, resume, restore order and the memory arithmetic."""

import json
from pathlib import Path

import pytest
from common_defaults import OWN_UNITS

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import programs_matching, units_matching
from ansible_collections.gpulab.inference.plugins.module_utils.gpu_drain import (
    PHASE_DRAINED,
    CHANGE_LIMIT_S,
    PHASE_STOPPING,
    STATE_SCHEMA,
    Backends,
    ContainerBackend,
    DrainStateError,
    SupervisorBackend,
    SystemdBackend,
    cgroup_path,
    consumer_names,
    container_name,
    container_root,
    decide,
    drain_summary,
    dump_state,
    enablement_change,
    group_consumers,
    hidden_processes,
    memory_targets,
    merge_state,
    nvidia_device_minor,
    owner_from_cgroup,
    owner_of,
    parse_active_units,
    parse_container_ps,
    parse_stat_ppid,
    parse_state,
    parse_supervisorctl_status,
    parse_systemctl_show,
    program_units,
    restore_order,
    state_entry,
    unmatched_patterns,
    unsettled_gpus,
    vram_freed,
)

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'nvidia-smi'
PODMAN_ID = '3f9c2a1e7b5d48c0a6e2f1d9b8c7a6e5d4c3b2a19f8e7d6c5b4a39281706f5e4'
DOCKER_ID = '9b1d4e7a2c5f8036b9e2d5a8c1f4073a6d9c2b5e8f1a4d7c0b3e6a9d2c5f8b1e'
K8S_ID = '5e8b2d4f6a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b'
UUID_A = 'GPU-5b0e6f3a-91c2-4e8d-a7f4-0c3d2b1e9a60'
UUID_B = 'GPU-c84d1a97-2f6b-4b35-8e0a-7d91f5c2e3b4'
NOW = '2026-11-30T12:00:00Z'
LATER = '2026-11-30T13:00:00Z'


def fixture(relative):
    return (FIXTURES / relative).read_text()


# --- owners from /proc/PID/cgroup --------------------------------------------------------------

@pytest.mark.parametrize('name, owner', [
    ('synthetic/cgroup-v2-system-service.txt', {'kind': 'systemd', 'name': 'gpulab-rpc-server@0.service'}),
    ('synthetic/cgroup-v1-hybrid-service.txt', {'kind': 'systemd', 'name': 'gpulab-llama-server.service'}),
    ('synthetic/cgroup-v2-user-service.txt', {'kind': 'user_unit', 'name': 'llama-server.service', 'uid': 1000}),
    ('synthetic/cgroup-v2-session-scope.txt',
     {'kind': 'process', 'cgroup': '/user.slice/user-1000.slice/session-3.scope'}),
    ('synthetic/cgroup-v2-transient-run.txt', {'kind': 'systemd', 'name': 'run-u42.service'}),
    # podman, systemd cgroup manager: the container's payload under libpod-<id>.scope
    ('synthetic/cgroup-v2-podman-libpod-scope.txt',
     {'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': False}),
    ('synthetic/cgroup-v2-podman-rootless.txt',
     {'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': True}),
    # a quadlet / `podman generate systemd --new` container belongs to its service
    ('synthetic/cgroup-v2-podman-quadlet-service.txt', {'kind': 'systemd', 'name': 'whisper-asr.service'}),
    # conmon watches a container and holds no GPU; it is not the container
    ('synthetic/cgroup-v2-podman-conmon.txt',
     {'kind': 'process', 'cgroup': '/machine.slice/libpod-conmon-%s.scope' % PODMAN_ID}),
    ('synthetic/cgroup-v2-docker-scope.txt',
     {'kind': 'container', 'runtime': 'docker', 'id': DOCKER_ID, 'rootless': False}),
    # docker's cgroupfs driver on a hybrid host: the unified line still names containerd
    ('synthetic/cgroup-v1-docker-cgroupfs.txt',
     {'kind': 'container', 'runtime': 'docker', 'id': DOCKER_ID, 'rootless': False}),
    ('synthetic/cgroup-v2-kubernetes-containerd.txt',
     {'kind': 'container', 'runtime': 'kubernetes', 'id': K8S_ID, 'rootless': False}),
    # the capture from a sandboxed H200 host: an unknown runtime is a bare process
    ('h200-loaded/cgroup-container.txt',
     {'kind': 'process', 'cgroup': '/process_api/8177b0c243a368dc014c15431db2b997'}),
])
def test_owner_from_cgroup(name, owner):
    assert owner_from_cgroup(fixture(name)) == owner


def test_owner_from_cgroup_podman_cgroupfs_manager():
    # podman with cgroup_manager = "cgroupfs" (as the container lab runs it) on a v1 host
    text = '4:memory:/libpod_parent/libpod-%s\n1:name=systemd:/libpod_parent/libpod-%s\n0::/\n' % (
        PODMAN_ID, PODMAN_ID)
    assert owner_from_cgroup(text) == {'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID,
                                       'rootless': False}


@pytest.mark.parametrize('text', ['', '0::/\n', 'garbage\n', '1:name=systemd:/\n0::/\n'])
def test_owner_from_cgroup_root_or_unreadable_is_a_process(text):
    assert owner_from_cgroup(text) == {'kind': 'process', 'cgroup': '/'}


def test_cgroup_path_prefers_name_systemd_then_unified_then_any():
    assert cgroup_path('4:memory:/a\n1:name=systemd:/b\n0::/c\n') == '/b'
    assert cgroup_path('4:memory:/a\n0::/c\n') == '/c'
    assert cgroup_path('4:memory:/a\n0::/\n') == '/a'
    assert cgroup_path('0::/\n') is None


def test_user_manager_itself_is_a_process():
    text = '0::/user.slice/user-1000.slice/user@1000.service/init.scope\n'
    assert owner_from_cgroup(text)['kind'] == 'process'


def test_parse_stat_ppid_with_spaces_and_parens_in_the_name():
    assert parse_stat_ppid('4242 (python3) S 17 4242 4242 0 -1') == 17
    assert parse_stat_ppid('4242 (my (odd) name) S 99 4242') == 99
    with pytest.raises(ValueError, match='parent pid'):
        parse_stat_ppid('4242 nothing')


def test_supervisor_program_wins_over_supervisord_unit():
    status = ('asr:whisper                      RUNNING   pid 4100, uptime 2 days, 1:02:03\n'
              'embedder                         STOPPED   Nov 30 11:00 AM\n'
              'notebook                         RUNNING   pid 4200, uptime 0:00:05\n')
    programs = parse_supervisorctl_status(status)
    assert programs == {4100: 'asr:whisper', 4200: 'notebook'}
    cgroup = '0::/system.slice/supervisor.service\n'
    # the CUDA process is a child of the program's pid
    assert owner_of(cgroup, [4201, 4200, 900], programs) == {'kind': 'supervisor', 'name': 'notebook'}
    assert owner_of(cgroup, [4300, 900], programs) == {'kind': 'systemd', 'name': 'supervisor.service'}


def test_container_names_by_id_prefix():
    names = parse_container_ps('%s whisper-asr\n%s embedder,alias\nnot-an-id x\n' % (PODMAN_ID, DOCKER_ID[:12]))
    assert names == {PODMAN_ID: 'whisper-asr', DOCKER_ID[:12]: 'embedder'}
    assert container_name(PODMAN_ID, names) == 'whisper-asr'
    assert container_name(DOCKER_ID, names) == 'embedder'
    assert container_name(K8S_ID, names) is None


# --- processes nvidia-smi does not list ----------------------------------------------------------

@pytest.mark.parametrize('target, minor', [
    ('/dev/nvidia0', 0), ('/dev/nvidia7', 7), ('/dev/nvidiactl', None), ('/dev/nvidia-uvm', None),
    ('/dev/nvidia-caps/nvidia-cap1', None), ('socket:[123]', None), ('', None), (None, None),
])
def test_nvidia_device_minor(target, minor):
    assert nvidia_device_minor(target) == minor


def test_hidden_processes_leave_out_listed_daemons_and_self():
    holders = {
        10: {'name': 'nvidia-persistenced', 'devices': ['/dev/nvidia0']},
        20: {'name': 'python3', 'devices': ['/dev/nvidia1', '/dev/nvidia0']},
        30: {'name': 'llama-server', 'devices': ['/dev/nvidia0']},
        40: {'name': 'python3', 'devices': ['/dev/nvidia0']},
    }
    hidden = hidden_processes(holders, listed_pids={30}, ignored_names=['nvidia-persistenced'], excluded_pids={40})
    assert hidden == [{'pid': 20, 'process_name': 'python3', 'gpu_uuid': None, 'used_memory_mib': None,
                       'devices': ['/dev/nvidia0', '/dev/nvidia1']}]


# --- consumers and the decision table ---------------------------------------------------------------

def process(pid, owner, uuid=UUID_A, mib=1024, name='/usr/bin/python3', devices=None):
    return {'pid': pid, 'process_name': name, 'gpu_uuid': uuid, 'used_memory_mib': mib,
            'owner': owner, 'devices': devices}


def test_group_consumers_one_per_owner_with_memory_per_gpu():
    embed = {'kind': 'systemd', 'name': 'gpu-embed.service'}
    consumers = group_consumers([
        process(12, embed, UUID_A, 1000),
        process(11, embed, UUID_B, 500),
        process(11, embed, UUID_A, 24),
        process(50, {'kind': 'process', 'cgroup': '/'}, None, None, 'python3', ['/dev/nvidia0']),
        process(60, {'kind': 'systemd', 'name': 'mig.service'}, UUID_B, None),
    ])
    assert [c['key'] for c in consumers] == ['process:50', 'systemd:gpu-embed.service', 'systemd:mig.service']
    assert consumers[1]['pids'] == [11, 12]
    assert consumers[1]['gpus'] == {UUID_A: 1024, UUID_B: 500}
    assert consumers[1]['memory_unknown'] is False
    assert consumers[0]['gpus'] == {} and consumers[0]['devices'] == ['/dev/nvidia0']
    assert consumers[2]['memory_unknown'] is True


def consumer(owner, pid=1):
    return group_consumers([process(pid, owner)])[0]


LOADED = {'LoadState': 'loaded', 'Transient': 'no', 'ActiveState': 'active', 'UnitFileState': 'enabled'}


@pytest.mark.parametrize('owner, unit, kill, action', [
    ({'kind': 'systemd', 'name': 'gpulab-llama-server.service'}, LOADED, False, 'own'),
    ({'kind': 'systemd', 'name': 'gpulab-rpc-server@1.service'}, LOADED, False, 'own'),
    ({'kind': 'systemd', 'name': 'whisper-asr.service'}, LOADED, False, 'keep'),
    ({'kind': 'systemd', 'name': 'gpu-embed.service'}, LOADED, False, 'stop'),
    ({'kind': 'systemd', 'name': 'run-u42.service'}, dict(LOADED, Transient='yes'), False, 'report'),
    ({'kind': 'systemd', 'name': 'run-u42.service'}, dict(LOADED, Transient='yes'), True, 'kill'),
    ({'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': False}, None, False, 'stop'),
    ({'kind': 'container', 'runtime': 'docker', 'id': DOCKER_ID, 'rootless': False}, None, False, 'stop'),
    ({'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': True}, None, False, 'report'),
    ({'kind': 'container', 'runtime': 'kubernetes', 'id': K8S_ID, 'rootless': False}, None, True, 'kill'),
    ({'kind': 'supervisor', 'name': 'notebook'}, None, False, 'stop'),
    ({'kind': 'supervisor', 'name': 'asr:whisper'}, None, False, 'keep'),
    ({'kind': 'user_unit', 'name': 'llama.service', 'uid': 1000}, None, False, 'report'),
    ({'kind': 'process', 'cgroup': '/'}, None, False, 'report'),
    ({'kind': 'process', 'cgroup': '/'}, None, True, 'kill'),
])
def test_decision_table(owner, unit, kill, action):
    assert decide(consumer(owner), ['whisper*'], OWN_UNITS, kill, unit)[0] == action


def test_container_without_its_runtime_is_reported():
    found = dict(consumer({'kind': 'container', 'runtime': 'docker', 'id': DOCKER_ID, 'rootless': False}),
                 runtime_present=False)
    assert decide(found, [], [], False) == (
        'report', 'docker is not installed on this host; left running (kill_unmanaged is false)')


def test_own_units_win_over_keep_and_are_never_stopped():
    llama = consumer({'kind': 'systemd', 'name': 'gpulab-llama-server.service'})
    assert decide(llama, ['*'], OWN_UNITS, False)[0] == 'own'


def test_keep_names_and_unmatched_patterns():
    unit = consumer({'kind': 'systemd', 'name': 'whisper-asr.service'})
    container = dict(consumer({'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': False}),
                     name='asr')
    assert consumer_names(unit) == ['whisper-asr.service', 'whisper-asr']
    assert consumer_names(container) == ['asr', PODMAN_ID]
    assert decide(unit, ['whisper-asr'], [], False) == ('keep', "matches keep pattern 'whisper-asr'")
    assert decide(container, [PODMAN_ID[:12] + '*'], [], False)[0] == 'keep'
    # fnmatch is case-sensitive: a pattern in capitals is a typo here
    assert unmatched_patterns(['Whisper*', 'asr', 'tts-*'], [unit, container]) == ['Whisper*', 'tts-*']


# --- systemd ---------------------------------------------------------------------------------------

def test_parse_systemctl_show_and_active_units():
    show = 'ActiveState=active\nUnitFileState=disabled\nLoadState=loaded\nTransient=no\n'
    assert parse_systemctl_show(show) == {'ActiveState': 'active', 'UnitFileState': 'disabled',
                                          'LoadState': 'loaded', 'Transient': 'no'}
    listing = ('gpulab-rpc-server@0.service loaded active running gpulab RPC server 0\n'
               'gpulab-llama-server.service loaded active running gpulab llama-server\n'
               'whisper-asr.service loaded active running Speech recognition\n'
               'dbus.socket loaded active running D-Bus\n')
    units = parse_active_units(listing)
    assert units == ['gpulab-rpc-server@0.service', 'gpulab-llama-server.service', 'whisper-asr.service']
    # the head first, in the order of the patterns
    assert units_matching(units, OWN_UNITS) == [
        'gpulab-llama-server.service', 'gpulab-rpc-server@0.service']


@pytest.mark.parametrize('recorded, current, change', [
    ('enabled', 'enabled', None), ('disabled', 'disabled', None),
    ('enabled', 'disabled', 'enable'), ('disabled', 'enabled', 'disable'),
    ('static', 'enabled', None), ('enabled', 'masked', None), (None, 'enabled', None),
])
def test_enablement_change(recorded, current, change):
    assert enablement_change({'was_enabled': recorded}, current) == change


# --- the state file ------------------------------------------------------------------------------

def embed_entry():
    found = consumer({'kind': 'systemd', 'name': 'gpu-embed.service'})
    return state_entry(found, was_active=True, was_enabled='enabled')


def notebook_entry():
    found = consumer({'kind': 'systemd', 'name': 'gpu-notebook.service'})
    return state_entry(found, was_active=True, was_enabled='disabled')


def test_state_entry_and_round_trip():
    container = consumer({'kind': 'container', 'runtime': 'podman', 'id': PODMAN_ID, 'rootless': False})
    state, added = merge_state(None, [embed_entry(), state_entry(dict(container, name='asr'), True)], NOW)
    assert added == state['entries']
    assert state['entries'][0] == {'key': 'systemd:gpu-embed.service', 'kind': 'systemd',
                                   'name': 'gpu-embed.service', 'was_active': True, 'was_enabled': 'enabled',
                                   'gpus_mib': {UUID_A: 1024}}
    assert state['entries'][1]['runtime'] == 'podman' and state['entries'][1]['id'] == PODMAN_ID
    assert (state['schema'], state['phase'], state['created']) == (STATE_SCHEMA, PHASE_STOPPING, NOW)
    assert parse_state(dump_state(state), '/x') == state


def test_second_drain_keeps_the_recorded_prior_state_and_adds_new_consumers():
    first = merge_state(None, [embed_entry()], NOW)[0]
    first['phase'] = PHASE_DRAINED
    # gpu-embed is stopped now: a fresh look would record it as inactive; the state keeps "active"
    stale = dict(embed_entry(), was_active=False)
    state, added = merge_state(first, [stale, notebook_entry()], LATER)
    assert [e['key'] for e in state['entries']] == ['systemd:gpu-embed.service', 'systemd:gpu-notebook.service']
    assert state['entries'][0]['was_active'] is True
    assert added == [notebook_entry()]
    assert (state['created'], state['updated'], state['phase']) == (NOW, LATER, PHASE_STOPPING)
    # the first state is not changed in place
    assert len(first['entries']) == 1


def test_resume_of_an_interrupted_drain_adds_nothing_twice():
    interrupted = merge_state(None, [embed_entry(), notebook_entry()], NOW)[0]
    state, added = merge_state(json.loads(dump_state(interrupted)), [notebook_entry()], LATER)
    assert added == []
    assert [e['key'] for e in state['entries']] == ['systemd:gpu-embed.service', 'systemd:gpu-notebook.service']


def test_restore_order_is_the_reverse_and_skips_the_inactive():
    idle = dict(embed_entry(), key='systemd:idle.service', name='idle.service', was_active=False)
    state = merge_state(None, [embed_entry(), notebook_entry(), idle], NOW)[0]
    assert [e['name'] for e in restore_order(state)] == ['gpu-notebook.service', 'gpu-embed.service']


def valid_state():
    state = merge_state(None, [embed_entry()], NOW)[0]
    return state


def mutated(change):
    state = valid_state()
    change(state)
    return json.dumps(state)


@pytest.mark.parametrize('text, message', [
    ('{"schema": ', 'not JSON'),
    ('[]', 'expected a JSON object, found list'),
    (mutated(lambda s: s.update(schema='other/2')), "schema is 'other/2'"),
    (mutated(lambda s: s.update(phase='done')), "phase is 'done'"),
    (mutated(lambda s: s.update(created=None)), 'created is None'),
    (mutated(lambda s: s.update(entries={})), 'entries is {}'),
    (mutated(lambda s: s.update(killed='x')), "killed is 'x'"),
    (mutated(lambda s: s['entries'].append('x')), "entries[1] is 'x'"),
    (mutated(lambda s: s['entries'][0].update(kind='process')), "entries[0] kind is 'process'"),
    (mutated(lambda s: s['entries'][0].update(name='--all')), "entries[0] name is '--all'"),
    (mutated(lambda s: s['entries'][0].update(was_active='yes')), "entries[0] was_active is 'yes'"),
    (mutated(lambda s: s['entries'][0].update(was_enabled=1)), 'entries[0] was_enabled is 1'),
    (mutated(lambda s: s['entries'].append(dict(s['entries'][0]))), "entries[1] key is 'systemd:gpu-embed.service'"),
    (mutated(lambda s: s['entries'].append({'key': 'c', 'kind': 'container', 'runtime': 'lxc', 'id': PODMAN_ID,
                                            'was_active': True})), "entries[1] runtime is 'lxc'"),
    (mutated(lambda s: s['entries'].append({'key': 'c', 'kind': 'container', 'runtime': 'podman', 'id': 'x;rm',
                                            'was_active': True})), "entries[1] id is 'x;rm'"),
    (mutated(lambda s: s['entries'].append({'key': 'c', 'kind': 'container', 'runtime': 'podman',
                                            'id': PODMAN_ID + '\n', 'was_active': True})), "entries[1] id is"),
    (mutated(lambda s: s['entries'][0].update(name='gpu-embed.service\n')), "entries[0] name is 'gpu-embed.service\\n'"),
    (mutated(lambda s: s['entries'][0].update(name='gpu embed.service')), "entries[0] name is 'gpu embed.service'"),
    (mutated(lambda s: s['entries'][0].update(name='')), "entries[0] name is ''"),
    (mutated(lambda s: s['entries'][0].update(name=7)), 'entries[0] name is 7'),
    (mutated(lambda s: s['entries'][0].update(gpus_mib={'GPU-x': -512})), "entries[0] gpus_mib is {'GPU-x': -512}"),
    (mutated(lambda s: s['entries'][0].update(gpus_mib={'GPU-x': '512'})), 'entries[0] gpus_mib is'),
    (mutated(lambda s: s['entries'][0].update(gpus_mib=[512])), 'entries[0] gpus_mib is [512]'),
    (b'{"schema": "\xff"}', 'byte 12 is not UTF-8'),
    (b'\xfe\xff{}', 'byte 0 is not UTF-8'),
])
def test_corrupt_state_names_the_file_and_the_field(text, message):
    with pytest.raises(DrainStateError) as raised:
        parse_state(text, '/var/lib/gpulab/drain-state.json')
    assert str(raised.value).startswith('drain state file /var/lib/gpulab/drain-state.json is corrupt: ')
    assert message in str(raised.value)
    assert 'never overwritten' in str(raised.value)


# --- memory --------------------------------------------------------------------------------------

def gpu(index, uuid, used):
    return {'index': index, 'uuid': uuid, 'memory_used_mib': used}


def test_memory_targets_and_unsettled():
    before = [gpu(0, UUID_A, 6000), gpu(1, UUID_B, None)]
    stopped = [{'gpus': {UUID_A: 4000}}, {'gpus': {UUID_A: 1000, UUID_B: 500}}]
    targets = memory_targets(before, stopped, 512)
    assert targets == {UUID_A: 1512}
    assert unsettled_gpus([gpu(0, UUID_A, 1600), gpu(1, UUID_B, None)], targets) == [
        {'index': 0, 'uuid': UUID_A, 'used_mib': 1600, 'target_mib': 1512}]
    assert unsettled_gpus([gpu(0, UUID_A, 1512)], targets) == []
    # never a negative target, whatever nvidia-smi reported
    assert memory_targets([gpu(0, UUID_A, 100)], [{'gpus': {UUID_A: 4000}}], 0) == {UUID_A: 0}


def test_vram_freed_per_gpu():
    before = [gpu(0, UUID_A, 6000), gpu(1, UUID_B, None)]
    after = [gpu(0, UUID_A, 1000), gpu(1, UUID_B, None)]
    assert vram_freed(before, after) == [
        {'index': 0, 'uuid': UUID_A, 'used_before_mib': 6000, 'used_after_mib': 1000, 'freed_mib': 5000},
        {'index': 1, 'uuid': UUID_B, 'used_before_mib': None, 'used_after_mib': None, 'freed_mib': None},
    ]
    assert vram_freed(before, [])[0]['freed_mib'] is None


def test_drain_summary():
    found = dict(consumer({'kind': 'systemd', 'name': 'gpu-embed.service'}), action='stop', reason='not kept')
    freed = vram_freed([gpu(0, UUID_A, 6000)], [gpu(0, UUID_A, 4976)])
    assert drain_summary([found], freed) == ['stop gpu-embed.service (1024 MiB): not kept',
                                             'GPU 0 freed 1024 MiB (6000 -> 4976 MiB used)']


# --- a module running inside a container without a cgroup namespace (the lab) --------------------

def test_unit_inside_the_lab_container_seen_from_inside_and_from_the_host():
    unit = fixture('lab-podman-v1/cgroup-unit-in-container.txt')
    own = fixture('lab-podman-v1/cgroup-self-in-container.txt')
    root = container_root(own)
    assert root.startswith('/libpod_parent/libpod-') and len(root) == len('/libpod_parent/libpod-') + 64
    # inside: the container's own systemd manages it
    assert owner_from_cgroup(unit, root) == {'kind': 'systemd', 'name': 'systemd-journald.service'}
    # on the host: the whole container is the consumer
    host_view = owner_from_cgroup(unit)
    assert (host_view['kind'], host_view['runtime'], '/libpod_parent/libpod-' + host_view['id']) == (
        'container', 'podman', root)
    assert owner_from_cgroup(fixture('lab-podman-v1/cgroup-container-init-from-host.txt')) == host_view
    # a process started by podman exec sits in the container's root: nothing manages it
    assert owner_from_cgroup(own, root) == {'kind': 'process', 'cgroup': '/'}


def test_container_root_on_the_host_is_none():
    assert container_root(fixture('synthetic/cgroup-v2-system-service.txt')) is None
    assert container_root('') is None


def test_the_collections_vllm_is_own_as_a_unit_and_as_a_supervisord_program():
    # A redeploy with gpulab_engine vllm must not drain the vLLM it serves.
    unit = consumer({'kind': 'systemd', 'name': 'gpulab-vllm.service'})
    program = consumer({'kind': 'supervisor', 'name': 'gpulab-vllm'})
    other = consumer({'kind': 'supervisor', 'name': 'whisper'})
    assert decide(unit, [], OWN_UNITS, False)[0] == 'own'
    assert decide(program, [], OWN_UNITS, False) == ('own', 'an inference program of gpulab.inference')
    assert decide(other, [], OWN_UNITS, False)[0] == 'stop'


def test_the_collections_rpc_programs_are_own_and_stop_in_the_patterns_order():
    # gpulab-rpc-server-<i> is the program of gpulab-rpc-server@<i>.service: never drained.
    assert program_units('gpulab-rpc-server-1') == ['gpulab-rpc-server-1.service', 'gpulab-rpc-server@1.service']
    assert program_units('gpulab-vllm') == ['gpulab-vllm.service']
    assert decide(consumer({'kind': 'supervisor', 'name': 'gpulab-rpc-server-0'}), [], OWN_UNITS, False)[0] == 'own'
    assert decide(consumer({'kind': 'supervisor', 'name': 'gpulab-rpc-server-x'}), [], OWN_UNITS, False)[0] == 'stop'
    programs = ['gpulab-rpc-server-1', 'notebook', 'gpulab-llama-server', 'gpulab-rpc-server-0', 'gpulab-vllm']
    assert programs_matching(programs, OWN_UNITS) == [
        'gpulab-llama-server', 'gpulab-rpc-server-1', 'gpulab-rpc-server-0', 'gpulab-vllm']
    assert programs_matching(programs, OWN_UNITS[2:]) == ['gpulab-vllm']


# ---------------------------------------------------------------- one backend per service manager

class Commands:
    """BoundedRunner's interface: answers by argv, records every call with its limits."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls = []

    def run(self, command, limit_s=None, check=None):
        self.calls.append((list(command), limit_s, check))
        return self.answers.get(tuple(command), (0, '', ''))


class Failed(Exception):
    pass


def fail(msg, **extra):
    raise Failed(msg, extra)


SYSTEMCTL = '/usr/bin/systemctl'
SHOW = (SYSTEMCTL, 'show', '--property=ActiveState,UnitFileState,LoadState,Transient', '--')
EMBED = {'key': 'systemd:gpu-embed.service', 'kind': 'systemd', 'name': 'gpu-embed.service', 'was_enabled': 'enabled'}


def test_systemd_backend_asks_systemctl_and_builds_its_command_lines():
    commands = Commands({SHOW + ('gpu-embed.service',): (0, 'ActiveState=inactive\nUnitFileState=disabled\n', ''),
                         (SYSTEMCTL, 'list-units', '--type=service', '--state=active', '--plain', '--no-legend'):
                         (0, 'gpulab-llama-server.service loaded active running x\nwhisper.service loaded active running y\n', '')})
    systemd = SystemdBackend(SYSTEMCTL, commands, fail)
    assert systemd.is_running(EMBED) is False
    assert systemd.change_command('stop', EMBED) == [SYSTEMCTL, 'stop', '--', 'gpu-embed.service']
    assert systemd.active_services() == ['gpulab-llama-server.service', 'whisper.service']
    # disabled meanwhile, recorded enabled: enable it again
    assert systemd.pending_enablement(EMBED) == 'enable'
    systemd.set_enablement('enable', EMBED)
    systemd.change('start', EMBED, '/var/lib/gpulab/drain-state.json')
    command, limit_s, check = commands.calls[-1]
    assert command == [SYSTEMCTL, 'start', '--', 'gpu-embed.service'] and limit_s == CHANGE_LIMIT_S
    assert check.startswith('systemd:gpu-embed.service did not start: check its stop/start timeout')
    assert commands.calls[-2][0] == [SYSTEMCTL, 'enable', '--', 'gpu-embed.service']
    systemd.stop_unit('gpulab-rpc-server@0.service', 'state')
    assert commands.calls[-1][0] == [SYSTEMCTL, 'stop', '--', 'gpulab-rpc-server@0.service']


def test_systemd_backend_failures_name_the_command_and_a_host_without_systemd():
    commands = Commands({(SYSTEMCTL, 'enable', '--', 'gpu-embed.service'): (1, '', 'Unit file is masked.\n')})
    with pytest.raises(Failed) as failed:
        SystemdBackend(SYSTEMCTL, commands, fail).set_enablement('enable', EMBED)
    assert failed.value.args[0] == '/usr/bin/systemctl enable -- gpu-embed.service failed (rc=1): Unit file is masked.'
    assert failed.value.args[1]['rc'] == 1
    with pytest.raises(Failed, match='systemctl not found: draining systemd services needs systemd'):
        SystemdBackend(None, Commands(), fail).is_running(EMBED)


CONTAINER = {'key': 'container:podman:abc', 'kind': 'container', 'runtime': 'podman', 'id': 'abc', 'name': 'vllm'}


def test_container_backend_asks_the_runtime_by_id():
    inspect = ('/usr/bin/podman', 'inspect', '--format', '{{.State.Running}}', 'abc')
    podman = ContainerBackend('podman', '/usr/bin/podman', Commands({inspect: (0, 'true\n', '')}), fail)
    assert podman.is_running(CONTAINER) is True
    assert ContainerBackend('podman', '/usr/bin/podman', Commands({inspect: (125, '', 'no such container')}),
                            fail).is_running(CONTAINER) is False
    assert podman.change_command('start', CONTAINER) == ['/usr/bin/podman', 'start', 'abc']
    ps = ('/usr/bin/podman', 'ps', '--no-trunc', '--format', '{{.ID}} {{.Names}}')
    answer = Commands({ps: (0, '%s vllm\n' % PODMAN_ID, '')})
    assert ContainerBackend('podman', '/usr/bin/podman', answer, fail).names() == {PODMAN_ID: 'vllm'}
    assert ContainerBackend('podman', '/usr/bin/podman', Commands({ps: (125, '', 'x')}), fail).names() == {}


def test_container_backend_without_its_runtime():
    missing = ContainerBackend('docker', None, Commands(), fail)
    entry = dict(CONTAINER, runtime='docker', key='container:docker:abc')
    assert missing.is_running(entry) is False and missing.names() == {}
    with pytest.raises(Failed, match='cannot restore container abc: docker is not installed'):
        missing.change_command('start', entry)


PROGRAM = {'key': 'supervisor:notebook', 'kind': 'supervisor', 'name': 'notebook'}
SUPERVISORCTL = '/usr/bin/supervisorctl'


@pytest.mark.parametrize('rc, running', [(0, True), (3, True), (4, False)])
def test_supervisor_backend_reads_status_even_when_a_program_is_stopped(rc, running):
    status = 'notebook                         RUNNING   pid 4201, uptime 0:10:00\nasr   STOPPED   Not started\n'
    backend = SupervisorBackend(SUPERVISORCTL, Commands({(SUPERVISORCTL, 'status'): (rc, status, '')}), fail)
    assert backend.is_running(PROGRAM) is running
    assert backend.is_running(PROGRAM, programs={}) is False
    assert backend.change_command('stop', PROGRAM) == [SUPERVISORCTL, 'stop', 'notebook']


def test_supervisor_backend_without_supervisorctl():
    backend = SupervisorBackend(None, Commands(), fail)
    assert backend.programs() == {}
    with pytest.raises(Failed, match='cannot restore supervisord program notebook: supervisorctl is not installed'):
        backend.change_command('start', PROGRAM)


def test_backends_pick_the_manager_of_each_entry():
    paths = {'systemctl': SYSTEMCTL, 'podman': '/usr/bin/podman', 'supervisorctl': None}
    backends = Backends(paths.get, Commands(), fail)
    assert backends.runtimes == ['podman']
    assert isinstance(backends.of(EMBED), SystemdBackend)
    assert backends.of(CONTAINER).path == '/usr/bin/podman'
    assert backends.of(dict(CONTAINER, runtime='docker')).path is None
    assert isinstance(backends.of(PROGRAM), SupervisorBackend) and backends.of(PROGRAM).path is None
    assert backends.is_running(PROGRAM, programs={4201: 'notebook'}) is True
