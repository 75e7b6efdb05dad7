"""rpc_cache the module on a real directory: it removes what the plan names and nothing else, keeps a
file a process holds open, writes its record only on change (a second run changes nothing), removes
nothing in check mode or when it refuses a full disk, and reports the size for status."""

import json
import os
from unittest import mock

from ansible_collections.gpulab.inference.plugins.modules import rpc_cache

from module_harness import ExitJson, FailJson, run_module

GIB = 1 << 30
MIB = 1 << 20
PLAN = {'devices': [{'name': 'RPC0', 'host': 'node-b', 'kind': 'rpc', 'layer_range': [0, 4], 'output_layer': False,
                     'split': 1.0, 'weights_mib': 3}]}
MODEL = {'source': 'synthetic', 'path': '/var/lib/gpulab/models/m.gguf', 'size_bytes': 10}


def cache(tmp_path, sizes_mib_ages):
    """Files of the given MiB, each last used `age` seconds ago, under <tmp>/llama/rpc/."""
    directory = tmp_path / 'llama' / 'rpc'
    directory.mkdir(parents=True)
    names = []
    for index, (size_mib, age) in enumerate(sizes_mib_ages):
        name = '%016x' % (index + 1)
        path = directory / name
        with open(path, 'wb') as stream:
            stream.truncate(int(size_mib * MIB))
        when = 1_700_000_000 - age
        os.utime(path, (when, when))
        names.append(name)
    (directory / 'README').write_text('not the cache\n')
    return directory, names


def args(tmp_path, **extra):
    value = {'llama_cache': str(tmp_path / 'llama'), 'record': str(tmp_path / 'state' / 'rpc-cache.json'),
             'max_gib': 4 / 1024.0, 'min_free_gib': 0.0, 'model_manifest': MODEL, 'memory_plan': PLAN, 'host': 'node-b'}
    value.update(extra)
    return value


def run(arguments, open_paths=(), free=100 * GIB):
    with mock.patch.object(rpc_cache, 'fd_targets', return_value=list(open_paths)), \
            mock.patch.object(rpc_cache, 'free_bytes', return_value=free):
        return run_module(rpc_cache.main, arguments, {}, None)


def test_over_the_bound_the_oldest_files_go_and_the_record_is_written(tmp_path):
    directory, names = cache(tmp_path, [(2, 300), (2, 900), (2, 600)])
    (tmp_path / 'state').mkdir()
    result = run(args(tmp_path))
    assert result.kind is ExitJson, result.result
    # bound 4 MiB, a new model adding 3 MiB: 1 MiB left for the old files, all three go
    assert result.result['removed'] == [names[1], names[2], names[0]]
    assert result.result['changed'] is True
    assert result.result['model_changed'] is True
    assert sorted(os.listdir(directory)) == ['README']
    record = json.loads((tmp_path / 'state' / 'rpc-cache.json').read_text())
    assert record['path'] == str(directory)
    assert record['max_gib'] == 4 / 1024.0


def test_a_second_run_changes_nothing(tmp_path):
    cache(tmp_path, [(1, 300)])
    (tmp_path / 'state').mkdir()
    first = run(args(tmp_path))
    assert first.result['changed'] is True
    second = run(args(tmp_path))
    assert second.kind is ExitJson, second.result
    assert second.result['changed'] is False
    assert second.result['model_changed'] is False
    assert second.result['removed'] == []


def test_a_file_held_open_stays(tmp_path):
    directory, names = cache(tmp_path, [(3, 900), (3, 100)])
    (tmp_path / 'state').mkdir()
    result = run(args(tmp_path, max_gib=1 / 1024.0), open_paths=[str(directory / names[0]), 'pipe:[7]'])
    assert result.kind is ExitJson, result.result
    assert result.result['removed'] == [names[1]]
    assert result.result['in_use'] == [names[0]]
    assert result.result['over_bound'] is True
    assert sorted(os.listdir(directory)) == sorted(['README', names[0]])


def test_check_mode_removes_and_writes_nothing(tmp_path):
    directory, names = cache(tmp_path, [(3, 900), (3, 100)])
    result = run(dict(args(tmp_path), _ansible_check_mode=True))
    assert result.kind is ExitJson, result.result
    assert result.result['changed'] is True
    assert result.result['removed'] == [names[0], names[1]]
    assert sorted(os.listdir(directory)) == sorted(['README'] + names)
    assert not (tmp_path / 'state' / 'rpc-cache.json').exists()


def test_a_full_disk_fails_with_the_numbers_and_removes_nothing(tmp_path):
    directory, names = cache(tmp_path, [(1, 900)])
    result = run(args(tmp_path, min_free_gib=2.0), free=GIB)
    assert result.kind is FailJson
    message = result.result['msg']
    assert message.startswith('rpc_cache on node-b: %s: the disk is too full to start' % directory)
    assert 'has 1.0 GiB free' in message
    assert 'llama_rpc_server_cache_min_free_gib' in message
    assert result.result['free_bytes'] == GIB
    assert sorted(os.listdir(directory)) == sorted(['README'] + names)
    assert not (tmp_path / 'state' / 'rpc-cache.json').exists()


