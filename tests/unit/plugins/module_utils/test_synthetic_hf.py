"""synthetic_hf: options and their refusals, the config, tensor shapes and FP8 block scales, the
safetensors bytes read back with the standard library only, shards, the tokenizer, and the
state of a directory. The module itself is tested in tests/unit/plugins/modules/test_synthetic_hf_module.py."""

import hashlib
import json
import math
import os
import random
import stat
import struct

import jinja2
import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.module_utils.synthetic_hf import SyntheticHFError

SMALL = {"layers": 1, "hidden_size": 256, "attention_heads": 2, "kv_heads": 1, "head_dim": 128,
         "experts": 4, "experts_used": 2, "expert_ffn_size": 128, "ffn_size": 256}
# bytes per element, from the safetensors format's dtype names
ELEMENT_BYTES = {"BF16": 2, "F32": 4, "F8_E4M3": 1}


def plan_of(**options):
    return sh.ModelPlan(sh.validate_options(options))


def tensors_by_name(plan):
    return dict((name, (dtype, dims)) for name, dtype, dims in plan.tensors)


def read_safetensors(path):
    """(header dict in file order, length of the JSON header, tensor data) with struct and json only."""
    with open(path, "rb") as handle:
        data = handle.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length].decode("utf-8"))
    return header, length, data[8 + length:]


def bf16_to_float(two_bytes):
    return struct.unpack("<f", b"\0\0" + two_bytes)[0]


# --- options ----------------------------------------------------------------------------------

def test_defaults_are_a_small_minimax_m2_in_fp8():
    assert sh.validate_options({}) == dict({
        "architecture": "minimax-m2", "layers": 2, "hidden_size": 512, "attention_heads": 4, "kv_heads": 2,
        "head_dim": 128, "experts": 8, "experts_used": 2, "expert_ffn_size": 384, "ffn_size": 1024,
        "max_position_embeddings": 4096, "quantization": "fp8", "weight_block_size": [128, 128], "seed": 42,
        "shard_max_mib": 0}, **sh.FAMILY_DEFAULTS)


def test_none_means_the_default_and_a_tuple_block_becomes_a_list():
    opts = sh.validate_options({"layers": None, "seed": None, "weight_block_size": (128, 64)})
    assert (opts["layers"], opts["seed"], opts["weight_block_size"]) == (2, 42, [128, 64])


def test_block_rules_apply_to_fp8_only():
    # 100 is no multiple of 128: refused in FP8, fine unquantised
    assert sh.validate_options({"quantization": "none", "expert_ffn_size": 100})["expert_ffn_size"] == 100
    # a dense model does not check the expert options
    assert sh.validate_options({"architecture": "llama", "experts": 0})["experts"] == 0


@pytest.mark.parametrize("options,message", [
    ({"architecture": "mixtral"},
     "architecture 'mixtral' is not one of deepseek-v3, glm4-moe, gpt-oss, llama, minimax-m2, minimax-m3, qwen2, qwen3-moe, "
     "qwen3-next"),
    ({"quantization": "int4"}, "quantization 'int4' is not one of none, fp8 for architecture minimax-m2"),
    ({"layers": 0}, "layers is 0, expected a positive integer"),
    ({"hidden_size": "512"}, "hidden_size is '512', expected a positive integer"),
    ({"kv_heads": True}, "kv_heads is True, expected a positive integer"),
    ({"head_dim": -128}, "head_dim is -128, expected a positive integer"),
    ({"max_position_embeddings": 1.5}, "max_position_embeddings is 1.5, expected a positive integer"),
    ({"attention_heads": 6, "kv_heads": 4}, "attention_heads 6 is not a multiple of kv_heads 4 (grouped-query attention)"),
    ({"experts": 0}, "experts is 0, expected a positive integer"),
    ({"experts_used": 9}, "experts_used 9 exceeds experts 8"),
    ({"architecture": "qwen2", "ffn_size": 0}, "ffn_size is 0, expected a positive integer"),
    ({"weight_block_size": [128, 0]}, "weight_block_size is [128, 0], expected two positive integers [n, k]"),
    ({"weight_block_size": [128, True]}, "weight_block_size is [128, True], expected two positive integers [n, k]"),
    ({"weight_block_size": 128}, "weight_block_size is 128, expected two positive integers [n, k]"),
    ({"hidden_size": 320}, "hidden_size 320 is not a multiple of the FP8 block 128; vLLM cannot load it even on one GPU"),
    ({"attention_heads": 2, "kv_heads": 2, "head_dim": 96},
     "attention_heads x head_dim 192 is not a multiple of the FP8 block 128; vLLM cannot load it even on one GPU"),
    ({"attention_heads": 4, "kv_heads": 1, "head_dim": 64},
     "kv_heads x head_dim 64 is not a multiple of the FP8 block 128; vLLM cannot load it even on one GPU"),
    ({"expert_ffn_size": 200}, "expert_ffn_size 200 is not a multiple of the FP8 block 128; vLLM cannot load it even on one GPU"),
    ({"architecture": "llama", "ffn_size": 1000},
     "ffn_size 1000 is not a multiple of the FP8 block 128; vLLM cannot load it even on one GPU"),
    ({"seed": "42"}, "seed is '42', expected an integer"),
    ({"shard_max_mib": -1}, "shard_max_mib is -1, expected 0 (one file) or a size in MiB"),
    # Caught before the plan lists 10**9 layers' tensors (a MemoryError) or experts' (minutes).
    ({"layers": 10 ** 9}, "layers 1000000000 is above 512, more than any model has; give a real model's shape"),
    ({"experts": 10 ** 9, "experts_used": 2}, "experts 1000000000 is above 1024, more than any model has; give a real "
                                              "model's shape"),
])
def test_bad_options_name_the_value(options, message):
    with pytest.raises(SyntheticHFError) as raised:
        sh.validate_options(options)
    assert str(raised.value) == message


