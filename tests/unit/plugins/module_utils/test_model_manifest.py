"""model_manifest: the one rule for the model a serving role loads, and the manifest's file records."""

import json

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import model_manifest as mm

WHERE = '/etc/gpulab/model.json'


def manifest(**fields):
    base = {'managed_by': 'gpulab.inference', 'path': '/srv/m/m-00001-of-00002.gguf'}
    base.update(fields)
    return json.dumps(base)


def test_the_roles_own_path_wins_over_the_manifest():
    assert mm.model_path('/srv/other.gguf', manifest(), WHERE, 'llama_server_model_path') == '/srv/other.gguf'


def test_the_manifest_names_the_model_otherwise():
    assert mm.model_path('', manifest(), WHERE, 'llama_server_model_path') == '/srv/m/m-00001-of-00002.gguf'
    assert mm.model_path(None, manifest(path='/srv/ckpt'), WHERE, 'vllm_server_model_path') == '/srv/ckpt'


@pytest.mark.parametrize('given, text, unreadable, message', [
    ('', None, 'file not found: /etc/gpulab/model.json',
     'No model to load: memory_plan_model_path is empty and /etc/gpulab/model.json is missing '
     r'\(file not found: /etc/gpulab/model.json\); run playbooks/model.yml'),
    ('', None, None, r'is missing \(not found\)'),
    ('', '{', None, 'is not JSON'),
    ('', '[]', None, 'was not written by the model role'),
    ('', json.dumps({'path': '/x'}), None, 'was not written by the model role'),
    ('', manifest(path=None), None, '"path" is null, not an absolute path'),
    ('', manifest(path='m.gguf'), None, '"path" is "m.gguf", not an absolute path'),
    ('models/m.gguf', manifest(), None, "memory_plan_model_path='models/m.gguf': give the absolute path"),
])
def test_no_model_names_the_variable_and_what_to_do(given, text, unreadable, message):
    with pytest.raises(mm.ModelManifestError, match=message) as raised:
        mm.model_path(given, text, WHERE, 'memory_plan_model_path', unreadable)
    if not given:
        assert str(raised.value).endswith('or set memory_plan_model_path')


def test_file_records_and_back():
    files = [{'name': 'a', 'size_bytes': 3, 'sha256': 'a' * 64}]
    records = mm.file_records(files, {'a': (3, 123)})
    assert records == [{'name': 'a', 'size_bytes': 3, 'sha256': 'a' * 64, 'mtime_ns': 123}]
    assert mm.records_by_name({'files': records + ['junk', {'name': 1}]}) == {'a': records[0]}
    assert mm.records_by_name({'files': None}) == {}
