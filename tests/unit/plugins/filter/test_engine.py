"""engine filter: gpulab_engine with auto resolved from the head's inventory variables."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.engine import FilterModule, engine, engine_units
from common_defaults import common_default

TABLE = common_default('gpulab_engines')


class Lazy(dict):
    """hostvars of one host that fails when a variable the rule does not read is templated."""

    def __getitem__(self, key):
        if key == "unrelated":
            raise AssertionError("the filter templated a variable it does not read")
        return dict.__getitem__(self, key)


HOSTVARS = {"node-a": Lazy(model_source="http://10.231.77.5/ckpt", unrelated="{{ boom }}"),
            "node-b": Lazy(model_source="http://10.231.77.5/m.gguf")}


def test_auto_reads_the_head_only():
    assert engine("auto", HOSTVARS, ["node-a", "node-b"], TABLE) == "vllm"
    assert engine("auto", HOSTVARS, ["node-b"], TABLE) == "llama_cpp"
    detail = engine("auto", HOSTVARS, ["node-a"], TABLE, detail=True)
    assert detail["engine"] == "vllm" and detail["reason"].startswith("auto: model_source http://10.231.77.5/ckpt is a Hugging")


def test_a_set_engine_needs_no_head():
    assert engine("llama_cpp", {}, [], TABLE) == "llama_cpp"
    assert engine("vllm", {}, [], TABLE, detail=True) == {"engine": "vllm", "reason": "gpulab_engine is set to vllm"}


@pytest.mark.parametrize("setting, hostvars, head, message", [
    ("sglang", {}, [], "gpulab_engine is 'sglang'; set one of llama_cpp, vllm"),
    ("auto", {"h": Lazy(model_source="head")}, ["h"], "model_source is head, but model_path"),
])
def test_bad_input_is_a_message(setting, hostvars, head, message):
    with pytest.raises(AnsibleFilterError, match=message):
        engine(setting, hostvars, head, TABLE)


def test_no_head_or_no_model_is_the_first_engine():
    assert engine("auto", {}, [], TABLE) == "llama_cpp"
    assert engine("auto", {"h": Lazy()}, ["h"], TABLE) == "llama_cpp"


def test_engine_units():
    assert engine_units(TABLE, ["vllm"]) == ["gpulab-vllm.service"]
    with pytest.raises(AnsibleFilterError, match="gpulab_stop_engines names x"):
        engine_units(TABLE, ["x"])


def test_registered():
    assert FilterModule().filters() == {"engine": engine, "engine_units": engine_units}
