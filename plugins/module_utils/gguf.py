# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small pure-Python GGUF (version 3) writer and reader.

Only what the collection needs: every metadata value type, tensor infos, aligned tensor data
written from a stream of chunks (the file is never held in memory), and a reader that checks a
file is complete. Layout follows llama.cpp's ggml/src/gguf.cpp and gguf-py/gguf/constants.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32
KEY_ALIGNMENT = "general.alignment"

# GGUF metadata value types (gguf_type in ggml/include/gguf.h)
UINT8 = 0
INT8 = 1
UINT16 = 2
INT16 = 3
UINT32 = 4
INT32 = 5
FLOAT32 = 6
BOOL = 7
STRING = 8
ARRAY = 9
UINT64 = 10
INT64 = 11
FLOAT64 = 12

VALUE_TYPE_NAMES = {
    UINT8: "UINT8", INT8: "INT8", UINT16: "UINT16", INT16: "INT16", UINT32: "UINT32",
    INT32: "INT32", FLOAT32: "FLOAT32", BOOL: "BOOL", STRING: "STRING", ARRAY: "ARRAY",
    UINT64: "UINT64", INT64: "INT64", FLOAT64: "FLOAT64",
}

# fixed-size scalar types: struct format (little endian)
_SCALAR_FORMATS = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}

# ggml tensor types used here: id -> (name, values per block, bytes per block)
GGML_F32 = 0
GGML_F16 = 1
GGML_Q8_0 = 8
GGML_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_Q8_0: ("Q8_0", 32, 34),  # fp16 scale + 32 int8 quants
}
GGML_TYPE_IDS = dict((name, type_id) for type_id, (name, _b, _s) in GGML_TYPES.items())


class GGUFError(Exception):
    """A GGUF file or value that cannot be written or read."""


class GGUFValue:
    """A typed metadata value. For ARRAY, `value` is a list and `item_type` its element type."""

    __slots__ = ("value_type", "value", "item_type")

    def __init__(self, value_type, value, item_type=None):
        if value_type not in VALUE_TYPE_NAMES:
            raise GGUFError("unknown GGUF value type %r" % (value_type,))
        if value_type == ARRAY and item_type not in VALUE_TYPE_NAMES:
            raise GGUFError("GGUF array needs an element type, got %r" % (item_type,))
        self.value_type = value_type
        self.value = value
        self.item_type = item_type

    def __eq__(self, other):
        return (isinstance(other, GGUFValue) and self.value_type == other.value_type
                and self.item_type == other.item_type and self.value == other.value)

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        if self.value_type == ARRAY:
            return "GGUFValue(ARRAY[%s], %d items)" % (VALUE_TYPE_NAMES[self.item_type], len(self.value))
        return "GGUFValue(%s, %r)" % (VALUE_TYPE_NAMES[self.value_type], self.value)


def align_offset(offset, alignment=GGUF_DEFAULT_ALIGNMENT):
    """Smallest multiple of `alignment` that is >= offset."""
    return (offset + alignment - 1) // alignment * alignment


def tensor_nbytes(ggml_type, dims):
    """Bytes of a tensor's data. dims are ggml order (dims[0] varies fastest, one row). Any type of
    GGML_BLOCK_SIZES: a header over a hole (a model's shape without its data) may name K-quants."""
    types = GGML_TYPES if ggml_type in GGML_TYPES else GGML_BLOCK_SIZES
    if ggml_type not in types:
        raise GGUFError("unsupported ggml tensor type %r" % (ggml_type,))
    name, block_values, block_bytes = types[ggml_type]
    if not dims or any(int(d) <= 0 for d in dims):
        raise GGUFError("tensor dims must be positive, got %r" % (list(dims),))
    if dims[0] % block_values:
        raise GGUFError("row length %d is not a multiple of the %s block size %d"
                        % (dims[0], name, block_values))
    n_values = 1
    for dim in dims:
        n_values *= int(dim)
    return n_values // block_values * block_bytes


class TensorInfo:
    """Name, dims (ggml order), ggml type and data offset (relative to the data section)."""

    __slots__ = ("name", "dims", "ggml_type", "offset")

    def __init__(self, name, dims, ggml_type, offset=0):
        self.name = name
        self.dims = tuple(int(d) for d in dims)
        self.ggml_type = ggml_type
        self.offset = offset

    @property
    def nbytes(self):
        return tensor_nbytes(self.ggml_type, self.dims)

    @property
    def n_elements(self):
        n_values = 1
        for dim in self.dims:
            n_values *= dim
        return n_values

    def __repr__(self):
        return "TensorInfo(%r, %r, %s, offset=%d)" % (
            self.name, self.dims, GGML_TYPES.get(self.ggml_type, ("?",))[0], self.offset)


