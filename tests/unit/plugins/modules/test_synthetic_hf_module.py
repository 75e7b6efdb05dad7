# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.synthetic_hf: the files, the safetensors bytes, FP8 blocks, idempotence,
check mode and errors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.modules import synthetic_hf

SMALL = {"layers": 1, "hidden_size": 256, "attention_heads": 2, "kv_heads": 1, "head_dim": 128,
         "experts": 4, "experts_used": 2, "expert_ffn_size": 128, "ffn_size": 256}


def run_module(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            synthetic_hf.main()
    return exit_info.value.code != 0, json.loads(capsys.readouterr().out)


def read_safetensors(path):
    """Parse a whole file: header, then each tensor's bytes."""
    with open(path, "rb") as handle:
        data = handle.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    return header, body, length


def test_writes_minimax_m2_fp8_then_is_idempotent(tmp_path, capsys):
    path = str(tmp_path / "mm2")
    failed, result = run_module(dict(SMALL, path=path), capsys)
    assert not failed, result
    assert result["changed"] is True
    assert result["files"] == ["config.json", "generation_config.json", "gpulab-synthetic.json", "model.safetensors",
                               "tokenizer.json", "tokenizer_config.json"]
    assert sorted(os.listdir(path)) == result["files"]
    assert result["architecture"] == "MiniMaxM2ForCausalLM" and result["model_type"] == "minimax_m2"
    failed, again = run_module(dict(SMALL, path=path), capsys)
    assert not failed and again["changed"] is False
    assert again["options_sha256"] == result["options_sha256"]


def test_config_has_the_real_fp8_quantization_config(tmp_path, capsys):
    path = str(tmp_path / "mm2")
    run_module(dict(SMALL, path=path), capsys)
    with open(os.path.join(path, "config.json")) as handle:
        config = json.load(handle)
    assert config["quantization_config"] == {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}
    assert config["num_local_experts"] == 4 and config["intermediate_size"] == 128
    assert config["vocab_size"] == 320 and config["eos_token_id"] == 258
    # the planner reads it back to the same shape
    shape = hf.model_shape(config)
    assert shape["experts"] == 4 and shape["quant"]["block"] == [128, 128]


def test_safetensors_layout_and_values(tmp_path, capsys):
    path = str(tmp_path / "mm2")
    run_module(dict(SMALL, path=path), capsys)
    header, body, length = read_safetensors(os.path.join(path, "model.safetensors"))
    assert length % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    # contiguous offsets covering the whole body, in order
    spans = sorted(info["data_offsets"] for info in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(body)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    w1 = header["model.layers.0.block_sparse_moe.experts.0.w1.weight"]
    assert (w1["dtype"], w1["shape"]) == ("F8_E4M3", [128, 256])
    scale = header["model.layers.0.block_sparse_moe.experts.0.w1.weight_scale_inv"]
    assert (scale["dtype"], scale["shape"]) == ("F32", [1, 2])
    start, end = scale["data_offsets"]
    assert struct.unpack("<2f", body[start:end]) == pytest.approx((0.004, 0.004))
    # FP8 bytes never NaN (0x7f / 0xff) and exponents 5..8
    start, end = w1["data_offsets"]
    fp8 = body[start:end]
    assert all(5 <= (b >> 3) & 0xF <= 8 for b in fp8)
    # bf16 weights bounded, norms one, router bias zero
    emb = header["model.embed_tokens.weight"]
    assert (emb["dtype"], emb["shape"]) == ("BF16", [320, 256])
    start, end = emb["data_offsets"]
    values = [struct.unpack("<f", b"\0\0" + body[i:i + 2])[0] for i in range(start, start + 2000, 2)]
    assert all(2 ** -9 <= abs(v) < 2 ** -5 for v in values)
    norm = header["model.norm.weight"]
    start, end = norm["data_offsets"]
    assert body[start:end] == struct.pack("<H", 0x3F80) * 256
    bias = header["model.layers.0.block_sparse_moe.e_score_correction_bias"]
    assert bias["dtype"] == "F32" and body[bias["data_offsets"][0]:bias["data_offsets"][1]] == b"\0" * 16
    # lm_head and the router stay bf16
    assert header["lm_head.weight"]["dtype"] == "BF16"
    assert header["model.layers.0.block_sparse_moe.gate.weight"]["dtype"] == "BF16"


def test_same_seed_same_bytes(tmp_path, capsys):
    for name in ("a", "b"):
        run_module(dict(SMALL, path=str(tmp_path / name)), capsys)
    with open(str(tmp_path / "a" / "model.safetensors"), "rb") as a, open(str(tmp_path / "b" / "model.safetensors"), "rb") as b:
        assert a.read() == b.read()


def test_dense_llama_unquantised_in_shards(tmp_path, capsys):
    path = str(tmp_path / "llama")
    failed, result = run_module(dict(SMALL, path=path, architecture="llama", quantization="none", shard_max_mib=1), capsys)
    assert not failed, result
    shards = [f for f in result["files"] if f.endswith(".safetensors")]
    assert len(shards) > 1 and shards[0] == "model-00001-of-%05d.safetensors" % len(shards)
    with open(os.path.join(path, "model.safetensors.index.json")) as handle:
        index = json.load(handle)
    assert index["metadata"]["total_size"] == result["weights_bytes"]
    assert set(index["weight_map"].values()) == set(shards)
    with open(os.path.join(path, "config.json")) as handle:
        config = json.load(handle)
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    total = 0
    for shard in shards:
        header, body, _length = read_safetensors(os.path.join(path, shard))
        header.pop("__metadata__")
        assert all(index["weight_map"][name] == shard for name in header)
        assert all(info["dtype"] in ("BF16",) for info in header.values())
        total += len(body)
    assert total == result["weights_bytes"]
    # a re-run with one file removes the old shards
    failed, result = run_module(dict(SMALL, path=path, architecture="llama", quantization="none"), capsys)
    assert result["changed"] is True and result["removed"] == sorted(shards + ["model.safetensors.index.json"])
    assert sorted(os.listdir(path)) == result["files"]


def test_qwen2_has_qkv_biases():
    plan = sh.ModelPlan(sh.validate_options(dict(SMALL, architecture="qwen2", quantization="none")))
    names = [t[0] for t in plan.tensors]
    assert "model.layers.0.self_attn.k_proj.bias" in names
    assert plan.config["attention_bias"] is True


def test_tokenizer_is_byte_level_with_the_parsers_tokens():
    files, count = sh.tokenizer_files("minimax-m2")
    tokenizer = files["tokenizer.json"]
    assert tokenizer["model"]["type"] == "BPE" and len(tokenizer["model"]["vocab"]) == 256
    assert tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    added = dict((a["content"], a) for a in tokenizer["added_tokens"])
    assert added["</think>"]["special"] is False and added["<|im_end|>"]["special"] is True
    assert count == 263 and sh.token_id("</think>") == 260
    assert "<think>" in files["tokenizer_config.json"]["chat_template"]
    assert "<think>" not in sh.tokenizer_files("llama")[0]["tokenizer_config.json"]["chat_template"]
    # every byte has a distinct printable symbol
    assert len(set(sh.byte_symbols().values())) == 256


def test_check_mode_writes_nothing(tmp_path, capsys):
    path = str(tmp_path / "mm2")
    failed, result = run_module(dict(SMALL, path=path), capsys, check_mode=True)
    assert not failed and result["changed"] is True
    assert not os.path.exists(path)
    assert result["size_bytes"] > result["weights_bytes"] > 0


def test_refuses_a_model_it_did_not_write(tmp_path, capsys):
    path = tmp_path / "real"
    path.mkdir()
    (path / "config.json").write_text("{}")
    failed, result = run_module(dict(SMALL, path=str(path)), capsys)
    assert failed and "holds a model this module did not write" in result["msg"]
    failed, result = run_module(dict(SMALL, path=str(path), force=True), capsys)
    assert not failed and result["changed"] is True


def test_changed_options_rewrite(tmp_path, capsys):
    path = str(tmp_path / "mm2")
    run_module(dict(SMALL, path=path), capsys)
    failed, result = run_module(dict(SMALL, path=path, seed=7), capsys)
    assert not failed and result["changed"] is True


@pytest.mark.parametrize("change,message", [
    ({"attention_heads": 3, "kv_heads": 2}, "attention_heads 3 is not a multiple of kv_heads 2"),
    ({"experts_used": 5}, "experts_used 5 exceeds experts 4"),
    ({"expert_ffn_size": 192}, "expert_ffn_size 192 is not a multiple of the FP8 block 128"),
    ({"architecture": "llama", "ffn_size": 200}, "ffn_size 200 is not a multiple of the FP8 block 128"),
    ({"head_dim": 64, "kv_heads": 1}, "kv_heads x head_dim 64 is not a multiple of the FP8 block 128"),
    ({"layers": 0}, "layers is 0, expected a positive integer"),
    ({"weight_block_size": [128]}, "weight_block_size is [128]"),
    ({"shard_max_mib": -1}, "shard_max_mib is -1"),
])
def test_bad_options_name_the_value(tmp_path, capsys, change, message):
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "m"), **change), capsys)
    assert failed and message in result["msg"]
    assert not os.path.exists(str(tmp_path / "m"))


