"""model_transfer: a model's files, what a node still needs, resume offsets, space, ranges, progress."""

import json

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt

SHA_A = 'a' * 64
SHA_B = 'b' * 64


@pytest.mark.parametrize('first, expected', [
    ('m.gguf', ['m.gguf']),
    ('MiniMax-M2-Q4-00001-of-00003.gguf',
     ['MiniMax-M2-Q4-00001-of-00003.gguf', 'MiniMax-M2-Q4-00002-of-00003.gguf', 'MiniMax-M2-Q4-00003-of-00003.gguf']),
    ('x-00001-of-00001.gguf', ['x-00001-of-00001.gguf']),
    ('sub/x-00001-of-00002.gguf', ['sub/x-00001-of-00002.gguf', 'sub/x-00002-of-00002.gguf']),
])
def test_gguf_shards_from_the_first(first, expected):
    assert mt.gguf_shard_names(first) == expected


@pytest.mark.parametrize('first, message', [
    ('m-00002-of-00003.gguf', "is shard 2 of 3: give the first shard (-00001-of-00003.gguf)"),
    ('m-00001-of-00000.gguf', 'is shard 1 of 0'),
    ('m.bin', 'does not end with .gguf'),
    ('../m.gguf', 'must be a plain path inside the model directory'),
])
def test_gguf_refuses(first, message):
    with pytest.raises(mt.ModelTransferError, match=message.replace('(', r'\(').replace(')', r'\)')):
        mt.gguf_shard_names(first)


INDEX = json.dumps({'metadata': {}, 'weight_map': {'a': 'model-00002-of-00002.safetensors',
                                                   'b': 'model-00001-of-00002.safetensors',
                                                   'c': 'model-00001-of-00002.safetensors'}})


def test_hf_files_from_the_index_and_the_optional_files_present():
    present = ['config.json', HF_INDEX, 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
               'tokenizer.json', 'tokenizer_config.json', 'README.md', 'SHA256SUMS']
    assert mt.hf_file_names(present, INDEX) == [
        'config.json', HF_INDEX, 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
        'tokenizer.json', 'tokenizer_config.json']


HF_INDEX = 'model.safetensors.index.json'


def test_hf_single_file():
    assert mt.hf_file_names(['config.json', 'model.safetensors', 'generation_config.json']) == [
        'config.json', 'model.safetensors', 'generation_config.json']


@pytest.mark.parametrize('present, index, message', [
    (['model.safetensors'], None, 'no config.json'),
    (['config.json'], None, 'has no weights'),
    (['config.json', HF_INDEX], INDEX, 'names model-00001-of-00002.safetensors, model-00002-of-00002.safetensors, missing'),
    (['config.json', HF_INDEX], '{', 'is not JSON'),
    (['config.json', HF_INDEX], '{"weight_map": {}}', 'has no weight_map'),
    (['config.json', HF_INDEX], '{"weight_map": {"a": "../x.safetensors"}}', 'must be a plain path'),
])
def test_hf_refuses(present, index, message):
    with pytest.raises(mt.ModelTransferError, match=message):
        mt.hf_file_names(present, index)


def test_sha256sums_both_formats_comments_and_dot_slash():
    text = '# made by sha256sum\n\n%s  m-00001-of-00002.gguf\n%s *./m-00002-of-00002.gguf\n' % (SHA_A.upper(), SHA_B)
    assert mt.parse_sha256sums(text) == {'m-00001-of-00002.gguf': SHA_A, 'm-00002-of-00002.gguf': SHA_B}


@pytest.mark.parametrize('text, message', [
    ('abc  m.gguf', 'line 1 is not'),
    ('%s' % SHA_A, 'line 1 is not'),
    ('\n%s  ../m.gguf' % SHA_A, 'line 2 file'),
    ('%s  m.gguf\n%s  m.gguf' % (SHA_A, SHA_B), 'lists m.gguf twice'),
])
def test_sha256sums_refuses(text, message):
    with pytest.raises(mt.ModelTransferError, match=message):
        mt.parse_sha256sums(text)


def test_check_files_normalises():
    assert mt.check_files([{'name': 'a', 'size_bytes': 3, 'sha256': SHA_A.upper()}, {'name': 'b', 'size_bytes': 0}]) == [
        {'name': 'a', 'size_bytes': 3, 'sha256': SHA_A}, {'name': 'b', 'size_bytes': 0, 'sha256': None}]


@pytest.mark.parametrize('files, message', [
    ([], 'non-empty list'),
    ('x', 'non-empty list'),
    (['a'], r'files\[0\] must be a mapping'),
    ([{'name': 'a', 'size_bytes': -1}], 'whole number >= 0'),
    ([{'name': 'a', 'size_bytes': True}], 'whole number >= 0'),
    ([{'name': 'a', 'size_bytes': '3'}], 'whole number >= 0'),
    ([{'name': 'a', 'size_bytes': 1, 'sha256': 'x'}], '64 hex digits'),
    ([{'name': 'a', 'size_bytes': 1}, {'name': 'a', 'size_bytes': 1}], 'listed twice'),
    ([{'name': '/etc/passwd', 'size_bytes': 1}], 'plain path'),
    ([{'name': 'a.gguf.part', 'size_bytes': 1}], 'suffix of files still in transfer'),
    ([{'name': '', 'size_bytes': 1}], 'non-empty string'),
])
def test_check_files_refuses(files, message):
    with pytest.raises(mt.ModelTransferError, match=message):
        mt.check_files(files)