# ---------------------------------------------------------------- writing

def _pack_string(text):
    raw = text.encode("utf-8") if not isinstance(text, bytes) else text
    return struct.pack("<Q", len(raw)) + raw


def _pack_scalar(value_type, value):
    if value_type == STRING:
        return _pack_string(value)
    try:
        return struct.pack(_SCALAR_FORMATS[value_type], value)
    except (struct.error, KeyError, TypeError) as exc:
        raise GGUFError("cannot encode %r as GGUF %s: %s"
                        % (value, VALUE_TYPE_NAMES.get(value_type, value_type), exc))


def _pack_value(gvalue):
    if gvalue.value_type != ARRAY:
        return struct.pack("<I", gvalue.value_type) + _pack_scalar(gvalue.value_type, gvalue.value)
    item_type = gvalue.item_type
    parts = [struct.pack("<IIQ", ARRAY, item_type, len(gvalue.value))]
    if item_type == STRING:
        parts.extend(_pack_string(item) for item in gvalue.value)
    elif item_type == ARRAY:
        raise GGUFError("nested GGUF arrays are not supported")
    else:
        fmt = _SCALAR_FORMATS[item_type]
        try:
            parts.append(struct.pack("<%d%s" % (len(gvalue.value), fmt[1]), *gvalue.value))
        except struct.error as exc:
            raise GGUFError("cannot encode array of GGUF %s: %s" % (VALUE_TYPE_NAMES[item_type], exc))
    return b"".join(parts)


def layout_tensors(tensors, alignment=GGUF_DEFAULT_ALIGNMENT):
    """Set each TensorInfo.offset (aligned, in order); return the data section size in bytes."""
    offset = 0
    for info in tensors:
        info.offset = offset
        offset = align_offset(offset + info.nbytes, alignment)
    return offset


def encode_header(metadata, tensors, alignment=GGUF_DEFAULT_ALIGNMENT):
    """Header, metadata, tensor infos and padding up to the data section, as bytes.

    metadata: list of (key, GGUFValue) in file order. tensors: list of TensorInfo (offsets are
    computed here).
    """
    layout_tensors(tensors, alignment)
    parts = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(metadata))]
    seen = set()
    for key, gvalue in metadata:
        if key in seen:
            raise GGUFError("duplicate GGUF metadata key %r" % (key,))
        seen.add(key)
        parts.append(_pack_string(key))
        parts.append(_pack_value(gvalue))
    for info in tensors:
        parts.append(_pack_string(info.name))
        parts.append(struct.pack("<I", len(info.dims)))
        parts.append(struct.pack("<%dQ" % len(info.dims), *info.dims))
        parts.append(struct.pack("<IQ", info.ggml_type, info.offset))
    header = b"".join(parts)
    return header + b"\0" * (align_offset(len(header), alignment) - len(header))


def write_gguf(stream, metadata, tensors, chunks_for, alignment=GGUF_DEFAULT_ALIGNMENT):
    """Write a GGUF file to a binary stream; tensor data comes chunk by chunk.

    chunks_for(info) yields bytes-like chunks whose total length must equal info.nbytes.
    Returns the number of bytes written.
    """
    header = encode_header(metadata, tensors, alignment)
    stream.write(header)
    written = len(header)
    for info in tensors:
        expected = info.nbytes
        got = 0
        for chunk in chunks_for(info):
            stream.write(chunk)
            got += len(chunk)
        if got != expected:
            raise GGUFError("tensor %s: generated %d bytes, expected %d" % (info.name, got, expected))
        pad = align_offset(got, alignment) - got
        stream.write(b"\0" * pad)
        written += got + pad
    return written


def write_gguf_headers(stream, metadata, tensors, alignment=GGUF_DEFAULT_ALIGNMENT):
    """A GGUF's header and tensor table over a hole of its data's size: the file has the model's
    size and shape and reads as zeros, but takes no disk (the planners read only headers).
    Returns the file's size in bytes."""
    header = encode_header(metadata, tensors, alignment)
    stream.write(header)
    size = len(header) + layout_tensors(tensors, alignment)
    stream.truncate(size)
    return size


# ---------------------------------------------------------------- reading

