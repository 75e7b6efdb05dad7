"""model_source_kind filter: the kinds, and a bad source as a message."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.model_source_kind import FilterModule, model_source_kind


@pytest.mark.parametrize('source, kind', [('head', 'head'), ('http://10.231.77.5/m/', 'url'), ('/srv/m.gguf', 'controller')])
def test_kinds(source, kind):
    assert model_source_kind(source) == kind


def test_a_relative_path_is_a_message():
    with pytest.raises(AnsibleFilterError, match="model_source 'models/m.gguf': a path on the controller must be absolute"):
        model_source_kind('models/m.gguf')


def test_registered():
    assert FilterModule().filters() == {'model_source_kind': model_source_kind}
