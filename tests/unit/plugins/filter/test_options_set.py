"""The options_set filter keeps the argument spec of the role options a host's variables define, and
nothing else; bad input is a filter error."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.options_set import FilterModule

options_set = FilterModule().filters()["options_set"]

OPTIONS = {
    "llama_server_port": {"role": "llama_server", "spec": {"type": "int", "default": 8080}},
    "gpu_drain_keep": {"role": "gpu_drain", "spec": {"type": "list", "elements": "str", "default": []}},
}


def test_keeps_the_options_the_host_set():
    host_vars = {"llama_server_port": None, "ansible_host": "10.0.0.1", "inventory_hostname": "node-a"}
    assert options_set(OPTIONS, host_vars) == {"llama_server_port": {"type": "int", "default": 8080}}
    assert options_set(OPTIONS, {}) == {}


@pytest.mark.parametrize("options, host_vars, words", [
    (["llama_server_port"], {}, "expects role_options' mapping, got list"),
    (OPTIONS, None, "gpulab.inference.options_set: argument of type 'NoneType' is not"),
])
def test_wrong_input_is_a_filter_error(options, host_vars, words):
    with pytest.raises(AnsibleFilterError) as raised:
        options_set(options, host_vars)
    assert words in str(raised.value)