class _Cursor:
    """Buffered little-endian reads that turn a short read into a GGUFError naming the file."""

    def __init__(self, stream, path, file_size=None):
        self.stream = stream
        self.path = path
        self.pos = 0
        self.file_size = file_size

    def need(self, size, what):
        """Refuse to read `size` bytes for `what` when the file cannot hold them: a corrupt count
        must end in an error naming it, not in allocating gigabytes."""
        if self.file_size is not None and size > self.file_size - self.pos:
            raise GGUFError("%s: corrupt GGUF file: %s at offset %d needs %d bytes, the file has %d left"
                            % (self.path, what, self.pos, size, max(0, self.file_size - self.pos)))

    def read(self, size):
        data = self.stream.read(size)
        if len(data) != size:
            raise GGUFError("%s: truncated GGUF file (wanted %d bytes at offset %d, got %d)"
                            % (self.path, size, self.pos, len(data)))
        self.pos += size
        return data

    def unpack(self, fmt):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))

    def string(self):
        (length,) = self.unpack("<Q")
        if length > 1 << 32:
            raise GGUFError("%s: corrupt GGUF string length %d at offset %d" % (self.path, length, self.pos))
        self.need(length, "a string of %d bytes" % length)
        raw = self.read(length)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError("%s: GGUF string at offset %d is not UTF-8" % (self.path, self.pos - length))


def _read_value(cur, value_type):
    if value_type == STRING:
        return GGUFValue(STRING, cur.string())
    if value_type == ARRAY:
        item_type, count = cur.unpack("<IQ")
        if item_type not in VALUE_TYPE_NAMES or item_type == ARRAY:
            raise GGUFError("%s: corrupt GGUF array element type %d at offset %d" % (cur.path, item_type, cur.pos))
        if count > 1 << 32:
            raise GGUFError("%s: corrupt GGUF array length %d at offset %d" % (cur.path, count, cur.pos))
        if item_type == STRING:
            # every string has at least its 8-byte length
            cur.need(count * 8, "an array of %d strings" % count)
            items = [cur.string() for _i in range(count)]
        else:
            fmt = _SCALAR_FORMATS[item_type]
            cur.need(count * struct.calcsize(fmt), "an array of %d %s values" % (count, VALUE_TYPE_NAMES[item_type]))
            items = list(cur.unpack("<%d%s" % (count, fmt[1])))
        return GGUFValue(ARRAY, items, item_type)
    if value_type not in _SCALAR_FORMATS:
        raise GGUFError("%s: corrupt GGUF value type %d at offset %d" % (cur.path, value_type, cur.pos))
    (value,) = cur.unpack(_SCALAR_FORMATS[value_type])
    return GGUFValue(value_type, value)


def check_alignment(gvalue, path):
    """general.alignment as llama.cpp accepts it: a UINT32 power of two (ggml/src/gguf.cpp,
    gguf_init_from_file_impl: "alignment %zu is not a power of 2")."""
    if gvalue.value_type != UINT32:
        raise GGUFError("%s: %s is a GGUF %s, expected UINT32"
                        % (path, KEY_ALIGNMENT, VALUE_TYPE_NAMES[gvalue.value_type]))
    alignment = gvalue.value
    if alignment == 0 or alignment & (alignment - 1):
        raise GGUFError("%s: %s is %d, not a power of 2 (llama.cpp refuses such a file)" % (path, KEY_ALIGNMENT, alignment))
    return alignment


class GGUFFile:
    """What read_gguf found: metadata (dict key -> GGUFValue, in file order), tensors, layout."""

    def __init__(self, path, version, metadata, tensors, alignment, data_offset, file_size):
        self.path = path
        self.version = version
        self.metadata = metadata
        self.tensors = tensors
        self.alignment = alignment
        self.data_offset = data_offset
        self.file_size = file_size

    def get(self, key, default=None):
        """Plain Python value of a metadata key."""
        gvalue = self.metadata.get(key)
        return default if gvalue is None else gvalue.value


def _open_local(path):
    import os
    return open(path, "rb"), os.path.getsize(path)


