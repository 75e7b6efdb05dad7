"""rpc_cache: the cache's layout, its bound, the prune's choice (over the bound pruned oldest first,
files in use left alone) and the refusal of a disk too full for the new model."""

import json

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import rpc_cache as rc

GIB = 1 << 30
MIB = 1 << 20
NOW = 1_000_000.0


def entry(index, size_gib, used_at):
    return {'name': '%016x' % index, 'size_bytes': int(size_gib * GIB), 'atime': used_at, 'mtime': used_at - 10}


def plan(files, bound_gib=10, open_now=(), record=None, key='k1', need_gib=0, free_gib=100, min_free_gib=1):
    return rc.prune_plan(files, int(bound_gib * GIB), set(open_now), record, key, NOW, int(need_gib * GIB),
                         int(free_gib * GIB), int(min_free_gib * GIB))


def same_model(since):
    return {'schema': rc.RECORD_SCHEMA, 'model': 'k1', 'since': since}


# --- layout --------------------------------------------------------------------------------------

def test_files_live_in_the_rpc_subdirectory_of_llama_cache():
    assert rc.files_dir('/var/cache/gpulab/rpc/') == '/var/cache/gpulab/rpc/rpc'


@pytest.mark.parametrize('value', ['', None, 'relative/dir'])
def test_a_cache_dir_that_is_not_absolute_is_refused_by_name(value):
    with pytest.raises(rc.RpcCacheError, match='llama_rpc_server_cache_dir'):
        rc.files_dir(value)


@pytest.mark.parametrize('name, ours', [
    ('00ab12cd34ef5678', True), ('00AB12CD34EF5678', False), ('00ab12cd34ef567', False),
    ('00ab12cd34ef5678.tmp', False), ('00ab12cd34ef5678\n', False), ('gpulab-rpc-cache.json', False)])
def test_only_rpc_servers_hash_names_are_the_cache(name, ours):
    assert rc.is_cache_file(name) is ours


def test_open_names_keep_only_cache_files_of_this_directory():
    targets = ['/c/rpc/00000000000000aa', '/c/rpc/00000000000000bb (deleted)', '/c/rpcx/00000000000000cc',
               '/c/rpc/sub/00000000000000dd', 'socket:[1234]', '/c/rpc/notes.txt']
    assert rc.open_names(targets, '/c/rpc') == {'00000000000000aa'}


# --- the bound -----------------------------------------------------------------------------------

def test_max_gib_sets_the_bound():
    assert rc.max_bytes(3, 0.5, 100 * GIB, 7 * GIB) == 3 * GIB


def test_without_max_gib_the_bound_is_a_fraction_of_free_plus_cache():
    assert rc.max_bytes(None, 0.25, 30 * GIB, 10 * GIB) == 10 * GIB


@pytest.mark.parametrize('settings, variable', [
    ((0, 0.5, 1), 'llama_rpc_server_cache_max_gib'),
    ((-2, 0.5, 1), 'llama_rpc_server_cache_max_gib'),
    (('ten', 0.5, 1), 'llama_rpc_server_cache_max_gib'),
    ((None, 0, 1), 'llama_rpc_server_cache_disk_fraction'),
    ((None, 1.5, 1), 'llama_rpc_server_cache_disk_fraction'),
    ((None, 0.5, -1), 'llama_rpc_server_cache_min_free_gib'),
    ((None, 0.5, True), 'llama_rpc_server_cache_min_free_gib'),
])
def test_bad_settings_are_refused_naming_the_variable(settings, variable):
    with pytest.raises(rc.RpcCacheError, match=variable):
        rc.check_settings(*settings)


def test_good_settings_pass():
    rc.check_settings(None, 1, 0)
    rc.check_settings(0.5, 0.1, 2.5)


# --- the model and what it adds -----------------------------------------------------------------