# --- config -----------------------------------------------------------------------------------

def test_minimax_m2_config():
    plan = plan_of()
    config = plan.config
    assert config["architectures"] == ["MiniMaxM2ForCausalLM"] and config["model_type"] == "minimax_m2"
    # 256 byte tokens + 7 added tokens = 263, rounded up to a multiple of 64
    assert plan.n_tokens == 263 and config["vocab_size"] == 320
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["num_key_value_heads"], config["head_dim"]) == (512, 2, 4, 2, 128)
    assert (config["intermediate_size"], config["num_local_experts"], config["num_experts_per_tok"]) == (384, 8, 2)
    assert (config["rotary_dim"], config["attn_type_list"]) == (64, [1, 1])
    assert (config["eos_token_id"], config["pad_token_id"], config["bos_token_id"]) == (258, 256, None)
    assert config["quantization_config"]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize("architecture,name,bias", [("llama", "LlamaForCausalLM", False), ("qwen2", "Qwen2ForCausalLM", True)])
def test_dense_configs(architecture, name, bias):
    config = plan_of(architecture=architecture, quantization="none").config
    assert config["architectures"] == [name]
    assert (config["intermediate_size"], config["attention_bias"]) == (1024, bias)
    assert "num_local_experts" not in config and "quantization_config" not in config


# --- tensor shapes and FP8 block scales -------------------------------------------------------

def test_minimax_m2_fp8_tensor_shapes():
    plan = plan_of()
    tensors = tensors_by_name(plan)
    # embeddings + (2 norms, 4 attention weights and their scales, Q/K norms, router, its bias,
    # 8 experts x 3 weights and their scales) per layer + final norm + lm_head
    assert len(plan.tensors) == 1 + 2 * (2 + 8 + 2 + 2 + 8 * 3 * 2) + 2
    layer = "model.layers.1."
    assert tensors["model.embed_tokens.weight"] == ("BF16", [320, 512])
    assert tensors[layer + "self_attn.q_proj.weight"] == ("F8_E4M3", [512, 512])
    assert tensors[layer + "self_attn.k_proj.weight"] == ("F8_E4M3", [256, 512])
    assert tensors[layer + "self_attn.o_proj.weight"] == ("F8_E4M3", [512, 512])
    assert tensors[layer + "self_attn.q_norm.weight"] == ("BF16", [512])
    assert tensors[layer + "self_attn.k_norm.weight"] == ("BF16", [256])
    assert tensors[layer + "block_sparse_moe.gate.weight"] == ("BF16", [8, 512])
    assert tensors[layer + "block_sparse_moe.e_score_correction_bias"] == ("F32", [8])
    assert tensors[layer + "block_sparse_moe.experts.7.w1.weight"] == ("F8_E4M3", [384, 512])
    assert tensors[layer + "block_sparse_moe.experts.7.w2.weight"] == ("F8_E4M3", [512, 384])
    assert tensors["model.norm.weight"] == ("BF16", [512])
    assert tensors["lm_head.weight"] == ("BF16", [320, 512])
    # one float32 scale per [128, 128] block
    assert tensors[layer + "self_attn.q_proj.weight_scale_inv"] == ("F32", [4, 4])
    assert tensors[layer + "self_attn.k_proj.weight_scale_inv"] == ("F32", [2, 4])
    assert tensors[layer + "block_sparse_moe.experts.7.w1.weight_scale_inv"] == ("F32", [3, 4])
    assert tensors[layer + "block_sparse_moe.experts.7.w2.weight_scale_inv"] == ("F32", [4, 3])


