# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wrapper template of role service (roles/service/templates/wrapper.sh.j2), rendered from the
plans' wrappers and run with fake commands: each runs with exactly the planned arguments (values
with spaces and quotes intact, "$@" passed on), the planned environment and the API key read from
its file, Ray's head started before vLLM."""

import json
import subprocess
from pathlib import Path

import jinja2
from ansible.plugins.filter.core import FilterModule

from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import rpc_server_wrapper
from ansible_collections.gpulab.inference.plugins.module_utils.vllm_service import service_files_of

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / 'roles' / 'service' / 'templates' / 'wrapper.sh.j2'

# Records its name, arguments and the environment the wrappers set, one JSON line per call.
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
names = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "GGML_RDMA_DEV", "LLAMA_CACHE", "VLLM_API_KEY")
with open(os.environ["FAKE_RECORD"], "a") as record:
    record.write(json.dumps({"argv": sys.argv[1:], "name": os.path.basename(sys.argv[0]),
                             "env": dict((n, os.environ[n]) for n in names if n in os.environ)}) + "\n")
'''


def render(wrapper):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters.update(FilterModule().filters())
    return env.from_string(TEMPLATE.read_text()).render(__service_wrapper=wrapper)


def run(tmp_path, text, *args):
    script = tmp_path / 'wrapper'
    script.write_text(text)
    script.chmod(0o755)
    subprocess.run(['sh', '-n', str(script)], check=True)
    record = tmp_path / 'record.jsonl'
    subprocess.run([str(script)] + list(args), check=True, env={'PATH': '/usr/bin:/bin', 'FAKE_RECORD': str(record)})
    return [json.loads(line) for line in record.read_text().splitlines()]


def fake(tmp_path, name):
    path = tmp_path / name
    path.write_text(FAKE)
    path.chmod(0o755)
    return str(path)


def test_the_rpc_server_runs_with_its_gpu_cache_and_rdma(tmp_path):
    binary = fake(tmp_path, 'rpc server')
    server = {'instance': 0, 'device': 'CUDA0', 'gpu_index': 2, 'port': 50052}
    settings = {'host': 'node-b', 'user': 'gpulab-rpc', 'unit': 'gpulab-rpc-server', 'bin_dir': '/opt/gpulab/bin',
                'threads': 4, 'cache_dir': str(tmp_path / "cache dir")}
    wrapper = rpc_server_wrapper(server, {'build_id': '0123456789ab', 'rpc_server_binary': binary}, '10.0.0.2', settings,
                                 {'GGML_RDMA_DEV': 'mlx5_0', 'GGML_RDMA_GID': '3'})
    (call,) = run(tmp_path, render(wrapper), '--verbose')
    assert call['argv'] == ['--host', '10.0.0.2', '--port', '50052', '--device', 'CUDA0', '--threads', '4', '--cache',
                            '--verbose']
    assert call['env'] == {'CUDA_DEVICE_ORDER': 'PCI_BUS_ID', 'CUDA_VISIBLE_DEVICES': '2', 'GGML_RDMA_DEV': 'mlx5_0',
                           'LLAMA_CACHE': str(tmp_path / 'cache dir')}


def service(tmp_path, **changes):
    base = {'node_name': 'node-a', 'install': 'pip', 'service_manager': 'systemd',
            'vllm_command': [fake(tmp_path, 'vllm')], 'ray_command': [fake(tmp_path, 'ray')], 'ray_port': 6379,
            'fabric_address': '10.0.0.1', 'user': 'gpulab-vllm', 'group': 'gpulab-vllm', 'unit': 'gpulab-vllm',
            'bin_dir': '/opt/gpulab/bin', 'env_file': '/etc/gpulab/vllm/environment', 'rdma_env_file': '/etc/x',
            'api_key_file': '', 'cache_dir': '/var/cache/gpulab/vllm', 'environment': {}, 'hardening': {},
            'cuda_devices': [], 'restart_sec': 30, 'start_limit_burst': 3, 'start_limit_interval_s': 1800,
            'master_addr': '10.0.0.1', 'distributed_backend': 'ray'}
    base.update(changes)
    return base


INFO = {'label': 'TP2', 'nodes': 2, 'model_path': '/srv/m', 'estimate': {}}


def test_the_ray_head_starts_ray_then_vllm_with_the_key_from_its_file(tmp_path):
    key = tmp_path / 'api-key'
    key.write_text("k3y 'quoted'\n")
    serve = ['serve', '/srv/my model', '--host', '0.0.0.0', '--distributed-executor-backend', 'ray']
    files = service_files_of(service(tmp_path, api_key_file=str(key)), INFO, 'head', serve)
    ray, vllm = run(tmp_path, render(files['wrapper']))
    assert (ray['name'], ray['argv']) == (
        'ray', ['start', '--head', '--disable-usage-stats', '--port', '6379', '--node-ip-address', '10.0.0.1'])
    assert (vllm['name'], vllm['argv']) == ('vllm', serve)
    assert vllm['env'] == {'VLLM_API_KEY': "k3y 'quoted'"}


def test_a_ray_worker_only_joins_the_head(tmp_path):
    files = service_files_of(service(tmp_path, fabric_address='10.0.0.2'), INFO, 'ray-worker', [])
    (call,) = run(tmp_path, render(files['wrapper']))
    assert (call['name'], call['argv']) == (
        'ray', ['start', '--block', '--disable-usage-stats', '--address', '10.0.0.1:6379', '--node-ip-address', '10.0.0.2'])
    assert call['env'] == {}