def read_gguf(path, opener=None):
    """Parse a GGUF file's header, metadata and tensor infos, and check its data is complete.

    opener: path -> (binary stream, file size); a local file by default, or ranged reads of a
    file on a mirror (module_utils/model_header.py), which never fetch the tensor data."""
    from collections import OrderedDict

    try:
        stream, file_size = (opener or _open_local)(path)
    except (IOError, OSError) as exc:
        raise GGUFError("%s: cannot open GGUF file: %s" % (path, exc))
    with stream:
        cur = _Cursor(stream, path, file_size)
        magic = stream.read(4)
        cur.pos = len(magic)
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (magic %r, expected %r)" % (path, magic, GGUF_MAGIC))
        version, n_tensors, n_kv = cur.unpack("<IQQ")
        if version != GGUF_VERSION:
            raise GGUFError("%s: GGUF version %d is not supported (expected %d)" % (path, version, GGUF_VERSION))
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise GGUFError("%s: corrupt GGUF header (%d tensors, %d metadata keys)" % (path, n_tensors, n_kv))
        metadata = OrderedDict()
        for _i in range(n_kv):
            key = cur.string()
            (value_type,) = cur.unpack("<I")
            metadata[key] = _read_value(cur, value_type)
        tensors = []
        for _i in range(n_tensors):
            name = cur.string()
            (n_dims,) = cur.unpack("<I")
            if not 1 <= n_dims <= 4:
                raise GGUFError("%s: tensor %s has %d dims (corrupt file)" % (path, name, n_dims))
            dims = cur.unpack("<%dQ" % n_dims)
            ggml_type, offset = cur.unpack("<IQ")
            tensors.append(TensorInfo(name, dims, ggml_type, offset))
        alignment = GGUF_DEFAULT_ALIGNMENT
        if KEY_ALIGNMENT in metadata:
            alignment = check_alignment(metadata[KEY_ALIGNMENT], path)
        data_offset = align_offset(cur.pos, alignment)
    # a file without tensors (vocab-only) may end right after its metadata, unpadded
    data_end = data_offset if tensors else cur.pos
    for info in tensors:
        if info.ggml_type not in GGML_TYPES:
            # a type this reader does not size; only its offset can be checked
            data_end = max(data_end, data_offset + info.offset)
            continue
        if info.offset % alignment:
            raise GGUFError("%s: tensor %s offset %d is not %d-byte aligned" % (path, info.name, info.offset, alignment))
        data_end = max(data_end, data_offset + info.offset + info.nbytes)
    if data_end > file_size:
        raise GGUFError("%s: truncated GGUF file: tensor data needs %d bytes, file has %d"
                        % (path, data_end, file_size))
    return GGUFFile(path, version, metadata, tensors, alignment, data_offset, file_size)


# ---------------------------------------------------------------- models: split files, every tensor type

# Block layout of every ggml type a model file may hold: id -> (name, values per block, bytes per
# block). From ggml/src/ggml.c type_traits (blck_size, type_size) and ggml/include/ggml.h
# enum ggml_type; the ids missing here were removed from ggml (Q4_2, Q4_3, Q4_0_4_4, ...).
GGML_BLOCK_SIZES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
GGML_BLOCK_TYPE_IDS = dict((name, type_id) for type_id, (name, _b, _s) in GGML_BLOCK_SIZES.items())

# gguf-split keys and names (tools/gguf-split/gguf-split.cpp, src/llama.cpp llama_split_path)
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS_COUNT = "split.tensors.count"


def ggml_type_name(ggml_type):
    """'Q8_0' for 8; 'type 99' for an id this table does not know."""
    return GGML_BLOCK_SIZES.get(ggml_type, ("type %s" % (ggml_type,),))[0]


def ggml_row_bytes(ggml_type, n_values):
    """Bytes of n_values of a type (ggml_row_size): n_values must fill whole blocks."""
    if ggml_type not in GGML_BLOCK_SIZES:
        raise GGUFError("unknown ggml tensor type %r" % (ggml_type,))
    name, block_values, block_bytes = GGML_BLOCK_SIZES[ggml_type]
    if n_values % block_values:
        raise GGUFError("%d values do not fill whole %s blocks of %d" % (n_values, name, block_values))
    return n_values // block_values * block_bytes


def ggml_nbytes(ggml_type, dims):
    """Bytes of a tensor of any ggml type (ggml_nbytes for a contiguous tensor)."""
    if not dims or any(int(d) <= 0 for d in dims):
        raise GGUFError("tensor dims must be positive, got %r" % (list(dims),))
    rows = 1
    for dim in dims[1:]:
        rows *= int(dim)
    return ggml_row_bytes(ggml_type, int(dims[0])) * rows


def split_path(prefix, split_no, split_count):
    """llama_split_path: '<prefix>-0000<no+1>-of-0000<count>.gguf' (split_no counts from 0)."""
    return "%s-%05d-of-%05d.gguf" % (prefix, split_no + 1, split_count)


