"""The event arithmetic of scripts/ssh-deploy-bench.py, on ansible-runner events shaped as it
emits them (runner_on_ok with host, role, task, task_path, start, end, duration)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / 'scripts' / 'ssh-deploy-bench.py'
SPEC = importlib.util.spec_from_file_location('ssh_deploy_bench', SCRIPT)
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def finished(host, task, start_s, end_s, role='gpulab.inference.llama_cpp_distribute', event='runner_on_ok',
             path='roles/llama_cpp_distribute/tasks/transfer.yml:7', uuid=None):
    stamp = '2026-12-01T10:00:%06.3f+00:00'
    return {'event': event, 'event_data': {'host': host, 'task': task, 'role': role, 'task_path': path,
                                           'start': stamp % start_s, 'end': stamp % end_s,
                                           'duration': end_s - start_s, 'res': {},
                                           'task_uuid': uuid or '%s/%s' % (role, task)}}


EVENTS = [
    {'event': 'runner_on_start', 'event_data': {'host': 'node-b', 'task': 'Copy the tarball from the controller'}},
    finished('node-b', 'Copy the tarball from the controller', 10.0, 12.5),
    finished('node-c', 'Copy the tarball from the controller', 10.2, 13.0),
    finished('node-a', 'Copy the tarball from the controller', 20.0, 29.0, role='other_role'),
    finished('node-a', 'Validating arguments', 0.0, 0.5, role='common', uuid='play-1'),
    finished('node-a', 'Validating arguments', 30.0, 30.5, role='common', uuid='play-2'),
    finished('node-b', 'Unpack the build', 14.0, 15.5),
    finished('node-c', 'Unpack the build', 14.0, 16.0, event='runner_on_failed'),
    finished('node-a', 'Follow the build\'s progress', 1.0, 9.0, role='gpulab.inference.llama_cpp_build',
             path='roles/llama_cpp_build/tasks/progress.yml:3'),
]


def test_task_span_runs_from_the_first_start_to_the_last_end_of_the_role_and_hosts():
    span = bench.task_span(EVENTS, 'Copy the tarball from the controller', 'llama_cpp_distribute', ['node-b', 'node-c'])
    assert span == {'wall_s': 3.0, 'hosts': {'node-b': 2.5, 'node-c': 2.8}}


def test_task_span_counts_failed_hosts_and_ignores_start_events():
    assert bench.task_span(EVENTS, 'Unpack the build') == {'wall_s': 2.0, 'hosts': {'node-b': 1.5, 'node-c': 2.0}}


def test_task_span_of_a_task_that_did_not_run_is_none():
    assert bench.task_span(EVENTS, 'Copy the tarball from the controller', 'llama_cpp_distribute', ['node-d']) is None
    assert bench.task_span(EVENTS, 'No such task') is None


def test_role_span_covers_the_role_tasks_of_the_hosts():
    assert bench.role_span(EVENTS, 'llama_cpp_distribute') == 6.0
    assert bench.role_span(EVENTS, 'llama_cpp_distribute', ['node-b']) == 5.5
    assert bench.role_span(EVENTS, 'vllm_server') is None


def test_slowest_tasks_are_sorted_and_counted_per_task_of_the_playbook():
    assert bench.slowest_tasks(EVENTS, 3) == [
        ('Copy the tarball from the controller', 9.0), ("Follow the build's progress", 8.0),
        ('Copy the tarball from the controller', 3.0)]
    # The same role task in two plays: two short tasks, not one spanning the whole run.
    assert bench.slowest_tasks(EVENTS, 10)[-2:] == [('Validating arguments', 0.5), ('Validating arguments', 0.5)]


@pytest.mark.parametrize('size, copies, seconds, expected', [(18_555_442, 2, 0.5, 74.2), (10**6, 1, 1.0, 1.0)])
def test_rate_counts_every_copy(size, copies, seconds, expected):
    assert bench.rate_mb_s(size, copies, seconds) == expected


def test_ssh_argv_reuses_ansible_control_path_and_the_inventory_arguments():
    node = {'host': '10.232.86.11', 'user': 'gpulab', 'key': '/k/id_ed25519',
            'common_args': '-o UserKnownHostsFile=/k/known_hosts -o IdentitiesOnly=yes'}
    argv = bench.ssh_argv('scp', node)
    assert argv[0] == 'scp'
    assert 'ControlPath=%s' % str(Path('~/.ansible/cp/%C').expanduser()) in argv
    assert argv[-4:] == ['-o', 'UserKnownHostsFile=/k/known_hosts', '-o', 'IdentitiesOnly=yes']
    assert ['-i', '/k/id_ed25519'] == argv[argv.index('-i'):argv.index('-i') + 2]


def test_ssh_argv_of_a_node_reached_through_an_ssh_config_names_no_key():
    # The lab inventories: no ansible_host or key, the lab's ssh_config given with -F.
    node = {'host': 'node-b', 'user': 'gpulab', 'key': '', 'common_args': '-F /lab/ssh_config'}
    argv = bench.ssh_argv('ssh', node)
    assert '-i' not in argv
    assert argv[-2:] == ['-F', '/lab/ssh_config']
