"""model_io against a real server on loopback: listing a mirror, fetching with resume and
verification, the node-to-node server's ranges, the progress file."""

import functools
import hashlib
import http.server
import json
import os
import threading

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def mirror(tmp_path):
    """A directory served by the module's own server on 127.0.0.1 (every file listed)."""
    root = tmp_path / 'mirror'
    root.mkdir()
    servers = []

    def start(files, handler_root=None):
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        server = model_io.ModelServer('127.0.0.1', 0, str(root), list(files))
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return 'http://127.0.0.1:%d' % server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def plain_server(tmp_path):
    """Python's SimpleHTTPRequestHandler: a file server that ignores Range (answers 200)."""
    root = tmp_path / 'plain'
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield root, 'http://127.0.0.1:%d' % server.server_address[1]
    server.shutdown()
    server.server_close()


DATA = bytes(range(256)) * 4096  # 1 MiB


class Progress:
    def __init__(self):
        self.done = 0

    def add(self, count, current, force=False):
        self.done += count


def entry(name, data, digest=True):
    return {'name': name, 'size_bytes': len(data), 'sha256': sha(data) if digest else None}


def test_fetch_whole_file_renames_only_when_verified(mirror, tmp_path):
    url = mirror({'m.gguf': DATA})
    dest = tmp_path / 'dest'
    result = model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), entry('m.gguf', DATA), Progress())
    assert (dest / 'm.gguf').read_bytes() == DATA
    assert not (dest / 'm.gguf.part').exists()
    assert result['fetched_bytes'] == len(DATA) and result['resumed_from'] == 0 and result['sha256'] == sha(DATA)
    assert result['mtime_ns'] == os.stat(str(dest / 'm.gguf')).st_mtime_ns


def test_fetch_resumes_a_part_with_a_range_request(mirror, tmp_path):
    url = mirror({'m.gguf': DATA})
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'm.gguf.part').write_bytes(DATA[:300000])
    progress = Progress()
    result = model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), entry('m.gguf', DATA), progress)
    assert result['resumed_from'] == 300000
    assert result['fetched_bytes'] == progress.done == len(DATA) - 300000
    assert (dest / 'm.gguf').read_bytes() == DATA


def test_a_server_ignoring_ranges_starts_the_part_again(plain_server, tmp_path):
    root, url = plain_server
    (root / 'm.gguf').write_bytes(DATA)
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'm.gguf.part').write_bytes(b'x' * 1000)  # not even the right bytes
    result = model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), entry('m.gguf', DATA), Progress())
    assert result['resumed_from'] == 0 and result['fetched_bytes'] == len(DATA)
    assert (dest / 'm.gguf').read_bytes() == DATA


def test_a_complete_file_with_the_wrong_sha256_is_removed(mirror, tmp_path):
    url = mirror({'m.gguf': DATA})
    dest = tmp_path / 'dest'
    wanted = dict(entry('m.gguf', DATA), sha256='0' * 64)
    with pytest.raises(mt.ModelTransferError, match='m.gguf has sha256 %s, the source says 0{64}' % sha(DATA)):
        model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), wanted, Progress())
    assert sorted(os.listdir(str(dest))) == []


def test_a_short_answer_keeps_the_part_for_the_next_run(mirror, tmp_path):
    url = mirror({'m.gguf': DATA[:1000]})
    dest = tmp_path / 'dest'
    wanted = {'name': 'm.gguf', 'size_bytes': len(DATA), 'sha256': sha(DATA)}
    with pytest.raises(mt.ModelTransferError, match='is 1000 bytes, the source has 1048576 .the connection ended early; run again to resume'):
        model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), wanted, Progress())
    assert (dest / 'm.gguf.part').stat().st_size == 1000
    assert not (dest / 'm.gguf').exists()


def test_a_part_longer_than_the_source_says_is_416(mirror, tmp_path):
    url = mirror({'m.gguf': DATA[:1000]})
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'm.gguf.part').write_bytes(DATA[:2000])
    wanted = {'name': 'm.gguf', 'size_bytes': 4000, 'sha256': None}
    with pytest.raises(mt.ModelTransferError, match='HTTP 416, the file at the source is shorter'):
        model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), wanted, Progress())


def test_a_complete_part_is_renamed_without_a_request(tmp_path):
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'm.gguf.part').write_bytes(DATA)
    result = model_io.fetch_file(None, 'http://127.0.0.1:9/m.gguf', str(dest), entry('m.gguf', DATA), Progress())
    assert result['fetched_bytes'] == 0 and (dest / 'm.gguf').read_bytes() == DATA


