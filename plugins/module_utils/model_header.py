# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model's shape where it lies, without its weights: plan before download.

A GGUF model's header and tensor table (every shard), or a Hugging Face checkpoint's
config.json, index and safetensors headers, read from model_source: an http(s) mirror through
HTTP Range requests (the model role's client, model_io.HTTPSource) or a directory on this machine.
Reads grow from a small first request, so a header costs about its own size; every byte read is
counted (bytes_read) so a test can hold the reader to a fraction of the model.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf

# First ranged read of a file, doubled on every further read up to the cap: a GGUF header with a
# 200k-token vocabulary is a few MiB, a safetensors header a few hundred KiB.
FIRST_READ_BYTES = 64 * 1024
MAX_READ_BYTES = 8 * 1024 * 1024
# A safetensors header larger than this is not one (vllm_plan's module reads the same bound).
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


class HeaderError(ValueError):
    """The source cannot be read as a model: the message names the source and what to do."""


class Counter:
    """Bytes read from the source, over every file."""

    def __init__(self):
        self.bytes_read = 0
        self.requests = 0


class CountingHTTPSource(model_io.HTTPSource):
    """The model role's client, counting the bodies of whole-file reads (SHA256SUMS, the index)."""

    def __init__(self, counter, timeout_s=30):
        model_io.HTTPSource.__init__(self, timeout_s)
        self.counter = counter

    def text(self, url):
        body = model_io.HTTPSource.text(self, url)
        if body is not None:
            self.counter.bytes_read += len(body.encode("utf-8"))
            self.counter.requests += 1
        return body


class RangeReader:
    """A read-only stream over part of a file on a mirror: each read past the buffer fetches the
    next block with `Range: bytes=a-b` and must get 206 with that block."""

    def __init__(self, client, url, size, counter):
        self.client, self.url, self.size, self.counter = client, url, size, counter
        self.pos = 0
        self.buffer = b""
        self.buffer_start = 0
        self.block = FIRST_READ_BYTES

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def _fetch(self, start, length):
        end = min(self.size, start + length) - 1
        if end < start:
            return b""
        response = self.client.open("GET", self.url, {"Range": "bytes=%d-%d" % (start, end)})
        try:
            if response.status != 206:
                raise HeaderError("GET %s with Range: HTTP %d %s; the mirror must answer byte ranges (206) so a plan "
                                  "reads only the model's headers: serve the files with a server that honours Range "
                                  "(nginx, the lab's mirror)" % (self.url, response.status, response.reason))
            data = response.read(end - start + 1)
        finally:
            response.gpulab_connection.close()
        self.counter.bytes_read += len(data)
        self.counter.requests += 1
        if len(data) != end - start + 1:
            raise HeaderError("GET %s bytes %d-%d: the mirror answered %d bytes" % (self.url, start, end, len(data)))
        return data

    def read(self, size):
        want_end = min(self.size, self.pos + size)
        have_end = self.buffer_start + len(self.buffer)
        if want_end > have_end:
            keep = self.buffer[self.pos - self.buffer_start:] if self.pos < have_end else b""
            start = max(self.pos, have_end)
            length = max(want_end - start, self.block)
            self.block = min(self.block * 2, MAX_READ_BYTES)
            self.buffer = keep + self._fetch(start, length)
            self.buffer_start = self.pos
        data = self.buffer[self.pos - self.buffer_start:want_end - self.buffer_start]
        self.pos += len(data)
        return data


class LocalReader:
    """The same for a file on this machine, counting what is read."""

    def __init__(self, path, counter):
        self.stream = open(path, "rb")
        self.counter = counter

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stream.close()
        return False

    def read(self, size):
        data = self.stream.read(size)
        self.counter.bytes_read += len(data)
        return data


class Source:
    """A model source: files listed with their sizes, opened for ranged reads."""

    def __init__(self, source, hf_layout=False, timeout_s=30, client=None):
        self.source = source
        self.hf_layout = hf_layout
        self.counter = Counter()
        try:
            self.kind = mt.source_kind(source)
        except mt.ModelTransferError as exc:
            raise HeaderError(str(exc))
        if self.kind == "head":
            raise HeaderError("model_source is head: the model is already on the head; plan it there with "
                              "deploy.yml's memory plan, or give the mirror URL or a path on the controller")
        self.client = client or (CountingHTTPSource(self.counter, timeout_s) if self.kind == "url" else None)
        try:
            if self.kind == "url":
                self.format, self.base, self.files, self.name = model_io.list_http(source, hf_layout, self.client)
            else:
                self.format, self.base, self.files, self.name = model_io.list_directory(source)
        except mt.ModelTransferError as exc:
            raise HeaderError("model_source %s: %s" % (source, exc))
        self.sizes = dict((f["name"], f["size_bytes"]) for f in self.files)

    @property
    def size_bytes(self):
        return sum(self.sizes.values())

    def where(self, name):
        if self.kind == "url":
            return mt.file_url(self.base, name, self.hf_layout)
        return os.path.join(self.base, name)

    def open(self, name):
        """(stream, size) of one file of the model."""
        if name not in self.sizes:
            raise HeaderError("%s is not among the model's files at %s" % (name, self.source))
        if self.kind == "url":
            return RangeReader(self.client, self.where(name), self.sizes[name], self.counter), self.sizes[name]
        return LocalReader(self.where(name), self.counter), self.sizes[name]

    def read_all(self, name):
        stream, size = self.open(name)
        with stream:
            return stream.read(size)

    # -- GGUF -------------------------------------------------------------------------------

    def gguf_model(self):
        """gguf.GGUFModel of the model's shards, from their headers."""
        by_path = dict((self.where(n), n) for n in self.sizes)

        def opener(path):
            if path not in by_path:
                raise HeaderError("%s: no such file at the source" % path)
            return self.open(by_path[path])

        try:
            return gguf.read_gguf_model(self.where(self.name), opener=opener, exists=lambda path: path in by_path)
        except gguf.GGUFError as exc:
            raise HeaderError("model_source %s: %s" % (self.source, exc))

    # -- Hugging Face -------------------------------------------------------------------------

    def hf_checkpoint(self):
        """(config, {tensor: (dtype, dims, nbytes)}) from config.json and every safetensors header."""
        try:
            config = json.loads(self.read_all(mt.HF_CONFIG).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise HeaderError("%s is not JSON: %s" % (self.where(mt.HF_CONFIG), exc))
        tensors = {}
        for name in sorted(n for n in self.sizes if n.endswith(".safetensors")):
            tensors.update(self.safetensors_header(name))
        return config, tensors

    def safetensors_header(self, name):
        stream, size = self.open(name)
        with stream:
            head = stream.read(8)
            if len(head) < 8:
                raise HeaderError("%s is not a safetensors file: shorter than 8 bytes" % self.where(name))
            (length,) = struct.unpack("<Q", head)
            if length > min(MAX_SAFETENSORS_HEADER, size - 8):
                raise HeaderError("%s is not a safetensors file: its header length %d does not fit the file's %d bytes"
                                  % (self.where(name), length, size))
            try:
                return hf.parse_safetensors_header(head + stream.read(length), self.where(name))
            except hf.CheckpointError as exc:
                raise HeaderError(str(exc))


# ---------------------------------------------------------------- hypothetical hardware

def parse_hardware(value, variable="plan_hardware"):
    """plan_hardware: a list of nodes, each {name (optional), gpus: N, memory_gib: G} or
    {name, gpus: [{memory_gib | memory_mib, kept_gib | kept_mib}, ...]}. Returns nodes as
    [{name, gpus: [{index, memory_total_mib, kept_mib}]}]."""
    example = ("e.g. -e '{\"%s\": [{\"name\": \"a\", \"gpus\": 2, \"memory_gib\": 96}, {\"name\": \"b\", \"gpus\": 1, "
               "\"memory_gib\": 96}]}'" % variable)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise HeaderError("%s is not JSON: give a list of nodes, %s" % (variable, example))
    if not isinstance(value, list) or not value:
        raise HeaderError("%s is %r, not a list of nodes: %s" % (variable, value, example))
    nodes = []
    for position, node in enumerate(value):
        where = "%s[%d]" % (variable, position)
        if not isinstance(node, dict):
            raise HeaderError("%s is %r, not a node ({name, gpus, memory_gib}): %s" % (where, node, example))
        name = node.get("name", "node-%d" % position)
        if not isinstance(name, str) or not name:
            raise HeaderError("%s.name is %r, not a name" % (where, name))
        gpus = node.get("gpus")
        if isinstance(gpus, int) and not isinstance(gpus, bool):
            if gpus < 1:
                raise HeaderError("%s.gpus is %d; give 1 or more GPUs" % (where, gpus))
            gpus = [dict((k, node[k]) for k in ("memory_gib", "memory_mib", "kept_gib", "kept_mib") if k in node)
                    for _i in range(gpus)]
        if not isinstance(gpus, list) or not gpus:
            raise HeaderError("%s.gpus is %r: give a count with memory_gib, or a list of GPUs each with memory_gib"
                              % (where, gpus))
        entries = []
        for index, gpu in enumerate(gpus):
            gwhere = "%s.gpus[%d]" % (where, index)
            if not isinstance(gpu, dict):
                raise HeaderError("%s is %r, not a GPU ({memory_gib: 96})" % (gwhere, gpu))
            memory = _mib(gpu, "memory", gwhere, required=True)
            kept = _mib(gpu, "kept", gwhere, required=False) or 0
            if kept >= memory:
                raise HeaderError("%s keeps %d MiB for other services, all of its %d MiB" % (gwhere, kept, memory))
            entries.append({"index": index, "memory_total_mib": memory, "kept_mib": kept})
        nodes.append({"name": name, "gpus": entries})
    names = [n["name"] for n in nodes]
    if len(set(names)) != len(names):
        raise HeaderError("%s names a node twice (%s)" % (variable, ", ".join(names)))
    return nodes


def _mib(gpu, what, where, required):
    gib, mib = gpu.get(what + "_gib"), gpu.get(what + "_mib")
    if gib is None and mib is None:
        if required:
            raise HeaderError("%s has no %s_gib (or %s_mib): give the GPU's memory, e.g. 96" % (where, what, what))
        return None
    value, unit = (gib, "gib") if gib is not None else (mib, "mib")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (required and value <= 0):
        raise HeaderError("%s.%s_%s is %r, not a positive number" % (where, what, unit, value))
    return int(value * 1024) if unit == "gib" else int(value)