def test_with_sums_fills_in_and_refuses_a_conflict():
    files = [{'name': 'a', 'size_bytes': 1, 'sha256': None}, {'name': 'b', 'size_bytes': 1, 'sha256': None}]
    assert mt.with_sums(files, {'a': SHA_A}) == [{'name': 'a', 'size_bytes': 1, 'sha256': SHA_A},
                                                 {'name': 'b', 'size_bytes': 1, 'sha256': None}]
    with pytest.raises(mt.ModelTransferError, match='a: sha256 a+ at the source, b+ in SHA256SUMS'):
        mt.with_sums([{'name': 'a', 'size_bytes': 1, 'sha256': SHA_A}], {'a': SHA_B})


@pytest.mark.parametrize('source, kind', [
    ('head', 'head'), ('http://10.0.0.5/models/m', 'url'), ('HTTPS://mirror/m.gguf', 'url'), ('/srv/m', 'controller'),
])
def test_source_kind(source, kind):
    assert mt.source_kind(source) == kind


@pytest.mark.parametrize('source, message', [
    ('', 'model_source is empty'), (None, 'model_source is empty'), ('ftp://x/m', 'only http:// and https://'),
    ('models/m', 'must be absolute'), ('http://x/m?x=1', 'without spaces, query or fragment'),
    ('http://x/a b', 'without spaces'),
])
def test_source_kind_refuses(source, message):
    with pytest.raises(mt.ModelTransferError, match=message):
        mt.source_kind(source)


@pytest.mark.parametrize('source, expected', [
    ('http://m/models/x/x-00001-of-00002.gguf', ('http://m/models/x', 'x-00001-of-00002.gguf')),
    ('http://m/models/ckpt/', ('http://m/models/ckpt', None)),
    ('/srv/ckpt', ('/srv/ckpt', None)),
])
def test_split_source(source, expected):
    assert mt.split_source(source) == expected


def test_file_url_quotes_and_hf_layout():
    assert mt.file_url('http://m/x/', 'a b+c.gguf') == 'http://m/x/a%20b%2Bc.gguf'
    assert mt.file_url('http://m/org/model', 'sub/config.json', hf_layout=True) == 'http://m/org/model/resolve/main/sub/config.json'


def entry(name='m.gguf', size=100, sha=SHA_A):
    return {'name': name, 'size_bytes': size, 'sha256': sha}


def record(size=100, mtime=7, sha=SHA_A):
    return {'size_bytes': size, 'mtime_ns': mtime, 'sha256': sha}


@pytest.mark.parametrize('rec, size, mtime, want, expected', [
    (record(), 100, 7, SHA_A, True),
    (record(), 100, 7, None, True),
    (record(), 100, 8, SHA_A, False),      # touched since it was verified
    (record(), 99, 7, SHA_A, False),
    (record(sha=SHA_B), 100, 7, SHA_A, False),  # changed at the source
    (None, 100, 7, SHA_A, False),
    ({'size_bytes': 100, 'mtime_ns': 7}, 100, 7, SHA_A, False),
])
def test_record_matches(rec, size, mtime, want, expected):
    assert mt.record_matches(rec, entry(sha=want), size, mtime) is expected


@pytest.mark.parametrize('part, size, offset', [(None, 100, 0), (0, 100, 0), (40, 100, 40), (100, 100, 100), (101, 100, 0)])
def test_resume_offset(part, size, offset):
    assert mt.resume_offset(part, size) == offset


def test_plan_node_every_action():
    files = [entry('kept'), entry('touched'), entry('missing'), entry('partial'), entry('wrong-size'),
             entry('changed', sha=SHA_B)]
    present = {'kept': (100, 7), 'touched': (100, 9), 'wrong-size': (50, 7), 'changed': (100, 7)}
    records = {'kept': record(), 'touched': record(), 'changed': record()}
    parts = {'partial': 30, 'wrong-size': 200}
    plan = mt.plan_node(files, present, records, parts)
    assert [(p['name'], p['action'], p['offset']) for p in plan] == [
        ('kept', 'keep', 0), ('touched', 'verify', 0), ('missing', 'fetch', 0), ('partial', 'fetch', 30),
        ('wrong-size', 'fetch', 0), ('changed', 'fetch', 0)]
    summary = mt.plan_summary(plan)
    assert summary == {'fetch_bytes': 100 + 70 + 100 + 100, 'resumed_bytes': 30, 'verify_bytes': 100,
                       'keep': ['kept'], 'verify': ['touched'], 'fetch': ['missing', 'partial', 'wrong-size', 'changed']}
    assert mt.space_needed(plan) == 370 + 100


