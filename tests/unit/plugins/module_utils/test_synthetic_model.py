# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The synthetic model: shapes and keys llama.cpp's loader reads, options, shards, files on disk."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

V = gguf.GGUFValue


def _write(path, metadata, tensors, fill=b"\x01"):
    with open(path, "wb") as stream:
        return gguf.write_gguf(stream, metadata, tensors, lambda info: [fill * info.nbytes])


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


# ---------------------------------------------------------------- bounds, temporary files, space

@pytest.mark.parametrize("options, message", [
    ({"context_length": 2 ** 33}, "context_length=8589934592 does not fit the GGUF UINT32 key it is written to"),
    ({"hidden_size": 2 ** 32 * 32}, "hidden_size=137438953472 does not fit the GGUF UINT32 key"),
    ({"shards": 70000}, "shards=70000 does not fit split.count, a GGUF UINT16 (at most 65535)"),
    ({"context_length": 0}, "context_length=0 must be a positive integer"),
    ({"head_dim": True}, "head_dim=True must be a positive integer"),
    ({"chat_template": 5}, "chat_template must be a string, got 5"),
])
def test_out_of_range_options_are_named(options, message):
    with pytest.raises(sm.SyntheticModelError) as err:
        sm.validate_options(options)
    assert message in str(err.value)


def test_temp_files_are_recognised_by_name():
    path = "/m/synthetic-minimax-m2-00001-of-00002.gguf"
    assert sm.is_temp_file_of(".synthetic-minimax-m2-00001-of-00002.gguf.k2j4x9_a.tmp", path)
    assert not sm.is_temp_file_of(".synthetic-minimax-m2-00001-of-00002.gguf.k2j4x9_a.tmp.keep", path)
    assert not sm.is_temp_file_of(".synthetic-minimax-m2-00002-of-00002.gguf.k2j4x9_a.tmp", path)
    assert not sm.is_temp_file_of("synthetic-minimax-m2-00001-of-00002.gguf", path)
    assert not sm.is_temp_file_of(".synthetic-minimax-m2-00001-of-00002.gguf..tmp", path)
    # regular-expression characters in the name are literal
    assert not sm.is_temp_file_of(".mXgguf.abc.tmp", "/m/m.gguf")


def test_stale_temp_files_are_found_with_their_size(tmp_path):
    model = str(tmp_path / "m.gguf")
    (tmp_path / ".m.gguf.abcd1234.tmp").write_bytes(b"x" * 100)
    (tmp_path / ".other.gguf.abcd1234.tmp").write_bytes(b"x")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    os.mkdir(str(tmp_path / ".m.gguf.dir00000.tmp"))
    os.symlink("/etc/hostname", str(tmp_path / ".m.gguf.link0000.tmp"))
    assert sm.stale_temp_files([model]) == [(str(tmp_path / ".m.gguf.abcd1234.tmp"), 100)]
    assert sm.stale_temp_files([str(tmp_path / "absent" / "m.gguf")]) == []


def test_existing_directory_walks_up(tmp_path):
    assert sm.existing_directory(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert sm.existing_directory(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("arch, per_token, state", [
    # deepseek2: rank 256 / 4 = 64, rope 64 / 2 = 32: 4 layers x 96 K values x 2 bytes, no V
    ("deepseek2", 768, 0),
    # qwen3moe / glm4moe: 4 layers x (2 x 64 K + 2 x 64 V) x 2 bytes
    ("qwen3moe", 2048, 0),
    ("glm4moe", 2048, 0),
    # gpt-oss: the same widths, 2 sliding + 2 full layers
    ("gpt-oss", 2048, 0),
    # qwen3next: one full layer (512 bytes); 3 recurrent layers x (r 3 x (256 + 2 x 2 x 64) + s 64 x 256) x 4
    ("qwen3next", 512, 215040),
    # minimax-m3: the dense first layer 256 values, the 3 sparse ones 2 x 64 + 64 K (the indexer's
    # head) and as many V: (256 + 3 x 384) x 2 bytes
    ("minimax-m3", 2816, 0),
])
def test_each_family_is_written_as_its_loader_reads_it(tmp_path, arch, per_token, state):
    from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
    opts = sm.validate_options(dict(architecture=arch, layers=4, hidden_size=256, attention_heads=4, kv_heads=2,
                                    head_dim=64, experts=4, experts_used=2, expert_ffn_size=128, quantization="F16"))
    plan = sm.ModelPlan(opts, str(tmp_path / "m.gguf"), sm.builtin_vocab(), "0" * 64)
    sm.write_model(plan, 1)
    facts = gp.model_facts(gguf.read_gguf_model(plan.paths[0]))
    assert facts["architecture"] == arch and facts["structure"]["modelled"]
    assert gp.kv_bytes_per_token(facts) == per_token
    assert gp.state_bytes_per_sequence(facts) == state