def test_scales_round_the_last_block_up():
    # k = 96: 512 columns need ceil(512 / 96) = 6 blocks, 384 need 4
    tensors = tensors_by_name(plan_of(weight_block_size=[128, 96]))
    assert tensors["model.layers.0.self_attn.q_proj.weight_scale_inv"] == ("F32", [4, 6])
    assert tensors["model.layers.0.block_sparse_moe.experts.0.w1.weight_scale_inv"] == ("F32", [3, 6])
    assert tensors["model.layers.0.block_sparse_moe.experts.0.w2.weight_scale_inv"] == ("F32", [4, 4])


@pytest.mark.parametrize("block", [[128, 128], [128, 96], [256, 64]])
def test_every_fp8_weight_is_followed_by_its_scale(block):
    opts = dict(SMALL, hidden_size=512, kv_heads=2, expert_ffn_size=256) if block[0] == 256 else dict(SMALL)
    plan = plan_of(weight_block_size=block, **opts)
    entries = plan.tensors
    fp8 = [i for i, (_name, dtype, _dims) in enumerate(entries) if dtype == "F8_E4M3"]
    assert fp8
    for i in fp8:
        name, _dtype, (rows, columns) = entries[i]
        assert entries[i + 1] == (name + "_scale_inv", "F32",
                                  [int(math.ceil(rows / float(block[0]))), int(math.ceil(columns / float(block[1])))])
    scales = [name for name, _dtype, _dims in entries if name.endswith("_scale_inv")]
    assert len(scales) == len(fp8)


def test_unquantised_models_have_no_fp8_and_no_scales():
    for architecture in ("minimax-m2", "llama", "qwen2"):
        plan = plan_of(architecture=architecture, quantization="none")
        assert set(dtype for _name, dtype, _dims in plan.tensors) <= {"BF16", "F32"}
        assert not [name for name, _dtype, _dims in plan.tensors if name.endswith("_scale_inv")]


def test_qwen2_has_qkv_biases_and_llama_has_none():
    qwen = tensors_by_name(plan_of(architecture="qwen2", quantization="none"))
    assert qwen["model.layers.0.self_attn.q_proj.bias"] == ("BF16", [512])
    assert qwen["model.layers.0.self_attn.k_proj.bias"] == ("BF16", [256])
    assert qwen["model.layers.0.mlp.gate_proj.weight"] == ("BF16", [1024, 512])
    assert qwen["model.layers.0.mlp.down_proj.weight"] == ("BF16", [512, 1024])
    llama = tensors_by_name(plan_of(architecture="llama", quantization="none"))
    assert not [name for name in llama if name.endswith(".bias")]


def test_sizes_and_parameter_count():
    plan = plan_of()
    weights = 0
    params = 0
    for name, dtype, dims in plan.tensors:
        count = 1
        for d in dims:
            count *= d
        weights += count * ELEMENT_BYTES[dtype]
        if not name.endswith("_scale_inv"):
            params += count
    assert plan.weights_bytes == weights == 11692736
    assert plan.n_params == params == 11350032


# --- safetensors ------------------------------------------------------------------------------

def test_header_bytes_and_offsets():
    entries = [("a", "BF16", [3]), ("b", "F32", [2, 2]), ("c", "F8_E4M3", [5])]
    raw, size = sh.safetensors_header(entries)
    (length,) = struct.unpack("<Q", raw[:8])
    assert length == len(raw) - 8 and length % 8 == 0
    text = raw[8:].decode("utf-8")
    # padded with spaces after the closing brace, fewer than 8 of them
    padding = len(text) - len(text.rstrip(" "))
    assert text.rstrip(" ").endswith("}") and padding < 8
    header = json.loads(text)
    assert list(header) == ["__metadata__", "a", "b", "c"]
    assert header == {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
        "b": {"dtype": "F32", "shape": [2, 2], "data_offsets": [6, 22]},
        "c": {"dtype": "F8_E4M3", "shape": [5], "data_offsets": [22, 27]},
    }
    assert size == 27
    raw, _size = sh.safetensors_header(entries, metadata={"source": "test"})
    assert json.loads(raw[8:].decode("utf-8"))["__metadata__"] == {"source": "test"}


