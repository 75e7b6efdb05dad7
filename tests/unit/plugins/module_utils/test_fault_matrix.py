"""fault_matrix: the figures of docs/faults.md from a request log and the fault's times."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.fault_matrix import (
    drain_recorded,
    failed_during,
    failed_outside,
    lost_services,
    missing_from,
    percentile,
    recap_text,
    serving_again_after,
    table,
    task_in_play,
    task_started_after,
)


def _log(pattern, start=100.0):
    """One request a second from start: 'o' succeeded, 'x' failed."""
    return [{'start': start + i, 'end': start + i + 0.2, 'ok': c == 'o', 'error': '' if c == 'o' else 'timeout'}
            for i, c in enumerate(pattern)]


def test_serving_again_after_the_last_failure():
    # fault at 102; failures at 103..106, 107 succeeds and all after it
    requests = _log('oooxxxxoooo')
    assert serving_again_after(requests, 102.0, 200.0) == 5.0
    assert failed_during(requests, 102.0, 200.0) == (9, 4)


def test_a_success_between_failures_is_not_serving_again():
    requests = _log('ooxoxxoo')
    assert serving_again_after(requests, 101.0, 200.0) == 5.0


def test_no_failure_is_zero_and_no_success_after_is_none():
    assert serving_again_after(_log('oooo'), 101.0, 200.0) == 0.0
    assert serving_again_after(_log('ooxx'), 101.0, 200.0) is None


def test_failures_outside_the_fault_windows_are_counted():
    requests = _log('xooxxooox')
    assert failed_outside(requests, [(103.0, 104.5)]) == 2


@pytest.mark.parametrize('values, fraction, expected', [
    ([1, 2, 3, 4], 0.5, 2), ([5], 0.99, 5), (list(range(1, 101)), 0.99, 99), ([], 0.5, None)])
def test_percentile_nearest_rank(values, fraction, expected):
    assert percentile(values, fraction) == expected


def test_recap_text():
    stats = {'ok': {'node-a': 40, 'node-b': 30, 'node-c': 30}, 'changed': {'node-a': 4, 'node-b': 2}, 'failures': {}}
    assert recap_text(stats) == 'changed=4/2/0'
    assert recap_text({'ok': {'node-a': 3}, 'changed': {}, 'failures': {'node-c': 1}}) == 'changed=0 failed on node-c'
    assert recap_text({}) == 'no run'


def test_table_rows():
    text = table([{'case': 'SIGKILL of the RPC server', 'node': 'node-b', 'manager': 'systemd', 'detected_s': 1.04,
                   'serving_again_s': 12.0, 'failed': 3, 'sent': 40, 'deploy_1': 'changed=0/0/0',
                   'deploy_2': 'changed=0/0/0', 'notes': 'a | b'}])
    lines = text.splitlines()
    assert lines[0].startswith('| case | node | manager | detected after (s) |')
    assert lines[2] == ('| SIGKILL of the RPC server | node-b | systemd | 1.0 | 12.0 | 3 / 40 | nothing | changed=0/0/0 '
                        '| changed=0/0/0 | a \\| b |')
    assert '| not within the case |' in table([{'case': 'c', 'node': 'n', 'manager': 'm', 'serving_again_s': None}])


def test_drain_recorded_reads_phase_and_names_and_tolerates_no_file():
    text = ('{"schema": 1, "phase": "stopping", "entries": [{"key": "systemd:gpu-embed.service", '
            '"name": "gpu-embed.service"}, {"key": "pid:41"}], "killed": []}')
    assert drain_recorded(text) == ('stopping', ['gpu-embed.service', 'pid:41'])
    assert drain_recorded('') == (None, [])
    assert drain_recorded('{"phase": "dr') == (None, [])
    assert drain_recorded('[1]') == (None, [])


def test_lost_services_names_each_unit_not_running_again():
    expected = {'node-b': ['gpu-embed.service'], 'node-c': ['gpu-embed.service', 'asr.service']}
    assert lost_services(expected, {'node-b': ['gpu-embed.service', 'x'], 'node-c': ['asr.service', 'gpu-embed.service']}) == 'nothing'
    assert lost_services(expected, {'node-b': [], 'node-c': ['asr.service']}) == \
        'gpu-embed.service on node-b, gpu-embed.service on node-c'
    assert lost_services({}, {}) == 'nothing'


def test_task_started_after_the_marked_task():
    output = ('PLAY [x]\nTASK [gpulab.inference.gpu_drain : Drain the GPUs (state file first)] ***\nok: [node-a]\n'
              'TASK [gpulab.inference.gpu_drain : Show what was stopped, kept and freed] ***\n')
    assert not task_started_after(output, 'Show what was stopped')
    assert task_started_after(output + 'TASK [gpulab.inference.llama_rpc_server : Install the unit] ***\n', 'Show what was stopped')
    assert task_started_after(output, 'Drain the GPUs')
    assert not task_started_after('', 'Drain the GPUs')


def test_task_in_play_only_in_the_named_play():
    output = ('PLAY [Preflight checks and GPU facts] ***\nTASK [gpulab.inference.common : Resolve the service manager of this node] ***\n'
              'PLAY [RoCE fabric (nodes with gpulab_fabric_interface)] ***\n')
    # the task ran, but in another play than the one named
    assert not task_in_play(output, 'RoCE fabric', 'Resolve the service manager')
    assert task_in_play(output, 'Preflight', 'Resolve the service manager')
    output += 'TASK [gpulab.inference.common : Resolve the service manager of this node] ***\n'
    assert task_in_play(output, 'RoCE fabric', 'Resolve the service manager')
    assert not task_in_play(output, 'RoCE fabric', 'Configure the RoCE fabric')
    assert not task_in_play(output, 'Report what is served', 'Resolve the service manager')
    assert not task_in_play('', 'Preflight', 'Gathering Facts')


def test_missing_from_names_what_the_message_leaves_out():
    message = 'node-b: /srv/flt-disk/m/blob.gguf.part: [Errno 28] No space left on device'
    assert missing_from(message, ['node-b', '/srv/flt-disk/m']) == []
    assert missing_from(message, ['node-c', '/srv/flt-disk/m']) == ['node-c']
    assert missing_from(None, ['node-b']) == ['node-b']