def test_the_server_answers_ranges_head_404_and_416(mirror):
    url = mirror({'a.bin': DATA[:100]})
    client = model_io.HTTPSource(5)
    response = client.open('GET', url + '/a.bin', {'Range': 'bytes=90-'})
    assert response.status == 206 and response.getheader('Content-Range') == 'bytes 90-99/100'
    assert response.read() == DATA[90:100]
    response.gpulab_connection.close()
    assert client.size(url + '/a.bin') == 100
    assert client.size(url + '/other.bin') is None
    assert client.size(url + '/../../etc/passwd') is None
    response = client.open('GET', url + '/a.bin', {'Range': 'bytes=100-'})
    assert response.status == 416 and response.getheader('Content-Range') == 'bytes */100'
    response.gpulab_connection.close()


def test_the_server_refuses_a_busy_port(mirror):
    url = mirror({'a.bin': b'x'})
    port = int(url.rsplit(':', 1)[1])
    with pytest.raises(mt.ModelTransferError, match='port %d is in use' % port):
        model_io.ModelServer('127.0.0.1', port, '/nonexistent', [])


def test_a_connection_refused_is_a_message():
    with pytest.raises(mt.ModelTransferError, match='GET http://127.0.0.1:9/x: .*refused'):
        model_io.HTTPSource(2).text('http://127.0.0.1:9/x')


def test_list_http_gguf_with_sums(mirror):
    shards = {'m-00001-of-00002.gguf': DATA[:10], 'm-00002-of-00002.gguf': DATA[:20]}
    sums = ''.join('%s  %s\n' % (sha(data), name) for name, data in shards.items())
    url = mirror(dict(shards, SHA256SUMS=sums.encode()))
    kind, base, files, serve = model_io.list_http(url + '/m-00001-of-00002.gguf', False, model_io.HTTPSource(5))
    assert (kind, base, serve) == ('gguf', url, 'm-00001-of-00002.gguf')
    assert files == [entry(name, data) for name, data in shards.items()]


def test_list_http_hf_without_sums(mirror):
    index = json.dumps({'weight_map': {'a': 'model-00001-of-00002.safetensors', 'b': 'model-00002-of-00002.safetensors'}})
    files = {'ckpt/config.json': b'{}', 'ckpt/model.safetensors.index.json': index.encode(),
             'ckpt/model-00001-of-00002.safetensors': b'1' * 5, 'ckpt/model-00002-of-00002.safetensors': b'2' * 6,
             'ckpt/tokenizer.json': b'{"t": 1}'}
    url = mirror(files)
    kind, base, listed, serve = model_io.list_http(url + '/ckpt/', False, model_io.HTTPSource(5))
    assert (kind, base, serve) == ('hf', url + '/ckpt', '')
    assert [(f['name'], f['size_bytes'], f['sha256']) for f in listed] == [
        ('config.json', 2, None), ('model.safetensors.index.json', len(index), None),
        ('model-00001-of-00002.safetensors', 5, None), ('model-00002-of-00002.safetensors', 6, None),
        ('tokenizer.json', 8, None)]


def test_list_http_a_missing_shard(mirror):
    url = mirror({'m-00001-of-00002.gguf': b'x'})
    with pytest.raises(mt.ModelTransferError, match='m-00002-of-00002.gguf is missing on the mirror'):
        model_io.list_http(url + '/m-00001-of-00002.gguf', False, model_io.HTTPSource(5))


def test_list_directory(tmp_path):
    (tmp_path / 'config.json').write_text('{}')
    (tmp_path / 'model.safetensors').write_bytes(b'w' * 7)
    (tmp_path / 'notes.txt').write_text('x')
    (tmp_path / 'SHA256SUMS').write_text('%s  model.safetensors\n' % sha(b'w' * 7))
    kind, base, files, serve = model_io.list_directory(str(tmp_path))
    assert kind == 'hf' and serve == '' and base == str(tmp_path)
    assert files == [{'name': 'config.json', 'size_bytes': 2, 'sha256': None}, entry('model.safetensors', b'w' * 7)]
    (tmp_path / 'm-00001-of-00002.gguf').write_bytes(b'g')
    with pytest.raises(mt.ModelTransferError, match='m-00002-of-00002.gguf is missing .a split model needs every shard'):
        model_io.list_directory(str(tmp_path / 'm-00001-of-00002.gguf'))
    with pytest.raises(mt.ModelTransferError, match='is not a directory'):
        model_io.list_directory(str(tmp_path / 'nowhere'))


