# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GGUF writer/reader and the synthetic model's shapes, against llama.cpp's layout rules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import json
import os
import struct

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

V = gguf.GGUFValue

EVERY_TYPE = [
    ("t.uint8", V(gguf.UINT8, 255)),
    ("t.int8", V(gguf.INT8, -128)),
    ("t.uint16", V(gguf.UINT16, 65535)),
    ("t.int16", V(gguf.INT16, -32768)),
    ("t.uint32", V(gguf.UINT32, 4294967295)),
    ("t.int32", V(gguf.INT32, -2147483648)),
    ("t.float32", V(gguf.FLOAT32, 0.5)),
    ("t.bool", V(gguf.BOOL, True)),
    ("t.string", V(gguf.STRING, "h\u00e9llo <|im_start|>")),
    ("t.uint64", V(gguf.UINT64, 2 ** 64 - 1)),
    ("t.int64", V(gguf.INT64, -2 ** 63)),
    ("t.float64", V(gguf.FLOAT64, 1e-300)),
    ("t.array.string", V(gguf.ARRAY, ["a", "", "\u00ff"], gguf.STRING)),
    ("t.array.int32", V(gguf.ARRAY, [1, -2, 3], gguf.INT32)),
    ("t.array.float32", V(gguf.ARRAY, [0.25, -1.0], gguf.FLOAT32)),
    ("t.array.bool", V(gguf.ARRAY, [True, False], gguf.BOOL)),
    ("t.array.empty", V(gguf.ARRAY, [], gguf.UINT8)),
]


def _write(path, metadata, tensors, fill=b"\x01"):
    with open(path, "wb") as stream:
        return gguf.write_gguf(stream, metadata, tensors, lambda info: [fill * info.nbytes])


def test_every_value_type_round_trips(tmp_path):
    path = str(tmp_path / "kv.gguf")
    _write(path, EVERY_TYPE, [])
    parsed = gguf.read_gguf(path)
    assert list(parsed.metadata.keys()) == [k for k, _v in EVERY_TYPE]
    for key, value in EVERY_TYPE:
        assert parsed.metadata[key] == value, key
    assert parsed.version == 3
    assert parsed.tensors == []


def test_header_bytes_follow_the_spec():
    header = gguf.encode_header([("a", V(gguf.UINT32, 7))], [gguf.TensorInfo("w", (32, 2), gguf.GGML_Q8_0)])
    assert header[:4] == b"GGUF"
    assert struct.unpack("<IQQ", header[4:24]) == (3, 1, 1)
    # key: u64 length + bytes, then type u32, then the value
    assert header[24:32 + 1] == struct.pack("<Q", 1) + b"a"
    assert struct.unpack("<II", header[33:41]) == (gguf.UINT32, 7)
    assert len(header) % 32 == 0


def test_tensor_offsets_are_aligned_and_data_lands_there(tmp_path):
    tensors = [
        gguf.TensorInfo("norm", (3,), gguf.GGML_F32),        # 12 bytes -> padded to 32
        gguf.TensorInfo("w", (32, 3), gguf.GGML_Q8_0),       # 3 blocks = 102 bytes -> 128
        gguf.TensorInfo("h", (5,), gguf.GGML_F16),           # 10 bytes
    ]
    path = str(tmp_path / "t.gguf")
    with open(path, "wb") as stream:
        gguf.write_gguf(stream, [("general.architecture", V(gguf.STRING, "x"))], tensors,
                        lambda info: [bytes([len(info.name)]) * info.nbytes])
    parsed = gguf.read_gguf(path)
    assert [t.offset for t in parsed.tensors] == [0, 32, 160]
    assert [t.dims for t in parsed.tensors] == [(3,), (32, 3), (5,)]
    assert parsed.data_offset % 32 == 0
    assert parsed.file_size == parsed.data_offset + 160 + 32
    with open(path, "rb") as stream:
        stream.seek(parsed.data_offset + 32)
        assert stream.read(102) == b"\x01" * 102
        assert stream.read(26) == b"\0" * 26
        assert stream.read(10) == b"\x01" * 10


def test_q8_0_is_34_bytes_per_32_values():
    assert gguf.tensor_nbytes(gguf.GGML_Q8_0, (32,)) == 34
    assert gguf.tensor_nbytes(gguf.GGML_Q8_0, (512, 256, 8)) == 512 * 256 * 8 // 32 * 34
    assert gguf.tensor_nbytes(gguf.GGML_F16, (3, 5)) == 30
    with pytest.raises(gguf.GGUFError, match="row length 48 is not a multiple of the Q8_0 block size 32"):
        gguf.tensor_nbytes(gguf.GGML_Q8_0, (48, 2))


