"""scripts/faults_supervisor.py without a GPU: what it reads from a deploy.yml log (as ansible-core 2.19
writes it with the YAML result format, long strings folded), the kept services' history, each case's
row from a request log, and the table of docs/faults.md it writes."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / 'scripts' / 'faults_supervisor.py'
SPEC = importlib.util.spec_from_file_location('faults_supervisor', SCRIPT)
faults = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(faults)

LOG = """
PLAY [Plan the engine before anything is started, stopped or drained] ******

TASK [gpulab.inference.memory_plan : Show the per-device plan] *************************
ok: [gpu-host] =>
    msg:
    - RPC0[127.0.0.1:50052]  gpu-host  free 80000 MiB  weights 95.1 MiB
    - 'gpu-host: asr: 4608 MiB reserved on GPU 0 (4608 MiB from the most it held when
        last seen running (2026-12-07T14:02:11Z); not running now)'

TASK [gpulab.inference.gpu_drain : Show what was stopped, kept and freed] ***********************************
ok: [gpu-host] =>
    msg:
    - 'stop trainer (2560 MiB): a supervisord program using the GPU, not kept'
    - 'keep asr (4608 MiB): matches gpu_drain_keep asr'

TASK [gpulab.inference.service : Wait for /health to turn from 503 (loading) to 200, watching the service] ***
[ERROR]: Task failed: Action failed: the program exited and waits to be started again
fatal: [gpu-host]: FAILED! =>
    changed: false
    msg: the program exited and waits to be started again (Exited too quickly (process
        log may have details))

TASK [gpulab.inference.gpu_drain : Fail with the error of the step that failed, naming the nodes not restored] ***
fatal: [gpu-host]: FAILED! =>
    changed: false
    msg: 'Wait for /health to turn from 503 (loading) to 200, watching the service failed:
        the program exited and waits to be started again (Exited too quickly (process
        log may have details)). The drained services were restored.'

