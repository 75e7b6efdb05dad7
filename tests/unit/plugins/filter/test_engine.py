"""engine filter: gpulab_engine with auto resolved from the head's inventory variables."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.engine import FilterModule, engine


class Lazy(dict):
    """hostvars of one host that fails when a variable the rule does not read is templated."""

    def __getitem__(self, key):
        if key == "unrelated":
            raise AssertionError("the filter templated a variable it does not read")
        return dict.__getitem__(self, key)


HOSTVARS = {"node-a": Lazy(model_source="http://10.231.77.5/ckpt", unrelated="{{ boom }}"),
            "node-b": Lazy(model_source="http://10.231.77.5/m.gguf")}


def test_auto_reads_the_head_only():
    assert engine("auto", HOSTVARS, ["node-a", "node-b"]) == "vllm"
    assert engine("auto", HOSTVARS, ["node-b"]) == "llama_cpp"
    detail = engine("auto", HOSTVARS, ["node-a"], detail=True)
    assert detail["engine"] == "vllm" and detail["reason"].startswith("auto: model_source http://10.231.77.5/ckpt is a Hugging")


def test_a_set_engine_needs_no_head():
    assert engine("llama_cpp", {}, []) == "llama_cpp"
    assert engine("vllm", {}, [], detail=True) == {"engine": "vllm", "reason": "gpulab_engine is set to vllm"}


@pytest.mark.parametrize("setting, hostvars, head, message", [
    ("auto", {}, [], "gpulab_engine is auto but the inventory has no head"),
    ("auto", {"h": Lazy()}, ["h"], "gpulab_engine is auto but the inventory names no model"),
    ("sglang", {}, [], "gpulab_engine is 'sglang'; set llama_cpp, vllm or auto"),
])
def test_bad_input_is_a_message(setting, hostvars, head, message):
    with pytest.raises(AnsibleFilterError, match=message):
        engine(setting, hostvars, head)


def test_registered():
    assert FilterModule().filters() == {"engine": engine}