MEMORY_PLAN = {'devices': [
    {'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'layer_range': [0, 10], 'output_layer': False, 'split': 0.4,
     'weights_mib': 1024},
    {'name': 'RPC1', 'host': 'node-b', 'kind': 'rpc', 'layer_range': [10, 20], 'output_layer': False, 'split': 0.3,
     'weights_mib': 512.5},
    {'name': 'RPC2', 'host': 'node-c', 'kind': 'rpc', 'layer_range': [20, 28], 'output_layer': False, 'split': 0.2,
     'weights_mib': 2048},
    {'name': 'CUDA0', 'host': 'node-a', 'kind': 'local', 'layer_range': [28, 32], 'output_layer': True, 'split': 0.1,
     'weights_mib': 4096},
]}
MODEL = {'source': 'url', 'path': '/m/a.gguf', 'size_bytes': 5,
         'files': [{'name': 'a.gguf', 'size_bytes': 5, 'sha256': 'aa', 'mtime_ns': 1}]}


def test_need_is_the_weights_on_this_hosts_rpc_devices():
    assert rc.need_bytes(MEMORY_PLAN, 'node-b') == 1024 * MIB + int(512.5 * MIB)
    assert rc.need_bytes(MEMORY_PLAN, 'node-c') == 2048 * MIB
    assert rc.need_bytes(MEMORY_PLAN, 'node-a') == 0
    assert rc.need_bytes({}, 'node-b') == 0


