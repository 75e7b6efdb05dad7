"""kept_history: the node's file of what each kept service held, read and rewritten at every look
at the GPUs; a module's check mode writes nothing, a bad file fails naming it."""

import json
from types import SimpleNamespace

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import kept_history

ASR = {'gpu_index': 0, 'used_memory_mib': 40960, 'supervisor_program': 'asr:asr_00', 'pid': 10}


class Failed(Exception):
    pass


def module(path, keep, check_mode=False):
    def fail_json(**kwargs):
        raise Failed(kwargs['msg'])
    return SimpleNamespace(params={'kept_history_file': str(path), 'keep': keep}, check_mode=check_mode,
                           fail_json=fail_json)


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    monkeypatch.setattr(kept_history, 'now_text', lambda: '2026-12-07T11:00:00Z')


def test_a_look_writes_what_the_kept_service_holds_and_a_later_one_keeps_it(tmp_path):
    path = tmp_path / 'state' / 'kept-room.json'
    assert kept_history.keep_history(module(path, ['asr_00']), {'processes': [ASR]}) == {
        'asr_00': {'gpus': {'0': 40960}, 'seen_at': '2026-12-07T11:00:00Z'}}
    assert json.loads(path.read_text()) == {
        'managed_by': 'gpulab.inference',
        'services': {'asr_00': {'gpus': {'0': 40960}, 'seen_at': '2026-12-07T11:00:00Z'}}}
    assert oct(path.stat().st_mode & 0o777) == '0o644'
    # restarting: not on the GPU at the next look
    assert kept_history.keep_history(module(path, ['asr_00']), {'processes': []})['asr_00']['gpus'] == {'0': 40960}
    assert json.loads(path.read_text())['services']['asr_00']['gpus'] == {'0': 40960}


def test_check_mode_returns_the_history_and_writes_nothing(tmp_path):
    path = tmp_path / 'kept-room.json'
    history = kept_history.keep_history(module(path, ['asr_00'], check_mode=True), {'processes': [ASR]})
    assert history['asr_00']['gpus'] == {'0': 40960}
    assert not path.exists()


def test_a_node_that_keeps_nothing_gets_no_file_and_one_that_stopped_keeping_is_emptied(tmp_path):
    path = tmp_path / 'kept-room.json'
    assert kept_history.keep_history(module(path, []), {'processes': [ASR]}) == {}
    assert not path.exists()
    kept_history.keep_history(module(path, ['asr_00']), {'processes': [ASR]})
    assert kept_history.keep_history(module(path, []), {'processes': [ASR]}) == {}
    assert json.loads(path.read_text())['services'] == {}


def test_nothing_without_a_file_or_a_residency(tmp_path):
    assert kept_history.keep_history(module('', ['asr_00']), {'processes': [ASR]}) is None
    assert kept_history.keep_history(module(tmp_path / 'kept-room.json', ['asr_00']), None) is None


def test_a_file_that_is_not_the_record_fails_naming_it_and_stays(tmp_path):
    path = tmp_path / 'kept-room.json'
    path.write_text('[1, 2]')
    with pytest.raises(Failed, match='kept services history %s is not a gpulab.inference record' % path):
        kept_history.keep_history(module(path, ['asr_00']), {'processes': [ASR]})
    assert path.read_text() == '[1, 2]'


def test_a_directory_that_cannot_be_made_fails_naming_the_file(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    path = blocker / 'kept-room.json'
    with pytest.raises(Failed, match='kept services history %s cannot be read or written' % path):
        kept_history.keep_history(module(path, ['asr_00']), {'processes': [ASR]})
