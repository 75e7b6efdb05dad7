"""The rules of module file_set: entries checked, each path's steps planned from what is there, and
the plans carried out on a temporary directory (a failed validation changes no target)."""

import os
import stat

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import file_set as fs

UID = os.getuid()
GID = os.getgid()


def a_file(path, content='x\n', mode='0644', **extra):
    return dict(path=str(path), state='file', content=content, mode=mode, **extra)


def a_directory(path, mode='0755', **extra):
    return dict(path=str(path), state='directory', mode=mode, **extra)


def test_good_entries_have_no_problems():
    assert fs.entry_problems([a_directory('/etc/gpulab'), a_file('/etc/gpulab/x.json', validate='true %s'),
                              {'path': '/etc/gpulab/old.json', 'state': 'absent'}]) == []


@pytest.mark.parametrize('entry, problem', [
    (a_file('etc/x'), 'files[0] (etc/x): path must be absolute'),
    (a_file('/etc/../x'), 'files[0] (/etc/../x): path must be normalised'),
    (a_file('/'), 'files[0] (/): path must be normalised'),
    ({'path': '/x', 'state': 'link', 'mode': '0644'}, "state must be one of file, directory, absent, not 'link'"),
    (dict(a_file('/x'), content=None), 'a file needs content'),
    (dict(a_directory('/x'), content='y'), 'content is only for state file'),
    (dict(a_directory('/x'), validate='true %s'), 'validate is only for state file'),
    (a_file('/x', validate='nft --check -f'), 'validate must contain %s'),
    (a_file('/x', mode=None), 'a file needs a mode, such as "0644"'),
    (a_directory('/x', mode=None), 'a directory needs a mode'),
    (a_file('/x', mode='rw-r--r--'), "mode must be a string of octal digits, such as \"0644\" (quoted in YAML), not 'rw-r--r--'"),
    (a_file('/x', mode=644), 'mode must be a string of octal digits, such as "0644" (quoted in YAML), not 644'),
    ({'path': '/x', 'state': 'absent', 'mode': '0644'}, 'an absent path takes no mode, owner or group'),
])
def test_each_bad_entry_is_named_with_its_problem(entry, problem):
    problems = fs.entry_problems([entry])
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_path_listed_twice_is_a_problem():
    assert fs.entry_problems([a_file('/x'), a_file('/x')]) == ['files[1] (/x): the path is listed twice']


def test_parse_mode():
    assert fs.parse_mode('0644') == 0o644
    assert fs.parse_mode('755') == 0o755
    assert fs.parse_mode(None) is None


FILE_NOW = {'kind': 'file', 'mode': 0o644, 'uid': 0, 'gid': 0, 'size': 2}


@pytest.mark.parametrize('entry, current, uid, gid, content, steps', [
    # a file that is right: nothing
    (a_file('/x'), FILE_NOW, 0, 0, b'x\n', []),
    # owner and group not given: left as they are
    (a_file('/x'), dict(FILE_NOW, uid=5, gid=6), None, None, b'x\n', []),
    (a_file('/x'), FILE_NOW, 0, 0, b'y\n', ['write', 'chmod', 'chown']),
    (a_file('/x'), FILE_NOW, None, None, None, ['write', 'chmod']),
    (a_file('/x', mode='0755'), FILE_NOW, 0, 0, b'x\n', ['chmod']),
    (a_file('/x'), FILE_NOW, 0, 7, b'x\n', ['chown']),
    (a_file('/x'), {'kind': 'missing'}, 0, 0, None, ['write', 'chmod', 'chown']),
    (a_directory('/d'), {'kind': 'missing'}, None, None, None, ['mkdir', 'chmod']),
    (a_directory('/d'), {'kind': 'directory', 'mode': 0o755, 'uid': 0, 'gid': 0}, 0, 0, None, []),
    (a_directory('/d', mode='0750'), {'kind': 'directory', 'mode': 0o755, 'uid': 0, 'gid': 0}, 0, 0, None, ['chmod']),
    ({'path': '/x', 'state': 'absent'}, FILE_NOW, None, None, None, ['remove']),
    ({'path': '/x', 'state': 'absent'}, {'kind': 'link', 'mode': 0o777, 'uid': 0, 'gid': 0}, None, None, None, ['remove']),
    ({'path': '/x', 'state': 'absent'}, {'kind': 'missing'}, None, None, None, []),
])
def test_plan_entry_steps(entry, current, uid, gid, content, steps):
    assert fs.plan_entry(entry, current, uid, gid, content) == (steps, None)


@pytest.mark.parametrize('entry, kind, problem', [
    (a_file('/x'), 'directory', '/x is a directory, not a regular file'),
    (a_file('/x'), 'link', '/x is a symbolic link, not a regular file'),
    (a_directory('/x'), 'file', '/x is a file, not a directory'),
    ({'path': '/x', 'state': 'absent'}, 'directory', '/x is a directory; file_set removes files only'),
])
def test_plan_entry_refuses_what_it_must_not_replace(entry, kind, problem):
    steps, found = fs.plan_entry(entry, {'kind': kind, 'mode': 0o755, 'uid': 0, 'gid': 0}, 0, 0, None)
    assert steps == [] and found.startswith(problem), found


