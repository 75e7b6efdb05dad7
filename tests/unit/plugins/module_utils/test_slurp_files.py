"""module_utils/slurp_files: each file as slurp returns it, and the required ones named when absent."""

import base64
import os

from ansible_collections.gpulab.inference.plugins.module_utils.slurp_files import slurp, slurp_all


def test_a_file_reads_as_slurp_returns_it(tmp_path):
    (tmp_path / 'plan.json').write_bytes(b'{"layout": "auto"}\n')
    assert slurp(str(tmp_path / 'plan.json')) == {
        'source': str(tmp_path / 'plan.json'), 'encoding': 'base64',
        'content': base64.b64encode(b'{"layout": "auto"}\n').decode('ascii')}


def test_absent_directory_and_oversized_files_say_why(tmp_path):
    (tmp_path / 'big').write_bytes(b'x' * 11)
    assert slurp(str(tmp_path / 'none')) == {'source': str(tmp_path / 'none'), 'missing': True,
                                             'msg': 'file not found: %s' % (tmp_path / 'none')}
    assert slurp(str(tmp_path)) == {'source': str(tmp_path), 'missing': False, 'msg': 'not a regular file: %s' % tmp_path}
    assert slurp(str(tmp_path / 'big'), max_bytes=10)['msg'] == '%s is larger than 10 bytes: not read' % (tmp_path / 'big')
    assert slurp(str(tmp_path / 'big'), max_bytes=11)['content'] == base64.b64encode(b'x' * 11).decode('ascii')


def test_an_unreadable_file_says_so(tmp_path):
    secret = tmp_path / 'secret'
    secret.write_text('k')
    secret.chmod(0)
    try:
        result = slurp(str(secret))
        if os.geteuid() == 0:  # root reads it anyway
            assert result['content'] == base64.b64encode(b'k').decode('ascii')
        else:
            assert result['msg'].startswith('cannot read %s: ' % secret) and result['missing'] is False
    finally:
        secret.chmod(0o600)


def test_required_names_are_checked(tmp_path):
    (tmp_path / 'a').write_text('1')
    results, problems = slurp_all({'a': str(tmp_path / 'a'), 'b': str(tmp_path / 'b')}, required=['a', 'b', 'c'])
    assert sorted(results) == ['a', 'b']
    assert 'content' in results['a'] and results['b']['missing'] is True
    assert problems == ['b: file not found: %s' % (tmp_path / 'b'), 'c is required but files gives no path for it']
    assert slurp_all({'a': str(tmp_path / 'a')})[1] == []
