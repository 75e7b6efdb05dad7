# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GGUF writer/reader against llama.cpp's layout rules (ggml/src/gguf.cpp)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
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


# ---------------------------------------------------------------- corrupt vocabularies

def _header(n_kv):
    return gguf.GGUF_MAGIC + struct.pack("<IQQ", 3, 0, n_kv)


def _key(name):
    return struct.pack("<Q", len(name)) + name.encode()


CORRUPT = [
    # (id, file bytes, words the error must hold)
    ("alignment 0", _header(1) + _key("general.alignment") + struct.pack("<II", gguf.UINT32, 0),
     ["general.alignment is 0, not a power of 2"]),
    ("alignment 48", _header(1) + _key("general.alignment") + struct.pack("<II", gguf.UINT32, 48),
     ["general.alignment is 48, not a power of 2"]),
    ("alignment a string", _header(1) + _key("general.alignment") + struct.pack("<I", gguf.STRING) + _key("32"),
     ["general.alignment is a GGUF STRING, expected UINT32"]),
    ("absurd scalar array count", _header(1) + _key("t.a") + struct.pack("<IIQ", gguf.ARRAY, gguf.INT32, (1 << 32)),
     ["an array of 4294967296 INT32 values", "needs 17179869184 bytes"]),
    ("absurd string array count", _header(1) + _key("tokenizer.ggml.tokens")
     + struct.pack("<IIQ", gguf.ARRAY, gguf.STRING, (1 << 31)), ["an array of 2147483648 strings"]),
    ("absurd string length", _header(1) + _key("t.s") + struct.pack("<IQ", gguf.STRING, (1 << 31)),
     ["a string of 2147483648 bytes"]),
    ("string length over 4 GiB", _header(1) + _key("t.s") + struct.pack("<IQ", gguf.STRING, (1 << 40)),
     ["corrupt GGUF string length 1099511627776"]),
    ("nested array", _header(1) + _key("t.a") + struct.pack("<IIQ", gguf.ARRAY, gguf.ARRAY, 1),
     ["corrupt GGUF array element type 9"]),
    ("unknown value type", _header(1) + _key("t.x") + struct.pack("<I", 99), ["corrupt GGUF value type 99"]),
    ("non-UTF-8 key", _header(1) + struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<IB", gguf.UINT8, 1),
     ["is not UTF-8"]),
    ("absurd key count", gguf.GGUF_MAGIC + struct.pack("<IQQ", 3, 0, 1 << 40), ["corrupt GGUF header"]),
    ("version 2", gguf.GGUF_MAGIC + struct.pack("<IQQ", 2, 0, 0), ["GGUF version 2 is not supported"]),
    ("not GGUF", b"PK\x03\x04", ["not a GGUF file"]),
    ("empty", b"", ["not a GGUF file"]),
]


@pytest.mark.parametrize("data, words", [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_corrupt_files_are_named_errors(tmp_path, data, words):
    path = tmp_path / "vocab.gguf"
    path.write_bytes(data)
    with pytest.raises(gguf.GGUFError) as raised:
        gguf.read_gguf(str(path))
    assert str(raised.value).startswith(str(path))
    for word in words:
        assert word in str(raised.value)


def test_power_of_two_alignment_is_read(tmp_path):
    path = str(tmp_path / "a.gguf")
    with open(path, "wb") as stream:
        gguf.write_gguf(stream, [("general.alignment", V(gguf.UINT32, 64))], [gguf.TensorInfo("w", (32,), gguf.GGML_F32)],
                        lambda info: [b"\0" * info.nbytes], alignment=64)
    parsed = gguf.read_gguf(path)
    assert (parsed.alignment, parsed.data_offset % 64) == (64, 0)


def test_headers_over_a_hole_read_back_with_the_models_size(tmp_path):
    """write_gguf_headers: the table of any ggml type (here Q2_K and Q8_0), the data a hole."""
    metadata = [("general.architecture", gguf.GGUFValue(gguf.STRING, "llama"))]
    tensors = [gguf.TensorInfo("a.weight", (256, 4096), 10), gguf.TensorInfo("b.weight", (128, 3), gguf.GGML_Q8_0)]
    path = str(tmp_path / "shape.gguf")
    with open(path, "wb") as stream:
        size = gguf.write_gguf_headers(stream, metadata, tensors)
    # Q2_K: 84 bytes per 256 values; Q8_0: 34 per 32; each aligned to 32
    assert size == os.path.getsize(path) and os.stat(path).st_blocks * 512 < 64 << 10
    model = gguf.read_gguf_model(path)
    assert [(i.name, i.dims, i.ggml_type) for i, _s in model.tensors] == [("a.weight", (256, 4096), 10),
                                                                          ("b.weight", (128, 3), gguf.GGML_Q8_0)]
    # 4096 rows of 84 bytes, then 3 rows of 4 x 34 = 408 bytes padded to 416
    assert tensors[1].offset == 4096 * 84
    assert size == len(gguf.encode_header(metadata, tensors)) + 4096 * 84 + 416
