"""Module file_set on a temporary directory: one run writes, a second finds nothing to do, check
mode and a failed validation write nothing, and what it must not replace fails before any change."""

import os
import stat

from ansible_collections.gpulab.inference.plugins.modules import file_set
from module_harness import ExitJson, FailJson, run_module


def entries(tmp_path):
    return [
        {'path': str(tmp_path / 'etc'), 'state': 'directory', 'mode': '0755'},
        {'path': str(tmp_path / 'etc' / 'rules.nft'), 'content': 'table inet gpulab {}\n', 'mode': '0644',
         'validate': 'nft --check -f %s'},
        {'path': str(tmp_path / 'old.json'), 'state': 'absent'},
    ]


def run(args, answers=None, bin_path='/usr/bin/nft'):
    return run_module(file_set.main, args, {} if answers is None else answers, bin_path)


def nft_check(tmp_path, rc=0, err=''):
    """The validation command's answer for any temporary file beside rules.nft."""
    class Answers(dict):
        def __getitem__(self, command):
            assert command[:3] == ('nft', '--check', '-f') and os.path.dirname(command[3]) == str(tmp_path / 'etc'), command
            return rc, '', err
    return Answers()


def test_writes_then_finds_nothing_to_do(tmp_path):
    (tmp_path / 'old.json').write_text('{}')
    first = run({'files': entries(tmp_path)}, nft_check(tmp_path))
    assert first.kind is ExitJson, first.result
    assert first.result['changed'] is True
    assert first.result['changed_paths'] == [str(tmp_path / 'etc'), str(tmp_path / 'etc' / 'rules.nft'), str(tmp_path / 'old.json')]
    assert [item['steps'] for item in first.result['files']] == [['mkdir', 'chmod'], ['write', 'chmod'], ['remove']]
    assert first.commands and first.commands[0][:3] == ['nft', '--check', '-f']
    assert (tmp_path / 'etc' / 'rules.nft').read_text() == 'table inet gpulab {}\n'
    assert stat.S_IMODE(os.stat(tmp_path / 'etc' / 'rules.nft').st_mode) == 0o644
    assert not (tmp_path / 'old.json').exists()

    second = run({'files': entries(tmp_path)})
    assert second.kind is ExitJson and second.result['changed'] is False and second.result['changed_paths'] == []
    # a file that is already right is not validated again
    assert second.commands == []


def test_check_mode_reports_and_writes_nothing(tmp_path):
    result = run({'files': entries(tmp_path), '_ansible_check_mode': True, '_ansible_diff': True})
    assert result.kind is ExitJson and result.result['changed'] is True
    assert result.result['diff'] == [{'before_header': str(tmp_path / 'etc' / 'rules.nft'),
                                      'after_header': str(tmp_path / 'etc' / 'rules.nft'),
                                      'before': '', 'after': 'table inet gpulab {}\n'}]
    assert result.commands == []
    assert sorted(os.listdir(tmp_path)) == []


def test_a_failed_validation_fails_and_leaves_the_file(tmp_path):
    (tmp_path / 'etc').mkdir()
    (tmp_path / 'etc' / 'rules.nft').write_text('old\n')
    result = run({'files': entries(tmp_path)}, nft_check(tmp_path, rc=1, err='Error: syntax error\n'))
    assert result.kind is FailJson
    assert result.result['msg'] == 'file_set: %s failed validation (nft --check -f %%s): Error: syntax error' % (
        tmp_path / 'etc' / 'rules.nft')
    assert (tmp_path / 'etc' / 'rules.nft').read_text() == 'old\n'
    assert sorted(os.listdir(tmp_path / 'etc')) == ['rules.nft']


def test_a_directory_where_a_file_belongs_fails_before_any_change(tmp_path):
    (tmp_path / 'etc' / 'rules.nft').mkdir(parents=True)
    (tmp_path / 'old.json').write_text('{}')
    result = run({'files': entries(tmp_path)})
    assert result.kind is FailJson
    assert result.result['msg'] == ('file_set: %s is a directory, not a regular file; move it away or choose another path'
                                    % (tmp_path / 'etc' / 'rules.nft'))
    assert (tmp_path / 'old.json').exists()


def test_bad_entries_and_unknown_accounts_are_refused(tmp_path):
    bad = run({'files': [{'path': 'relative', 'content': 'x', 'mode': '0644'}]})
    assert bad.kind is FailJson and bad.result['problems'] == ['files[0] (relative): path must be absolute']
    unrendered = run({'files': [{'path': str(tmp_path / 'x'), 'template': 'x.j2', 'mode': '0644'}]})
    assert unrendered.kind is FailJson and 'call the module through it' in unrendered.result['msg']
    account = run({'files': [{'path': str(tmp_path / 'x'), 'content': 'x', 'mode': '0644', 'owner': 'gpulab-no-such-user'}]})
    assert account.kind is FailJson
    assert account.result['msg'] == "%s: owner 'gpulab-no-such-user' does not exist on this node; create it first" % (tmp_path / 'x')
    assert not (tmp_path / 'x').exists()


def test_check_mode_takes_an_account_made_later_in_the_run_as_a_change(tmp_path):
    (tmp_path / 'x').write_text('x')
    os.chmod(tmp_path / 'x', 0o644)
    result = run({'files': [{'path': str(tmp_path / 'x'), 'content': 'x', 'mode': '0644', 'group': 'gpulab-no-such-group'}],
                  '_ansible_check_mode': True})
    assert result.kind is ExitJson and result.result['changed_paths'] == [str(tmp_path / 'x')]