def test_written_file_reads_back_with_the_stdlib(tmp_path):
    plan = plan_of(**SMALL)
    sh.write_model(str(tmp_path), plan)
    header, length, body = read_safetensors(str(tmp_path / "model.safetensors"))
    assert length % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    # the tensors in plan order, with their dtypes and shapes
    assert [(name, info["dtype"], info["shape"]) for name, info in header.items()] == \
        [(name, dtype, list(dims)) for name, dtype, dims in plan.tensors]
    # offsets: back to back from 0 to the end of the file, each span the tensor's size
    end = 0
    for name, dtype, dims in plan.tensors:
        start, stop = header[name]["data_offsets"]
        count = 1
        for d in dims:
            count *= d
        assert (start, stop) == (end, end + count * ELEMENT_BYTES[dtype]), name
        end = stop
    assert end == len(body) == plan.weights_bytes
    assert os.path.getsize(str(tmp_path / "model.safetensors")) == 8 + length + plan.weights_bytes

    def tensor(name):
        start, stop = header[name]["data_offsets"]
        return body[start:stop]

    # FP8 scales are all 0.004; FP8 values e4m3 with exponent 5..8 (never NaN 0x7f/0xff)
    scale = tensor("model.layers.0.self_attn.q_proj.weight_scale_inv")
    assert struct.unpack("<4f", scale) == pytest.approx((0.004,) * 4)  # [2, 2] blocks
    fp8 = tensor("model.layers.0.block_sparse_moe.experts.3.w2.weight")
    assert len(fp8) == 256 * 128
    assert all(5 <= (b >> 3) & 0xF <= 8 for b in fp8)
    assert len(set(fp8)) == 2 * 4 * 8  # every sign, exponent 5..8 and mantissa occurs
    # norms are ones, the router bias zeros, other BF16 weights bounded away from 0, inf and NaN
    assert tensor("model.layers.0.input_layernorm.weight") == struct.pack("<H", 0x3F80) * 256
    assert tensor("model.layers.0.block_sparse_moe.e_score_correction_bias") == b"\0" * 16
    gate = tensor("model.layers.0.block_sparse_moe.gate.weight")
    values = [bf16_to_float(gate[i:i + 2]) for i in range(0, len(gate), 2)]
    assert all(2 ** -9 <= abs(v) < 2 ** -5 for v in values)
    assert min(values) < 0 < max(values)


def test_write_leaves_no_temporary_files_and_sets_the_mode(tmp_path):
    plan = plan_of(**SMALL)
    sh.write_model(str(tmp_path), plan, mode=0o640)
    assert sorted(os.listdir(str(tmp_path))) == plan.file_names() == [
        "config.json", "generation_config.json", "gpulab-synthetic.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"]
    assert all(stat.S_IMODE(os.stat(str(tmp_path / name)).st_mode) == 0o640 for name in plan.file_names())
    with open(str(tmp_path / "gpulab-synthetic.json")) as handle:
        marker = json.load(handle)
    assert marker == {"managed_by": "gpulab.inference.synthetic_hf", "options_sha256": plan.options_sha256,
                      "options": plan.opts, "generator_revision": 1,
                      "files": ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                "tokenizer_config.json"]}
    with open(str(tmp_path / "generation_config.json")) as handle:
        assert json.load(handle) == {"eos_token_id": 258, "pad_token_id": 256}


def test_same_seed_same_bytes_other_seed_other_bytes():
    def first_chunk(seed):
        return next(sh.tensor_chunks("w.weight", "F8_E4M3", [64, 64], random.Random(seed)))
    assert first_chunk(1) == first_chunk(1)
    assert first_chunk(1) != first_chunk(2)


def test_tensor_chunks_split_large_tensors(monkeypatch):
    monkeypatch.setattr(sh, "CHUNK_ELEMENTS", 4)
    chunks = list(sh.tensor_chunks("x.weight", "BF16", [2, 5], random.Random(0)))
    assert [len(c) for c in chunks] == [8, 8, 4]
    assert list(sh.tensor_chunks("x.weight", "BF16", [0, 5], random.Random(0))) == []


def test_a_dtype_without_generator_is_named():
    with pytest.raises(SyntheticHFError) as raised:
        list(sh.tensor_chunks("x.weight", "I8", [4], random.Random(0)))
    assert str(raised.value) == "no generator for dtype I8 of x.weight"


# --- shards -----------------------------------------------------------------------------------

def test_shards_group_tensors_up_to_the_limit():
    entries = [("a", "F32", [10]), ("b", "F32", [10]), ("c", "F32", [100]), ("d", "F32", [5])]
    assert sh.shard_tensors(entries, 0) == [("model.safetensors", entries)]
    assert sh.shard_tensors(entries, 1000) == [("model.safetensors", entries)]
    # 40 + 40 fit in 100; c (400 bytes) gets its own file; d follows alone
    assert sh.shard_tensors(entries, 100) == [
        ("model-00001-of-00003.safetensors", entries[:2]),
        ("model-00002-of-00003.safetensors", entries[2:3]),
        ("model-00003-of-00003.safetensors", entries[3:]),
    ]