def test_missing_parent(tmp_path, capsys):
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "no" / "m")), capsys)
    assert failed and "does not exist; create it first" in result["msg"]


def _tight_disk(monkeypatch, directory, free_bytes):
    real_statvfs = os.statvfs

    class Tight:
        f_frsize = 1
        f_bavail = free_bytes

    monkeypatch.setattr(os, "statvfs", lambda d: Tight() if d == directory else real_statvfs(d))


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_model_larger_than_the_free_space_is_refused_before_writing(tmp_path, capsys, monkeypatch, check_mode):
    path = str(tmp_path / "m")
    _failed, predicted = run_module(dict(SMALL, path=path), capsys, check_mode=True)
    _tight_disk(monkeypatch, str(tmp_path), predicted["size_bytes"] - 100)
    failed, result = run_module(dict(SMALL, path=path), capsys, check_mode=check_mode)
    assert failed, result
    assert result["msg"].startswith("%s has " % tmp_path) and "GiB free, the model needs" in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_a_model_that_fits_exactly_is_written(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "m")
    needed = sh.space_needed(sh.write_sizes(sh.ModelPlan(sh.validate_options(SMALL))), {})
    _tight_disk(monkeypatch, str(tmp_path), needed)
    failed, result = run_module(dict(SMALL, path=path), capsys)
    assert not failed, result
    assert sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)) == needed