def test_q8_0_blocks_carry_the_scale_then_32_quants():
    plan = sm.TensorPlan("w", (64, 2), gguf.GGML_Q8_0, "random", 64)
    data = b"".join(bytes(c) for c in sm.tensor_chunks(plan, 1))
    assert len(data) == 4 * 34
    scale = struct.unpack("<e", data[0:2])[0]
    assert scale == pytest.approx((1 / 8.0) / 73.9, rel=1e-3)
    assert [data[34 * b:34 * b + 2] for b in range(4)] == [data[0:2]] * 4
    # same seed, same bytes; other seed, other bytes
    assert data == b"".join(bytes(c) for c in sm.tensor_chunks(plan, 1))
    assert data != b"".join(bytes(c) for c in sm.tensor_chunks(plan, 2))


def test_f16_values_come_from_a_bounded_table():
    plan = sm.TensorPlan("w", (256, 4), gguf.GGML_F16, "random", 256)
    data = b"".join(bytes(c) for c in sm.tensor_chunks(plan, 3))
    values = struct.unpack("<%de" % (len(data) // 2), data)
    bound = (1 / 16.0) * 3 ** 0.5
    assert len(values) == 1024
    assert max(abs(v) for v in values) <= bound * 1.001
    assert len(set(values)) > 100


def test_norms_are_one_and_the_expert_bias_zero():
    norm = sm.TensorPlan("n", (40,), gguf.GGML_F32, 1.0)
    assert b"".join(sm.tensor_chunks(norm, 0)) == struct.pack("<f", 1.0) * 40
    bias = sm.TensorPlan("b", (8,), gguf.GGML_F32, 0.0)
    assert b"".join(sm.tensor_chunks(bias, 0)) == b"\0" * 32


def test_writer_rejects_a_short_tensor_stream():
    stream = io.BytesIO()
    with pytest.raises(gguf.GGUFError, match="tensor w: generated 3 bytes, expected 4"):
        gguf.write_gguf(stream, [], [gguf.TensorInfo("w", (1,), gguf.GGML_F32)], lambda info: [b"abc"])


def test_truncated_file_error_names_the_file(tmp_path):
    path = str(tmp_path / "cut.gguf")
    _write(path, [("k", V(gguf.STRING, "v"))], [gguf.TensorInfo("w", (32, 64), gguf.GGML_Q8_0)])
    size = os.path.getsize(path)
    with open(path, "r+b") as stream:
        stream.truncate(size - 100)
    with pytest.raises(gguf.GGUFError, match=r"cut\.gguf: truncated GGUF file: tensor data needs"):
        gguf.read_gguf(path)
    with open(path, "r+b") as stream:
        stream.truncate(30)
    with pytest.raises(gguf.GGUFError, match=r"cut\.gguf: truncated GGUF file \(wanted"):
        gguf.read_gguf(path)


def test_corrupt_file_error_names_the_file(tmp_path):
    path = str(tmp_path / "junk.gguf")
    with open(path, "wb") as stream:
        stream.write(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(gguf.GGUFError, match=r"junk\.gguf: not a GGUF file"):
        gguf.read_gguf(path)
    with open(path, "wb") as stream:
        stream.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99))
    with pytest.raises(gguf.GGUFError, match=r"junk\.gguf: corrupt GGUF value type 99"):
        gguf.read_gguf(path)


# ---------------------------------------------------------------- minimax-m2 shapes

# Derived from llama.cpp 0c1e570 src/models/minimax-m2.cpp load_arch_tensors with the defaults:
# n_embd 512, n_head 8, n_head_kv 2, head_dim 128, n_ff (feed_forward_length) 256, n_expert 8.
MINIMAX_M2_LAYER = [
    ("attn_norm.weight", (512,), "F32"),
    ("attn_q.weight", (512, 1024), "Q8_0"),
    ("attn_k.weight", (512, 256), "Q8_0"),
    ("attn_v.weight", (512, 256), "Q8_0"),
    ("attn_output.weight", (1024, 512), "Q8_0"),
    ("attn_q_norm.weight", (1024,), "F32"),
    ("attn_k_norm.weight", (256,), "F32"),
    ("ffn_norm.weight", (512,), "F32"),
    ("ffn_gate_inp.weight", (512, 8), "F32"),
    ("exp_probs_b.bias", (8,), "F32"),
    ("ffn_gate_exps.weight", (512, 256, 8), "Q8_0"),
    ("ffn_down_exps.weight", (256, 512, 8), "Q8_0"),
    ("ffn_up_exps.weight", (512, 256, 8), "Q8_0"),
]


def _shapes(plan):
    return [(t.info.name, t.info.dims, gguf.GGML_TYPES[t.info.ggml_type][0]) for t in plan]


def test_minimax_m2_tensor_names_and_dims():
    opts = sm.validate_options({})
    shapes = _shapes(sm.minimax_m2_tensors(opts, 1000))
    expected = [("token_embd.weight", (512, 1000), "Q8_0")]
    for il in range(4):
        expected += [("blk.%d.%s" % (il, name), dims, kind) for name, dims, kind in MINIMAX_M2_LAYER]
    expected += [("output_norm.weight", (512,), "F32"), ("output.weight", (512, 1000), "Q8_0")]
    assert shapes == expected
    assert len(shapes) == 2 + 4 * 13 + 1


def test_minimax_m2_f16_keeps_norms_and_router_f32():
    opts = sm.validate_options({"quantization": "F16", "layers": 1})
    kinds = dict((n, k) for n, _d, k in _shapes(sm.minimax_m2_tensors(opts, 64)))
    assert kinds["blk.0.ffn_up_exps.weight"] == "F16"
    assert kinds["blk.0.ffn_gate_inp.weight"] == "F32"
    assert kinds["blk.0.attn_k_norm.weight"] == "F32"


def test_minimax_m2_metadata_keys_the_loader_reads():
    opts = sm.validate_options({"layers": 62, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8,
                                "experts": 256, "experts_used": 8, "expert_ffn_size": 1536})
    meta = dict((k, (v.value_type, v.value)) for k, v in sm.minimax_m2_metadata(opts))
    assert meta == {
        "minimax-m2.context_length": (gguf.UINT32, 4096),
        "minimax-m2.embedding_length": (gguf.UINT32, 3072),
        "minimax-m2.block_count": (gguf.UINT32, 62),
        "minimax-m2.feed_forward_length": (gguf.UINT32, 1536),
        "minimax-m2.expert_feed_forward_length": (gguf.UINT32, 1536),
        "minimax-m2.attention.head_count": (gguf.UINT32, 48),
        "minimax-m2.attention.head_count_kv": (gguf.UINT32, 8),
        "minimax-m2.attention.key_length": (gguf.UINT32, 128),
        "minimax-m2.attention.value_length": (gguf.UINT32, 128),
        "minimax-m2.attention.layer_norm_rms_epsilon": (gguf.FLOAT32, 1e-6),
        "minimax-m2.rope.dimension_count": (gguf.UINT32, 64),
        "minimax-m2.rope.freq_base": (gguf.FLOAT32, 5000000.0),
        "minimax-m2.expert_count": (gguf.UINT32, 256),
        "minimax-m2.expert_used_count": (gguf.UINT32, 8),
        "minimax-m2.expert_gating_func": (gguf.UINT32, 2),
    }


# ---------------------------------------------------------------- options, shards, plan

@pytest.mark.parametrize("options, message", [
    ({"experts": 4, "experts_used": 5}, "experts_used=5 is larger than experts=4"),
    ({"hidden_size": 500}, "hidden_size=500 is not divisible by 32"),
    ({"expert_ffn_size": 100}, "expert_ffn_size=100 is not divisible by 32"),
    ({"attention_heads": 6, "kv_heads": 4}, "attention_heads=6 is not divisible by kv_heads=4"),
    ({"quantization": "Q4_K"}, "quantization='Q4_K' is not supported; use one of: F16, Q8_0"),
    ({"architecture": "llama"}, "architecture='llama' is not supported"),
    ({"layers": 0}, "layers=0 must be a positive integer"),
    ({"layers": 600}, "layers=600 exceeds llama.cpp's limit of 512"),
    ({"seed": -1}, "seed=-1 must be a non-negative integer"),
])
def test_bad_options_name_the_value(options, message):
    with pytest.raises(sm.SyntheticModelError) as err:
        sm.validate_options(options)
    assert message in str(err.value)


def test_shard_paths_use_gguf_split_names():
    assert sm.shard_paths("/m/x.gguf", 1) == ["/m/x.gguf"]
    assert sm.shard_paths("/m/x.gguf", 3) == [
        "/m/x-00001-of-00003.gguf", "/m/x-00002-of-00003.gguf", "/m/x-00003-of-00003.gguf"]
    with pytest.raises(sm.SyntheticModelError, match="path='/m/x.bin' must end with .gguf"):
        sm.shard_paths("/m/x.bin", 1)


def test_assign_shards_balances_bytes_and_leaves_none_empty():
    assert sm.assign_shards([10, 1, 1, 1, 10], 3) == [0, 1, 1, 1, 2]
    assert sm.assign_shards([1, 1, 1], 3) == [0, 1, 2]
    assert sm.assign_shards([100, 1, 1], 3) == [0, 1, 2]
    assert sm.assign_shards([5, 5, 5, 5], 1) == [0, 0, 0, 0]
    with pytest.raises(sm.SyntheticModelError, match="shards=4 is more than the model's 3 tensors"):
        sm.assign_shards([1, 1, 1], 4)


def test_split_plan_keys_like_gguf_split(tmp_path):
    opts = sm.validate_options({"layers": 2, "shards": 3})
    plan = sm.ModelPlan(opts, str(tmp_path / "m.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    names = []
    for index, path in enumerate(plan.paths):
        parsed = gguf.read_gguf(path)
        assert parsed.metadata["split.no"] == V(gguf.UINT16, index)
        assert parsed.metadata["split.count"] == V(gguf.UINT16, 3)
        assert parsed.metadata["split.tensors.count"] == V(gguf.INT32, len(plan.tensors))
        assert parsed.get(sm.KEY_OPTIONS_SHA256) == plan.options_sha256
        assert ("general.architecture" in parsed.metadata) == (index == 0)
        assert parsed.tensors, path
        names += [t.name for t in parsed.tensors]
    assert names == [t.info.name for t in plan.tensors]
    assert sum(os.path.getsize(p) for p in plan.paths) == sum(plan.file_sizes())
    assert not [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")]


def test_written_file_matches_the_plan(tmp_path):
    opts = sm.validate_options({"layers": 1, "chat_template": "{{ x }}"})
    plan = sm.ModelPlan(opts, str(tmp_path / "m.gguf"), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    parsed = gguf.read_gguf(plan.paths[0])
    assert parsed.file_size == plan.file_sizes()[0]
    assert parsed.get("general.architecture") == "minimax-m2"
    assert parsed.get("general.file_type") == 7
    assert parsed.get("tokenizer.chat_template") == "{{ x }}"
    assert len(parsed.get("tokenizer.ggml.tokens")) == 259
    assert json.loads(parsed.get(sm.KEY_OPTIONS_JSON))["layers"] == 1
    assert [(t.name, t.dims) for t in parsed.tensors] == [(t.info.name, t.info.dims) for t in plan.tensors]
    # embd + output, 3 norms of n_embd, q + o, k + v, q/k norms, router, bias, 3 expert tensors
    assert plan.n_params == 512 * 259 * 2 + 512 * 3 + 512 * 1024 * 2 + 512 * 256 * 2 + 1024 + 256 \
        + 512 * 8 + 8 + 512 * 256 * 8 * 3


def test_options_digest_follows_content_and_vocab_only():
    base = sm.validate_options({})
    digest, _json = sm.options_digest(base, "aa")
    assert sm.options_digest(dict(base), "aa")[0] == digest
    assert sm.options_digest(dict(base, vocab_gguf="/elsewhere.gguf"), "aa")[0] == digest
    assert sm.options_digest(base, "bb")[0] != digest
    assert sm.options_digest(dict(base, seed=7), "aa")[0] != digest


def test_default_chat_template_when_the_vocab_has_none():
    plan = sm.ModelPlan(sm.validate_options({"layers": 1}), "/x/m.gguf", sm.builtin_vocab(), None)
    first = dict(plan.files[0][1])
    assert plan.chat_template_source == "default"
    assert first["tokenizer.chat_template"].value == sm.DEFAULT_CHAT_TEMPLATE


def test_existing_state(tmp_path):
    opts = sm.validate_options({"layers": 1, "shards": 2})
    plan = sm.ModelPlan(opts, str(tmp_path / "m.gguf"), sm.builtin_vocab(), None)
    assert sm.existing_state(plan.paths, plan.options_sha256) == "absent"
    sm.write_model(plan, opts["seed"])
    assert sm.existing_state(plan.paths, plan.options_sha256) == "current"
    assert sm.existing_state(plan.paths, "other") == "stale"
    os.unlink(plan.paths[1])
    assert sm.existing_state(plan.paths, plan.options_sha256) == "stale"
    foreign = str(tmp_path / "real.gguf")
    _write(foreign, [("general.architecture", V(gguf.STRING, "minimax-m2"))], [])
    with pytest.raises(sm.SyntheticModelError, match=r"real\.gguf exists and is not a synthetic model"):
        sm.existing_state([foreign], plan.options_sha256)


def test_free_space_check_names_the_directory(tmp_path):
    sm.check_free_space(str(tmp_path), 1)
    with pytest.raises(sm.SyntheticModelError, match=r"%s has [0-9.]+ GiB free, the model needs 1048576\.000 GiB"
                       % str(tmp_path)):
        sm.check_free_space(str(tmp_path), 1 << 50)