def test_plan_node_after_hashing():
    files = [entry('right'), entry('wrong'), entry('any', sha=None)]
    present = {'right': (100, 1), 'wrong': (100, 1), 'any': (100, 1)}
    plan = mt.plan_node(files, present, {}, {'wrong': 10}, hashed={'right': SHA_A, 'wrong': SHA_B, 'any': SHA_B})
    assert [(p['name'], p['action'], p['offset'], p['sha256']) for p in plan] == [
        ('right', 'keep', 0, SHA_A), ('wrong', 'fetch', 10, SHA_A), ('any', 'keep', 0, SHA_B)]


def test_plan_keep_takes_the_recorded_sha_when_the_source_has_none():
    plan = mt.plan_node([entry(sha=None)], {'m.gguf': (100, 7)}, {'m.gguf': record()}, {})
    assert plan[0]['action'] == 'keep' and plan[0]['sha256'] == SHA_A


def test_space_problem_names_host_path_and_both_sizes():
    assert mt.space_problem('node-b', '/srv/m', 1 << 30, 1 << 30) is None
    assert mt.space_problem('node-b', '/srv/m', 1024, 3 << 20) == (
        'node-b: /srv/m has 1.0 KiB free (1024 bytes), the model needs 3.0 MiB more (3145728 bytes); '
        'free space there or point model_dir at a larger disk')


def test_verify_problem():
    assert mt.verify_problem(entry(), SHA_A, 100) is None
    assert mt.verify_problem(entry(sha=None), SHA_B, 100) is None
    assert mt.verify_problem(entry(), SHA_A, 99) == 'm.gguf is 99 bytes, the source has 100'
    assert mt.verify_problem(entry(), SHA_B, 100) == 'm.gguf has sha256 %s, the source says %s' % (SHA_B, SHA_A)


@pytest.mark.parametrize('header, size, expected', [
    (None, 10, None), ('', 10, None), ('items=0-1', 10, None), ('bytes=0-1,4-5', 10, None), ('bytes=-', 10, None),
    ('bytes=abc', 10, None),
    ('bytes=0-', 10, (0, 9)), ('bytes=4-', 10, (4, 9)), ('bytes=2-5', 10, (2, 5)), ('bytes=2-50', 10, (2, 9)),
    ('bytes=-3', 10, (7, 9)), ('bytes=-30', 10, (0, 9)), (' bytes=9-9 ', 10, (9, 9)),
])
def test_parse_range(header, size, expected):
    assert mt.parse_range(header, size) == expected


@pytest.mark.parametrize('header, size', [('bytes=10-', 10), ('bytes=5-4', 10), ('bytes=-0', 10), ('bytes=-5', 0), ('bytes=0-', 0)])
def test_parse_range_not_satisfiable(header, size):
    with pytest.raises(mt.RangeNotSatisfiable):
        mt.parse_range(header, size)


def test_content_range_round_trip():
    assert mt.content_range(4, 9, 10) == 'bytes 4-9/10'
    assert mt.parse_content_range('bytes 4-9/10') == (4, 9, 10)
    assert mt.parse_content_range('bytes 4-9/*') == (4, 9, None)
    with pytest.raises(mt.ModelTransferError, match='is not "bytes'):
        mt.parse_content_range('4-9/10')


def test_response_start():
    assert mt.response_start(200, None, 40) == 0
    assert mt.response_start(206, 'bytes 40-99/100', 40) == 40
    with pytest.raises(mt.ModelTransferError, match='asked for bytes from 40, the server answered from 0'):
        mt.response_start(206, 'bytes 0-99/100', 40)
    with pytest.raises(mt.ModelTransferError, match='HTTP 404'):
        mt.response_start(404, None, 0)


@pytest.mark.parametrize('count, text', [(0, '0 B'), (1023, '1023 B'), (1536, '1.5 KiB'), (5 << 20, '5.0 MiB'),
                                         (226 << 30, '226.0 GiB'), (3 << 40, '3.0 TiB'), (5000 << 40, '5000.0 TiB')])
def test_format_bytes(count, text):
    assert mt.format_bytes(count) == text


def test_format_duration():
    assert mt.format_duration(3725) == '1:02:05'
    assert mt.format_duration(-1) == '0:00:00'


def test_progress_and_its_line():
    state = mt.progress(50 << 20, 200 << 20, 5.0, 'm-00001-of-00002.gguf')
    assert state == {'done_bytes': 50 << 20, 'total_bytes': 200 << 20, 'percent': 25.0,
                     'rate_bytes_s': float(10 << 20), 'eta_s': 15.0, 'current': 'm-00001-of-00002.gguf'}
    assert mt.progress_line(state) == '50.0 MiB of 200.0 MiB (25.0%), 10.0 MiB/s, 0:00:15 left (m-00001-of-00002.gguf)'


def test_progress_at_the_start_and_of_nothing():
    assert mt.progress_line(mt.progress(0, 100, 0.0)) == '0 B of 100 B (0.0%)'
    assert mt.progress(0, 0, 0.0)['percent'] == 100.0
    assert mt.progress_line(mt.progress(100, 100, 1.0)) == '100 B of 100 B (100.0%), 100 B/s'
