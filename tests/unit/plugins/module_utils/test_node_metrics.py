"""The node's metrics collector: GPU families from nvidia-smi answers, the collection's state from its
files, and one pass of the collector on the node (nvidia-smi replaced by the lab's fake)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpulab.inference.plugins.module_utils import node_metrics, nvidia_smi
from module_utils_closure import closure
from ansible_collections.gpulab.inference.plugins.module_utils.metrics_text import render
from ansible_collections.gpulab.inference.plugins.module_utils.node_metrics import (
    NodeMetricsError,
    bench_families,
    build_families,
    drain_families,
    firewall_families,
    gpu_families,
    health_families,
    parse_sensor_query,
    rpc_cache_families,
    rpc_server_families,
    utc_stamp_seconds,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
FAKE_NVIDIA_SMI = REPO_ROOT / 'molecule' / 'lab' / 'files' / 'fake-nvidia-smi'
H200 = REPO_ROOT / 'molecule' / 'lab' / 'files' / 'nvidia-smi' / 'h200'
# The files role monitoring installs for the collector.
COLLECTOR_FILES = yaml.safe_load((REPO_ROOT / 'roles' / 'monitoring' / 'vars' / 'main.yml').read_text())[
    '__monitoring_collector_modules']
GPU_QUERY = (
    '0, GPU-aaaa, NVIDIA H200, 00000000:00:06.0, 580.159.04, 9.0, 143771, 81920, 61851, 31\n'
    '1, GPU-bbbb, NVIDIA H200, 00000000:00:07.0, 580.159.04, 9.0, 143771, 0, 143156, [N/A]\n')
SENSORS = '0, 245.67, 61, 1980, 3201\n1, [N/A], 35, 345, [Not Supported]\n'
APPS = '4242, /opt/gpulab/llama.cpp/current/bin/rpc-server, GPU-aaaa, 81408\n77, /usr/bin/python3, GPU-zzzz, 10\n'
MIB = 1024 * 1024


def samples(families):
    """{metric name: {frozenset(labels): value text}} of rendered families."""
    found = {}
    for item in families:
        found[item['name']] = dict((frozenset(labels.items()), value) for labels, value in item['samples'])
    return found


def test_parse_sensor_query_reads_numbers_and_not_available_markers():
    assert parse_sensor_query(SENSORS) == {
        0: {'power_w': 245.67, 'temperature_c': 61.0, 'clock_sm_mhz': 1980.0, 'clock_mem_mhz': 3201.0},
        1: {'power_w': None, 'temperature_c': 35.0, 'clock_sm_mhz': 345.0, 'clock_mem_mhz': None},
    }
    assert parse_sensor_query('') == {}


@pytest.mark.parametrize('output, message', [
    ('0, 245.67, 61, 1980\n', r'answered 4 fields, expected 5 \(index,power.draw'),
    ('0, hot, 61, 1980, 3201\n', "field power.draw is 'hot', expected a number or N/A"),
    ('N/A, 1, 61, 1980, 3201\n', "field index is 'N/A'"),
    ('0.5, 1, 61, 1980, 3201\n', "field index is '0.5'"),
    ('0, 1, 61, 1980, 3201\n0, 1, 61, 1980, 3201\n', 'listed GPU index 0 twice'),
])
def test_parse_sensor_query_names_the_field_at_fault(output, message):
    with pytest.raises(NodeMetricsError, match=message):
        parse_sensor_query(output)


def test_gpu_families_per_gpu_and_per_process():
    gpus = nvidia_smi.parse_gpu_query(GPU_QUERY)
    found = samples(gpu_families(gpus, parse_sensor_query(SENSORS), nvidia_smi.parse_compute_apps_query(APPS)))
    gpu0 = frozenset({'gpu': '0', 'uuid': 'GPU-aaaa', 'name': 'NVIDIA H200'}.items())
    gpu1 = frozenset({'gpu': '1', 'uuid': 'GPU-bbbb', 'name': 'NVIDIA H200'}.items())
    assert found['gpulab_gpu_memory_used_bytes'] == {gpu0: '%d' % (81920 * MIB), gpu1: '0'}
    assert found['gpulab_gpu_memory_total_bytes'][gpu1] == '%d' % (143771 * MIB)
    # utilization.gpu [N/A] on GPU 1: no sample rather than a made-up 0
    assert found['gpulab_gpu_utilization_ratio'] == {gpu0: '0.31'}
    assert found['gpulab_gpu_power_watts'] == {gpu0: '245.67'}
    assert found['gpulab_gpu_temperature_celsius'] == {gpu0: '61.0', gpu1: '35.0'}
    assert found['gpulab_gpu_clock_sm_hertz'] == {gpu0: '1980000000.0', gpu1: '345000000.0'}
    assert found['gpulab_gpu_clock_memory_hertz'] == {gpu0: '3201000000.0'}
    # the process on a GPU this query did not list is left out
    process = frozenset(dict(gpu0, pid='4242', process='/opt/gpulab/llama.cpp/current/bin/rpc-server').items())
    assert found['gpulab_gpu_process_memory_used_bytes'] == {process: '%d' % (81408 * MIB)}


def test_gpu_families_without_sensors_keep_the_memory():
    found = samples(gpu_families(nvidia_smi.parse_gpu_query(GPU_QUERY), {}, []))
    assert len(found['gpulab_gpu_memory_used_bytes']) == 2
    assert found['gpulab_gpu_power_watts'] == {} and found['gpulab_gpu_process_memory_used_bytes'] == {}


def test_build_families():
    assert samples(build_families('{"build_id": "0c1e570abcde"}'))['gpulab_build_info'] == {
        frozenset({'build_id': '0c1e570abcde'}.items()): '1'}
    assert samples(build_families(None))['gpulab_build_info'] == {}
    with pytest.raises(NodeMetricsError, match="build_id 'x; rm' is not a hex build id"):
        build_families('{"build_id": "x; rm"}')
    with pytest.raises(NodeMetricsError, match='BUILD_INFO.json is not JSON'):
        build_families('{')


def test_utc_stamp_seconds():
    assert utc_stamp_seconds('2025-01-02T03:04:05Z') == 1735787045
    assert utc_stamp_seconds('2025-01-02 03:04:05') is None
    assert utc_stamp_seconds(17) is None


def test_drain_families_present_since_created():
    state = json.dumps({'schema': 'gpulab.inference.gpu_drain/1', 'phase': 'drained',
                        'created': '2025-01-02T03:04:05Z', 'updated': '2025-01-02T03:05:00Z',
                        'entries': [{'key': 'a'}, {'key': 'b'}]})
    found = samples(drain_families(state, 99.0))
    assert found['gpulab_drain_state_present'] == {frozenset(): '1'}
    assert found['gpulab_drain_since_timestamp_seconds'] == {frozenset(): '1735787045'}
    assert found['gpulab_drain_entries'] == {frozenset(): '2'}


def test_drain_families_torn_file_counts_as_present_since_its_time():
    found = samples(drain_families('{"phase": ', 1700000000.4))
    assert found['gpulab_drain_state_present'] == {frozenset(): '1'}
    assert found['gpulab_drain_since_timestamp_seconds'] == {frozenset(): '1700000000'}
    assert found['gpulab_drain_entries'] == {frozenset(): '0'}


def test_drain_families_absent():
    found = samples(drain_families(None, None))
    assert found['gpulab_drain_state_present'] == {frozenset(): '0'}
    assert found['gpulab_drain_since_timestamp_seconds'] == {}


def test_rpc_cache_families_from_cache_status():
    from ansible_collections.gpulab.inference.plugins.module_utils import rpc_cache
    record = {'path': '/var/cache/gpulab/rpc', 'max_gib': 1, 'disk_fraction': 0.5, 'min_free_gib': 1}
    status = rpc_cache.cache_status(record, [{'name': 'a' * 16, 'size_bytes': 2 * 1024 ** 3}], 10 * 1024 ** 3)
    found = samples(rpc_cache_families(status))
    assert found['gpulab_rpc_cache_size_bytes'] == {frozenset(): str(2 * 1024 ** 3)}
    assert found['gpulab_rpc_cache_bound_bytes'] == {frozenset(): str(1024 ** 3)}
    assert found['gpulab_rpc_cache_over_bound'] == {frozenset(): '1'}
    assert found['gpulab_rpc_cache_files'] == {frozenset(): '1'}
    # no record: the size counts, the bound is unknown
    found = samples(rpc_cache_families(rpc_cache.cache_status(None, [], 0)))
    assert found['gpulab_rpc_cache_size_bytes'] == {frozenset(): '0'} and found['gpulab_rpc_cache_bound_bytes'] == {}
    assert all(not value for value in samples(rpc_cache_families(None)).values())


def test_rpc_server_families_listening_on_the_manifest_address():
    manifest = json.dumps({'address': '10.231.78.11', 'endpoints': [{'port': 50052, 'instance': 0},
                                                                    {'port': 50053, 'instance': 1}]})
    sockets = [{'address': '10.231.78.11', 'port': 50052, 'uid': 0, 'inode': 1},
               {'address': '127.0.0.1', 'port': 50053, 'uid': 0, 'inode': 2}]
    found = samples(rpc_server_families(manifest, sockets))['gpulab_rpc_server_up']
    assert found == {frozenset({'instance_index': '0', 'port': '50052'}.items()): '1',
                     frozenset({'instance_index': '1', 'port': '50053'}.items()): '0'}
    assert samples(rpc_server_families(None, sockets))['gpulab_rpc_server_up'] == {}
    with pytest.raises(NodeMetricsError, match='has no endpoints list'):
        rpc_server_families('{"address": "x"}', [])
    with pytest.raises(NodeMetricsError, match='endpoints entry 0 has no port'):
        rpc_server_families('{"endpoints": [{"port": true}]}', [])


def test_firewall_and_health_families():
    assert samples(firewall_families('gpulab_rpc', False))['gpulab_rpc_firewall_table_loaded'] == {
        frozenset({'table': 'gpulab_rpc'}.items()): '0'}
    assert samples(firewall_families('gpulab_rpc', None))['gpulab_rpc_firewall_table_loaded'] == {}
    assert samples(health_families('http://127.0.0.1:8080', True))['gpulab_head_healthy'] == {
        frozenset({'url': 'http://127.0.0.1:8080'}.items()): '1'}
    assert samples(health_families(None, None))['gpulab_head_healthy'] == {}


def test_bench_families_from_the_last_run_headline():
    record = json.dumps({'finished': '2025-01-02T03:04:05Z', 'report': 'reports/x/report.md',
                         'headline': {'decode_tok_s': 41.5, 'prefill_tok_s': 900, 'ttft_s': 0.4,
                                      'best_aggregate_tok_s': None}})
    found = samples(bench_families(record))
    assert found['gpulab_bench_finished_timestamp_seconds'] == {frozenset(): '1735787045'}
    assert found['gpulab_bench_decode_tok_s'] == {frozenset(): '41.5'}
    assert found['gpulab_bench_prefill_tok_s'] == {frozenset(): '900.0'}
    assert found['gpulab_bench_ttft_seconds'] == {frozenset(): '0.4'}
    assert found['gpulab_bench_best_aggregate_tok_s'] == {}
    # an older record without figures, and no record: the families stay empty
    assert samples(bench_families('{"finished": "2025-01-02T03:04:05Z"}'))['gpulab_bench_decode_tok_s'] == {}
    assert all(not value for value in samples(bench_families(None)).values())


def test_one_pass_on_a_node_with_the_fake_nvidia_smi(tmp_path):
    # The collector as the role runs it: its files in the collection's package layout under a lib
    # directory, run by path with PYTHONPATH; nvidia-smi is the lab's fake with the H200 profile
    # and a consumers file naming a live process.
    profile = tmp_path / 'smi'
    profile.mkdir()
    for path in H200.iterdir():
        (profile / path.name).write_text(path.read_text())
    pid_file = tmp_path / 'consumer.pid'
    pid_file.write_text('%d\n' % os.getpid())
    uuid = nvidia_smi.parse_gpu_query((H200 / 'query-gpu.csv').read_text())[0]['uuid']
    (profile / 'consumers').write_text('%s,%s,2048\n' % (pid_file, uuid))
    lib = tmp_path / 'lib' / 'ansible_collections' / 'gpulab' / 'inference' / 'plugins' / 'module_utils'
    lib.mkdir(parents=True)
    source = REPO_ROOT / 'plugins' / 'module_utils'
    for name in COLLECTOR_FILES:
        (lib / name).write_text((source / name).read_text())
    textfiles = tmp_path / 'textfile'
    textfiles.mkdir()
    drain = tmp_path / 'drain-state.json'
    drain.write_text(json.dumps({'created': '2025-01-02T03:04:05Z', 'entries': []}))
    env = dict(os.environ, PYTHONPATH=str(tmp_path / 'lib'), GPULAB_FAKE_NVIDIA_SMI_DIR=str(profile))
    done = subprocess.run(
        [sys.executable, str(lib / 'node_metrics.py'), '--once', '--textfile-dir', str(textfiles),
         '--nvidia-smi', str(FAKE_NVIDIA_SMI), '--drain-state', str(drain),
         '--build-info', str(tmp_path / 'none.json')],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    gpu = (textfiles / 'gpulab-gpu.prom').read_text()
    assert 'gpulab_gpu_memory_total_bytes{gpu="0",name="NVIDIA H200",uuid="%s"} %d' % (uuid, 143771 * MIB) in gpu
    assert 'gpulab_gpu_process_memory_used_bytes{gpu="0",name="NVIDIA H200",pid="%d",process="%s",uuid="%s"} %d' % (
        os.getpid(), os.readlink('/proc/%d/exe' % os.getpid()), uuid, 2048 * MIB) in gpu
    assert 'gpulab_collector_success{collector="gpu",source="gpu"} 1' in gpu
    assert 'gpulab_collector_success{collector="gpu",source="processes"} 1' in gpu
    # the profile's sensors answer (query-gpu-sensors.csv: 117.26 W, 41 C, 1980 and 3201 MHz)
    assert 'gpulab_collector_success{collector="gpu",source="sensors"} 1' in gpu
    labels = '{gpu="0",name="NVIDIA H200",uuid="%s"}' % uuid
    assert 'gpulab_gpu_power_watts%s 117.26' % labels in gpu
    assert 'gpulab_gpu_temperature_celsius%s 41' % labels in gpu
    assert 'gpulab_gpu_clock_sm_hertz%s 1980000000' % labels in gpu
    assert 'gpulab_gpu_clock_memory_hertz%s 3201000000' % labels in gpu
    state = (textfiles / 'gpulab-state.prom').read_text()
    assert 'gpulab_drain_state_present 1' in state and 'gpulab_drain_since_timestamp_seconds 1735787045' in state
    assert 'gpulab_collector_success{collector="state",source="build"} 1' in state
    assert sorted(path.name for path in textfiles.iterdir()) == ['gpulab-gpu.prom', 'gpulab-state.prom']


def test_a_failed_query_is_said_and_the_rest_still_written(tmp_path, monkeypatch):
    answers = {'gpu': (0, GPU_QUERY, ''), 'sensors': (2, 'Invalid combination of input arguments', ''),
               'apps': (0, '', '')}

    def fake_run(argv):
        if argv[1] == node_metrics.SENSOR_QUERY_ARGS[0]:
            return answers['sensors']
        if argv[1].startswith('--query-compute-apps'):
            return answers['apps']
        return answers['gpu']
    monkeypatch.setattr(node_metrics, 'run', fake_run)
    logged = []
    args = node_metrics.parse_args(['--textfile-dir', str(tmp_path)])
    text = render(node_metrics.gpu_pass(args, logged.append))
    assert 'gpulab_collector_success{collector="gpu",source="sensors"} 0' in text
    assert 'gpulab_gpu_memory_used_bytes{gpu="0"' in text
    assert logged == ['sensors: nvidia-smi exited 2: Invalid combination of input arguments']


def test_healthy_reads_the_status_of_one_get():
    """The collector's health probe: 200 is healthy, anything else (or nothing listening) is not."""
    import http.server
    import threading
    from ansible_collections.gpulab.inference.plugins.module_utils.node_metrics import _healthy

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == '/health' else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = 'http://127.0.0.1:%d' % server.server_address[1]
        assert _healthy(base + '/health') is True
        assert _healthy(base + '/loading') is False
        assert _healthy('ftp://127.0.0.1/health') is False
    finally:
        server.shutdown()
        server.server_close()
    assert _healthy(base + '/health') is False


def test_the_role_installs_what_the_collector_imports():
    assert sorted(COLLECTOR_FILES) == sorted(name + '.py' for name in closure(['node_metrics']))
