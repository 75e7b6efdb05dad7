# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The I/O of a model transfer, with the decisions left to model_transfer: listing a source
(a directory or an HTTP mirror), hashing, fetching one file over HTTP with resume, and the
read-only HTTP server a node runs while the others copy from it.

Python's standard library only (http.client, http.server), so nodes need nothing installed.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import http.server
import json
import os
import posixpath
import queue
import socket
import socketserver
import threading
import time
import urllib.parse

from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write, fsync_directory

# 1 MiB blocks, four in flight: few enough system calls and hashlib calls that Python's own
# cost is small, while the read of one block overlaps the sha256 of the one before. Each byte is
# copied from the socket into a block, from the block into the page cache and read by sha256, so
# the blocks in flight must stay within the CPU's cache: with 4 MiB blocks the fetch ran at 57-65%
# of curl of the same URL, with 1 MiB above it (docs/benchmarks.md, issue 36).
CHUNK_BYTES = 1 << 20
PIPELINE_DEPTH = 4
# Each block goes to the page cache in writes of 16 KiB, as curl and netcat write. Linux sizes a
# new page-cache folio by the write that creates it, and on a VM whose free memory goes back to
# its host (virtio_balloon's free page reporting, 2 MiB blocks) the large folios of 1 MiB writes
# were five times dearer to fill: 4 GiB after an idle spell took 12-13 s of system time in
# copy_folio_from_iter_atomic with 1 MiB writes, 4-5 s with 16 KiB ones, and the copy ran at
# 650-810 MiB/s instead of 300 (curl of the same URL: 470-575; docs/benchmarks.md, issue 36).
WRITE_BYTES = 16 << 10
USER_AGENT = 'gpulab.inference-model-fetch'


class HashThread:
    """sha256 in a thread of its own, so the caller's reads and writes overlap the hashing:
    hashlib releases the GIL on blocks of more than 2 KiB. The caller takes a free block
    (`block()`), fills it, hands it over (`submit`); a block comes back for reuse once hashed,
    in the order submitted, so the digest is the same as one update per block in turn.
    Use as a context manager; `digest` is complete after the with block ends."""

    def __init__(self, digest=None, chunk=CHUNK_BYTES, depth=None):
        self.digest = digest if digest is not None else hashlib.sha256()
        self._free = queue.Queue()
        for _each in range(depth or PIPELINE_DEPTH):
            self._free.put(bytearray(chunk))
        self._todo = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name='gpulab-sha256', daemon=True)

    def _run(self):
        while True:
            item = self._todo.get()
            if item is None:
                return
            block, count = item
            if self._error is None:
                try:
                    with memoryview(block) as view:
                        self.digest.update(view[:count])
                except Exception as error:  # pylint: disable=broad-except
                    self._error = error
            self._free.put(block)  # always, so the caller never waits on a dead hasher

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._todo.put(None)
        self._thread.join()
        if self._error is not None and exc_info[0] is None:
            raise mt.ModelTransferError('sha256: %s' % self._error)
        return False

    def block(self):
        """A free block to fill (waits while every block is being hashed)."""
        return self._free.get()

    def submit(self, block, count):
        """Hash block's first count bytes after those submitted before; an empty one is returned."""
        if count:
            self._todo.put((block, count))
        else:
            self._free.put(block)


def write_all(fd, view, piece=WRITE_BYTES):
    """os.write until every byte of view is written, at most piece bytes per write (a write may
    take fewer)."""
    while len(view):
        view = view[os.write(fd, view[:piece]):]


def sha256_file(path, limit=None, chunk=CHUNK_BYTES, digest=None):
    """sha256 object over path's first limit bytes (all when None), continuing digest when
    given; the reads overlap the hashing."""
    left = limit
    with open(path, 'rb', buffering=0) as stream, HashThread(digest, chunk) as hasher:
        while left is None or left > 0:
            block = hasher.block()
            with memoryview(block) as view:
                count = stream.readinto(view if left is None or left >= chunk else view[:left])
            hasher.submit(block, count)
            if not count:
                break
            if left is not None:
                left -= count
    return hasher.digest


