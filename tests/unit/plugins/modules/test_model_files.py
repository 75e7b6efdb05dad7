"""gpulab.inference.model_files: the plan of one node (keep, verify, fetch, resume, space) and verification."""

import json
import os

from ansible_collections.gpulab.inference.plugins.modules import model_files

from model_module_case import run, sha

A = b'a' * 100
B = b'b' * 50


def files():
    return [{'name': 'a.bin', 'size_bytes': len(A), 'sha256': sha(A)}, {'name': 'b.bin', 'size_bytes': len(B), 'sha256': sha(B)}]


def args(tmp_path, **more):
    return dict({'path': str(tmp_path / 'm'), 'files': files(), 'manifest': str(tmp_path / 'model.json')}, **more)


def test_an_empty_node_fetches_everything_and_has_room(tmp_path, capsys):
    failed, result = run(model_files.main, args(tmp_path), capsys)
    assert not failed and not result['changed']
    assert [s['action'] for s in result['plan']] == ['fetch', 'fetch']
    assert (result['fetch_bytes'], result['needed_bytes'], result['resumed_bytes']) == (150, 150, 0)
    assert result['problem'] is None and result['free_bytes'] > 0


def test_a_part_resumes_and_too_little_space_is_the_problem(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin.part').write_bytes(A[:40])
    failed, result = run(model_files.main, args(tmp_path, free_bytes=100, host='node-b'), capsys)
    assert not failed
    assert [(s['name'], s['offset']) for s in result['fetch']] == [('a.bin', 40), ('b.bin', 0)]
    assert result['needed_bytes'] == 110
    assert result['problem'].startswith('node-b: %s has 100 B free (100 bytes), the model needs 110 B more' % (tmp_path / 'm'))


def test_verify_then_keep_without_reading_again(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin').write_bytes(A)
    (tmp_path / 'm' / 'b.bin').write_bytes(B)
    failed, result = run(model_files.main, args(tmp_path, state='verify'), capsys)
    assert not failed and result['verified_bytes'] == 150
    records = result['records']
    assert [(r['name'], r['sha256']) for r in records] == [('a.bin', sha(A)), ('b.bin', sha(B))]
    (tmp_path / 'model.json').write_text(json.dumps({'managed_by': 'gpulab.inference', 'path': '/x', 'files': records}))
    failed, result = run(model_files.main, args(tmp_path), capsys)
    assert [s['action'] for s in result['plan']] == ['keep', 'keep'] and result['needed_bytes'] == 0
    failed, result = run(model_files.main, args(tmp_path, state='verify'), capsys)
    assert not failed and result['verified_bytes'] == 0 and result['records'] == records
    # A file touched since it was verified is read again.
    os.utime(str(tmp_path / 'm' / 'b.bin'), ns=(1, 1))
    failed, result = run(model_files.main, args(tmp_path), capsys)
    assert [s['action'] for s in result['plan']] == ['keep', 'keep'] and result['hashed_bytes'] == 50
    assert result['needed_bytes'] == 0 and [r['name'] for r in result['records']] == ['a.bin', 'b.bin']


def test_a_file_of_the_right_size_but_other_bytes_is_fetched_again(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin').write_bytes(b'x' * 100)
    failed, result = run(model_files.main, args(tmp_path), capsys)
    assert not failed and [(s['action'], s['offset']) for s in result['plan']] == [('fetch', 0), ('fetch', 0)]
    assert result['hashed_bytes'] == 100 and result['needed_bytes'] == 150 and result['records'] == []


def test_verify_trusts_the_records_of_the_fetch(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin').write_bytes(A)
    (tmp_path / 'm' / 'b.bin').write_bytes(B)
    stat = os.stat(str(tmp_path / 'm' / 'a.bin'))
    verified = [{'name': 'a.bin', 'size_bytes': 100, 'sha256': sha(A), 'mtime_ns': stat.st_mtime_ns}]
    failed, result = run(model_files.main, args(tmp_path, state='verify', verified=verified), capsys)
    assert not failed and result['verified_bytes'] == 50


def test_verify_fails_naming_each_wrong_file(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin').write_bytes(b'x' * 100)
    failed, result = run(model_files.main, args(tmp_path, state='verify', host='node-c'), capsys)
    assert failed
    assert result['msg'] == '%s on node-c: a.bin has sha256 %s, the source says %s; b.bin is missing' % (
        tmp_path / 'm', sha(b'x' * 100), sha(A))


def test_bad_files_are_refused(tmp_path, capsys):
    failed, result = run(model_files.main, args(tmp_path, files=[{'name': '../x', 'size_bytes': 1}]), capsys)
    assert failed and 'must be a plain path inside the model directory' in result['msg']


def test_reverify_reads_back_a_file_changed_with_its_size_and_mtime_kept(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'a.bin').write_bytes(A)
    (tmp_path / 'm' / 'b.bin').write_bytes(B)
    failed, result = run(model_files.main, args(tmp_path, state='verify'), capsys)
    (tmp_path / 'model.json').write_text(json.dumps({'managed_by': 'gpulab.inference', 'path': '/x', 'files': result['records']}))
    target = tmp_path / 'm' / 'a.bin'
    kept = os.stat(str(target))
    target.write_bytes(b'x' + A[1:])
    os.utime(str(target), ns=(kept.st_atime_ns, kept.st_mtime_ns))
    # The manifest's record still matches size and mtime: trusted without reading.
    failed, result = run(model_files.main, args(tmp_path), capsys)
    assert not failed and [s['action'] for s in result['plan']] == ['keep', 'keep'] and result['hashed_bytes'] == 0
    # Asked to verify: both read back, the changed one fetched again from the start.
    failed, result = run(model_files.main, args(tmp_path, reverify=True), capsys)
    assert not failed and result['hashed_bytes'] == 150
    assert [(s['name'], s['action'], s['offset']) for s in result['plan']] == [('a.bin', 'fetch', 0), ('b.bin', 'keep', 0)]
    assert result['fetch_bytes'] == 100
