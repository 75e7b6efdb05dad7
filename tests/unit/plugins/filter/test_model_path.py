"""model_path filter: the slurped manifest decoded and the model_manifest rule applied."""

import base64
import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.model_path import FilterModule, model_path

WHERE = '/etc/gpulab/model.json'


def slurped(content):
    return {'content': base64.b64encode(json.dumps(content).encode()).decode(), 'encoding': 'base64'}


def test_the_manifest_path_and_the_given_one():
    raw = slurped({'managed_by': 'gpulab.inference', 'path': '/srv/ckpt'})
    assert model_path(raw, '', WHERE, 'vllm_server_model_path') == '/srv/ckpt'
    assert model_path(raw, '/srv/other', WHERE, 'vllm_server_model_path') == '/srv/other'
    # The slurp was skipped because the path was given.
    assert model_path({'skipped': True}, '/srv/other', WHERE, 'vllm_server_model_path') == '/srv/other'


def test_a_missing_manifest_is_a_message_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match=r'llama_server_model_path is empty and /etc/gpulab/model.json is missing \(file not found\)'):
        model_path({'failed': True, 'msg': 'file not found'}, '', WHERE, 'llama_server_model_path')


def test_undecodable_content():
    with pytest.raises(AnsibleFilterError, match='could not be decoded'):
        model_path({'content': '!!!'}, '', WHERE, 'x')
    with pytest.raises(AnsibleFilterError, match='No model to load'):
        model_path(None, '', WHERE, 'x')


def test_registered():
    assert FilterModule().filters()['model_path'] is model_path