def test_sharded_model_has_an_index_that_matches_the_files(tmp_path):
    options = dict(SMALL)
    options.update(architecture="llama", quantization="none", shard_max_mib=1, hidden_size=512)
    plan = plan_of(**options)
    assert len(plan.shards) > 1
    sh.write_model(str(tmp_path), plan)
    with open(str(tmp_path / sh.INDEX_NAME)) as handle:
        index = json.load(handle)
    assert index["metadata"] == {"total_size": plan.weights_bytes}
    assert sorted(index["weight_map"]) == sorted(name for name, _dtype, _dims in plan.tensors)
    total = 0
    for file_name, entries in plan.shards:
        header, _length, body = read_safetensors(str(tmp_path / file_name))
        header.pop("__metadata__")
        assert list(header) == [name for name, _dtype, _dims in entries]
        assert all(index["weight_map"][name] == file_name for name in header)
        assert min(info["data_offsets"][0] for info in header.values()) == 0
        assert max(info["data_offsets"][1] for info in header.values()) == len(body)
        total += len(body)
    assert total == plan.weights_bytes


# --- tokenizer --------------------------------------------------------------------------------

def test_byte_symbols_are_gpt2s_byte_level_mapping():
    symbols = sh.byte_symbols()
    assert len(symbols) == 256 and len(set(symbols.values())) == 256
    assert (symbols[ord("A")], symbols[ord("!")], symbols[ord("~")]) == ("A", "!", "~")
    # the bytes GPT-2 remaps: control bytes and space from U+0100, DEL.. from U+0121, soft hyphen U+0143
    assert (symbols[0], symbols[ord(" ")], symbols[ord("\n")], symbols[0x7F], symbols[0xAD]) == (
        "\u0100", "\u0120", "\u010a", "\u0121", "\u0143")


def test_tokenizer_json_structure():
    files, count = sh.tokenizer_files("minimax-m2")
    assert sorted(files) == ["tokenizer.json", "tokenizer_config.json"]
    tokenizer = files["tokenizer.json"]
    assert sorted(tokenizer) == ["added_tokens", "decoder", "model", "normalizer", "padding", "post_processor",
                                 "pre_tokenizer", "truncation", "version"]
    model = tokenizer["model"]
    assert (model["type"], model["merges"], model["byte_fallback"]) == ("BPE", [], False)
    assert sorted(model["vocab"].values()) == list(range(256))
    assert model["vocab"]["\u0120"] == 32
    for part in ("pre_tokenizer", "post_processor", "decoder"):
        assert tokenizer[part]["type"] == "ByteLevel"
    assert [(a["id"], a["content"], a["special"]) for a in tokenizer["added_tokens"]] == [
        (256, "<|endoftext|>", True), (257, "<|im_start|>", True), (258, "<|im_end|>", True),
        (259, "<think>", False), (260, "</think>", False),
        (261, "<minimax:tool_call>", False), (262, "</minimax:tool_call>", False)]
    assert count == 263
    config = files["tokenizer_config.json"]
    assert (config["tokenizer_class"], config["eos_token"], config["pad_token"], config["bos_token"]) == (
        "PreTrainedTokenizerFast", "<|im_end|>", "<|endoftext|>", None)
    assert sorted(config["added_tokens_decoder"]) == [str(i) for i in range(256, 263)]
    assert config["added_tokens_decoder"]["258"] == {"content": "<|im_end|>", "single_word": False, "lstrip": False,
                                                     "rstrip": False, "normalized": False, "special": True}
    # the files are JSON as written
    assert json.loads(json.dumps(files)) == files


def test_token_ids():
    assert [sh.token_id(t) for t in ("<|endoftext|>", "<|im_end|>", "</think>")] == [256, 258, 260]


@pytest.mark.parametrize("architecture,prompt_end", [("minimax-m2", "<|im_start|>assistant\n<think>\n"),
                                                     ("llama", "<|im_start|>assistant\n")])
