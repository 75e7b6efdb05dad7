"""The serving_problems filter reads the serving variables each host set from hostvars and returns
the checks' sentences; other variables are not read, bad input is a filter error."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.serving_problems import FilterModule

serving_problems = FilterModule().filters()["serving_problems"]


class TaggedStr(str):
    """Stands in for the str subclass Ansible hands filters."""


def test_reads_only_the_serving_variables_of_the_given_hosts():
    hostvars = {"node-a": {"llama_server_ctx_size": TaggedStr("abc"), "other": "x"},
                "node-b": {"llama_server_parallel": 2},
                "spare": {"llama_server_parallel": 0}}
    assert serving_problems(["node-a", "node-b"], hostvars) == [
        "llama_server_ctx_size='abc' on node-a is not a whole number: set the context in tokens shared by all "
        "slots, e.g. 8192 (0: the model's training context)."]


def test_a_host_missing_from_hostvars_has_nothing_set():
    assert serving_problems(["node-a"], {}) == []


@pytest.mark.parametrize("hosts, hostvars", [("node-a", {}), (["node-a"], None)])
def test_wrong_input_is_a_filter_error(hosts, hostvars):
    with pytest.raises(AnsibleFilterError) as raised:
        serving_problems(hosts, hostvars)
    assert "gpulab.inference.serving_problems" in str(raised.value)
