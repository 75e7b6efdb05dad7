# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Layer placement, KV cache and fit arithmetic of gguf_plan, on synthetic GGUF files and on
tensor lists shaped like the full MiniMax-M2 (no file needed)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest
from common_defaults import OWN_UNITS

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

MIB = 1024 * 1024


class ShapedModel:
    """A model's metadata and tensor infos without a file (tensor data is never read anyway)."""

    def __init__(self, options, n_vocab):
        opts = sm.validate_options(options)
        self.path = "/models/%s.gguf" % opts["architecture"]
        self.metadata = dict((k, v.value) for k, v in sm.minimax_m2_metadata(opts))
        self.metadata["general.architecture"] = opts["architecture"]
        self.metadata["%s.vocab_size" % opts["architecture"]] = n_vocab
        self.tensors = [(plan.info, 0) for plan in sm.minimax_m2_tensors(opts, n_vocab)]
        self.size_bytes = sum(gguf.ggml_nbytes(i.ggml_type, i.dims) for i, _s in self.tensors)

    def get(self, key, default=None):
        return self.metadata.get(key, default)


# MiniMax-M2 itself (the comments of synthetic_model.DEFAULTS), in Q8_0
MINIMAX_M2 = dict(layers=62, hidden_size=3072, attention_heads=48, kv_heads=8, head_dim=128, experts=256,
                  experts_used=8, expert_ffn_size=1536, context_length=196608)


@pytest.fixture(scope="module")
def minimax():
    return ShapedModel(MINIMAX_M2, 200064)