def file_stat(path):
    """(size, mtime_ns) of a regular file, None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not os.path.isfile(path):
        return None
    return info.st_size, info.st_mtime_ns


def free_bytes(path):
    """Free bytes for an unprivileged writer at path or, when it does not exist yet, at its
    nearest existing ancestor; (directory, bytes)."""
    directory = os.path.abspath(path)
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    stat = os.statvfs(directory)
    return directory, stat.f_bavail * stat.f_frsize


# -- HTTP client ----------------------------------------------------------------------------

class HTTPSource:
    """GET and HEAD against a mirror, with a socket timeout and redirects followed (a Hugging
    Face-compatible endpoint redirects resolve/main/ to its file store)."""

    def __init__(self, timeout_s=30, max_redirects=5):
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects

    def _connection(self, url):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ('http', 'https'):
            raise mt.ModelTransferError('%s: only http and https are fetched' % url)
        cls = http.client.HTTPSConnection if parts.scheme == 'https' else http.client.HTTPConnection
        path = parts.path or '/'
        return cls(parts.hostname, parts.port, timeout=self.timeout_s), path

    def open(self, method, url, headers=None):
        """The response (status, headers and body to read) after redirects; the caller closes it."""
        for _hop in range(self.max_redirects + 1):
            conn, path = self._connection(url)
            try:
                conn.request(method, path, headers=dict({'User-Agent': USER_AGENT}, **(headers or {})))
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                raise mt.ModelTransferError('%s %s: %s' % (method, url, error))
            if response.status in (301, 302, 303, 307, 308) and response.getheader('Location'):
                url = urllib.parse.urljoin(url, response.getheader('Location'))
                response.read()
                conn.close()
                continue
            response.gpulab_connection = conn
            return response
        raise mt.ModelTransferError('%s %s: more than %d redirects' % (method, url, self.max_redirects))

    def size(self, url):
        """Content-Length of url (HEAD), None when the mirror does not have it (404)."""
        response = self.open('HEAD', url)
        try:
            if response.status == 404:
                return None
            if response.status != 200:
                raise mt.ModelTransferError('HEAD %s: HTTP %d %s' % (url, response.status, response.reason))
            length = response.getheader('Content-Length')
            if length is None or not length.isdigit():
                raise mt.ModelTransferError('HEAD %s: no Content-Length, the mirror must give file sizes' % url)
            return int(length)
        finally:
            response.gpulab_connection.close()

    def text(self, url):
        """The body of url as text, None for 404."""
        response = self.open('GET', url)
        try:
            if response.status == 404:
                return None
            if response.status != 200:
                raise mt.ModelTransferError('GET %s: HTTP %d %s' % (url, response.status, response.reason))
            return response.read().decode('utf-8')
        finally:
            response.gpulab_connection.close()


def list_http(source, hf_layout, client):
    """(kind, base, files, serve_name) of a model on an HTTP mirror."""
    base, name = mt.split_source(source)
    sums_text = client.text(mt.file_url(base, mt.SUMS_NAME, hf_layout))
    sums = mt.parse_sha256sums(sums_text) if sums_text is not None else {}
    if name:
        names = mt.gguf_shard_names(name)
        kind, serve = 'gguf', name
    else:
        index = client.text(mt.file_url(base, mt.HF_INDEX, hf_layout))
        candidates = [mt.HF_CONFIG] + ([] if index is not None else [mt.HF_SINGLE]) + list(mt.HF_OPTIONAL)
        present = set(n for n in candidates if n in sums or client.size(mt.file_url(base, n, hf_layout)) is not None)
        if index is not None:
            present.add(mt.HF_INDEX)
            present.update(mt.hf_weight_names(index))
        names = mt.hf_file_names(present, index)
        kind, serve = 'hf', ''
    files = []
    for each in names:
        size = client.size(mt.file_url(base, each, hf_layout))
        if size is None:
            raise mt.ModelTransferError('%s is missing on the mirror (HTTP 404)' % mt.file_url(base, each, hf_layout))
        files.append({'name': each, 'size_bytes': size, 'sha256': sums.get(each)})
    return kind, base, files, serve


def list_directory(source):
    """(kind, base, files, serve_name) of a model in a local directory (or its GGUF file)."""
    base, name = mt.split_source(source)
    shards = mt.gguf_shard_names(name) if name else None
    if not os.path.isdir(base):
        raise mt.ModelTransferError('%s is not a directory' % base)
    sums_path = os.path.join(base, mt.SUMS_NAME)
    sums = {}
    if os.path.isfile(sums_path):
        with open(sums_path, encoding='utf-8') as stream:
            sums = mt.parse_sha256sums(stream.read(), sums_path)
    if name:
        names, kind, serve = shards, 'gguf', name
    else:
        present = set(os.listdir(base))
        index = None
        if mt.HF_INDEX in present:
            with open(os.path.join(base, mt.HF_INDEX), encoding='utf-8') as stream:
                index = stream.read()
        names, kind, serve = mt.hf_file_names(present, index), 'hf', ''
    files = []
    for each in names:
        stat = file_stat(os.path.join(base, each))
        if stat is None:
            raise mt.ModelTransferError('%s is missing (a split model needs every shard beside the first)' % os.path.join(base, each))
        files.append({'name': each, 'size_bytes': stat[0], 'sha256': sums.get(each)})
    return kind, base, files, serve


class ProgressFile:
    """The transfer's progress as JSON (model_transfer.progress plus `line`), rewritten
    atomically at most every interval_s, so the play can show it while the fetch runs."""

    def __init__(self, path, total_bytes, interval_s=1.0, clock=time.monotonic):
        self.path = path
        self.total_bytes = total_bytes
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self.last = None
        self.done = 0

    def add(self, count, current, force=False, finished=False):
        """Count bytes moved; finished (with force) marks the end, failed or not, for the waiter."""
        self.done += count
        now = self.clock()
        if self.path and (force or self.last is None or now - self.last >= self.interval_s):
            self.last = now
            state = mt.progress(self.done, self.total_bytes, now - self.started, current)
            state['line'] = mt.progress_line(state)
            state['finished'] = finished
            atomic_write(self.path, json.dumps(state, sort_keys=True) + '\n', 0o644)


def _receive(response, url, part, offset, digest, progress, name, chunk):
    """Write the response body into part from offset, fsync it, and feed digest in a
    HashThread while the next block is read; the bytes written."""
    fetched = 0
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, 'O_CLOEXEC', 0) | (0 if offset else os.O_TRUNC)
    fd = os.open(part, flags, 0o644)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        with HashThread(digest, chunk) as hasher:
            while True:
                block = hasher.block()
                try:
                    count = response.readinto(block)
                except (OSError, http.client.HTTPException) as error:
                    hasher.submit(block, 0)
                    raise mt.ModelTransferError('GET %s: %s after %d bytes' % (url, error, offset + fetched))
                if count:
                    with memoryview(block) as view:
                        write_all(fd, view[:count])
                hasher.submit(block, count)
                if not count:
                    break
                fetched += count
                progress.add(count, name)
        os.fsync(fd)
    finally:
        os.close(fd)
    return fetched


def fetch_file(client, url, dest_dir, entry, progress, mode=0o644, chunk=CHUNK_BYTES):
    """Fetch one file into <dest>/<name>.part from where an earlier attempt stopped, hash it
    while writing, and rename it to its name only when its size and sha256 are right.
    Returns {name, size_bytes, sha256, mtime_ns, fetched_bytes, resumed_from}."""
    final = os.path.join(dest_dir, entry['name'])
    part = final + mt.PART_SUFFIX
    os.makedirs(os.path.dirname(final), 0o755, exist_ok=True)
    stat = file_stat(part)
    offset = mt.resume_offset(stat[0] if stat else None, entry['size_bytes'])
    headers = {'Range': 'bytes=%d-' % offset} if 0 < offset < entry['size_bytes'] else {}
    digest = sha256_file(part, offset) if offset else hashlib.sha256()
    fetched = 0
    if offset < entry['size_bytes']:
        response = client.open('GET', url, headers)
        try:
            if response.status == 416 and offset:
                raise mt.ModelTransferError('GET %s from byte %d: HTTP 416, the file at the source is shorter '
                                            'than its listing said' % (url, offset))
            try:
                start = mt.response_start(response.status, response.getheader('Content-Range'), offset)
            except mt.ModelTransferError as error:
                raise mt.ModelTransferError('GET %s: %s' % (url, error))
            if start != offset:
                digest, offset = hashlib.sha256(), 0
            fetched = _receive(response, url, part, offset, digest, progress, entry['name'], chunk)
        finally:
            response.gpulab_connection.close()
    size = offset + fetched
    problem = mt.verify_problem(entry, digest.hexdigest(), size)
    if problem:
        if size >= entry['size_bytes']:
            # Complete but wrong: a resume would keep the wrong bytes.
            os.unlink(part)
        raise mt.ModelTransferError('%s: %s%s' % (url, problem, '' if size >= entry['size_bytes'] else
                                                  ' (the connection ended early; run again to resume)'))
    os.chmod(part, mode)
    os.replace(part, final)
    fsync_directory(os.path.dirname(final))
    size, mtime_ns = file_stat(final)
    return {'name': entry['name'], 'size_bytes': size, 'sha256': digest.hexdigest(), 'mtime_ns': mtime_ns,
            'fetched_bytes': fetched, 'resumed_from': offset}


# -- the node-to-node server ----------------------------------------------------------------

class ModelRequestHandler(http.server.BaseHTTPRequestHandler):
    """GET and HEAD of the listed files of one directory, with single byte ranges; nothing
    else (no listing, no other file, no writes)."""

    server_version = 'gpulab-model-serve'
    protocol_version = 'HTTP/1.1'

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def _target(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip('/')
        name = posixpath.normpath(path)
        if name not in self.server.allowed:
            return None
        return os.path.join(self.server.root, name)

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body):
        target = self._target()
        if target is None or not os.path.isfile(target):
            self.send_error(404)
            return
        size = os.path.getsize(target)
        try:
            selected = mt.parse_range(self.headers.get('Range'), size)
        except mt.RangeNotSatisfiable:
            self.send_response(416)
            self.send_header('Content-Range', 'bytes */%d' % size)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        start, end = selected if selected else (0, size - 1)
        self.send_response(206 if selected else 200)
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(end - start + 1 if size else 0))
        if selected:
            self.send_header('Content-Range', mt.content_range(start, end, size))
        self.end_headers()
        if not body or not size:
            return
        # sendfile: the kernel copies from the page cache to the socket, leaving the CPU to the
        # receivers' sha256.
        self.wfile.flush()
        with open(target, 'rb') as stream:
            try:
                self.connection.sendfile(stream, start, end - start + 1)
            except (BrokenPipeError, ConnectionResetError):
                return


class ModelServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """A thread per client, so every node copies at once."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, port, root, allowed):
        self.address_family = socket.AF_INET6 if ':' in address else socket.AF_INET
        self.root = root
        self.allowed = frozenset(allowed)
        try:
            http.server.HTTPServer.__init__(self, (address, port), ModelRequestHandler)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise mt.ModelTransferError('%s port %d is in use: stop what listens there or set model_serve_port' % (address, port))
            raise mt.ModelTransferError('cannot listen on %s port %d: %s' % (address, port, error))