@pytest.mark.parametrize('memory_plan, message', [
    ({'devices': 'RPC0'}, 'no devices list'),
    ({'devices': ['RPC0']}, r'devices\[0\] is not an object'),
    ({'devices': [{'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'weights_mib': '1'}]}, 'RPC0 has weights_mib'),
    ({'devices': [{'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'weights_mib': -1}]}, 'RPC0 has weights_mib'),
])
def test_a_bad_memory_plan_is_refused_naming_the_field(memory_plan, message):
    with pytest.raises(rc.RpcCacheError, match=message):
        rc.need_bytes(memory_plan, 'node-b')


def test_the_model_key_ignores_recorded_times_and_other_hosts():
    base = rc.model_key(MODEL, MEMORY_PLAN, 'node-b')
    later = dict(MODEL, files=[dict(MODEL['files'][0], mtime_ns=99)])
    assert rc.model_key(later, MEMORY_PLAN, 'node-b') == base
    moved = {'devices': [dict(d, split=0.9) if d['host'] == 'node-c' else d for d in MEMORY_PLAN['devices']]}
    assert rc.model_key(MODEL, moved, 'node-b') == base
    assert len(base) == 64


def test_the_model_key_moves_with_the_model_or_this_hosts_layers():
    base = rc.model_key(MODEL, MEMORY_PLAN, 'node-b')
    other = dict(MODEL, files=[dict(MODEL['files'][0], sha256='bb')])
    assert rc.model_key(other, MEMORY_PLAN, 'node-b') != base
    shifted = {'devices': [dict(d, layer_range=[0, 12]) if d['name'] == 'RPC0' else d for d in MEMORY_PLAN['devices']]}
    assert rc.model_key(MODEL, shifted, 'node-b') != base


@pytest.mark.parametrize('text', [None, '', '{', '[]', '{"schema": "other/1", "model": "k", "since": 1}',
                                  json.dumps({'schema': rc.RECORD_SCHEMA, 'model': 1, 'since': 1}),
                                  json.dumps({'schema': rc.RECORD_SCHEMA, 'model': 'k', 'since': True})])
def test_a_record_that_is_not_ours_counts_as_none(text):
    assert rc.parse_record(text) is None


def test_a_record_reads_back():
    value = rc.record('/c/rpc', 'k1', 12.5, None, 0.5, 1.0)
    assert rc.parse_record(rc.record_text(value)) == value
    assert set(value) == set(rc.RECORD_FIELDS)


# --- the prune ------------------------------------------------------------------------------------

def test_a_cache_within_its_bound_is_left_as_it_is():
    result = plan([entry(1, 2, NOW - 500), entry(2, 3, NOW - 400)], bound_gib=10, record=same_model(NOW - 1000))
    assert result['remove'] == []
    assert result['size_bytes'] == 5 * GIB
    assert result['over_bound'] is False
    assert result['model_changed'] is False
    assert result['since'] == NOW - 1000


def test_a_cache_over_its_bound_is_pruned_oldest_first_until_it_fits():
    files = [entry(1, 4, NOW - 300), entry(2, 4, NOW - 900), entry(3, 4, NOW - 600), entry(4, 4, NOW - 100)]
    result = plan(files, bound_gib=9, record=same_model(NOW - 50))
    assert result['remove'] == ['%016x' % 2, '%016x' % 3]
    assert result['removed_bytes'] == 8 * GIB
    assert result['left_bytes'] == 8 * GIB
    assert result['over_bound'] is False


def test_the_later_of_access_and_modification_orders_the_prune():
    read_recently = {'name': '%016x' % 1, 'size_bytes': GIB, 'atime': NOW - 10, 'mtime': NOW - 5000}
    written_long_ago = {'name': '%016x' % 2, 'size_bytes': GIB, 'atime': NOW - 4000, 'mtime': NOW - 4000}
    result = plan([read_recently, written_long_ago], bound_gib=1, record=same_model(NOW))
    assert result['remove'] == ['%016x' % 2]


def test_a_file_held_open_is_never_removed_even_over_the_bound():
    files = [entry(1, 6, NOW - 900), entry(2, 6, NOW - 800)]
    result = plan(files, bound_gib=1, open_now={'%016x' % 1}, record=same_model(NOW))
    assert result['remove'] == ['%016x' % 2]
    assert result['in_use'] == ['%016x' % 1]
    assert result['left_bytes'] == 6 * GIB
    assert result['over_bound'] is True


def test_the_current_models_files_stay_while_the_model_is_unchanged():
    files = [entry(1, 3, NOW - 100), entry(2, 3, NOW - 2000), entry(3, 3, NOW - 50)]
    result = plan(files, bound_gib=2, record=same_model(NOW - 1000))
    assert result['remove'] == ['%016x' % 2]
    assert result['in_use'] == ['%016x' % 1, '%016x' % 3]
    assert result['over_bound'] is True


def test_a_changed_model_makes_room_for_what_it_adds():
    files = [entry(1, 3, NOW - 100), entry(2, 3, NOW - 200), entry(3, 3, NOW - 300)]
    result = plan(files, bound_gib=10, record=same_model(NOW - 1000), key='k2', need_gib=5)
    assert result['model_changed'] is True
    assert result['since'] == NOW
    assert result['target_bytes'] == 5 * GIB
    # what the old model used is no longer protected: the two oldest go
    assert result['remove'] == ['%016x' % 3, '%016x' % 2]
    assert result['in_use'] == []


def test_without_a_record_the_model_counts_as_changed():
    result = plan([entry(1, 1, NOW - 10)], bound_gib=10, record=None, need_gib=2)
    assert result['model_changed'] is True
    assert result['need_bytes'] == 2 * GIB
    assert result['remove'] == []


def test_a_model_larger_than_the_bound_empties_what_is_not_in_use():
    files = [entry(1, 1, NOW - 10), entry(2, 1, NOW - 20)]
    result = plan(files, bound_gib=4, open_now={'%016x' % 1}, key='k2', need_gib=6)
    assert result['remove'] == ['%016x' % 2]
    assert result['model_exceeds_bound'] is True


def test_an_unchanged_model_needs_no_room():
    result = plan([entry(1, 1, NOW - 10)], bound_gib=4, record=same_model(NOW - 100), need_gib=50, free_gib=2)
    assert result['need_bytes'] == 0
    assert result['problem'] is None


# --- a full disk ------------------------------------------------------------------------------------

def test_a_disk_too_full_even_after_the_prune_is_refused_with_the_numbers_and_nothing_removed():
    files = [entry(1, 2, NOW - 100), entry(2, 2, NOW - 200)]
    result = plan(files, bound_gib=3, key='k2', need_gib=20, free_gib=10, min_free_gib=1)
    assert result['remove'] == []
    assert result['removed_bytes'] == 0
    problem = result['problem']
    assert 'need up to 20.0 GiB' in problem
    assert 'has 10.0 GiB free' in problem
    assert '4.0 GiB more after pruning' in problem
    assert 'the cache holds 4.0 GiB' in problem
    assert 'bound 3.0 GiB' in problem
    assert '1.0 GiB must stay free (llama_rpc_server_cache_min_free_gib)' in problem
    assert 'llama_rpc_server_cache_enabled false' in problem


def test_the_prune_can_make_the_room_a_full_disk_lacks():
    files = [entry(1, 4, NOW - 100), entry(2, 4, NOW - 200)]
    result = plan(files, bound_gib=6, key='k2', need_gib=5, free_gib=2, min_free_gib=1)
    assert result['problem'] is None
    assert result['remove'] == ['%016x' % 2, '%016x' % 1]


def test_min_free_alone_can_refuse_an_unchanged_model():
    result = plan([entry(1, 1, NOW - 10)], bound_gib=4, record=same_model(NOW - 100), free_gib=0.5, min_free_gib=1)
    assert result['problem'] is not None
    assert 'has 0.5 GiB free' in result['problem']


# --- status (status.yml and the report) ----------------------------------------------------------

def recorded(max_gib=None, disk_fraction=0.5):
    return {'schema': rc.RECORD_SCHEMA, 'model': 'k1', 'since': NOW, 'path': '/var/cache/gpulab/rpc/rpc',
            'max_gib': max_gib, 'disk_fraction': disk_fraction}


def test_status_gives_the_size_against_the_recorded_bound():
    status = rc.cache_status(recorded(max_gib=50), [entry(1, 10, NOW), entry(2, 3, NOW)], 400 * GIB)
    assert status == {'enabled': True, 'path': '/var/cache/gpulab/rpc/rpc', 'size_bytes': 13 * GIB, 'size_gib': 13.0,
                      'files': 2, 'max_bytes': 50 * GIB, 'bound_gib': 50.0, 'free_bytes': 400 * GIB,
                      'over_bound': False,
                      'summary': '/var/cache/gpulab/rpc/rpc holds 13.00 GiB in 2 files, bound 50.00 GiB'}


def test_status_without_max_gib_takes_the_fraction_of_free_plus_held():
    status = rc.cache_status(recorded(disk_fraction=0.25), [entry(1, 2, NOW)], 6 * GIB)
    assert (status['max_bytes'], status['bound_gib']) == (2 * GIB, 2.0)
    assert status['over_bound'] is False


def test_status_says_when_the_cache_is_over_its_bound():
    status = rc.cache_status(recorded(max_gib=1), [entry(1, 0.75, NOW), entry(2, 0.5, NOW)], 100 * GIB)
    assert status['over_bound'] is True
    assert status['size_gib'] == 1.25
    assert status['summary'] == '/var/cache/gpulab/rpc/rpc holds 1.25 GiB in 2 files, bound 1.00 GiB; over its bound'


def test_status_without_a_record_names_the_file_and_counts_nothing():
    status = rc.cache_status(None, [], None)
    assert (status['path'], status['size_bytes'], status['files'], status['max_bytes'], status['bound_gib']) == (
        None, 0, 0, None, None)
    assert status['over_bound'] is False
    assert status['summary'] == 'no record (gpulab_rpc_cache_file): no deploy has bounded the cache here yet'


def test_status_of_a_cache_turned_off_still_counts_what_is_left():
    status = rc.cache_status(recorded(max_gib=50), [entry(1, 4, NOW)], 100 * GIB, enabled=False)
    assert status['enabled'] is False and status['size_gib'] == 4.0
    assert status['summary'] == ('off (llama_rpc_server_cache_enabled is false); /var/cache/gpulab/rpc/rpc holds '
                                 '4.00 GiB in 1 file from an earlier deploy')
    assert rc.cache_status(None, [], None, enabled=False)['summary'] == 'off (llama_rpc_server_cache_enabled is false)'


def test_fnv1a64_is_rpc_servers_hash():
    # FNV-1a 64-bit reference values (the offset basis for no bytes), in one chunk or several
    assert rc.fnv1a64([]) == 0xcbf29ce484222325
    assert rc.fnv1a64([b'a']) == 0xaf63dc4c8601ec8c
    assert rc.fnv1a64([b'foobar']) == 0x85944171f73967e8
    assert rc.fnv1a64([b'foo', b'', b'bar']) == 0x85944171f73967e8


def test_a_file_cut_short_does_not_match_its_name():
    data = bytes(range(256)) * 64
    name = '%016x' % rc.fnv1a64([data])
    assert rc.name_matches(name, rc.fnv1a64([data]))
    assert not rc.name_matches(name, rc.fnv1a64([data[:len(data) // 2]]))