@pytest.fixture(scope="module")
def lab_model(tmp_path_factory):
    """The lab's synthetic model (inventory/demo: the defaults, two shards), built-in vocabulary."""
    opts = sm.validate_options({"shards": 2})
    plan = sm.ModelPlan(opts, str(tmp_path_factory.mktemp("lab") / "synthetic-minimax-m2.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    return gguf.read_gguf_model(plan.paths[0])


def devices(*free, **kwargs):
    hosts = kwargs.get("hosts") or [None] * len(free)
    return [{"name": "D%d" % i, "free_mib": f, "host": h} for i, (f, h) in enumerate(zip(free, hosts))]


def test_tensor_layers_follow_llama_cpp_names():
    assert gp.tensor_layer("token_embd.weight", 4) == gp.INPUT
    assert gp.tensor_layer("output.weight", 4) == gp.OUTPUT
    assert gp.tensor_layer("output_norm.weight", 4) == gp.OUTPUT
    assert gp.tensor_layer("blk.3.ffn_up_exps.weight", 4) == 3
    with pytest.raises(gp.PlanError, match=r"blk\.4\.attn_q\.weight belongs to layer 4 but the model has 4 layers"):
        gp.tensor_layer("blk.4.attn_q.weight", 4)


# ---------------------------------------------------------------- tensor split input

def test_tensor_split_modes():
    devs = [{"name": "A", "free_mib": 100, "total_mib": 400}, {"name": "B", "free_mib": 300, "total_mib": 400}]
    assert gp.tensor_split("equal", devs) == [1.0, 1.0]
    assert gp.tensor_split("free", devs) == [100.0, 300.0]
    assert gp.tensor_split("proportional", devs) == [400.0, 400.0]
    assert gp.tensor_split([3, "1"], devs) == [3.0, 1.0]
    assert gp.tensor_split("3,1", devs) == [3.0, 1.0]
    assert gp.tensor_split("3/1", devs) == [3.0, 1.0]
    # shorter than the devices: the rest get 0, as common/arg.cpp fills them
    assert gp.tensor_split([1], devs) == [1.0, 0.0]


@pytest.mark.parametrize("split, message", [
    ([1, -1], r"tensor_split entry -1 is negative; proportions must be >= 0"),
    ([0, 0], r"tensor_split \[0, 0\] is all zero, which puts nothing on any device"),
    ("0,0", r"tensor_split \['0', '0'\] is all zero"),
    ([1, 1, 1], r"tensor_split has 3 entries but there are only 2 devices \(A, B\)"),
    (["x", 1], r"tensor_split entry 'x' is not a number"),
    ([float("nan"), 1], r"tensor_split entry nan must be a finite number"),
    ([True, 1], r"tensor_split entry True is not a number"),
    ("bytes", r"tensor_split 'bytes' is not equal, free, proportional or a list of numbers"),
])
def test_bad_tensor_split_is_named(split, message):
    devs = [{"name": "A", "free_mib": 100}, {"name": "B", "free_mib": 300}]
    with pytest.raises(gp.PlanError, match=message):
        gp.tensor_split(split, devs)


def test_split_by_unknown_memory_is_refused():
    with pytest.raises(gp.PlanError, match=r"free_mib is unknown for B; tensor_split=free needs it"):
        gp.tensor_split("free", [{"name": "A", "free_mib": 1}, {"name": "B", "free_mib": None}])
    with pytest.raises(gp.PlanError, match=r"total_mib is unknown for A"):
        gp.tensor_split("proportional", [{"name": "A", "free_mib": 1}])


def test_bad_devices_are_named():
    with pytest.raises(gp.PlanError, match=r"devices is empty"):
        gp.normalise_devices([])
    with pytest.raises(gp.PlanError, match=r"devices\[1\] .* needs a name"):
        gp.normalise_devices([{"name": "A"}, {"free_mib": 3}])
    with pytest.raises(gp.PlanError, match=r"device name A appears twice"):
        gp.normalise_devices([{"name": "A"}, {"name": "A"}])
    with pytest.raises(gp.PlanError, match=r"devices\[0\]\.free_mib -5 is negative"):
        gp.normalise_devices([{"name": "A", "free_mib": -5}])
    with pytest.raises(gp.PlanError, match=r"17 devices but llama.cpp handles at most 16"):
        gp.tensor_split("equal", [{"name": "D%d" % i} for i in range(17)])


# ---------------------------------------------------------------- KV cache (llama-context.cpp, llama-kv-cache.cpp)

@pytest.mark.parametrize("ctx, parallel, unified, expected", [
    (2048, 1, False, (2048, 1)),
    (8192, 4, False, (2048, 4)),
    (1000, 3, False, (512, 3)),   # 1000 -> 1024 cells; 1024 // 3 = 341 -> 512 per stream
    (8192, 4, True, (8192, 1)),
    (0, 1, False, (4096, 1)),     # the training context
    (100, 1, False, (256, 1)),
])
def test_kv_cells(ctx, parallel, unified, expected):
    assert gp.kv_cells(ctx, parallel, 4096, unified) == expected


def test_bad_kv_input_is_named():
    with pytest.raises(gp.PlanError, match=r"parallel=0 must be a positive number of slots"):
        gp.kv_cells(2048, 0, 4096)
    with pytest.raises(gp.PlanError, match=r"ctx_size=-1 must be a number of tokens >= 0"):
        gp.kv_cells(-1, 1, 4096)
    with pytest.raises(gp.PlanError, match=r"ctx_size=0 asks for the model's training context, but the model does not say it"):
        gp.kv_cells(0, 1, 0)
    with pytest.raises(gp.PlanError, match=r"cache_type_k='q3' is not a KV cache type llama.cpp accepts; use one of: bf16, f16"):
        gp.cache_type("q3", "cache_type_k")


def test_kv_bytes_per_layer_for_minimax_m2(minimax):
    facts = gp.model_facts(minimax)
    # n_embd_k_gqa = 128 x 8 = 1024 values per cell: f16 2048 bytes, q8_0 1024 / 32 x 34 = 1088 bytes
    assert gp.kv_bytes_per_layer(facts, 1000, 2, 1, 1)[0] == (2048 * 2000, 2048 * 2000)
    assert gp.kv_bytes_per_layer(facts, 1000, 1, 8, 8)[61] == (1088 * 1000, 1088 * 1000)


def test_quantized_v_cache_needs_flash_attention(lab_model):
    with pytest.raises(gp.PlanError, match=r"cache_type_v=q8_0 needs flash attention"):
        gp.plan_layout(lab_model, devices(100, 100), cache_type_v="q8_0", flash_attn="off", ctx_size=512)


# ---------------------------------------------------------------- model facts

def test_facts_of_the_lab_model(lab_model):
    facts = gp.model_facts(lab_model)
    assert facts["architecture"] == "minimax-m2"
    assert (facts["layers"], facts["experts"], facts["experts_used"]) == (4, 8, 2)
    assert facts["files"] == 2
    assert facts["total_params"] == sum(info.n_elements for info, _s in lab_model.tensors)
    assert facts["size_bytes"] == sum(s.file_size for s in lab_model.shards)
    experts = sum(info.n_elements for info, _s in lab_model.tensors if "_exps" in info.name)
    assert facts["active_params"] == facts["total_params"] - experts + experts * 2 // 8


def test_facts_of_minimax_m2_match_its_published_size(minimax):
    facts = gp.model_facts(minimax)
    # MiniMax-M2: 230B parameters, 10B active (general figures; the embeddings and router add a little)
    assert 228e9 < facts["total_params"] < 231e9
    assert 10e9 < facts["active_params"] < 11.5e9
    # Q8_0 is 8.5 bits per weight: about 226 GiB, the seed's figure
    assert 225 < facts["size_bytes"] / float(1 << 30) < 229
    # at decode every token reads the dense weights and 8 of 256 experts: about 10.6 GiB ... per token
    assert 10e9 < facts["decode_bytes_per_token"] < 12.5e9


def test_not_a_model_is_named():
    class VocabOnly:
        path = "/models/ggml-vocab-qwen2.gguf"
        tensors = []
        size_bytes = 0

        def get(self, key, default=None):
            return default

    with pytest.raises(gp.PlanError, match=r"ggml-vocab-qwen2\.gguf has no general\.architecture: not a model"):
        gp.model_facts(VocabOnly())


def shaped(**metadata):
    model = ShapedModel(dict(layers=2, hidden_size=256, attention_heads=4, kv_heads=2, head_dim=64, experts=4,
                             experts_used=2, expert_ffn_size=128), 1000)
    arch = model.metadata["general.architecture"]
    for name, value in metadata.items():
        full = "%s.%s" % (arch, name.replace("__", "."))
        if value is None:
            model.metadata.pop(full, None)
        else:
            model.metadata[full] = value
    return model


@pytest.mark.parametrize("metadata, message", [
    ({"attention__head_count": 0}, "attention.head_count is 0 (int), expected a whole number >= 1"),
    ({"attention__head_count": [0, 0]}, "attention.head_count is 0 for every layer"),
    ({"attention__head_count": "48"}, "attention.head_count is '48' (str)"),
    ({"attention__head_count": 4.5}, "attention.head_count is 4.5 (float)"),
    ({"attention__head_count": [4, "x"]}, "attention.head_count[1] is 'x'"),
    ({"attention__head_count": [4, 4, 4]}, "attention.head_count has 3 entries for 2 layers"),
    ({"attention__head_count_kv": -1}, "attention.head_count_kv is -1"),
    ({"block_count": 0}, "block_count is 0 (int), expected a whole number >= 1"),
    ({"block_count": "62"}, "block_count is '62' (str)"),
    ({"block_count": True}, "block_count is True (bool)"),
    ({"embedding_length": [256]}, "embedding_length is [256] (list)"),
    ({"attention__key_length": 0}, "attention.key_length is 0"),
    ({"expert_count": "many"}, "expert_count is 'many'"),
    ({"expert_used_count": 9}, "expert_used_count is 9 but"),
    ({"context_length": -1}, "context_length is -1"),
    ({"vocab_size": "big"}, "vocab_size is 'big'"),
])
def test_gguf_metadata_of_the_wrong_type_or_value_is_named(metadata, message):
    model = shaped(**metadata)
    model.metadata.pop("tokenizer.ggml.tokens", None)
    with pytest.raises(gp.PlanError) as raised:
        gp.model_facts(model)
    assert model.path in str(raised.value)
    assert message in str(raised.value)


@pytest.mark.parametrize("arch", [7, ["minimax-m2"], "minimax m2", "minimax-m2\n"])
def test_an_architecture_that_is_not_a_name_is_named(arch):
    model = shaped()
    model.metadata["general.architecture"] = arch
    with pytest.raises(gp.PlanError, match="metadata general.architecture is"):
        gp.model_facts(model)


def test_per_layer_head_counts_with_attention_free_layers_are_read():
    facts = gp.model_facts(shaped(attention__head_count=[0, 4], attention__head_count_kv=[0, 2]))
    assert (facts["attention_heads"], facts["kv_heads"]) == (4, [0, 2])


# ---------------------------------------------------------------- plans

def test_plan_of_the_lab_layout_matches_what_llama_server_logged(lab_model):
    """The demo (README): RPC0 holds layers 0-2 = 13.62 MiB, RPC1 layer 3 and the output."""
    plan = gp.plan_layout(lab_model, devices(24105, 24105), split="equal", ctx_size=2048, parallel=1, margin_mib=0)
    first, second = plan["devices"]
    assert (first["layers"], first["output_layer"]) == ([0, 1, 2], False)
    assert (second["layers"], second["output_layer"]) == ([3], True)
    assert first["weights_mib"] == 13.62
    # K and V: 2 KV heads x 128 x 2048 cells x f16 = 1 MiB each, per layer
    assert (first["kv_cache_mib"], second["kv_cache_mib"]) == (6.0, 2.0)
    weights = sum(gguf.align_offset(gguf.ggml_nbytes(i.ggml_type, i.dims), 32) for i, _s in lab_model.tensors)
    embd = [i for i, _s in lab_model.tensors if i.name == "token_embd.weight"][0]
    assert first["weights_mib"] + second["weights_mib"] == pytest.approx(
        (weights - gguf.ggml_nbytes(embd.ggml_type, embd.dims)) / float(MIB), abs=0.02)
    assert plan["cpu"]["weights_mib"] == round(gguf.ggml_nbytes(embd.ggml_type, embd.dims) / float(MIB), 2)
    assert plan["fits"] is True and plan["overflowing"] == []


def test_a_device_that_would_overflow_is_named_in_the_table(lab_model):
    plan = gp.plan_layout(lab_model, devices(24105, 10), split="equal", ctx_size=2048, margin_mib=0)
    assert plan["fits"] is False
    assert plan["overflowing"] == ["D1"]
    table = gp.format_table(plan)
    assert table[0].startswith("device")
    assert table[2].startswith("D1") and table[2].endswith("NO")
    assert table[1].endswith("yes")


def test_the_margin_counts(lab_model):
    plan = gp.plan_layout(lab_model, devices(100, 100), ctx_size=2048, margin_mib=0)
    need = max(r["total_mib"] for r in plan["devices"])
    assert gp.plan_layout(lab_model, devices(100, 100), ctx_size=2048, margin_mib=100 - need + 1)["fits"] is False
    assert gp.plan_layout(lab_model, devices(100, 100), ctx_size=2048, margin_mib=100 - need - 1)["fits"] is True


def test_unknown_free_memory_is_unchecked_not_failed(lab_model):
    plan = gp.plan_layout(lab_model, devices(None, 24105), ctx_size=2048)
    assert plan["unchecked"] == ["D0"] and plan["devices"][0]["fits"] is None and plan["fits"] is True


def test_kv_cache_stays_on_the_host_without_offload(lab_model):
    plan = gp.plan_layout(lab_model, devices(100, 100), ctx_size=2048, offload_kqv=False)
    assert [r["kv_cache_mib"] for r in plan["devices"]] == [0.0, 0.0]
    assert plan["cpu"]["kv_cache_mib"] == 8.0


def test_seed_claim_only_three_gpus_hold_minimax_m2_q8_0(minimax):
    """Two 96 GB GPUs on the head and one on the worker: no GPU and no node holds the model,
    the three together do (the seed paper: 80.0 / 75.7 / 80.0 GiB, context to spare)."""
    free = 97248  # an idle RTX PRO 6000 (nvidia-smi capture)
    devs = [{"name": "RPC0", "host": "node-b", "free_mib": free},
            {"name": "CUDA0", "host": "node-a", "free_mib": free},
            {"name": "CUDA1", "host": "node-a", "free_mib": free}]
    options = dict(ctx_size=32768, parallel=1, margin_mib=1024)
    names, plan = gp.smallest_device_set(minimax, devs, **options)
    assert names == ["RPC0", "CUDA0", "CUDA1"]
    assert plan["fits"] is True
    assert gp.single_node_fits(minimax, devs, **options) == {"node-a": False, "node-b": False}
    equal = gp.plan_layout(minimax, devs, split="equal", **options)
    assert [r["layer_range"] for r in equal["devices"]] == ["0-20", "21-41", "42-61"]
    assert equal["devices"][2]["output_layer"] is True
    weights_gib = [r["weights_mib"] / 1024 for r in equal["devices"]]
    assert all(73 < w < 80 for w in weights_gib), weights_gib


def test_smallest_set_is_none_when_nothing_holds_it(minimax):
    assert gp.smallest_device_set(minimax, devices(1000, 1000), ctx_size=4096) == (None, None)


def test_smallest_set_prefers_fewer_devices(lab_model):
    names, plan = gp.smallest_device_set(lab_model, devices(10, 500, 20), ctx_size=2048, margin_mib=0)
    assert names == ["D1"]
    assert plan["devices"][0]["layers"] == [0, 1, 2, 3]


# ---------------------------------------------------------------- devices from the nodes

GPU_B = {"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97248}
GPUS_A = [{"index": 1, "memory_total_mib": 97887, "memory_free_mib": 90000},
          {"index": 0, "memory_total_mib": 97887, "memory_free_mib": 97248}]


def test_devices_from_nodes_rpc_first_then_local_gpus():
    residency = {"node-a": {"gpus": GPUS_A, "processes": []}, "node-b": {"gpus": [GPU_B], "processes": []}}
    devs = gp.devices_from_nodes("node-a", ["node-b"], True, residency)
    assert [(d["name"], d["host"], d["gpu_index"], d["free_mib"]) for d in devs] == [
        ("RPC0", "node-b", 0, 97248), ("CUDA0", "node-a", 0, 97248), ("CUDA1", "node-a", 1, 90000)]


def test_memory_of_the_collections_own_services_counts_as_available():
    """A redeploy replaces the running servers: their memory is the new layout's."""
    gpu = {"index": 0, "memory_total_mib": 143771, "memory_free_mib": 40000}
    processes = [
        {"gpu_index": 0, "used_memory_mib": 80000, "systemd_unit": "gpulab-rpc-server@0.service"},
        {"gpu_index": 0, "used_memory_mib": 5000, "systemd_unit": "ollama.service"},
        {"gpu_index": 1, "used_memory_mib": 7000, "systemd_unit": "gpulab-llama-server.service"},
        {"gpu_index": 0, "used_memory_mib": 300, "systemd_unit": None},
    ]
    own = OWN_UNITS
    devs = gp.devices_from_nodes("node-a", ["node-c"], True, {"node-c": {"gpus": [gpu], "processes": processes}},
                                 own_units=own)
    assert devs[0]["free_mib"] == 120000
    assert gp.devices_from_nodes("node-a", ["node-c"], True,
                                 {"node-c": {"gpus": [gpu], "processes": processes}})[0]["free_mib"] == 40000
    assert kept_room.own_service("gpulab-llama-server.service", own)
    assert kept_room.own_service("gpulab-vllm.service", own)
    assert not kept_room.own_service("gpulab-llama-server-old.service", own)
    assert not kept_room.own_service("gpulab-rpc-server.service", own)


def test_memory_the_drain_will_free_counts_as_available():
    """The seed's case: other GPU services hold memory; the drain stops them after the plan."""
    gpu = {"index": 0, "uuid": "GPU-b", "memory_total_mib": 97887, "memory_free_mib": 60000}
    consumers = [
        {"key": "systemd:gpu-embed.service", "action": "stop", "gpus": {"GPU-b": 20000}},
        {"key": "systemd:whisper-asr.service", "action": "keep", "gpus": {"GPU-b": 9000}},
        {"key": "process:400", "action": "report", "gpus": {"GPU-b": 2000}},
        {"key": "process:401", "action": "kill", "gpus": {"GPU-b": 1000, "GPU-other": 500}},
        {"key": "systemd:gpulab-rpc-server@0.service", "action": "own", "gpus": {"GPU-b": 7000}},
    ]
    residency = {"node-b": {"gpus": [gpu], "processes": []}}
    devs = gp.devices_from_nodes("node-a", ["node-b"], True, residency, drained={"node-b": consumers})
    assert devs[0]["free_mib"] == 60000 + 20000 + 1000
    assert gp.devices_from_nodes("node-a", ["node-b"], True, residency)[0]["free_mib"] == 60000
    assert kept_room.drain_frees_mib(gpu, None) == 0


def test_devices_from_a_published_manifest():
    servers = {"node-b": {"endpoints": [{"instance": 0, "device": "CPU", "gpu_index": None, "port": 50052,
                                         "memory_mib": 20000}]}}
    devs = gp.devices_from_nodes("node-a", ["node-b", "node-c"], False, {}, servers)
    assert [(d["name"], d["host"], d["port"], d["free_mib"], d["total_mib"]) for d in devs] == [
        ("RPC0", "node-b", 50052, None, 20000), ("RPC1", "node-c", None, None, None)]


def test_a_cpu_build_has_no_local_devices():
    residency = {"node-a": {"gpus": GPUS_A, "processes": []}}
    devs = gp.devices_from_nodes("node-a", ["node-b"], False, residency)
    assert [d["name"] for d in devs] == ["RPC0"]


def test_no_device_at_all_is_named():
    with pytest.raises(gp.PlanError, match=r"no device: no RPC worker and no local GPU on node-a"):
        gp.devices_from_nodes("node-a", [], False)
    with pytest.raises(gp.PlanError, match=r"node-b: servers.json lists no endpoint"):
        gp.devices_from_nodes("node-a", ["node-b"], False, {}, {"node-b": {"endpoints": []}})
    with pytest.raises(gp.PlanError, match=r"node-b has no GPU in its residency facts, but the build has CUDA"):
        gp.devices_from_nodes("node-a", ["node-b"], True, {})


@pytest.mark.parametrize("manifest, message", [
    (["endpoints"], "node-b: servers.json lists no endpoint"),
    ({"endpoints": "50052"}, "node-b: servers.json lists no endpoint"),
    ({"endpoints": ["50052"]}, "node-b: servers.json endpoints entry 0 is not an object"),
    ({"endpoints": [{"gpu_index": "x", "port": 50052}]}, "endpoints entry 0 gpu_index 'x' is not a whole number"),
    ({"endpoints": [{"gpu_index": -1, "port": 50052}]}, "endpoints entry 0 gpu_index -1 is not a whole number >= 0"),
    ({"endpoints": [{"gpu_index": True, "port": 50052}]}, "endpoints entry 0 gpu_index True"),
    ({"endpoints": [{"port": "50052; id"}]}, "endpoints entry 0 port '50052; id' is not a whole number"),
    ({"endpoints": [{"port": 70000}]}, "endpoints entry 0 port 70000 is out of range"),
    ({"endpoints": [{"port": 0}]}, "endpoints entry 0 port 0 is not a whole number >= 1"),
    ({"endpoints": [{"port": 50052, "memory_mib": -5}]}, "endpoints entry 0 memory_mib -5 is not a whole number >= 0"),
    ({"endpoints": [{"port": 50052, "memory_mib": 1.5}]}, "endpoints entry 0 memory_mib 1.5"),
])
def test_a_worker_manifest_field_that_cannot_be_used_is_named(manifest, message):
    with pytest.raises(gp.PlanError, match=re.escape(message)):
        gp.devices_from_nodes("node-a", ["node-b"], False, {}, {"node-b": manifest})


# ---------------------------------------------------------------- the CUDA context of each process

def test_every_gpu_device_that_holds_layers_carries_one_cuda_context(lab_model):
    base = gp.plan_layout(lab_model, devices(24105, 24105), ctx_size=2048, margin_mib=0)
    plan = gp.plan_layout(lab_model, devices(24105, 24105), ctx_size=2048, margin_mib=0, cuda_context_mib=720)
    for before, after in zip(base["devices"], plan["devices"]):
        assert (before["context_mib"], after["context_mib"]) == (0.0, 720.0)
        assert after["total_mib"] == pytest.approx(before["total_mib"] + 720, abs=0.01)
        assert after["headroom_mib"] == pytest.approx(before["headroom_mib"] - 720, abs=0.01)
    assert "context" in gp.format_table(plan)[0]


def test_no_cuda_context_on_a_cpu_device_or_a_device_without_layers(lab_model):
    devs = [{"name": "RPC0", "free_mib": None, "cuda": False}, {"name": "CUDA0", "free_mib": 24105},
            {"name": "CUDA1", "free_mib": 24105}]
    plan = gp.plan_layout(lab_model, devs, split=[1, 1, 0], ctx_size=2048, cuda_context_mib=720)
    assert [r["context_mib"] for r in plan["devices"]] == [0.0, 720.0, 0.0]
    assert [d["cuda"] for d in gp.devices_from_nodes("node-a", ["node-b"], False, {})] == [False]
    residency = {"node-a": {"gpus": GPUS_A, "processes": []}, "node-b": {"gpus": [GPU_B], "processes": []}}
    assert [d["cuda"] for d in gp.devices_from_nodes("node-a", ["node-b"], True, residency)] == [True, True, True]


def test_negative_cuda_context_is_named(lab_model):
    with pytest.raises(gp.PlanError, match=r"cuda_context_mib -1 must be >= 0"):
        gp.plan_layout(lab_model, devices(100), cuda_context_mib=-1)


# The H200 of issue 34 (CUDA 13.0, driver 580): an RPC server given no layers (--tensor-split 0,63)
# beside llama-server on the same GPU; nvidia-smi showed the idle server holding 518 MiB.
H200_IDLE_RPC_MIB = 518


def one_h200(free_mib=143000):
    return [{"name": "RPC0", "host": "h200", "gpu_index": 0, "free_mib": free_mib},
            {"name": "CUDA0", "host": "h200", "gpu_index": 0, "free_mib": free_mib}]


def test_a_gpu_device_without_layers_holds_its_idle_context(lab_model):
    options = dict(split=[0, 1], ctx_size=2048, margin_mib=1024, cuda_context_mib=720)
    bare = gp.plan_layout(lab_model, one_h200(), **options)
    plan = gp.plan_layout(lab_model, one_h200(), cuda_idle_context_mib=H200_IDLE_RPC_MIB, **options)
    rpc, head = plan["devices"]
    assert rpc["layers"] == [] and rpc["output_layer"] is False
    assert (rpc["context_mib"], rpc["total_mib"]) == (518.0, 518.0)
    assert (bare["devices"][0]["context_mib"], bare["devices"][0]["total_mib"]) == (0.0, 0.0)
    # the device with every layer keeps the full context and its total
    assert head["context_mib"] == 720.0 and head["total_mib"] == bare["devices"][1]["total_mib"]
    # one GPU: its headroom loses the idle server's context
    assert head["headroom_mib"] == pytest.approx(bare["devices"][1]["headroom_mib"] - 518, abs=0.01)
    assert "518" in gp.format_table(plan)[1]


def test_the_idle_context_stays_off_cpu_devices_and_devices_with_layers(lab_model):
    devs = [{"name": "RPC0", "free_mib": None, "cuda": False}, {"name": "CUDA0", "free_mib": 24105},
            {"name": "CUDA1", "free_mib": 24105}]
    plan = gp.plan_layout(lab_model, devs, split=[1, 1, 0], ctx_size=2048, cuda_context_mib=720,
                          cuda_idle_context_mib=518)
    assert [r["context_mib"] for r in plan["devices"]] == [0.0, 720.0, 518.0]
    assert plan["devices"][2]["total_mib"] == 518.0
    # the equal split gives every device layers: the idle figure changes nothing
    equal = dict(split="equal", ctx_size=2048, cuda_context_mib=720)
    with_idle = gp.plan_layout(lab_model, devs, cuda_idle_context_mib=518, **equal)
    assert with_idle == gp.plan_layout(lab_model, devs, **equal)


def test_idle_context_zero_leaves_it_out(lab_model):
    plan = gp.plan_layout(lab_model, one_h200(), split=[0, 1], ctx_size=2048, cuda_context_mib=720,
                          cuda_idle_context_mib=0)
    assert (plan["devices"][0]["context_mib"], plan["devices"][0]["total_mib"]) == (0.0, 0.0)


@pytest.mark.parametrize("value, message", [
    (-1, "cuda_idle_context_mib -1 must be >= 0 (0 leaves the idle CUDA context out)"),
    ("abc", "cuda_idle_context_mib 'abc' is not a number"),
    (True, "cuda_idle_context_mib True is not a number"),
])
def test_a_bad_idle_context_is_named(lab_model, value, message):
    with pytest.raises(gp.PlanError, match=re.escape(message)):
        gp.plan_layout(lab_model, devices(100), cuda_idle_context_mib=value)


# The GPU harness on two H200s (docs/benchmarks.md, 2026-11-30): its synthetic model, llama-server's
# defaults (4 slots, flash attention auto, f16 cache) and what nvidia-smi showed per process, MiB.
E2E_MODEL = dict(layers=16, hidden_size=3072, attention_heads=48, kv_heads=8, experts=64, experts_used=8,
                 expert_ffn_size=1536, shards=2)
H200_MEASURED = {
    ("local", 8192): [17212], ("local", 65536): [20810],
    ("split", 8192): [9778, 8284], ("split", 65536): [11860, 9908],
}


@pytest.mark.parametrize("layout, ctx", sorted(H200_MEASURED))
def test_plan_with_the_cuda_context_meets_nvidia_smi_on_an_h200(layout, ctx):
    model = ShapedModel(E2E_MODEL, 151936)
    names = ["CUDA0"] if layout == "local" else ["RPC0", "CUDA0"]
    devs = [{"name": name, "free_mib": 143000} for name in names]
    plan = gp.plan_layout(model, devs, ctx_size=ctx, parallel=4, cuda_context_mib=720)
    planned = [row["total_mib"] for row in plan["devices"]]
    measured = H200_MEASURED[(layout, ctx)]
    for want, got in zip(measured, planned):
        assert got == pytest.approx(want, rel=0.01), (layout, ctx, planned, measured)
    assert sum(planned) == pytest.approx(sum(measured), rel=0.01)
    # without it, the two-process layouts were 6-9% under
    bare = gp.plan_layout(model, devs, ctx_size=ctx, parallel=4)
    assert sum(r["total_mib"] for r in bare["devices"]) < 0.97 * sum(measured)


# The H200 run of scripts/gpu-e2e-auto.sh (docs/benchmarks.md, 2026-12-02): m2-62 with a trained
# context of 262,144 beside a kept service of 80 GiB; the auto choice, the options memory-plan.json
# recorded, and what nvidia-smi showed per process (RPC0 with no layers, CUDA0 with all 63).
E2E_MODEL_62 = dict(layers=62, hidden_size=3072, attention_heads=48, kv_heads=8, experts=16, experts_used=8,
                    expert_ffn_size=1536, shards=2, context_length=262144)
H200_AUTO_RUN = dict(split=[0.0, 63.0], ctx_size=169984, parallel=4, cuda_context_mib=720)
H200_AUTO_MEASURED = {"RPC0": 518, "CUDA0": 59666}


def test_the_h200_autopilot_run_replayed_meets_nvidia_smi_per_process():
    model = ShapedModel(E2E_MODEL_62, 151936)
    devs = [{"name": "RPC0", "host": "gpu-host", "gpu_index": 0, "free_mib": 60000},
            {"name": "CUDA0", "host": "gpu-host", "gpu_index": 0, "free_mib": 60000}]
    plan = gp.plan_layout(model, devs, cuda_idle_context_mib=H200_IDLE_RPC_MIB, **H200_AUTO_RUN)
    rows = dict((row["name"], row) for row in plan["devices"])
    # memory-plan.json recorded 59,564.8 MiB on the GPU host with the compute estimate of the time;
    # the compute buffer built from the graph (compute_buffer) plans 59,657.5 against nvidia-smi's 59,666
    assert rows["CUDA0"]["compute_modelled"]
    assert rows["CUDA0"]["total_mib"] == pytest.approx(59657.5, abs=0.1)
    assert (rows["RPC0"]["layer_range"], rows["RPC0"]["total_mib"]) == ("", 518.0)
    for name, measured in H200_AUTO_MEASURED.items():
        assert rows[name]["total_mib"] == pytest.approx(measured, rel=0.02), (name, rows[name]["total_mib"], measured)
    # without the idle context the RPC server was planned at nothing
    bare = gp.plan_layout(model, devs, **H200_AUTO_RUN)
    assert bare["devices"][0]["total_mib"] == 0.0


# ---------------------------------------------------------------- devices on one GPU

def test_devices_keep_their_gpu_index_and_a_bad_one_is_named():
    devs = gp.normalise_devices([{"name": "RPC0", "host": "h", "gpu_index": 0, "free_mib": 100},
                                 {"name": "CUDA0", "host": "h", "gpu_index": None, "free_mib": 100}])
    assert [d["gpu_index"] for d in devs] == [0, None]
    for bad in (-1, "0", True):
        with pytest.raises(gp.PlanError, match=r"devices\[0\]\.gpu_index .* must be a GPU index"):
            gp.normalise_devices([{"name": "RPC0", "gpu_index": bad}])


def test_the_memory_plan_record_names_each_devices_gpu(lab_model):
    residency = {"node-a": {"gpus": GPUS_A, "processes": []}, "node-b": {"gpus": [GPU_B], "processes": []}}
    devs = gp.devices_from_nodes("node-a", ["node-b"], True, residency)
    plan = gp.plan_layout(lab_model, devs, ctx_size=4096)
    record = gp.plan_record("/m.gguf", {}, plan, {})
    assert [(d["name"], d["host"], d["gpu_index"]) for d in record["devices"]] == [
        ("RPC0", "node-b", 0), ("CUDA0", "node-a", 0), ("CUDA1", "node-a", 1)]


def test_shared_gpus_are_grouped_by_host_and_index():
    devs = [{"name": "RPC0", "host": "h", "gpu_index": 0}, {"name": "RPC1", "host": "w", "gpu_index": 0},
            {"name": "CUDA0", "host": "h", "gpu_index": 0}, {"name": "CUDA1", "host": "h", "gpu_index": 1},
            {"name": "RPC2", "host": None, "gpu_index": 1},
            {"name": "RPC3", "host": "h", "gpu_index": 1, "cuda": False}]
    assert gp.shared_gpus(devs) == [[0, 2]]


def test_two_devices_on_one_gpu_share_its_memory(lab_model):
    """An RPC server on the head's own GPU beside llama-server: what both hold is judged against the
    one GPU, with one margin, so a model that fills the GPU is not split over it twice."""
    options = dict(ctx_size=4096, margin_mib=512, cuda_context_mib=720)
    alone = gp.plan_layout(lab_model, [{"name": "CUDA0", "host": "h", "gpu_index": 0, "free_mib": 100000}],
                           **options)
    used = alone["devices"][0]["total_mib"]
    # each device alone would fit, both together do not
    free = used + 512 + 100
    devs = [{"name": "RPC0", "host": "h", "gpu_index": 0, "free_mib": free},
            {"name": "CUDA0", "host": "h", "gpu_index": 0, "free_mib": free}]
    plan = gp.plan_layout(lab_model, devs, **options)
    both = sum(r["total_mib"] for r in plan["devices"])
    assert both > used  # the second process's CUDA context and compute buffer
    for row in plan["devices"]:
        assert row["headroom_mib"] == pytest.approx(free - 512 - both, abs=0.02)
        assert row["fits"] is False
    assert plan["fits"] is False and plan["overflowing"] == ["RPC0", "CUDA0"]
    assert [r["shares_gpu_with"] for r in plan["devices"]] == [["CUDA0"], ["RPC0"]]
    # on two GPUs of that size the same split fits
    apart = gp.plan_layout(lab_model, [dict(devs[0], gpu_index=1), devs[1]], **options)
    assert apart["fits"] is True and [r["shares_gpu_with"] for r in apart["devices"]] == [[], []]


def test_memory_of_the_collections_own_programs_counts_as_available_under_supervisord():
    """Under supervisord no unit names the servers: their programs stand for the units (a redeploy
    on one H200 with an RPC server and llama-server both running)."""
    gpu = {"index": 0, "memory_total_mib": 143771, "memory_free_mib": 20000}
    processes = [
        {"gpu_index": 0, "used_memory_mib": 60000, "systemd_unit": None, "supervisor_program": "gpulab-rpc-server-0"},
        {"gpu_index": 0, "used_memory_mib": 50000, "systemd_unit": None, "supervisor_program": "gpulab-llama-server"},
        {"gpu_index": 0, "used_memory_mib": 9000, "systemd_unit": None, "supervisor_program": "embedder"},
        {"gpu_index": 0, "used_memory_mib": 4000, "systemd_unit": None,
         "supervisor_program": "gpulab-llama-server-old"},
        {"gpu_index": 0, "used_memory_mib": 300, "systemd_unit": None, "supervisor_program": None},
    ]
    assert kept_room.available_mib(gpu, processes, OWN_UNITS) == 20000 + 60000 + 50000
    assert kept_room.available_mib(gpu, processes, ()) == 20000
    assert kept_room.own_process({"supervisor_program": "gpulab-vllm"}, OWN_UNITS)
    assert kept_room.own_process({"systemd_unit": "gpulab-rpc-server@1.service"}, OWN_UNITS)
    assert not kept_room.own_process({"supervisor_program": "gpulab-rpc-server"}, OWN_UNITS)
    assert not kept_room.own_process({"systemd_unit": None, "supervisor_program": None}, OWN_UNITS)
