"""Lookup controller_stat: the keys of ansible.builtin.stat's result, read in the controller's process."""

import hashlib
import os

import pytest

from ansible.errors import AnsibleLookupError
from ansible_collections.gpulab.inference.plugins.lookup.controller_stat import LookupModule, controller_stat


def test_a_regular_file_with_and_without_its_checksum(tmp_path):
    archive = tmp_path / 'llama.cpp.tar.gz'
    archive.write_bytes(b'\x1f\x8b' + b'x' * 3000000)
    os.utime(archive, (1700000000, 1700000000.5))
    plain = controller_stat(str(archive))
    assert plain == {'exists': True, 'isreg': True, 'isdir': False, 'size': 3000002, 'mtime': 1700000000.5}
    hashed = controller_stat(str(archive), checksum=True)
    assert hashed['checksum'] == hashlib.sha256(archive.read_bytes()).hexdigest()


def test_absent_path_and_directory(tmp_path):
    assert controller_stat(str(tmp_path / 'none'), checksum=True) == {'exists': False}
    directory = controller_stat(str(tmp_path), checksum=True)
    assert (directory['exists'], directory['isreg'], directory['isdir'], 'checksum' in directory) == (True, False, True, False)


def test_a_file_that_cannot_be_read_is_a_clear_error(tmp_path, monkeypatch):
    archive = tmp_path / 'a.tar.gz'
    archive.write_bytes(b'x')

    def refuse(*unused_args, **unused_kwargs):
        raise PermissionError(13, 'Permission denied')
    monkeypatch.setattr('builtins.open', refuse)
    with pytest.raises(AnsibleLookupError, match='controller_stat: cannot read %s: Permission denied' % archive):
        controller_stat(str(archive), checksum=True)


def test_the_lookup_returns_one_dict_per_term(tmp_path):
    (tmp_path / 'a').write_text('a')
    lookup = LookupModule()
    result = lookup.run([str(tmp_path / 'a'), str(tmp_path / 'b')], variables={}, checksum=True)
    assert [item['exists'] for item in result] == [True, False]
    assert result[0]['checksum'] == hashlib.sha256(b'a').hexdigest()


def test_a_bad_option_is_refused(tmp_path):
    with pytest.raises(AnsibleLookupError, match='unknown option checksums'):
        LookupModule().run([str(tmp_path)], variables={}, checksums=True)
    with pytest.raises(AnsibleLookupError, match="checksum must be a boolean, not 'maybe'"):
        LookupModule().run([str(tmp_path)], variables={}, checksum='maybe')