PLAY RECAP *********************************************************************
gpu-host                   : ok=212  changed=3    unreachable=0    failed=1    skipped=40   rescued=1    ignored=0
"""


def test_the_recap_says_changed_and_where_it_failed():
    assert faults.recap(LOG) == 'changed=3 failed on gpu-host'
    assert faults.recap('gpu-host : ok=150  changed=0    unreachable=0    failed=0    skipped=9') == 'changed=0'
    assert faults.recap('TASK [x] ***\nTerminated\n') == 'no recap'


def test_the_reservation_line_is_found_across_the_folded_lines():
    assert faults.reservation_lines(LOG, 'asr') == [
        'asr: 4608 MiB reserved on GPU 0 (4608 MiB from the most it held when last seen running '
        '(2026-12-07T14:02:11Z); not running now)']
    assert faults.reservation_lines(LOG, 'whisper') == []
    running = 'asr: 512 MiB reserved on GPU 1 (4608 MiB from gpulab_kept_mib; running with 4096 MiB now)'
    assert faults.reservation_lines(running + '\n' + running, 'asr') == [running]


def test_mentions_only_in_the_named_task():
    assert faults.mentions(LOG, 'Show what was stopped, kept and freed', 'trainer') == [
        'stop trainer (2560 MiB): a supervisord program using the GPU, not kept']
    assert faults.mentions(LOG, 'Show the per-device plan', 'trainer') == []
    restored = faults.mentions(LOG, 'Fail with the error of the step that failed', 'were restored')
    assert len(restored) == 1 and restored[0].endswith('The drained services were restored.') and 'RECAP' not in restored[0]


def test_the_failure_is_the_last_failed_tasks_whole_message():
    assert faults.failure(LOG) == (
        'Wait for /health to turn from 503 (loading) to 200, watching the service failed: the program exited and '
        'waits to be started again (Exited too quickly (process log may have details)). The drained services were restored.')
    assert faults.failure(LOG, 60) == 'Wait for /health to turn from 503 (loading) to 200, ...'
    assert faults.failure('TASK [x : Start it] ***\nfatal: [gpu-host]: FAILED! =>\n    changed: false\n') == 'x : Start it'
    assert faults.failure('PLAY RECAP ***\n') == ''


def test_the_kept_history_of_one_pattern():
    text = json.dumps({'managed_by': 'gpulab.inference',
                       'services': {'asr': {'gpus': {'0': 4608}, 'seen_at': '2026-12-07T14:02:11Z'}}})
    assert faults.kept_history(text, 'asr') == ({'0': 4608}, '2026-12-07T14:02:11Z')
    assert faults.kept_history(text, 'whisper') == ({}, None)
    assert faults.kept_history('', 'asr') == ({}, None)
    assert faults.kept_history('not json', 'asr') == ({}, None)
    assert faults.kept_history('[1, 2]', 'asr') == ({}, None)


def requests():
    # one a second from t=100; the fault at 110 fails the requests started at 110-113
    return [{'start': 100.0 + i, 'end': 100.5 + i, 'ok': not 110 <= 100 + i <= 113, 'error': ''} for i in range(30)]


def test_a_case_row_counts_the_window_and_serving_again():
    row = faults.case_row(requests(), 110.0, 125.0, {'id': 'head-sigkill', 'case': 'SIGKILL of the head', 'detected_s': 0.3},
                          {'detected': True})
    assert (row['sent'], row['failed'], row['serving_again_s']) == (16, 4, 4.0)
    assert row['node'] == 'gpu-host' and row['manager'] == 'supervisor' and row['checks'] == {'detected': True}
    assert row['at'] == '1970-01-01T00:01:50Z'
    assert faults.case_row(requests(), 110.0, 125.0, {}, {}, served=False)['serving_again_s'] is None


def test_pairs_and_checks_from_the_command_line():
    assert faults.parse_pairs(['detected_s=1.234', 'serving_again_s=', 'notes=a=b', 'deploy_1=changed=0']) == {
        'detected_s': 1.2, 'serving_again_s': None, 'notes': 'a=b', 'deploy_1': 'changed=0'}
    assert faults.parse_checks(['a=yes', 'b=no', 'c=true']) == {'a': True, 'b': False, 'c': True}


def test_merge_replaces_a_case_run_again_and_update_adds_to_it():
    rows = faults.merge([{'id': 'kept', 'notes': 'old'}, {'id': 'head-sigkill'}], {'id': 'kept', 'notes': 'new'})
    assert [r['id'] for r in rows] == ['head-sigkill', 'kept'] and rows[1]['notes'] == 'new'
    rows = faults.update(rows, 'head-sigkill', {'deploy_1': 'changed=0'}, {'then_changed_0': False}, 'deploy.yml took 80 s.')
    assert rows[0] == {'id': 'head-sigkill', 'deploy_1': 'changed=0', 'checks': {'then_changed_0': False},
                       'notes': 'deploy.yml took 80 s.'}


def test_the_table_is_docs_faults_md_with_the_checks_in_the_notes(tmp_path):
    head = {'id': 'head-sigkill', 'case': 'SIGKILL of the head', 'detected_s': 0.3, 'lost': 'nothing',
            'deploy_1': 'changed=0', 'deploy_2': 'changed=0', 'notes': 'pid 42 killed.'}
    rows = [faults.case_row(requests(), 110.0, 125.0, head, {'detected': True, 'serving_again': True}),
            faults.case_row(requests(), 110.0, 125.0, {'id': 'kept', 'case': 'kept program stopped'},
                            {'asr_running': False}, served=False)]
    results = tmp_path / 'rows.json'
    faults.save_rows(str(results), rows)
    rc = faults.main(['write', '--results', str(results), '--out', str(tmp_path), '--meta', 'commit=abc1234',
                      '--meta', 'machine=NVIDIA H100 80GB HBM3 81559 MiB, 16 cores', '--meta', 'not_run=rpc-sigkill'])
    assert rc == 1
    table = (tmp_path / 'faults.md').read_text().splitlines()
    assert table[0].startswith('<!-- table written by scripts/gpu-e2e-faults.sh on ?, commit abc1234, NVIDIA H100')
    assert table[1] == ('| case | node | manager | detected after (s) | serving again after (s) | requests failed / sent | lost '
                        '| next deploy.yml | then | notes |')
    assert table[3] == ('| SIGKILL of the head | gpu-host | supervisor | 0.3 | 4.0 | 4 / 16 | nothing | changed=0 | changed=0 '
                        '| pid 42 killed. checks held: detected, serving_again. |')
    assert table[4] == ('| kept program stopped | gpu-host | supervisor | - | not within the case | 4 / 16 | nothing | - | - '
                        '| checks failed: asr_running. |')
    assert table[-1] == 'Not run in the last call (time): rpc-sigkill.'
    written = json.loads((tmp_path / 'faults.json').read_text())
    assert written['all_checks_held'] is False and written['meta']['commit'] == 'abc1234' and len(written['rows']) == 2


def test_row_and_update_through_the_command_line(tmp_path, capsys):
    load = tmp_path / 'load.jsonl'
    load.write_text(''.join(json.dumps(r) + '\n' for r in requests()) + '{"start": 129.0, "ok"')
    results = str(tmp_path / 'rows.json')
    assert faults.main(['row', '--results', results, '--load', str(load), '--fault-at', '110', '--until', '125',
                        '--set', 'id=rpc-sigkill', '--set', 'detected_s=1.25', '--check', 'detected=yes']) == 0
    assert json.loads(capsys.readouterr().out)['failed'] == 4
    assert faults.main(['update', '--results', results, '--id', 'rpc-sigkill', '--set', 'deploy_2=changed=0',
                        '--check', 'then_changed_0=yes', '--note', 'deploy.yml took 70 s, then 60 s.']) == 0
    row = faults.load_rows(results)[0]
    assert row['deploy_2'] == 'changed=0' and row['detected_s'] == 1.2
    assert row['checks'] == {'detected': True, 'then_changed_0': True} and row['notes'] == 'deploy.yml took 70 s, then 60 s.'
    assert faults.all_held([row])
