# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gguf.read_gguf_model against llama.cpp's own reader (the `gguf` package, gguf-py) on the
same files: synthetic models of several shapes, a split model, and files written by gguf-py's
writer with quantization types the collection's writer does not produce."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil

import numpy as np
import pytest

import gguf as gguf_py  # llama.cpp's gguf-py, from PyPI

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm


def write_synthetic(directory, name, **options):
    opts = sm.validate_options(options)
    plan = sm.ModelPlan(opts, str(directory / name), sm.builtin_vocab(), None)
    sm.write_model(plan, opts["seed"])
    return plan


def py_value(field):
    """A gguf-py ReaderField as a plain Python value."""
    value = field.contents()
    if isinstance(value, float):
        return float(np.float32(value))
    return value


def assert_same_as_gguf_py(parsed, path):
    reader = gguf_py.GGUFReader(path)
    fields = dict((k, f) for k, f in reader.fields.items() if not k.startswith("GGUF."))
    assert list(parsed.metadata) == list(fields)
    for key, field in fields.items():
        ours = parsed.metadata[key]
        assert ours.value_type == int(field.types[0]), key
        if ours.value_type == gguf.ARRAY:
            assert ours.item_type == int(field.types[1]), key
        theirs = py_value(field)
        if ours.value_type == gguf.FLOAT32:
            assert ours.value == pytest.approx(theirs), key
        elif ours.value_type == gguf.ARRAY and ours.item_type == gguf.FLOAT32:
            assert ours.value == pytest.approx(theirs), key
        else:
            assert ours.value == theirs, key
    assert parsed.alignment == reader.alignment
    assert parsed.data_offset == reader.data_offset
    assert len(parsed.tensors) == len(reader.tensors)
    for ours, theirs in zip(parsed.tensors, reader.tensors):
        assert ours.name == theirs.name
        assert list(ours.dims) == [int(d) for d in theirs.shape]
        assert ours.ggml_type == int(theirs.tensor_type)
        assert parsed.data_offset + ours.offset == theirs.data_offset
        assert ours.n_elements == int(theirs.n_elements)
        assert gguf.ggml_nbytes(ours.ggml_type, ours.dims) == int(theirs.n_bytes)


@pytest.mark.parametrize("options", [
    {},
    {"quantization": "F16", "layers": 2},
    {"layers": 3, "hidden_size": 256, "attention_heads": 4, "kv_heads": 1, "head_dim": 64, "experts": 4,
     "experts_used": 1, "expert_ffn_size": 128},
], ids=["default", "f16", "small-moe"])
def test_single_file_models_read_like_gguf_py(tmp_path, options):
    plan = write_synthetic(tmp_path, "model.gguf", **options)
    model = gguf.read_gguf_model(plan.paths[0])
    assert model.paths == plan.paths
    assert len(model.tensors) == len(plan.tensors)
    assert model.size_bytes == os.path.getsize(plan.paths[0]) == plan.file_sizes()[0]
    assert_same_as_gguf_py(model.shards[0], plan.paths[0])


def test_split_model_reads_every_shard_like_gguf_py(tmp_path):
    plan = write_synthetic(tmp_path, "split.gguf", shards=3)
    model = gguf.read_gguf_model(plan.paths[0])
    assert [os.path.basename(p) for p in model.paths] == [
        "split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"]
    assert [s for _info, s in model.tensors] == sorted(s for _info, s in model.tensors)
    assert set(s for _info, s in model.tensors) == set([0, 1, 2])
    assert [info.name for info, _s in model.tensors] == [t.info.name for t in plan.tensors]
    assert model.size_bytes == sum(plan.file_sizes())
    assert model.get("general.architecture") == "minimax-m2"
    for shard, path in zip(model.shards, plan.paths):
        assert_same_as_gguf_py(shard, path)
    # the metadata of the model is the first file's
    assert model.get(gguf.KEY_SPLIT_COUNT) == 3
    assert model.get(gguf.KEY_SPLIT_TENSORS_COUNT) == len(plan.tensors)


