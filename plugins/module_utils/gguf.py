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
    """Bytes of a tensor's data. dims are ggml order (dims[0] varies fastest, one row)."""
    if ggml_type not in GGML_TYPES:
        raise GGUFError("unsupported ggml tensor type %r" % (ggml_type,))
    _name, block_values, block_bytes = GGML_TYPES[ggml_type]
    if not dims or any(int(d) <= 0 for d in dims):
        raise GGUFError("tensor dims must be positive, got %r" % (list(dims),))
    if dims[0] % block_values:
        raise GGUFError("row length %d is not a multiple of the %s block size %d"
                        % (dims[0], GGML_TYPES[ggml_type][0], block_values))
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


# ---------------------------------------------------------------- reading

class _Cursor:
    """Buffered little-endian reads that turn a short read into a GGUFError naming the file."""

    def __init__(self, stream, path):
        self.stream = stream
        self.path = path
        self.pos = 0

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
            items = [cur.string() for _i in range(count)]
        else:
            fmt = _SCALAR_FORMATS[item_type]
            items = list(cur.unpack("<%d%s" % (count, fmt[1])))
        return GGUFValue(ARRAY, items, item_type)
    if value_type not in _SCALAR_FORMATS:
        raise GGUFError("%s: corrupt GGUF value type %d at offset %d" % (cur.path, value_type, cur.pos))
    (value,) = cur.unpack(_SCALAR_FORMATS[value_type])
    return GGUFValue(value_type, value)


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


def read_gguf(path):
    """Parse a GGUF file's header, metadata and tensor infos, and check its data is complete."""
    import os
    from collections import OrderedDict

    try:
        file_size = os.path.getsize(path)
        stream = open(path, "rb")
    except (IOError, OSError) as exc:
        raise GGUFError("%s: cannot open GGUF file: %s" % (path, exc))
    with stream:
        cur = _Cursor(stream, path)
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
            alignment = metadata[KEY_ALIGNMENT].value
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