def test_a_rewrite_counts_the_space_of_the_files_it_replaces(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "m")
    run_module(dict(SMALL, path=path), capsys)
    plan = sh.ModelPlan(sh.validate_options(dict(SMALL, seed=7)))
    sizes = sh.write_sizes(plan)
    old = dict((name, os.path.getsize(os.path.join(path, name))) for name, _size in sizes)
    # Same shapes, other seed: each file replaces one of the same size, so the peak is the largest file.
    assert sh.space_needed(sizes, old) == max(size for _name, size in sizes)
    _tight_disk(monkeypatch, path, max(size for _name, size in sizes) - 1)
    failed, result = run_module(dict(SMALL, path=path, seed=7), capsys)
    assert failed and "the model needs" in result["msg"], result
    _tight_disk(monkeypatch, path, max(size for _name, size in sizes))
    failed, result = run_module(dict(SMALL, path=path, seed=7), capsys)
    assert not failed, result


def test_space_needed_is_the_peak_of_writing_file_by_file():
    assert sh.space_needed([("a", 10), ("b", 5)], {}) == 15
    assert sh.space_needed([("a", 10), ("b", 5)], {"a": 10, "b": 5}) == 10
    assert sh.space_needed([("a", 4), ("b", 10)], {"a": 8}) == 10 - 4


def test_a_family_at_reduced_depth_as_sparse_headers_then_idempotent(tmp_path, capsys):
    path = str(tmp_path / "dsv3")
    args = {"path": path, "family": "deepseek-v3", "layers": 2, "weights": "sparse", "shard_max_mib": 4096}
    failed, result = run_module(args, capsys)
    assert not failed, result
    assert (result["changed"], result["architecture"], result["model_type"]) == (True, "DeepseekV3ForCausalLM", "deepseek_v3")
    assert result["vocab_size"] == 129280 and result["weights_bytes"] > 14 << 30
    config = json.load(open(os.path.join(path, "config.json")))
    assert (config["hidden_size"], config["num_hidden_layers"], config["first_k_dense_replace"]) == (7168, 2, 1)
    # the files have the checkpoint's size and no data on disk
    shards = [n for n in result["files"] if n.endswith(".safetensors")]
    assert sum(os.path.getsize(os.path.join(path, n)) for n in shards) > result["weights_bytes"]
    assert sum(os.stat(os.path.join(path, n)).st_blocks for n in shards) * 512 < 1 << 20
    failed, again = run_module(args, capsys)
    assert not failed and again["changed"] is False


def test_a_family_without_layers_has_its_released_depth(tmp_path, capsys):
    failed, result = run_module({"path": str(tmp_path / "oss"), "family": "gpt-oss", "weights": "sparse"}, capsys,
                                check_mode=True)
    assert not failed, result
    assert result["architecture"] == "GptOssForCausalLM" and result["changed"] is True
    # gpt-oss-120b: 36 layers, MXFP4 experts, 60.8 GiB
    assert result["weights_bytes"] / 2.0 ** 30 == pytest.approx(60.8, abs=0.1)
    assert not os.path.exists(str(tmp_path / "oss"))
