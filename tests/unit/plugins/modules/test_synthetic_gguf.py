# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.synthetic_gguf: decisions, idempotence, check mode and errors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm
from ansible_collections.gpulab.inference.plugins.modules import synthetic_gguf

# small enough to write in milliseconds
SMALL = {"layers": 1, "hidden_size": 64, "attention_heads": 2, "kv_heads": 1, "head_dim": 32,
         "experts": 4, "experts_used": 2, "expert_ffn_size": 32}


def run_module(args, check_mode=False, capsys=None):
    """Run main() and return (failed, result) from the JSON it prints."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            synthetic_gguf.main()
    result = json.loads(capsys.readouterr().out)
    return exit_info.value.code != 0, result


def test_writes_then_is_idempotent(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert not failed, result
    assert result["changed"] is True
    assert result["path"] == path
    assert result["shard_paths"] == [path]
    assert result["size_bytes"] == os.path.getsize(path)
    assert result["tensor_count"] == 2 + 13 + 1
    assert result["architecture"] == "minimax-m2"
    assert result["layers"] == 1
    assert result["vocab_size"] == 259
    assert result["chat_template_source"] == "default"
    assert gguf.read_gguf(path).get(sm.KEY_OPTIONS_SHA256) == result["options_sha256"]
    mtime_ns = os.stat(path).st_mtime_ns

    failed, again = run_module(dict(SMALL, path=path), capsys=capsys)
    assert not failed, again
    assert again["changed"] is False
    assert again["size_bytes"] == result["size_bytes"]
    assert os.stat(path).st_mtime_ns == mtime_ns


def test_changed_option_rewrites_and_force_rewrites(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    run_module(dict(SMALL, path=path), capsys=capsys)
    first = gguf.read_gguf(path).get(sm.KEY_OPTIONS_SHA256)
    _failed, result = run_module(dict(SMALL, path=path, seed=7), capsys=capsys)
    assert result["changed"] is True
    assert gguf.read_gguf(path).get(sm.KEY_OPTIONS_SHA256) != first
    _failed, result = run_module(dict(SMALL, path=path, seed=7, force=True), capsys=capsys)
    assert result["changed"] is True


def test_check_mode_writes_nothing_but_reports_exact_size(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    failed, predicted = run_module(dict(SMALL, path=path, shards=2), check_mode=True, capsys=capsys)
    assert not failed, predicted
    assert predicted["changed"] is True
    assert os.listdir(str(tmp_path)) == []
    _failed, written = run_module(dict(SMALL, path=path, shards=2), capsys=capsys)
    assert written["size_bytes"] == predicted["size_bytes"]
    assert written["size_bytes"] == sum(os.path.getsize(p) for p in written["shard_paths"])


def test_shards_return_every_path(tmp_path, capsys):
    path = str(tmp_path / "big.gguf")
    _failed, result = run_module(dict(SMALL, path=path, shards=3), capsys=capsys)
    expected = [str(tmp_path / ("big-%05d-of-00003.gguf" % i)) for i in (1, 2, 3)]
    assert result["shard_paths"] == expected
    assert result["path"] == expected[0]
    assert sorted(os.listdir(str(tmp_path))) == sorted(os.path.basename(p) for p in expected)
    # a missing shard makes the model stale again
    os.unlink(expected[2])
    _failed, result = run_module(dict(SMALL, path=path, shards=3), capsys=capsys)
    assert result["changed"] is True
    assert os.path.exists(expected[2])


def test_vocab_gguf_tokens_size_the_embeddings(tmp_path, capsys):
    vocab = str(tmp_path / "vocab.gguf")
    tokens = ["<s>", "</s>"] + ["t%d" % i for i in range(98)]
    with open(vocab, "wb") as stream:
        gguf.write_gguf(stream, [
            ("general.architecture", gguf.GGUFValue(gguf.STRING, "qwen2")),
            ("tokenizer.ggml.model", gguf.GGUFValue(gguf.STRING, "gpt2")),
            ("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.ARRAY, tokens, gguf.STRING)),
            ("tokenizer.chat_template", gguf.GGUFValue(gguf.STRING, "{{ messages }}")),
        ], [], None)
    path = str(tmp_path / "m.gguf")
    _failed, result = run_module(dict(SMALL, path=path, vocab_gguf=vocab), capsys=capsys)
    assert result["vocab_size"] == 100
    assert result["chat_template_source"] == "vocab_gguf"
    parsed = gguf.read_gguf(path)
    assert parsed.get("general.architecture") == "minimax-m2"
    assert parsed.get("tokenizer.ggml.model") == "gpt2"
    assert parsed.get("tokenizer.chat_template") == "{{ messages }}"
    assert parsed.tensors[0].dims == (64, 100)
    # another vocabulary file (other checksum) means another model
    with open(vocab, "ab") as stream:
        stream.write(b"\0")
    _failed, result = run_module(dict(SMALL, path=path, vocab_gguf=vocab), capsys=capsys)
    assert result["changed"] is True


@pytest.mark.parametrize("options, message", [
    ({"experts": 4, "experts_used": 8}, "experts_used=8 is larger than experts=4"),
    ({"hidden_size": 100}, "hidden_size=100 is not divisible by 32"),
    ({"shards": 40}, "shards=40 is more than the model's 16 tensors"),
])
def test_bad_options_fail_before_writing(tmp_path, capsys, options, message):
    path = str(tmp_path / "m.gguf")
    failed, result = run_module(dict(SMALL, path=path, **options), capsys=capsys)
    assert failed
    assert message in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_unknown_quantization_is_refused_by_the_spec(tmp_path, capsys):
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "m.gguf"), quantization="Q4_K"), capsys=capsys)
    assert failed
    assert "quantization" in result["msg"] and "Q4_K" in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_missing_directory_and_vocab_are_named(tmp_path, capsys):
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "nope" / "m.gguf")), capsys=capsys)
    assert failed
    assert "directory %s" % (tmp_path / "nope") in result["msg"]
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "m.gguf"),
                                     vocab_gguf=str(tmp_path / "v.gguf")), capsys=capsys)
    assert failed
    assert "vocab_gguf=%r does not exist" % str(tmp_path / "v.gguf") in result["msg"]


def test_refuses_to_overwrite_a_foreign_or_corrupt_file(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    with open(path, "wb") as stream:
        stream.write(b"not a model")
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert failed
    assert "%s: not a GGUF file" % path in result["msg"]
    assert "force=true" in result["msg"]
    with open(path, "rb") as stream:
        assert stream.read() == b"not a model"
    failed, result = run_module(dict(SMALL, path=path, force=True), capsys=capsys)
    assert not failed and result["changed"] is True
    assert gguf.read_gguf(path).get("general.architecture") == "minimax-m2"


def test_truncated_model_is_reported_with_its_name(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    run_module(dict(SMALL, path=path), capsys=capsys)
    with open(path, "r+b") as stream:
        stream.truncate(os.path.getsize(path) - 64)
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert failed
    assert "%s: truncated GGUF file" % path in result["msg"]


def test_file_mode_is_applied(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    run_module(dict(SMALL, path=path), capsys=capsys)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    _failed, result = run_module(dict(SMALL, path=path, mode="0600"), capsys=capsys)
    assert result["changed"] is True
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    _failed, result = run_module(dict(SMALL, path=path, mode="0600"), capsys=capsys)
    assert result["changed"] is False


# ---------------------------------------------------------------- bad input, table-driven

def _vocab_bytes(kv_bytes, n_kv=1):
    return gguf.GGUF_MAGIC + struct.pack("<IQQ", 3, 0, n_kv) + kv_bytes


def _key(name):
    return struct.pack("<Q", len(name)) + name.encode()


def _u32(value):
    return struct.pack("<II", gguf.UINT32, value)


VOCAB_ALIGNMENT_0 = _vocab_bytes(_key("general.alignment") + _u32(0))
VOCAB_ABSURD_ARRAY = _vocab_bytes(_key("tokenizer.ggml.tokens") + struct.pack(
    "<IIQ", gguf.ARRAY, gguf.STRING, 1 << 31))
VOCAB_NO_TOKENS = _vocab_bytes(_key("tokenizer.ggml.model") + struct.pack("<I", gguf.STRING) + _key("gpt2"))

HUGE = {"layers": 512, "hidden_size": 8192, "attention_heads": 64, "kv_heads": 8, "head_dim": 128,
        "experts": 1024, "experts_used": 8, "expert_ffn_size": 8192}

BAD_INPUTS = [
    # (id, options, vocabulary file bytes or None, check mode, words the message must hold)
    ("context_length 2^33", {"context_length": 2 ** 33}, None, False, ["context_length=8589934592 does not fit"]),
    ("context_length 2^33 in check mode", {"context_length": 2 ** 33}, None, True, ["context_length=8589934592"]),
    ("shards over UINT16", {"shards": 70000}, None, False, ["shards=70000 does not fit split.count"]),
    ("vocabulary with alignment 0", {}, VOCAB_ALIGNMENT_0, False,
     ["vocab_gguf:", "general.alignment is 0, not a power of 2"]),
    ("vocabulary with an absurd array count", {}, VOCAB_ABSURD_ARRAY, False,
     ["vocab_gguf:", "an array of 2147483648 strings"]),
    ("vocabulary without tokens", {}, VOCAB_NO_TOKENS, False, ["has no tokenizer.ggml.tokens array"]),
    ("vocabulary that is not GGUF", {}, b"PK\x03\x04zip", False, ["vocab_gguf:", "not a GGUF file"]),
    ("huge model in check mode", HUGE, None, True, ["GiB free, the model needs", "lower layers/experts"]),
    ("huge model", HUGE, None, False, ["GiB free, the model needs"]),
    ("layers over llama.cpp's limit", {"layers": 513}, None, False, ["layers=513 exceeds llama.cpp's limit of 512"]),
    ("negative seed", {"seed": -1}, None, False, ["seed=-1 must be a non-negative integer"]),
    ("zero kv heads", {"kv_heads": 0}, None, False, ["kv_heads=0 must be a positive integer"]),
    ("head_dim not a number", {"head_dim": "wide"}, None, False, ["head_dim"]),
    ("unknown option", {"kv_head": 2}, None, False, ["kv_head"]),
    ("path without .gguf", {"path": "model.bin"}, None, False, ["must end with .gguf"]),
]


@pytest.mark.parametrize("options, vocab, check_mode, words", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_fails_clearly_and_writes_nothing(tmp_path, capsys, options, vocab, check_mode, words):
    models = tmp_path / "models"
    models.mkdir()
    args = dict(SMALL, path=str(models / "m.gguf"))
    if vocab is not None:
        (tmp_path / "vocab.gguf").write_bytes(vocab)
        args["vocab_gguf"] = str(tmp_path / "vocab.gguf")
    args.update(options)
    if "path" in options:
        args["path"] = str(models / options["path"])
    failed, result = run_module(args, check_mode=check_mode, capsys=capsys)
    assert failed, result
    for word in words:
        assert word in result["msg"]
    assert os.listdir(str(models)) == []


def test_temp_files_of_an_interrupted_run_are_removed(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    stale = tmp_path / ".m.gguf.abcd1234.tmp"
    stale.write_bytes(b"half a model")
    failed, result = run_module(dict(SMALL, path=path), check_mode=True, capsys=capsys)
    assert not failed and result["removed_temp_files"] == [str(stale)]
    assert stale.exists()
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert not failed and result["removed_temp_files"] == [str(stale)]
    assert sorted(os.listdir(str(tmp_path))) == ["m.gguf"]
    # a current model with a stale temp file beside it: only the cleanup is a change
    stale.write_bytes(b"again")
    _failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert (result["changed"], result["removed_temp_files"]) == (True, [str(stale)])
    _failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert (result["changed"], result["removed_temp_files"]) == (False, [])


def test_free_space_check_counts_stale_temp_files(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "m.gguf")
    _failed, predicted = run_module(dict(SMALL, path=path), check_mode=True, capsys=capsys)
    needed = predicted["size_bytes"]
    real_statvfs = os.statvfs

    class Tight:
        f_frsize = 1
        f_bavail = needed - 100

    monkeypatch.setattr(os, "statvfs", lambda directory: Tight() if directory == str(tmp_path) else real_statvfs(directory))
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert failed and "the model needs" in result["msg"]
    assert os.listdir(str(tmp_path)) == []
    (tmp_path / ".m.gguf.abcd1234.tmp").write_bytes(b"x" * 200)
    failed, result = run_module(dict(SMALL, path=path), capsys=capsys)
    assert not failed, result
    assert os.listdir(str(tmp_path)) == ["m.gguf"]


def test_check_mode_tolerates_a_directory_not_yet_created(tmp_path, capsys):
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "new" / "m.gguf")), check_mode=True, capsys=capsys)
    assert not failed, result
    assert result["changed"] is True
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("metadata, message", [
    ([("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.ARRAY, [1, 2, 3], gguf.UINT32))],
     "tokenizer.ggml.tokens is an array of GGUF UINT32, not of strings"),
    ([("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.STRING, "abc"))], "has no tokenizer.ggml.tokens array"),
    ([("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.ARRAY, ["a", "b"], gguf.STRING)),
      ("tokenizer.chat_template", gguf.GGUFValue(gguf.UINT32, 7))], "tokenizer.chat_template is a GGUF UINT32"),
])
def test_vocab_gguf_metadata_of_the_wrong_type_is_named(tmp_path, capsys, metadata, message):
    vocab = str(tmp_path / "vocab.gguf")
    with open(vocab, "wb") as stream:
        gguf.write_gguf(stream, [("general.architecture", gguf.GGUFValue(gguf.STRING, "qwen2"))] + metadata, [], None)
    failed, result = run_module(dict(SMALL, path=str(tmp_path / "m.gguf"), vocab_gguf=vocab), capsys=capsys)
    assert failed, result
    assert "vocab_gguf=%r" % vocab in result["msg"] and message in result["msg"]
    assert sorted(os.listdir(str(tmp_path))) == ["vocab.gguf"]