def split_prefix(path, split_no, split_count):
    """llama_split_prefix: the prefix of a shard's path, or None when the name does not end
    with '-<no+1>-of-<count>.gguf'."""
    postfix = "-%05d-of-%05d.gguf" % (split_no + 1, split_count)
    if not path.endswith(postfix) or len(path) == len(postfix):
        return None
    return path[:-len(postfix)]


class GGUFModel:
    """A model's files as llama.cpp loads them: the first file's metadata, every file's tensors.

    shards: the GGUFFile of each file in split order. tensors: list of (TensorInfo, shard index),
    in file order. size_bytes: the files' total size on disk.
    """

    def __init__(self, path, shards):
        self.path = path
        self.shards = shards
        self.metadata = shards[0].metadata
        self.tensors = [(info, index) for index, shard in enumerate(shards) for info in shard.tensors]
        self.size_bytes = sum(shard.file_size for shard in shards)

    @property
    def paths(self):
        return [shard.path for shard in self.shards]

    def get(self, key, default=None):
        """Plain Python value of a metadata key of the first file."""
        gvalue = self.metadata.get(key)
        return default if gvalue is None else gvalue.value


def _check_tensor_data(parsed):
    """Every tensor's data lies inside the file, for every ggml type (read_gguf sizes only the
    types the writer knows)."""
    for info in parsed.tensors:
        if info.ggml_type not in GGML_BLOCK_SIZES:
            raise GGUFError("%s: tensor %s has ggml type %d, which this reader does not know"
                            % (parsed.path, info.name, info.ggml_type))
        end = parsed.data_offset + info.offset + ggml_nbytes(info.ggml_type, info.dims)
        if end > parsed.file_size:
            raise GGUFError("%s: truncated GGUF file: tensor %s ends at byte %d, the file has %d"
                            % (parsed.path, info.name, end, parsed.file_size))


def read_gguf_model(path, opener=None, exists=None):
    """Header, metadata and tensor infos of a model and of every shard of a split model.

    path: the model file, or the first shard of a gguf-split model (`*-00001-of-00006.gguf`).
    As llama.cpp's llama_model_loader: `split.count` in the first file says how many files there
    are; the others are found by name beside it and each must carry its own `split.no`. Reads no
    tensor data, only checks that every tensor's data fits inside its file. opener and exists
    (path -> bool) read the files elsewhere than on this machine (read_gguf).
    """
    import os

    exists = exists or os.path.exists
    first = read_gguf(path, opener)
    _check_tensor_data(first)
    count = first.get(KEY_SPLIT_COUNT, 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise GGUFError("%s: %s is %r, not a count" % (path, KEY_SPLIT_COUNT, count))
    if count <= 1:
        return GGUFModel(path, [first])
    first_no = first.get(KEY_SPLIT_NO, 0)
    if first_no != 0:
        raise GGUFError("%s is shard %s of %d of a split model; give the first shard (-00001-of-%05d.gguf)"
                        % (path, first_no + 1 if isinstance(first_no, int) else first_no, count, count))
    prefix = split_prefix(path, 0, count)
    if prefix is None:
        raise GGUFError("%s: the file says it is the first of %d shards, but its name does not end with "
                        "-00001-of-%05d.gguf, so the other shards cannot be found; keep gguf-split's names"
                        % (path, count, count))
    shards = [first]
    for split_no in range(1, count):
        shard_path = split_path(prefix, split_no, count)
        if not exists(shard_path):
            raise GGUFError("missing shard %d of %d: %s does not exist; every shard of a split model must sit "
                            "beside the first" % (split_no + 1, count, shard_path))
        shard = read_gguf(shard_path, opener)
        _check_tensor_data(shard)
        if shard.get(KEY_SPLIT_NO) != split_no or shard.get(KEY_SPLIT_COUNT) != count:
            found_no = shard.get(KEY_SPLIT_NO)
            raise GGUFError("%s: expected shard %d of %d, the file says shard %s of %s (a shard of another model?)"
                            % (shard_path, split_no + 1, count, found_no + 1 if isinstance(found_no, int) else found_no,
                               shard.get(KEY_SPLIT_COUNT)))
        shards.append(shard)
    model = GGUFModel(path, shards)
    expected = first.get(KEY_SPLIT_TENSORS_COUNT)
    if expected is not None and expected != len(model.tensors):
        raise GGUFError("%s: the shards hold %d tensors, %s says %d" % (path, len(model.tensors), KEY_SPLIT_TENSORS_COUNT, expected))
    names = set()
    for info, _index in model.tensors:
        if info.name in names:
            raise GGUFError("%s: tensor %s appears twice among the shards" % (path, info.name))
        names.add(info.name)
    return model