def test_diff_of_text_and_not_of_binary_or_large_files():
    assert fs.diff_of('/x', b'a\n', b'b\n') == {'before_header': '/x', 'after_header': '/x', 'before': 'a\n', 'after': 'b\n'}
    assert fs.diff_of('/x', None, b'b\n')['before'] == ''
    assert fs.diff_of('/x', b'\xff', b'b') is None
    assert fs.diff_of('/x', b'', b'b' * (fs.DIFF_MAX_BYTES + 1)) is None


def test_read_small_reads_up_to_the_limit(tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'abc')
    assert fs.read_small(str(path), 3) == b'abc'
    assert fs.read_small(str(path), 2) is None


def test_current_state_kinds(tmp_path):
    (tmp_path / 'f').write_text('ab')
    os.chmod(tmp_path / 'f', 0o640)
    (tmp_path / 'l').symlink_to(tmp_path / 'f')
    assert fs.current_state(str(tmp_path / 'missing')) == {'kind': 'missing'}
    assert fs.current_state(str(tmp_path / 'f')) == {'kind': 'file', 'mode': 0o640, 'uid': UID, 'gid': GID, 'size': 2}
    assert fs.current_state(str(tmp_path / 'l'))['kind'] == 'link'
    assert fs.current_state(str(tmp_path))['kind'] == 'directory'


def plans_for(entries):
    plans = []
    for entry in entries:
        current = fs.current_state(entry['path'])
        before = fs.read_small(entry['path'], 1 << 20) if current['kind'] == 'file' else None
        steps, problem = fs.plan_entry(entry, current, None, None, before)
        assert problem is None
        plans.append((steps, None, None))
    return plans


def test_apply_entries_makes_directories_files_and_removals(tmp_path):
    (tmp_path / 'old').write_text('old')
    (tmp_path / 'kept').write_text('same\n')
    os.chmod(tmp_path / 'kept', 0o600)
    entries = [a_directory(tmp_path / 'a' / 'b', mode='0750'), a_file(tmp_path / 'a' / 'b' / 'c.sh', 'run\n', '0755'),
               a_file(tmp_path / 'kept', 'same\n', '0644'), {'path': str(tmp_path / 'old'), 'state': 'absent'}]
    plans = plans_for(entries)
    assert [steps for steps, _uid, _gid in plans] == [['mkdir', 'chmod'], ['write', 'chmod'], ['chmod'], ['remove']]
    fs.apply_entries(entries, plans, lambda command, path: None)

    # missing parents get the entry's mode too, as ansible.builtin.file gives them
    assert stat.S_IMODE(os.stat(tmp_path / 'a').st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / 'a' / 'b').st_mode) == 0o750
    assert (tmp_path / 'a' / 'b' / 'c.sh').read_text() == 'run\n'
    assert stat.S_IMODE(os.stat(tmp_path / 'a' / 'b' / 'c.sh').st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / 'kept').st_mode) == 0o644
    assert not (tmp_path / 'old').exists()
    # a second plan finds nothing to do, and no temporary file is left
    assert [steps for steps, _uid, _gid in plans_for(entries[:3])] == [[], [], []]
    assert sorted(p.name for p in tmp_path.rglob('*')) == ['a', 'b', 'c.sh', 'kept']


def test_a_failed_validation_replaces_no_target(tmp_path):
    (tmp_path / 'rules.nft').write_text('old rules\n')
    (tmp_path / 'unit.service').write_text('old unit\n')
    entries = [a_file(tmp_path / 'unit.service', 'new unit\n'),
               a_file(tmp_path / 'rules.nft', 'bad rules\n', validate='nft --check -f %s')]
    checked = []

    def validate(command, path):
        checked.append((command, open(path).read()))
        return 'syntax error, unexpected bad'

    with pytest.raises(RuntimeError) as error:
        fs.apply_entries(entries, plans_for(entries), validate)
    assert str(error.value) == ('%s failed validation (nft --check -f %%s): syntax error, unexpected bad'
                                % (tmp_path / 'rules.nft'))
    assert checked == [('nft --check -f %s', 'bad rules\n')]
    # the unit listed before the rules is not replaced either, and no temporary file is left
    assert (tmp_path / 'unit.service').read_text() == 'old unit\n'
    assert (tmp_path / 'rules.nft').read_text() == 'old rules\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['rules.nft', 'unit.service']


def test_a_validated_file_is_checked_before_its_rename(tmp_path):
    entries = [a_file(tmp_path / 'rules.nft', 'good\n', validate='nft --check -f %s')]
    seen = []
    fs.apply_entries(entries, plans_for(entries),
                     lambda command, path: seen.append((os.path.dirname(path), os.path.exists(tmp_path / 'rules.nft'))))
    # the new file was checked beside its target, before the target existed
    assert seen == [(str(tmp_path), False)]
    assert (tmp_path / 'rules.nft').read_text() == 'good\n'