def test_a_record_that_cannot_be_written_fails_naming_the_node_and_file(tmp_path):
    # the state directory's disk full: the write of the new record fails with ENOSPC after some bytes
    cache(tmp_path, [(1, 900)])
    (tmp_path / 'state').mkdir()
    record = tmp_path / 'state' / 'rpc-cache.json'
    record.write_text('{"old": true}\n')

    def full(stream):
        stream.write(b'{')
        raise OSError(28, 'No space left on device')
    real = rpc_cache.atomic_write
    with mock.patch.object(rpc_cache, 'atomic_write', lambda path, text, mode: real(path, full, mode)):
        result = run(args(tmp_path))
    assert result.kind is FailJson, result.result
    assert result.result['msg'] == 'rpc_cache on node-b: the record %s cannot be written: No space left on device' % record
    # the old record whole, no temporary file beside it
    assert record.read_text() == '{"old": true}\n'
    assert os.listdir(tmp_path / 'state') == ['rpc-cache.json']


def test_verify_removes_a_file_cut_short_and_keeps_a_whole_one(tmp_path):
    # rpc-server names each file by the FNV-1a of the tensor's bytes; a disk that filled while it wrote
    # left the second one half written under its final name
    directory = tmp_path / 'llama' / 'rpc'
    directory.mkdir(parents=True)
    whole, cut = b'w' * 4096, b'c' * 4096
    whole_name, cut_name = ['%016x' % rpc_cache.rc.fnv1a64([data]) for data in (whole, cut)]
    (directory / whole_name).write_bytes(whole)
    (directory / cut_name).write_bytes(cut[:1000])
    kept = run(args(tmp_path, max_gib=1.0))
    assert kept.kind is ExitJson and kept.result['corrupt'] == []
    assert sorted(os.listdir(directory)) == sorted([whole_name, cut_name])
    result = run(args(tmp_path, max_gib=1.0, verify=True))
    assert result.kind is ExitJson, result.result
    assert result.result['corrupt'] == [cut_name]
    assert result.result['changed'] is True
    assert os.listdir(directory) == [whole_name]
    assert any(cut_name in warning and 'cut short' in warning for warning in result.warnings)


def test_a_bad_setting_fails_naming_the_variable(tmp_path):
    result = run(args(tmp_path, disk_fraction=1.5, max_gib=None))
    assert result.kind is FailJson
    assert 'llama_rpc_server_cache_disk_fraction is 1.5' in result.result['msg']


def test_without_max_gib_the_bound_follows_the_free_space(tmp_path):
    cache(tmp_path, [(2, 900)])
    (tmp_path / 'state').mkdir()
    result = run(args(tmp_path, max_gib=None, disk_fraction=0.5), free=10 * MIB)
    assert result.kind is ExitJson, result.result
    assert result.result['max_bytes'] == 6 * MIB
    assert result.result['removed'] == []


def test_query_reports_the_size_against_the_recorded_bound(tmp_path):
    directory, _names = cache(tmp_path, [(1, 900), (2, 100)])
    (tmp_path / 'state').mkdir()
    assert run(args(tmp_path, max_gib=1.0)).kind is ExitJson
    result = run({'state': 'query', 'record': str(tmp_path / 'state' / 'rpc-cache.json')})
    assert result.kind is ExitJson, result.result
    assert result.result == dict(result.result, changed=False, path=str(directory), size_bytes=3 * MIB, files=2,
                                 max_bytes=GIB, over_bound=False)
    status = result.result['status']
    assert (status['enabled'], status['size_gib'], status['bound_gib'], status['files']) == (True, 0.0, 1.0, 2)
    assert status['summary'] == '%s holds 0.00 GiB in 2 files, bound 1.00 GiB' % directory


def test_query_of_a_cache_turned_off_says_so(tmp_path):
    directory, _names = cache(tmp_path, [(3, 900)])
    (tmp_path / 'state').mkdir()
    assert run(args(tmp_path, max_gib=1.0)).kind is ExitJson
    result = run({'state': 'query', 'record': str(tmp_path / 'state' / 'rpc-cache.json'), 'enabled': False})
    assert result.kind is ExitJson, result.result
    assert result.result['changed'] is False
    assert result.result['status']['enabled'] is False
    assert result.result['status']['summary'] == ('off (llama_rpc_server_cache_enabled is false); %s holds 0.00 GiB in '
                                                  '1 file from an earlier deploy' % directory)
    assert result.result['size_bytes'] == 3 * MIB


def test_query_without_a_record_reports_nothing(tmp_path):
    result = run({'state': 'query', 'record': str(tmp_path / 'none.json')})
    assert result.kind is ExitJson
    assert result.result['path'] is None
    assert result.result['size_bytes'] == 0
