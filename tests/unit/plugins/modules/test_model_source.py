"""gpulab.inference.model_source: a directory, a mirror, and the refusals."""

import pytest

from ansible_collections.gpulab.inference.plugins.modules import model_source

from model_module_case import run, serve, sha

SHARDS = {'m-00001-of-00002.gguf': b'1' * 10, 'm-00002-of-00002.gguf': b'2' * 20}


def test_a_split_gguf_on_a_mirror_with_sums(tmp_path, capsys):
    for name, data in SHARDS.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / 'SHA256SUMS').write_text(''.join('%s  %s\n' % (sha(d), n) for n, d in SHARDS.items()))
    server, url = serve(tmp_path, list(SHARDS) + ['SHA256SUMS'])
    try:
        failed, result = run(model_source.main, {'source': url + '/m-00001-of-00002.gguf'}, capsys)
    finally:
        server.shutdown()
        server.server_close()
    assert not failed and not result['changed']
    assert result['kind'] == 'gguf' and result['serve_name'] == 'm-00001-of-00002.gguf' and result['total_bytes'] == 30
    assert result['files'] == [{'name': n, 'size_bytes': len(d), 'sha256': sha(d)} for n, d in SHARDS.items()]


def test_a_checkpoint_directory_on_the_controller(tmp_path, capsys):
    ckpt = tmp_path / 'MiniMax-M2'
    ckpt.mkdir()
    (ckpt / 'config.json').write_text('{}')
    (ckpt / 'model.safetensors').write_bytes(b'w' * 9)
    failed, result = run(model_source.main, {'source': str(ckpt) + '/'}, capsys, check_mode=True)
    assert not failed
    assert (result['kind'], result['name'], result['serve_name'], result['total_bytes']) == ('hf', 'MiniMax-M2', '', 11)


@pytest.mark.parametrize('source, message', [
    ('head', 'source=head names no place'),
    ('ftp://x/m.gguf', 'only http:// and https://'),
    ('/nonexistent/m-00002-of-00002.gguf', 'is shard 2 of 2'),
    ('/nonexistent/ckpt', '/nonexistent/ckpt is not a directory'),
    ('http://127.0.0.1:9/m.gguf', 'refused'),
])
def test_refusals_name_the_source(source, message, capsys):
    failed, result = run(model_source.main, {'source': source, 'timeout_s': 2}, capsys)
    assert failed and result['msg'].startswith('model source %s: ' % source) and message in result['msg']