def test_chat_template_renders_chatml(architecture, prompt_end):
    template = jinja2.Environment().from_string(sh.chat_template(architecture))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert template.render(messages=messages, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" + prompt_end)
    assert template.render(messages=messages, add_generation_prompt=False).endswith("Hi<|im_end|>\n")


# --- the state of a directory -----------------------------------------------------------------

def test_options_digest_follows_the_content_options():
    opts = sh.validate_options(SMALL)
    digest = sh.options_digest(opts)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert sh.options_digest(dict(opts)) == digest
    assert sh.options_digest(dict(opts, seed=7)) != digest
    assert sh.options_digest(dict(opts, shard_max_mib=1)) != digest


def test_existing_state(tmp_path):
    plan = plan_of(**SMALL)
    directory = str(tmp_path)
    assert sh.existing_state(directory, plan) == "absent"
    sh.write_model(directory, plan)
    assert sh.existing_state(directory, plan) == "current"
    assert sh.existing_state(directory, plan_of(**dict(SMALL, seed=7))) == "stale"
    os.unlink(str(tmp_path / "tokenizer.json"))
    assert sh.existing_state(directory, plan) == "stale"


@pytest.mark.parametrize("marker", ['{"managed_by": "someone else"}', "not json", "[1, 2]"])
def test_a_model_this_code_did_not_write_is_foreign(tmp_path, marker):
    (tmp_path / "config.json").write_text("{}")
    plan = plan_of(**SMALL)
    assert sh.existing_state(str(tmp_path), plan) == "foreign"
    (tmp_path / sh.MARKER_NAME).write_text(marker)
    assert sh.existing_state(str(tmp_path), plan) == "foreign"


def test_stale_files_are_old_weights_only(tmp_path):
    plan = plan_of(**SMALL)
    sh.write_model(str(tmp_path), plan)
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", sh.INDEX_NAME, "README.md"):
        (tmp_path / name).write_text("")
    assert sh.stale_files(str(tmp_path), plan) == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", sh.INDEX_NAME]


# --- the frontier MoE families ----------------------------------------------------------------

def family_plan(family, **overrides):
    return sh.ModelPlan(sh.validate_options(sh.family_options(family, **overrides)))


def params(plan):
    """Parameters of the checkpoint: MXFP4 blocks hold two values a byte, scales are no parameters."""
    total = 0
    for name, _dtype, dims in plan.tensors:
        if name.endswith(("_scale_inv", "_scales")):
            continue
        count = 1
        for d in dims:
            count *= d
        total += count * (2 if name.endswith("_blocks") else 1)
    return total


@pytest.mark.parametrize("family, billions, rel", [
    # the model cards: DeepSeek-V3 671B main weights (+14B of MTP module, not served), Qwen3-235B-A22B
    # 235B, GLM-4.5 355B with its MTP layer (2.3B), gpt-oss-120b 116.8B, Qwen3-Next-80B-A3B 80B,
    # MiniMax-M2 230B
    ("deepseek-v3", 671.0, 0.002), ("qwen3-moe", 235.1, 0.002), ("glm4-moe", 352.8, 0.005),
    ("gpt-oss", 116.8, 0.005), ("qwen3-next", 80.0, 0.01), ("minimax-m2", 229.0, 0.01),
])
def test_full_size_families_have_their_model_cards_parameter_counts(family, billions, rel):
    plan = family_plan(family)
    assert params(plan) / 1e9 == pytest.approx(billions, rel=rel)
    assert plan.n_params == params(plan)


def test_deepseek_v3_reduced_depth_keeps_its_widths_mla_experts_and_a_dense_first_layer():
    plan = family_plan("deepseek-v3", layers=2)
    config, shape, tensors = plan.config, plan.shape, tensors_by_name(plan)
    assert (config["architectures"], config["model_type"]) == (["DeepseekV3ForCausalLM"], "deepseek_v3")
    assert "head_dim" not in config and config["num_key_value_heads"] == 128
    assert (config["first_k_dense_replace"], config["n_routed_experts"], config["n_shared_experts"],
            config["n_group"], config["topk_group"], config["num_nextn_predict_layers"]) == (1, 256, 1, 8, 4, 0)
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    assert (shape["experts"], shape["dense_leading"], shape["shared_experts"], shape["dense_ffn_size"]) == (256, 1, 1, 18432)
    assert shape["structure"]["attention"] == "mla" and shape["structure"]["k_values"] == [576, 576]
    assert tensors["model.layers.0.mlp.gate_proj.weight"] == ("F8_E4M3", [18432, 7168])
    assert "model.layers.0.mlp.experts.0.up_proj.weight" not in tensors
    assert tensors["model.layers.1.mlp.experts.255.down_proj.weight"] == ("F8_E4M3", [7168, 2048])
    assert tensors["model.layers.1.mlp.experts.255.down_proj.weight_scale_inv"] == ("F32", [56, 16])
    assert tensors["model.layers.1.mlp.shared_experts.gate_proj.weight"] == ("F8_E4M3", [2048, 7168])
    assert tensors["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == ("F8_E4M3", [576, 7168])
    assert tensors["model.layers.1.self_attn.q_b_proj.weight"] == ("F8_E4M3", [128 * 192, 1536])
    assert tensors["model.embed_tokens.weight"] == ("BF16", [129280, 7168])
    assert "model.layers.2.input_layernorm.weight" not in tensors


def test_qwen3_moe_glm_gpt_oss_and_qwen3_next_configs_read_back_as_their_families():
    qwen = family_plan("qwen3-moe", layers=2)
    assert (qwen.shape["kv_heads"], qwen.shape["experts"], qwen.shape["expert_ffn_size"], qwen.shape["qk_norm"]) == \
        (4, 128, 1536, True)
    glm = family_plan("glm4-moe", layers=2)
    assert (glm.config["partial_rotary_factor"], glm.config["use_qk_norm"], glm.config["attention_bias"]) == (0.5, True, True)
    assert (glm.shape["experts"], glm.shape["dense_leading"], glm.shape["shared_expert_ffn_size"]) == (160, 1, 1536)
    assert tensors_by_name(glm)["model.layers.1.self_attn.k_proj.bias"] == ("BF16", [8 * 128])
    oss = family_plan("gpt-oss", layers=2)
    assert oss.config["layer_types"] == ["sliding_attention", "full_attention"]
    assert oss.config["quantization_config"]["quant_method"] == "mxfp4"
    assert oss.shape["structure"]["layer_kinds"] == ["swa", "full"] and oss.shape["structure"]["window"] == 128
    oss_tensors = tensors_by_name(oss)
    assert oss_tensors["model.layers.0.mlp.experts.gate_up_proj_blocks"] == ("U8", [128, 5760, 90, 16])
    assert oss_tensors["model.layers.0.mlp.experts.down_proj_scales"] == ("U8", [128, 2880, 90])
    assert oss_tensors["model.layers.0.self_attn.q_proj.weight"] == ("BF16", [4096, 2880])
    nxt = family_plan("qwen3-next", layers=4)
    assert nxt.config["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert nxt.shape["structure"]["layer_kinds"] == ["recurrent"] * 3 + ["full"]
    nxt_tensors = tensors_by_name(nxt)
    assert nxt_tensors["model.layers.0.linear_attn.in_proj_qkvz.weight"] == ("BF16", [2 * 2048 + 2 * 4096, 2048])
    assert nxt_tensors["model.layers.3.self_attn.q_proj.weight"] == ("BF16", [2 * 16 * 256, 2048])
    assert nxt_tensors["model.layers.3.mlp.shared_expert.up_proj.weight"] == ("BF16", [512, 2048])
    assert "model.layers.0.self_attn.q_proj.weight" not in nxt_tensors


def test_minimax_m3_nests_its_text_config_and_adds_the_indexer_on_its_sparse_layers():
    plan = family_plan("minimax-m3", layers=2)
    config, text, tensors = plan.config, plan.config["text_config"], tensors_by_name(plan)
    # vLLM's config registry knows minimax_m3_vl (MiniMaxM3Config), whose text_config is the backbone's
    assert (config["architectures"], config["model_type"], config["vision_config"]) == \
        (["MiniMaxM3SparseForCausalLM"], "minimax_m3_vl", None)
    assert "num_hidden_layers" not in config and text["num_hidden_layers"] == 2
    assert (text["moe_layer_freq"], text["sparse_attention_config"]["sparse_attention_freq"]) == ([0, 1], [0, 1])
    assert (text["hidden_act"], text["num_local_experts"], text["n_shared_experts"], text["dense_intermediate_size"]) == \
        ("swigluoai", 128, 1, 12288)
    assert plan.shape["structure"]["index_values"] == [0, 128] and plan.shape["dense_leading"] == 1
    assert tensors["model.layers.0.mlp.gate_proj.weight"] == ("BF16", [12288, 6144])
    assert "model.layers.0.self_attn.index_k_proj.weight" not in tensors
    assert tensors["model.layers.1.self_attn.index_q_proj.weight"] == ("BF16", [4 * 128, 6144])
    assert tensors["model.layers.1.self_attn.index_k_proj.weight"] == ("BF16", [128, 6144])
    assert tensors["model.layers.1.block_sparse_moe.gate.weight"] == ("F32", [128, 6144])
    assert tensors["model.layers.1.block_sparse_moe.experts.127.w2.weight"] == ("BF16", [6144, 3072])
    assert tensors["model.layers.1.block_sparse_moe.shared_experts.down_proj.weight"] == ("BF16", [6144, 3072])
    # issue 52's shape: 60 layers, 3 dense, 128 experts top-4 + 1 shared; 426.2 B parameters without MTP or vision
    full = family_plan("minimax-m3")
    assert full.shape["dense_leading"] == 3 and full.shape["structure"]["index_values"] == [0] * 3 + [128] * 57
    assert params(full) == 426174572928


def test_reduced_depth_keeps_a_dense_layer_before_the_moe_ones():
    assert sh.family_options("glm4-moe", layers=2)["dense_layers"] == 1
    assert sh.family_options("glm4-moe", layers=1)["dense_layers"] == 0
    assert sh.family_options("glm4-moe", layers=8)["dense_layers"] == 3
    with pytest.raises(SyntheticHFError, match="family 'kimi' is not one of"):
        sh.family_options("kimi")


@pytest.mark.parametrize("options, message", [
    ({"architecture": "deepseek-v3", "kv_heads": 2, "attention_heads": 4},
     "kv_heads 2 must equal attention_heads 4 for deepseek-v3"),
    ({"architecture": "deepseek-v3", "kv_heads": 4, "attention_heads": 4, "experts": 6, "expert_groups": 4},
     "experts 6 must split into expert_groups 4"),
    ({"architecture": "gpt-oss", "quantization": "fp8"}, "quantization 'fp8' is not one of none, mxfp4 for architecture gpt-oss"),
    ({"architecture": "gpt-oss", "quantization": "mxfp4", "hidden_size": 520}, "hidden_size 520 is not a multiple of the MXFP4 block 32"),
    ({"architecture": "qwen3-moe", "dense_layers": 1}, "dense_layers (first_k_dense_replace) is a DeepSeek-V3 / GLM-4.x MoE / MiniMax-M3 key"),
    ({"architecture": "minimax-m3", "quantization": "fp8"}, "quantization 'fp8' is not one of none for architecture minimax-m3"),
    ({"weights": "zeros"}, "weights 'zeros' is not one of random, sparse"),
    ({"vocab": 5}, "unknown option(s) vocab"),
])
def test_family_options_that_cannot_make_a_model_are_named(options, message):
    with pytest.raises(SyntheticHFError) as raised:
        sh.validate_options(options)
    assert message in str(raised.value)


def test_family_keys_at_their_defaults_leave_the_digest_of_earlier_models_alone():
    opts = sh.validate_options(SMALL)
    old = json.dumps({"revision": sh.GENERATOR_REVISION, "options": dict((k, opts[k]) for k in sh.CONTENT_OPTIONS)},
                     sort_keys=True, separators=(",", ":"))
    assert sh.options_digest(opts) == hashlib.sha256(old.encode("utf-8")).hexdigest()
    assert sh.options_digest(dict(opts, weights="sparse")) != sh.options_digest(opts)


def test_sparse_weights_are_headers_over_holes_of_the_datas_size(tmp_path):
    plan = family_plan("deepseek-v3", layers=2, weights="sparse", shard_max_mib=4096)
    sh.write_model(str(tmp_path), plan)
    total = 0
    for name, entries in plan.shards:
        path = str(tmp_path / name)
        header, data = sh.safetensors_header(entries)
        assert os.path.getsize(path) == len(header) + data
        # a hole: far fewer blocks than the size (4 GiB files on a few KiB of disk)
        assert os.stat(path).st_blocks * 512 < 1 << 20
        with open(path, "rb") as handle:
            head = handle.read(len(header))
            assert handle.read(4096) == b"\0" * 4096
        parsed = sh.hf.parse_safetensors_header(head, path)
        assert [(n, parsed[n][0], parsed[n][1]) for n, _dt, _d in entries] == [(n, dt, list(d)) for n, dt, d in entries]
        total += data
    assert total == plan.weights_bytes > 14 << 30
    assert [size for _n, size in sh.write_sizes(plan)][:len(plan.shards)] == \
        [len(sh.safetensors_header(e)[0]) for _n, e in plan.shards]
    assert sh.existing_state(str(tmp_path), plan) == "current"


def test_mxfp4_weights_are_random_blocks_under_one_scale(tmp_path):
    plan = sh.ModelPlan(sh.validate_options({
        "architecture": "gpt-oss", "quantization": "mxfp4", "layers": 2, "hidden_size": 64, "attention_heads": 2,
        "kv_heads": 1, "head_dim": 32, "experts": 4, "experts_used": 2, "expert_ffn_size": 64}))
    sh.write_model(str(tmp_path), plan)
    header, _length, body = read_safetensors(str(tmp_path / "model.safetensors"))
    start, stop = header["model.layers.1.mlp.experts.down_proj_scales"]["data_offsets"]
    assert body[start:stop] == bytes([120]) * (4 * 64 * 2)
    start, stop = header["model.layers.1.mlp.experts.gate_up_proj_blocks"]["data_offsets"]
    assert stop - start == 4 * 128 * 2 * 16 and len(set(body[start:stop])) > 200
