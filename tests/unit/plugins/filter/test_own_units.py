"""own_units: the collection's units (or programs) of one engine among a node's, in stop order."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.own_units import FilterModule, own_units
from common_defaults import common_default

ENGINES = dict((name, entry['units']) for name, entry in common_default('gpulab_engines').items())
SERVICES = ['gpulab-rpc-server@.service', 'gpulab-rpc-server@1.service', 'whisper-asr.service',
            'gpulab-llama-server.service', 'gpulab-rpc-server@0.service', 'gpulab-vllm.service',
            'gpulab-rpc-server-firewall.service']


def test_the_llama_cpp_units_the_head_first_without_the_template_or_the_firewall():
    assert own_units(SERVICES, ENGINES['llama_cpp']) == [
        'gpulab-llama-server.service', 'gpulab-rpc-server@1.service', 'gpulab-rpc-server@0.service']


def test_the_vllm_unit():
    assert own_units(SERVICES, ENGINES['vllm']) == ['gpulab-vllm.service']


def test_programs_match_as_their_units():
    programs = ['gpulab-rpc-server-0', 'notebook', 'gpulab-llama-server', 'gpulab-vllm']
    assert own_units(programs, ENGINES['llama_cpp'], kind='supervisor') == ['gpulab-llama-server', 'gpulab-rpc-server-0']
    assert own_units(programs, ENGINES['vllm'], kind='supervisor') == ['gpulab-vllm']


@pytest.mark.parametrize('names, patterns, kind, message', [
    ('gpulab-vllm.service', ['*'], 'systemd', 'the input must be a list of names'),
    (['a'], None, 'systemd', 'the patterns must be a list of names'),
    (['a'], ['*'], 'podman', "kind 'podman' is not systemd or supervisor"),
])
def test_bad_input_is_named(names, patterns, kind, message):
    with pytest.raises(AnsibleFilterError, match='gpulab.inference.own_units: ' + message):
        own_units(names, patterns, kind)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'own_units': own_units}
