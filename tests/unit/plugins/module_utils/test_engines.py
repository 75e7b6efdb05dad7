"""engines: the engine table's reader - the table checked, gpulab_engine resolved, the units asked."""

import copy

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import engines as en
from common_defaults import common_default

TABLE = common_default('gpulab_engines')


def test_the_shipped_table_holds():
    assert en.check_table(TABLE) is TABLE
    assert list(TABLE) == ['llama_cpp', 'vllm']
    assert TABLE['llama_cpp']['units'] == ['gpulab-llama-server.service', 'gpulab-rpc-server@[0-9]*.service']
    # a step the table leaves out is skipped without a word: llama.cpp's dry-run check among them
    assert TABLE['llama_cpp']['steps'] == list(en.ENGINE_STEPS)
    assert TABLE['vllm']['steps'] == ['model', 'serve']


@pytest.mark.parametrize("change, message", [
    (lambda t: t['vllm'].pop('role'), r"gpulab_engines.vllm.role must be a str, got None"),
    (lambda t: t['vllm'].update(formats=['onnx']), r"gpulab_engines.vllm.formats must list some of gguf, hf"),
    (lambda t: t['vllm'].update(steps=['model']), r"gpulab_engines.vllm.steps must include serve"),
    (lambda t: t['vllm'].update(steps=['serve', 'warm']), r"gpulab_engines.vllm.steps must include serve"),
    (lambda t: t['vllm']['api'].pop('port'), r"gpulab_engines.vllm.api has no port"),
    (lambda t: t['vllm'].update(units=[]), r"gpulab_engines.vllm.units must list"),
    (lambda t: t.update(auto=t['vllm']), r"gpulab_engines.auto: an engine's name"),
])
def test_a_broken_entry_is_named(change, message):
    table = copy.deepcopy(TABLE)
    change(table)
    with pytest.raises(en.EngineError, match=message):
        en.check_table(table)


def test_auto_follows_the_model_format():
    assert en.choose_engine("auto", "gguf", TABLE, "/m.gguf") == {
        "engine": "llama_cpp", "reason": "auto: /m.gguf is a GGUF model, which llama.cpp serves"}
    assert en.choose_engine("auto", "hf", TABLE, "/m")["engine"] == "vllm"
    assert en.choose_engine("vllm", "gguf", TABLE)["reason"] == "gpulab_engine is set to vllm"
    with pytest.raises(en.EngineError, match="neither a GGUF file nor a Hugging Face checkpoint"):
        en.choose_engine("auto", None, TABLE, "/m")
    with pytest.raises(en.EngineError, match=r"gpulab_engine is 'sglang'; set one of llama_cpp, vllm \(the engines "
                                             r"of gpulab_engines\) or auto"):
        en.choose_engine("sglang", "hf", TABLE)


def test_a_format_no_engine_serves_is_refused():
    only_gguf = {"llama_cpp": TABLE["llama_cpp"]}
    with pytest.raises(en.EngineError, match="no engine of gpulab_engines serves /m"):
        en.choose_engine("auto", "hf", only_gguf, "/m")


def test_an_engine_added_to_the_table_is_chosen_by_its_format_and_order():
    table = {"echo": dict(copy.deepcopy(TABLE["vllm"]), label="echo", role="echo_engine")}
    table.update(copy.deepcopy(TABLE))
    assert en.choose_engine("auto", "hf", table, "/m") == {
        "engine": "echo", "reason": "auto: /m is a Hugging Face checkpoint (config.json and safetensors), which echo serves"}
    assert en.choose_engine("echo", None, table)["engine"] == "echo"
    assert en.unit_patterns(table)[0] == "gpulab-vllm.service"


@pytest.mark.parametrize("variables, engine, said", [
    # molecule default: the lab's synthetic GGUF
    ({"model_synthetic": {"path": "/var/lib/gpulab/models/s.gguf", "shards": 2}, "model_path": "", "model_source": ""},
     "llama_cpp", "auto: a synthetic GGUF (model_synthetic) is a GGUF model"),
    # molecule vllm: the checkpoint named for vLLM wins over the lab's synthetic default
    ({"vllm_server_model_path": "/var/lib/gpulab/models/fp8", "model_synthetic": {"shards": 2}}, "vllm",
     "auto: vllm_server_model_path /var/lib/gpulab/models/fp8 is a Hugging Face checkpoint"),
    # molecule models: a mirror's first GGUF shard, or a checkpoint directory
    ({"model_source": "http://10.231.78.5/gguf/m-00001-of-00002.gguf"}, "llama_cpp",
     "model_source http://10.231.78.5/gguf/m-00001-of-00002.gguf is a GGUF model"),
    ({"model_source": "http://10.231.78.5/ckpt/"}, "vllm", "model_source http://10.231.78.5/ckpt/ is a Hugging Face"),
    ({"model_source": "/srv/models/M.GGUF"}, "llama_cpp", "model_source /srv/models/M.GGUF"),
    ({"model_source": "head", "model_path": "/srv/models/ckpt"}, "vllm", "model_source head, model_path /srv/models/ckpt"),
    ({"model_source": "head", "model_path": "/srv/m.gguf"}, "llama_cpp", "model_source head, model_path /srv/m.gguf"),
    ({"model_path": "/srv/m-00001-of-00003.gguf"}, "llama_cpp", "model_path /srv/m-00001-of-00003.gguf"),
    ({"llama_server_model_path": "/srv/m.gguf", "model_synthetic": {}}, "llama_cpp", "llama_server_model_path"),
    # no model named (a fabric-only lab): the table's first engine, said so
    ({"model_path": "", "model_synthetic": {}, "model_source": None}, "llama_cpp", "names no model"),
])
def test_auto_from_the_inventory(variables, engine, said):
    chosen = en.engine_from_inventory("auto", variables, TABLE)
    assert chosen["engine"] == engine
    assert said in chosen["reason"], chosen["reason"]


def test_a_set_engine_is_kept_and_an_unknown_one_refused():
    assert en.engine_from_inventory("vllm", {"model_synthetic": {"shards": 2}}, TABLE) == {
        "engine": "vllm", "reason": "gpulab_engine is set to vllm"}
    assert en.engine_from_inventory(None, {}, TABLE)["engine"] == "llama_cpp"
    with pytest.raises(en.EngineError, match="gpulab_engine is 'vlm'; set one of llama_cpp, vllm"):
        en.engine_from_inventory("vlm", {}, TABLE)
    with pytest.raises(en.EngineError, match="model_source is head, but model_path .the model on the head. is not set"):
        en.engine_from_inventory("auto", {"model_source": "head"}, TABLE)


def test_units_in_table_order_for_the_engines_asked():
    assert en.unit_patterns(TABLE) == ['gpulab-llama-server.service', 'gpulab-rpc-server@[0-9]*.service',
                                       'gpulab-vllm.service']
    assert en.unit_patterns(TABLE, ['vllm']) == ['gpulab-vllm.service']
    assert en.unit_patterns(TABLE, []) == []
    with pytest.raises(en.EngineError, match="gpulab_stop_engines names sglang, not an engine of gpulab_engines"):
        en.unit_patterns(TABLE, ['sglang'])


def test_the_others_are_retired():
    assert en.others(TABLE, 'vllm') == ['llama_cpp']
