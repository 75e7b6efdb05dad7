"""atomic_file: the one way the collection's modules write a file."""

import os
import stat

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import atomic_file as af


def names(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize('data, expected', [
    ('text é\n', 'text é\n'.encode('utf-8')),
    (b'\x00\x01bytes', b'\x00\x01bytes'),
    (lambda stream: [stream.write(c) for c in (b'chunk1', b'chunk2')], b'chunk1chunk2'),
])
def test_writes_str_bytes_and_chunks(tmp_path, data, expected):
    target = tmp_path / 'f.json'
    af.atomic_write(str(target), data, 0o644)
    assert target.read_bytes() == expected
    assert names(tmp_path) == ['f.json']


def test_replaces_an_existing_file_with_the_mode_asked(tmp_path):
    target = tmp_path / 'f'
    target.write_text('old')
    os.chmod(str(target), 0o600)
    af.atomic_write(str(target), 'new', 0o644)
    assert target.read_text() == 'new'
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_without_a_mode_the_file_is_private(tmp_path):
    af.atomic_write(str(tmp_path / 'f'), 'x')
    assert stat.S_IMODE((tmp_path / 'f').stat().st_mode) == 0o600


def test_temporary_file_is_hidden_beside_the_target(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append(src)
        real_replace(src, dst)
    monkeypatch.setattr(af.os, 'replace', replace)
    af.atomic_write(str(tmp_path / 'model.json'), 'x')
    af.atomic_write(str(tmp_path / 'state.json'), 'x', prefix='.state-', suffix='')
    assert os.path.dirname(seen[0]) == str(tmp_path)
    assert os.path.basename(seen[0]).startswith('.model.json.') and seen[0].endswith('.tmp')
    assert os.path.basename(seen[1]).startswith('.state-') and not seen[1].endswith('.tmp')


def test_a_failed_write_leaves_no_temporary_file_and_the_old_file(tmp_path):
    target = tmp_path / 'f'
    target.write_text('old')

    def broken(stream):
        stream.write(b'half')
        raise OSError(28, 'No space left on device')
    with pytest.raises(OSError, match='No space left'):
        af.atomic_write(str(target), broken, 0o644)
    assert names(tmp_path) == ['f']
    assert target.read_text() == 'old'


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(af.os, 'replace', refuse)
    with pytest.raises(OSError, match='No space left'):
        af.atomic_write(str(tmp_path / 'f'), 'x')
    assert names(tmp_path) == []


def test_an_interrupt_leaves_no_temporary_file(tmp_path):
    def interrupted(stream):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        af.atomic_write(str(tmp_path / 'f'), interrupted)
    assert names(tmp_path) == []


def test_data_of_another_type_is_refused_without_a_file(tmp_path):
    with pytest.raises(TypeError, match='not dict'):
        af.atomic_write(str(tmp_path / 'f'), {'a': 1})
    assert names(tmp_path) == []


def test_a_directory_is_refused_clearly(tmp_path):
    (tmp_path / 'out').mkdir()
    (tmp_path / 'out' / 'keep').write_text('x')
    with pytest.raises(af.AtomicWriteError, match='out is a directory; give the path of a file in it'):
        af.atomic_write(str(tmp_path / 'out'), 'text')
    assert names(tmp_path) == ['out']
    assert names(tmp_path / 'out') == ['keep']


def test_a_missing_directory_is_refused_clearly(tmp_path):
    with pytest.raises(af.AtomicWriteError, match=r'directory .*/missing does not exist; create it first'):
        af.atomic_write(str(tmp_path / 'missing' / 'f'), 'text')
    assert names(tmp_path) == []


def test_an_atomic_write_error_is_an_oserror():
    # Callers that catch OSError report the clear message unchanged.
    assert issubclass(af.AtomicWriteError, OSError)
    assert str(af.AtomicWriteError('d is a directory')) == 'd is a directory'


def test_path_problems(tmp_path):
    assert af.path_problem(str(tmp_path / 'f')) is None
    assert af.path_problem('') == 'no path given'
    assert af.path_problem(str(tmp_path)) == '%s is a directory; give the path of a file in it' % tmp_path
    assert af.path_problem(str(tmp_path / 'a' / 'f')) == (
        '%s: directory %s does not exist; create it first' % (tmp_path / 'a' / 'f', tmp_path / 'a'))


def test_an_unwritable_directory_is_refused(tmp_path, monkeypatch):
    # Patched: root, who runs the tests in CI, may write anywhere.
    monkeypatch.setattr(af.os, 'access', lambda path, mode: False)
    assert af.path_problem(str(tmp_path / 'f')) == (
        '%s: directory %s is not writable by this user' % (tmp_path / 'f', tmp_path))


def test_write_temp_returns_a_complete_file_the_caller_renames(tmp_path):
    target = tmp_path / 'shard.gguf'
    temp = af.write_temp(str(target), b'data', 0o644)
    assert os.path.dirname(temp) == str(tmp_path) and os.path.basename(temp).startswith('.shard.gguf.')
    assert open(temp, 'rb').read() == b'data'
    assert stat.S_IMODE(os.stat(temp).st_mode) == 0o644
    os.replace(temp, str(target))
    assert names(tmp_path) == ['shard.gguf']


def test_remove_quietly_ignores_a_missing_file(tmp_path):
    af.remove_quietly(str(tmp_path / 'never'))


def test_keep_file_writes_only_what_moved_and_makes_its_directory(tmp_path):
    path = tmp_path / 'state' / 'record.json'
    text = af.nice_json({'b': 1, 'a': [1, 2]})
    assert text == '{\n    "a": [\n        1,\n        2\n    ],\n    "b": 1\n}\n'
    assert af.keep_file(str(path), text, check_mode=True) is True
    assert not path.parent.exists()
    assert af.keep_file(str(path), text) is True
    assert path.read_text() == text
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o644, 0o755)
    assert af.keep_file(str(path), text) is False
    assert af.keep_file(str(path), af.nice_json({'a': 2})) is True
    assert path.read_text() == '{\n    "a": 2\n}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ['record.json']


def test_free_space_counts_what_stale_temp_files_hold():
    assert af.free_space_problem("/m", 10, 15, reclaimable_bytes=5) is None
    problem = af.free_space_problem("/m", 10 << 30, 20 << 30, reclaimable_bytes=5 << 30)
    assert problem == ("/m has 10.000 GiB free (5.000 GiB more once the temporary files of an interrupted run "
                       "are removed), the model needs 20.000 GiB; free space or lower layers/experts")
    assert af.free_space_problem("/m", 0, 1) == "/m has 0.000 GiB free, the model needs 0.000 GiB; free space or lower layers/experts"
