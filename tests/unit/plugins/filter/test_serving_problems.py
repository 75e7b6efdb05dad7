"""The serving_problems filter reads, for each host, the role options it set from hostvars and returns
the checks' sentences, the spec's own refusals among them; other variables are not read, a value
hostvars cannot template is left to the role's validation, bad input is a filter error."""

import pytest

from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable

from ansible_collections.gpulab.inference.plugins.filter.serving_problems import FilterModule

serving_problems = FilterModule().filters()["serving_problems"]

OPTIONS = {
    "llama_server_ctx_size": {"role": "llama_server", "spec": {"type": "int", "default": 8192}},
    "llama_server_parallel": {"role": "llama_server", "spec": {"type": "int", "default": 4}},
    "gpu_drain_keep": {"role": "gpu_drain", "spec": {"type": "list", "elements": "str", "default": []}},
}
ERROR = "argument 'llama_server_ctx_size' is of type str and we were unable to convert to int: \"'abc'\" cannot be converted to an int"


class TaggedStr(str):
    """Stands in for the str subclass Ansible hands filters."""


class Unreadable(dict):
    """Host variables of which one needs a role default to be templated."""

    def __getitem__(self, name):
        if name == "gpu_drain_keep":
            raise AnsibleUndefinedVariable("'gpu_drain_default_keep' is undefined")
        return dict.__getitem__(self, name)


def test_reads_and_validates_the_options_of_the_given_hosts():
    hostvars = {"node-a": {"llama_server_ctx_size": TaggedStr("abc"), "other": "x"},
                "node-b": {"llama_server_parallel": "0"},
                "spare": {"llama_server_parallel": 0}}
    assert serving_problems(["node-a", "node-b"], hostvars, OPTIONS) == [
        "llama_server_ctx_size='abc' on node-a: %s; role llama_server takes a whole number; remove the setting for "
        "the default 8192." % ERROR,
        "llama_server_parallel='0' on node-b is below 1: set the number of requests served at once, 1 or more, e.g. 4, "
        "or auto (from gpulab_serving_intent, set by the memory plan)."]


def test_a_value_that_cannot_be_read_here_is_left_to_the_validation():
    hostvars = {"node-a": Unreadable(gpu_drain_keep="{{ gpu_drain_default_keep }}", llama_server_parallel="0")}
    (problem,) = serving_problems(["node-a"], hostvars, OPTIONS)
    assert problem.startswith("llama_server_parallel='0' on node-a is below 1")


def test_a_host_missing_from_hostvars_or_with_good_values_has_nothing_wrong():
    assert serving_problems(["node-a"], {}, OPTIONS) == []
    assert serving_problems(["node-a"], {"node-a": {"gpu_drain_keep": ["x"]}}, OPTIONS) == []


@pytest.mark.parametrize("hosts, hostvars", [("node-a", {}), (["node-a"], None)])
def test_wrong_input_is_a_filter_error(hosts, hostvars):
    with pytest.raises(AnsibleFilterError) as raised:
        serving_problems(hosts, hostvars, OPTIONS)
    assert "gpulab.inference.serving_problems" in str(raised.value)