def write_with_gguf_py(path, tensors, arch="llama", extra=None):
    """A GGUF written by llama.cpp's own writer; tensors: (name, ggml type, dims in ggml order)."""
    writer = gguf_py.GGUFWriter(path, arch)
    writer.add_block_count(1)
    for key, value in (extra or {}).items():
        writer.add_uint32(key, value)
    for name, type_id, dims in tensors:
        qtype = gguf_py.GGMLQuantizationType(type_id)
        block_values, block_bytes = gguf_py.GGML_QUANT_SIZES[qtype]
        row_bytes = dims[0] // block_values * block_bytes
        rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
        data = np.zeros((rows, row_bytes), dtype=np.uint8)
        # gguf-py wants the byte shape in numpy order (rows ..., bytes per row)
        writer.add_tensor(name, data.reshape(tuple(reversed(dims[1:])) + (row_bytes,)), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("type_name", ["Q4_K", "Q6_K", "Q5_0", "IQ4_XS", "BF16", "MXFP4"])
def test_quantized_tensors_are_sized_like_gguf_py(tmp_path, type_name):
    path = str(tmp_path / ("%s.gguf" % type_name))
    type_id = gguf.GGML_BLOCK_TYPE_IDS[type_name]
    write_with_gguf_py(path, [("blk.0.ffn_up_exps.weight", type_id, (512, 64, 4)),
                              ("output.weight", type_id, (256, 32))])
    model = gguf.read_gguf_model(path)
    assert_same_as_gguf_py(model.shards[0], path)
    assert gguf.ggml_type_name(type_id) == type_name


def test_block_table_matches_gguf_py():
    theirs = dict((int(t), sizes) for t, sizes in gguf_py.GGML_QUANT_SIZES.items())
    ours = dict((t, (b, s)) for t, (_name, b, s) in gguf.GGML_BLOCK_SIZES.items())
    assert ours == theirs
    for type_id, (name, _b, _s) in gguf.GGML_BLOCK_SIZES.items():
        assert gguf_py.GGMLQuantizationType(type_id).name == name


# ---------------------------------------------------------------- bad input

def test_not_a_gguf_is_named(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 this is a zip, not a model" + b"\0" * 64)
    with pytest.raises(gguf.GGUFError, match=r"model\.gguf: not a GGUF file \(magic b'PK\\x03\\x04'"):
        gguf.read_gguf_model(str(path))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(gguf.GGUFError, match=r"nothere\.gguf: cannot open GGUF file"):
        gguf.read_gguf_model(str(tmp_path / "nothere.gguf"))


def test_truncated_header_is_named(tmp_path):
    plan = write_synthetic(tmp_path, "model.gguf", layers=1)
    with open(plan.paths[0], "rb") as stream:
        head = stream.read(200)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(head)
    with pytest.raises(gguf.GGUFError, match=r"cut\.gguf: (truncated|corrupt) GGUF file"):
        gguf.read_gguf_model(str(cut))


def test_truncated_tensor_data_is_named(tmp_path):
    path = str(tmp_path / "q4k.gguf")
    write_with_gguf_py(path, [("blk.0.attn_q.weight", 12, (512, 64))])
    size = os.path.getsize(path)
    with open(path, "r+b") as stream:
        stream.truncate(size - 100)
    with pytest.raises(gguf.GGUFError, match=r"q4k\.gguf: truncated GGUF file: tensor blk\.0\.attn_q\.weight ends at"):
        gguf.read_gguf_model(path)


def test_missing_shard_is_named(tmp_path):
    plan = write_synthetic(tmp_path, "split.gguf", shards=3)
    os.unlink(plan.paths[1])
    with pytest.raises(gguf.GGUFError, match=r"missing shard 2 of 3: .*split-00002-of-00003\.gguf does not exist"):
        gguf.read_gguf_model(plan.paths[0])


def test_a_later_shard_is_refused_as_the_model(tmp_path):
    plan = write_synthetic(tmp_path, "split.gguf", shards=2)
    with pytest.raises(gguf.GGUFError, match=r"is shard 2 of 2 of a split model; give the first shard"):
        gguf.read_gguf_model(plan.paths[1])


def test_renamed_first_shard_is_refused(tmp_path):
    plan = write_synthetic(tmp_path, "split.gguf", shards=2)
    renamed = str(tmp_path / "renamed.gguf")
    shutil.copy(plan.paths[0], renamed)
    with pytest.raises(gguf.GGUFError, match=r"does not end with -00001-of-00002\.gguf"):
        gguf.read_gguf_model(renamed)


def test_shard_of_another_model_is_refused(tmp_path):
    plan = write_synthetic(tmp_path, "split.gguf", shards=3)
    shutil.copy(plan.paths[2], plan.paths[1])
    with pytest.raises(gguf.GGUFError, match=r"expected shard 2 of 3, the file says shard 3 of 3"):
        gguf.read_gguf_model(plan.paths[0])


def test_unknown_tensor_type_is_named(tmp_path):
    path = tmp_path / "odd.gguf"
    info = gguf.TensorInfo("blk.0.attn_q.weight", (32,), gguf.GGML_F32)
    header = bytearray(gguf.encode_header([("general.architecture", gguf.GGUFValue(gguf.STRING, "llama"))], [info]))
    # patch the tensor's type (the u32 before its u64 offset, at the end of the tensor infos) to 99
    at = header.rindex(b"blk.0.attn_q.weight") + len("blk.0.attn_q.weight") + 4 + 8
    header[at:at + 4] = (99).to_bytes(4, "little")
    path.write_bytes(bytes(header) + b"\0" * 128)
    with pytest.raises(gguf.GGUFError, match=r"tensor blk\.0\.attn_q\.weight has ggml type 99"):
        gguf.read_gguf_model(str(path))