def test_progress_file_is_rewritten_at_most_every_interval(tmp_path):
    now = [0.0]
    path = tmp_path / 'progress.json'
    progress = model_io.ProgressFile(str(path), 100, interval_s=1.0, clock=lambda: now[0])
    now[0] = 0.5
    progress.add(10, 'a')
    assert json.loads(path.read_text())['line'] == '10 B of 100 B (10.0%), 20 B/s, 0:00:04 left (a)'
    now[0] = 0.9
    progress.add(10, 'a')
    assert json.loads(path.read_text())['done_bytes'] == 10
    now[0] = 2.0
    progress.add(30, 'b')
    assert json.loads(path.read_text())['done_bytes'] == 50
    assert json.loads(path.read_text())['finished'] is False
    progress.add(0, None, force=True, finished=True)
    assert json.loads(path.read_text())['finished'] is True


def test_sha256_file_limit_stat_and_free_space(tmp_path):
    (tmp_path / 'f').write_bytes(DATA)
    assert model_io.sha256_file(str(tmp_path / 'f'), 1000, chunk=64).hexdigest() == sha(DATA[:1000])
    assert model_io.file_stat(str(tmp_path / 'f'))[0] == len(DATA)
    assert model_io.file_stat(str(tmp_path)) is None and model_io.file_stat(str(tmp_path / 'x')) is None
    directory, free = model_io.free_bytes(str(tmp_path / 'not' / 'yet'))
    assert directory == str(tmp_path) and free > 0


def _hash_in_thread(data, chunk, digest=None, depth=2):
    with model_io.HashThread(digest, chunk, depth) as hasher:
        for start in range(0, len(data), chunk):
            block = hasher.block()
            piece = data[start:start + chunk]
            block[:len(piece)] = piece
            hasher.submit(block, len(piece))
    return hasher.digest.hexdigest()


def test_the_hash_thread_equals_hashlib_over_many_blocks():
    data = DATA + b'tail'  # 1 MiB and 4 bytes: 257 blocks of 4 KiB, the last one short
    assert _hash_in_thread(data, 4096) == sha(data)
    assert _hash_in_thread(data, 4096, depth=1) == sha(data)
    assert _hash_in_thread(b'', 4096) == sha(b'')


def test_the_hash_thread_continues_a_resumed_digest(tmp_path):
    data = DATA + b'tail'
    resumed = hashlib.sha256(data[:300001])
    assert _hash_in_thread(data[300001:], 65536, digest=resumed) == sha(data)
    (tmp_path / 'part').write_bytes(data[:300001])
    prefix = model_io.sha256_file(str(tmp_path / 'part'), chunk=4096)
    assert _hash_in_thread(data[300001:], 4096, digest=prefix) == sha(data)


def test_a_failing_hash_is_an_error_not_a_hang():
    class Broken:
        def update(self, data):
            raise ValueError('no more')

    with pytest.raises(mt.ModelTransferError, match='sha256: no more'):
        _hash_in_thread(DATA, 4096, digest=Broken(), depth=1)


def test_a_resumed_fetch_over_many_blocks_equals_hashlib(mirror, tmp_path):
    url = mirror({'m.gguf': DATA})
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'm.gguf.part').write_bytes(DATA[:123457])
    result = model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), entry('m.gguf', DATA), Progress(), chunk=5000)
    assert result['sha256'] == sha(DATA) and result['resumed_from'] == 123457
    assert (dest / 'm.gguf').read_bytes() == DATA


def test_write_all_writes_in_pieces_and_resumes_short_writes(tmp_path, monkeypatch):
    sizes = []
    real_write = os.write

    def short_write(fd, data):
        sizes.append(len(data))
        return real_write(fd, bytes(data[:len(data) - 1 if len(data) > 3000 else len(data)]))

    monkeypatch.setattr(model_io.os, 'write', short_write)
    fd = os.open(str(tmp_path / 'out'), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with memoryview(DATA[:50000]) as view:
            model_io.write_all(fd, view, piece=4096)
    finally:
        os.close(fd)
    assert (tmp_path / 'out').read_bytes() == DATA[:50000]
    assert max(sizes) == 4096 and len(sizes) > 50000 // 4096
    assert model_io.WRITE_BYTES == 16 << 10


def test_a_fetch_writes_the_page_cache_in_pieces_of_write_bytes(mirror, tmp_path, monkeypatch):
    sizes = []
    real_write = os.write
    monkeypatch.setattr(model_io.os, 'write', lambda fd, data: sizes.append(len(data)) or real_write(fd, data))
    url = mirror({'m.gguf': DATA})
    dest = tmp_path / 'dest'
    dest.mkdir()
    model_io.fetch_file(model_io.HTTPSource(5), url + '/m.gguf', str(dest), entry('m.gguf', DATA), Progress())
    assert (dest / 'm.gguf').read_bytes() == DATA
    assert sum(sizes) == len(DATA) and max(sizes) == model_io.WRITE_BYTES
