"""gpulab.inference.model_fetch: fetches, resumes, verifies and reports progress; check mode fetches nothing."""

import json

from ansible_collections.gpulab.inference.plugins.modules import model_fetch

from model_module_case import run, serve, sha

DATA = bytes(range(256)) * 2048


def test_fetch_resume_and_progress(tmp_path, capsys):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'a.gguf').write_bytes(DATA)
    (src / 'b.gguf').write_bytes(DATA[:1000])
    dest = tmp_path / 'dest'
    dest.mkdir()
    (dest / 'a.gguf.part').write_bytes(DATA[:200000])
    server, url = serve(src, ['a.gguf', 'b.gguf'])
    files = [{'name': 'a.gguf', 'size_bytes': len(DATA), 'sha256': sha(DATA)}, {'name': 'b.gguf', 'size_bytes': 1000, 'sha256': None}]
    progress = tmp_path / 'progress.json'
    try:
        failed, result = run(model_fetch.main, {'base_url': url, 'path': str(dest), 'files': files,
                                                'progress_file': str(progress), 'mode': '0640'}, capsys)
    finally:
        server.shutdown()
        server.server_close()
    assert not failed and result['changed']
    assert result['resumed_bytes'] == 200000 and result['fetched_bytes'] == len(DATA) - 200000 + 1000
    assert [f['sha256'] for f in result['files']] == [sha(DATA), sha(DATA[:1000])]
    assert (dest / 'a.gguf').read_bytes() == DATA and oct((dest / 'b.gguf').stat().st_mode & 0o777) == '0o640'
    state = json.loads(progress.read_text())
    assert state['done_bytes'] == state['total_bytes'] == result['fetched_bytes'] and state['percent'] == 100.0
    assert state['finished'] is True


def test_check_mode_and_nothing_to_fetch(tmp_path, capsys):
    files = [{'name': 'a.gguf', 'size_bytes': 1, 'sha256': None}]
    failed, result = run(model_fetch.main, {'base_url': 'http://127.0.0.1:9', 'path': str(tmp_path), 'files': files}, capsys, check_mode=True)
    assert not failed and result['changed'] and result['files'] == [] and not (tmp_path / 'a.gguf.part').exists()


def test_a_failed_fetch_names_the_url(tmp_path, capsys):
    files = [{'name': 'a.gguf', 'size_bytes': 1, 'sha256': None}]
    failed, result = run(model_fetch.main, {'base_url': 'http://127.0.0.1:9/m', 'path': str(tmp_path), 'files': files, 'timeout_s': 2}, capsys)
    assert failed and result['msg'].startswith('model_fetch into %s: GET http://127.0.0.1:9/m/a.gguf: ' % tmp_path)
    failed, result = run(model_fetch.main, {'base_url': 'ftp://x', 'path': str(tmp_path), 'files': files}, capsys)
    assert failed and 'only http:// and https://' in result['msg']
    failed, result = run(model_fetch.main, {'base_url': 'http://x', 'path': str(tmp_path), 'files': files, 'mode': 'rw'}, capsys)
    assert failed and result['msg'].startswith('model_fetch: invalid literal')


def test_a_full_disk_names_the_file_and_its_directory(tmp_path, capsys, monkeypatch):
    """ENOSPC while writing the .part (and again on the progress file on the same disk) fails with
    a message naming the directory and the file, not a traceback."""
    def full(*args, **kwargs):
        raise OSError(28, 'No space left on device')

    def progress_add(self, count, current, force=False, finished=False):
        if finished:
            full()
    monkeypatch.setattr(model_fetch.model_io, 'fetch_file', full)
    monkeypatch.setattr(model_fetch.model_io.ProgressFile, 'add', progress_add)
    files = [{'name': 'a.gguf', 'size_bytes': 1, 'sha256': None}]
    failed, result = run(model_fetch.main, {'base_url': 'http://127.0.0.1:9/m', 'path': str(tmp_path), 'files': files,
                                            'progress_file': str(tmp_path / 'progress.json')}, capsys)
    assert failed
    assert result['msg'] == 'model_fetch into %s: a.gguf.part: [Errno 28] No space left on device' % tmp_path
