# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM test double of the container lab: it refuses what vLLM 0.24.0 refuses and answers
the OpenAI-compatible API the role and the benchmark use."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import sse

REPO = Path(__file__).resolve().parents[3]
DOUBLE = REPO / 'molecule' / 'vllm' / 'files' / 'vllm-test-double'
DATA = REPO / 'tests' / 'unit' / 'fixtures' / 'vllm'


def env(**extra):
    base = dict(os.environ, VLLM_TEST_DOUBLE_DATA=str(DATA), VLLM_TEST_DOUBLE_TOKEN_DELAY_S='0')
    base.pop('VLLM_API_KEY', None)
    base.update(extra)
    return base


def run(args, **extra):
    return subprocess.run([sys.executable, str(DOUBLE)] + args, capture_output=True, text=True, env=env(**extra),
                          timeout=30, check=False)


@pytest.fixture
def model(tmp_path):
    (tmp_path / 'config.json').write_text('{}')
    return str(tmp_path)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_version():
    assert run(['--version']).stdout.strip() == '0.24.0'


@pytest.mark.parametrize('args,message', [
    (['--tensor-parallel-size', '2', '--expert-parallel'], 'unrecognized arguments: --expert-parallel'),
    (['--reasoning-parser', 'minimax_m2_think'], 'invalid reasoning parser: minimax_m2_think'),
    (['--tool-call-parser', 'minimax'], 'invalid tool parser: minimax'),
    (['--enable-auto-tool-choice'], '--enable-auto-tool-choice requires --tool-call-parser'),
    (['--tensor-parallel-size', 'eight'], "argument --tensor-parallel-size: invalid int value: 'eight'"),
    (['--gpu-memory-utilization', '1.2'], 'gpu_memory_utilization must be in (0, 1]'),
])
def test_refuses_what_vllm_refuses(model, args, message):
    result = run(['serve', model] + args)
    assert result.returncode == 2
    assert message in result.stderr


def test_model_without_config_json(tmp_path):
    result = run(['serve', str(tmp_path)])
    assert result.returncode == 2 and 'has no config.json' in result.stderr


def test_serves_the_api_with_reasoning_and_key(model, tmp_path):
    port = free_port()
    record = tmp_path / 'record.json'
    args = ['serve', model, '--host', '127.0.0.1', '--port', str(port), '--served-model-name', 'synthetic',
            '--tensor-parallel-size', '1', '--enable-expert-parallel', '--gpu-memory-utilization', '0.9',
            '--max-model-len', '4096', '--reasoning-parser', 'minimax_m2', '--tool-call-parser', 'minimax_m2',
            '--enable-auto-tool-choice']
    double_env = env(VLLM_API_KEY='k3y', VLLM_TEST_DOUBLE_RECORD=str(record), VLLM_HOST_IP='127.0.0.1')
    proc = subprocess.Popen([sys.executable, str(DOUBLE)] + args, env=double_env, stderr=subprocess.PIPE)
    try:
        base = 'http://127.0.0.1:%d' % port
        for _attempt in range(100):
            try:
                with urllib.request.urlopen(base + '/health', timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                time.sleep(0.05)
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(base + '/v1/models', timeout=5)
        assert denied.value.code == 401
        auth = {'Authorization': 'Bearer k3y', 'Content-Type': 'application/json'}
        with urllib.request.urlopen(urllib.request.Request(base + '/v1/models', headers=auth), timeout=5) as resp:
            models = json.load(resp)
        assert models['data'][0]['id'] == 'synthetic' and models['data'][0]['max_model_len'] == 4096
        body = json.dumps({'model': 'synthetic', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}).encode()
        with urllib.request.urlopen(urllib.request.Request(base + '/v1/chat/completions', data=body, headers=auth), timeout=5) as resp:
            answer = json.load(resp)
        message = answer['choices'][0]['message']
        assert message['content'] == 'Hello from the vLLM'
        assert message['reasoning'] == 'The user wants a greeting.'
        assert answer['usage']['completion_tokens'] == 4 + 5
        body = json.dumps({'model': 'synthetic', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 3,
                           'stream': True, 'stream_options': {'include_usage': True}}).encode()
        with urllib.request.urlopen(urllib.request.Request(base + '/v1/chat/completions', data=body, headers=auth), timeout=5) as resp:
            assert resp.headers['Content-Type'].startswith('text/event-stream')
            parser = sse.SseParser()
            events = parser.feed(resp.read())
        datas = [e['data'] for e in events]
        assert datas[-1] == '[DONE]'
        chunks = [json.loads(d) for d in datas[:-1]]
        assert chunks[-1]['choices'] == [] and chunks[-1]['usage']['completion_tokens'] == 3 + 5
        reasoning = ''.join(c['choices'][0]['delta'].get('reasoning', '') for c in chunks if c['choices'])
        content = ''.join(c['choices'][0]['delta'].get('content', '') for c in chunks if c['choices'])
        assert (reasoning, content) == ('The user wants a greeting.', 'Hello from the')
        # /metrics is not under /v1: no key, as in vLLM; its series in vLLM's names, from the two requests
        with urllib.request.urlopen(base + '/metrics', timeout=5) as resp:
            metrics = resp.read().decode()
        series = dict(line.rsplit(' ', 1) for line in metrics.splitlines() if not line.startswith('#'))
        labels = '{engine="0",model_name="synthetic"}'
        assert float(series['vllm:num_requests_running' + labels]) == 0
        assert float(series['vllm:num_requests_waiting' + labels]) == 0
        assert float(series['vllm:kv_cache_usage_perc' + labels]) == 0
        assert float(series['vllm:generation_tokens_total' + labels]) == (4 + 5) + (3 + 5)
        assert '# TYPE vllm:prompt_tokens_total counter' in metrics
        recorded = json.loads(record.read_text())
        assert recorded['argv'] == args and recorded['api_key_set'] is True
        assert recorded['env']['VLLM_HOST_IP'] == '127.0.0.1' and 'VLLM_API_KEY' not in recorded['env']
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()


def test_every_option_a_deployment_passes_is_a_real_vllm_option():
    known = set(l for l in (DATA / 'vllm-0.24.0-serve-options.txt').read_text().splitlines() if l and not l.startswith('#'))
    for option in ('--host', '--port', '--tensor-parallel-size', '--pipeline-parallel-size', '--data-parallel-size',
                   '--enable-expert-parallel', '--gpu-memory-utilization', '--max-model-len', '--kv-cache-dtype',
                   '--reasoning-parser', '--tool-call-parser', '--enable-auto-tool-choice', '--served-model-name',
                   '--nnodes', '--node-rank', '--master-addr', '--master-port', '--headless',
                   '--distributed-executor-backend', '--data-parallel-size-local', '--data-parallel-address',
                   '--data-parallel-rpc-port', '--data-parallel-start-rank', '--enforce-eager', '--api-key',
                   '--kv-cache-memory-bytes'):
        assert option in known, option
    assert '--expert-parallel' not in known
