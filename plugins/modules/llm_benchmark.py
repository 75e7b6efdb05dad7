#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_benchmark
short_description: Measure TTFT, inter-token latency and throughput of an OpenAI-compatible endpoint
version_added: 0.1.0
description:
  - Sends streaming chat completions to an OpenAI-compatible server (llama-server, vLLM) at a
    list of concurrency levels and returns, per level, requests ok and failed, time to first
    token, time per output token and inter-token latency (mean, p50, p99), prefill tok/s,
    per-stream decode tok/s with its run-to-run spread, and aggregate output tok/s.
  - Tokens are counted from the server's usage block (C(stream_options.include_usage)), never
    from chunks. Reasoning deltas (C(reasoning_content), and C(reasoning) as newer vLLM names
    it) are counted apart from the answer; answers left empty because O(max_tokens) ran out
    while the model was reasoning are counted and warned about.
  - Where the server is llama-server, its own per-request C(timings) are read too and
    reported beside the client's figures, with their ratio.
  - The prompt is synthetic, sized with the server's tokenizer (C(/tokenize)) where it offers
    one; every request starts differently so that no prompt cache shortens the prefill.
  - Checks the endpoint before any load (reachable, key accepted, model served, answers with
    an event stream) and fails with a message naming the option to fix.
  - Uses only the Python standard library on the target.
author:
  - gpulab.inference contributors (@gpulab)
options:
  base_url:
    description:
      - Root of the server, without C(/v1), for example C(http://127.0.0.1:8080).
    type: str
    required: true
  api_key:
    description:
      - Bearer token sent with every request. Empty sends none.
    type: str
    default: ""
  model:
    description:
      - Model name sent in requests. Empty takes the only model C(/v1/models) lists; a name the
        server does not list fails the task.
    type: str
    default: ""
  prompt_tokens:
    description:
      - Length of the synthetic user message in tokens of the server's tokenizer (estimated as
        one token per word where the server has no C(/tokenize)). The chat template adds a few.
    type: int
    default: 128
  max_tokens:
    description:
      - Output tokens asked for per request.
    type: int
    default: 128
  ignore_eos:
    description:
      - Send C(ignore_eos) (understood by llama-server and vLLM) so that every request decodes
        O(max_tokens) tokens and the figures of all requests cover the same length.
    type: bool
    default: true
  concurrency:
    description:
      - Concurrency levels, each run in turn (ascending), every level with that many streams.
    type: list
    elements: int
    default: [1, 2, 4]
  requests_per_level:
    description:
      - Requests sent at each level; a level sends at least one per stream.
    type: int
    default: 4
  warmup_requests:
    description:
      - Requests sent one at a time before the sweep and not counted (first-request costs such
        as CUDA graph capture). At least one is always sent - it checks the streaming path, the
        usage block and the key before the sweep.
    type: int
    default: 1
  timeout_s:
    description:
      - Seconds a request may wait for the next byte of its answer.
    type: int
    default: 300
  greedy:
    description:
      - Send C(temperature=0) (greedy decoding). By default no sampling parameter is sent, so
        the server's defaults apply, as for a plain chat client.
    type: bool
    default: false
  sampling:
    description:
      - More request fields, sent as given (for example C(top_p), C(chat_template_kwargs)).
    type: dict
    default: {}
  gguf_path:
    description:
      - The served GGUF on this host (the first shard of a split model). When set, its header
        gives the weights' size and the bytes a decode step reads per token (experts counted
        for the used fraction), for the report's bandwidth figure.
    type: path
  progress_path:
    description:
      - File rewritten (atomically) with one line saying where the sweep is, for a play that
        runs this module with C(async) and shows its progress.
    type: path
attributes:
  check_mode:
    support: partial
    description: Can run in check mode.
    details: In check mode only the endpoint checks and one request run; no sweep is sent.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Every level runs after the previous one has ended; a level's wall time runs from its first
    request sent to its last answer read.
seealso:
  - module: gpulab.inference.gpu_sampler
  - module: gpulab.inference.inference_report
"""

EXAMPLES = r"""
- name: Benchmark the head's llama-server
  gpulab.inference.llm_benchmark:
    base_url: http://127.0.0.1:8080
    concurrency: [1, 2, 4, 8]
  register: bench

- name: Benchmark vLLM with a key from the vault, greedy
  gpulab.inference.llm_benchmark:
    base_url: http://10.0.0.10:8000
    api_key: "{{ vllm_api_key }}"
    model: MiniMaxAI/MiniMax-M2
    greedy: true
    prompt_tokens: 512
    max_tokens: 256
  register: bench

- name: Show the decode figure at concurrency 1
  ansible.builtin.debug:
    msg: "{{ bench.benchmark.levels[0].decode_tok_s }} tok/s"
"""

RETURN = r"""
benchmark:
  description: What was measured.
  returned: success
  type: dict
  contains:
    base_url:
      description: The endpoint.
      type: str
      sample: http://127.0.0.1:8080
    engine:
      description: V(llama.cpp) (the server answers C(/props)), V(vllm) (it answers C(/version)) or V(openai-compatible).
      type: str
      sample: llama.cpp
    model:
      description: The model name sent.
      type: str
      sample: minimax-m2.gguf
    prompt:
      description: The synthetic prompt's size (V(tokenizer) or V(estimate)) and words.
      type: dict
      sample: {target_tokens: 128, tokens: 128, words: 124, sizing: tokenizer}
    request:
      description: max_tokens, ignore_eos and the sampling fields sent.
      type: dict
      sample: {max_tokens: 128, ignore_eos: true, sampling: {}}
    levels:
      description:
        - One entry per concurrency level, ascending. Times in seconds, rates in tokens per second.
        - C(ttft_s), C(tpot_s), C(itl_s) each hold mean, p50 and p99; C(decode_tok_s) is the mean
          per-stream decode rate and C(decode_tok_s_cv_percent) its spread over requests;
          C(server) holds llama-server's own figures (null for other servers) and
          C(decode_ratio), client over server.
      type: list
      elements: dict
      sample:
        - concurrency: 1
          requests: 4
          requests_ok: 4
          requests_failed: 0
          ttft_s: {mean: 0.051, p50: 0.05, p99: 0.06}
          tpot_s: {mean: 0.012, p50: 0.012, p99: 0.013}
          itl_s: {mean: 0.012, p50: 0.012, p99: 0.02}
          prefill_tok_s: 2702.1
          decode_tok_s: 82.5
          decode_tok_s_cv_percent: 0.6
          aggregate_output_tok_s: 80.1
          server: {decode_tok_s: 83.1, prefill_tok_s: 3120.4, decode_ratio: 0.9928}
    summary:
      description: One line per level - requests ok, TTFT p50, decode per stream, aggregate, llama-server's decode and the ratio.
      type: list
      elements: str
      sample: ['concurrency 1: 4/4 ok, TTFT p50 0.050 s, decode 82.5 tok/s per stream (spread 0.6 %), aggregate 80.1 tok/s']
    model_weights:
      description: From the GGUF header when O(gguf_path) is set, else null.
      type: dict
      sample: {architecture: minimax-m2, parameters: 228700000000, weights_bytes: 243000000000, bytes_read_per_token: 11000000000}
    warnings:
      description: Failed requests, empty answers whose budget went to reasoning.
      type: list
      elements: str
    duration_s:
      description: Wall time of the checks, warm-up and sweep.
      type: float
"""

import http.client as http_client
import json
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils import bench_stats
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write
from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import BenchInputError
from ansible_collections.gpulab.inference.plugins.module_utils.sse import SseError, SseParser, StreamRecord


class EndpointError(Exception):
    """The endpoint cannot be benchmarked; the message says why and what to do."""


class Endpoint:
    """HTTP to one OpenAI-compatible server (a new connection per request, as clients do)."""

    def __init__(self, base_url, api_key, timeout_s):
        self.scheme, self.host, self.port, self.prefix = bench_stats.parse_base_url(base_url)
        self.base_url = base_url.rstrip('/')
        self.api_key = api_key
        self.timeout_s = timeout_s

    def connect(self):
        cls = http_client.HTTPSConnection if self.scheme == 'https' else http_client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout_s)

    def headers(self):
        headers = {'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'}
        if self.api_key:
            headers['Authorization'] = 'Bearer %s' % self.api_key
        return headers

    def open(self, method, path, body=None):
        """(connection, response); raises EndpointError when the server cannot be reached."""
        conn = self.connect()
        try:
            conn.request(method, self.prefix + path, body=None if body is None else json.dumps(body),
                         headers=self.headers())
            return conn, conn.getresponse()
        except (OSError, http_client.HTTPException) as exc:
            conn.close()
            raise EndpointError('cannot reach %s%s: %s; check base_url and that the server runs and listens there'
                                % (self.base_url, path, exc))

    def call(self, method, path, body=None):
        """(status, parsed JSON or None, text) of a plain request."""
        conn, resp = self.open(method, path, body)
        try:
            text = resp.read().decode('utf-8', 'replace')
        except (OSError, http_client.HTTPException) as exc:
            raise EndpointError('%s%s: the answer broke off: %s' % (self.base_url, path, exc))
        finally:
            conn.close()
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return resp.status, data, text


def unauthorized(endpoint, path, status):
    what = 'the api_key was refused' if endpoint.api_key else 'the server wants an API key; set api_key'
    return EndpointError('%s%s answered %d: %s' % (endpoint.base_url, path, status, what))


def served_models(endpoint):
    status, data, text = endpoint.call('GET', '/v1/models')
    if status in (401, 403):
        raise unauthorized(endpoint, '/v1/models', status)
    if status != 200 or not isinstance(data, dict):
        raise EndpointError('%s/v1/models answered %d (%s): not an OpenAI-compatible server?'
                            % (endpoint.base_url, status, text[:200]))
    return [entry.get('id') for entry in data.get('data') or [] if isinstance(entry, dict)]


def choose_model(requested, served):
    if requested:
        if requested not in served:
            raise EndpointError('model %r is not served here; the server lists %s: set model to one of them'
                                % (requested, ', '.join(repr(m) for m in served) or 'none'))
        return requested
    if len(served) != 1:
        raise EndpointError('the server lists %d models (%s): set model to the one to benchmark'
                            % (len(served), ', '.join(repr(m) for m in served)))
    return served[0]


def detect_engine(endpoint):
    status, data, _text = endpoint.call('GET', '/props')
    if status == 200 and isinstance(data, dict) and 'default_generation_settings' in data:
        return 'llama.cpp'
    status, data, _text = endpoint.call('GET', '/version')
    if status == 200 and isinstance(data, dict) and 'version' in data:
        return 'vllm'
    return 'openai-compatible'


def token_counter(endpoint, model):
    """A function n_words -> tokens using the server's tokenizer, or None when it has none.

    llama-server: POST /tokenize {"content"} -> {"tokens": [...]} (tools/server/README.md);
    vLLM: POST /tokenize {"model", "prompt"} -> {"count"} (vllm/entrypoints/openai/api_server.py).
    """
    def llama(n_words):
        status, data, _text = endpoint.call('POST', '/tokenize', {'content': bench_stats.synthetic_prompt(n_words, 0)})
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get('tokens'), list):
            raise EndpointError('no llama.cpp tokenizer')
        return len(data['tokens'])

    def vllm(n_words):
        status, data, _text = endpoint.call('POST', '/tokenize', {'model': model, 'prompt': bench_stats.synthetic_prompt(n_words, 0)})
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get('count'), int):
            raise EndpointError('no vLLM tokenizer')
        return data['count']

    for counter in (llama, vllm):
        try:
            counter(4)
            return counter
        except EndpointError:
            continue
    return None


def stream_request(endpoint, body, clock=time.monotonic):
    """Send one streaming chat completion; return its StreamRecord (error set on failure)."""
    record = StreamRecord(clock())
    try:
        conn, resp = endpoint.open('POST', '/v1/chat/completions', body)
    except EndpointError as exc:
        record.error = str(exc)
        return record
    try:
        if resp.status != 200:
            text = resp.read().decode('utf-8', 'replace')
            if resp.status in (401, 403):
                record.error = str(unauthorized(endpoint, '/v1/chat/completions', resp.status))
            else:
                record.error = '/v1/chat/completions answered %d: %s' % (resp.status, text[:300])
            return record
        content_type = resp.getheader('Content-Type', '')
        if 'text/event-stream' not in content_type:
            resp.read()
            record.error = ('/v1/chat/completions answered a streaming request with %s, not an event stream: '
                            'the server does not stream, so TTFT and inter-token latency cannot be measured'
                            % (content_type or 'no Content-Type'))
            return record
        parser = SseParser()
        while not (record.done or record.error):
            data = resp.read1(65536) if hasattr(resp, 'read1') else resp.read(1)
            if not data:
                for event in parser.close():
                    record.add(event, clock())
                break
            now = clock()
            for event in parser.feed(data):
                record.add(event, now)
                if record.done or record.error:
                    break
        if not record.done and not record.error:
            record.error = 'the stream ended without [DONE]'
        record.end = clock()
    except SseError as exc:
        record.error = str(exc)
    except (OSError, http_client.HTTPException) as exc:
        record.error = 'the stream broke off: %s' % exc
    finally:
        conn.close()
    return record


def write_progress(path, line):
    if not path:
        return
    try:
        atomic_write(path, line + '\n', prefix='.progress-', suffix='')
    except OSError as exc:
        raise BenchInputError('progress_path %s cannot be written: %s' % (path, exc.strerror or exc))


class Benchmark:
    """The checks, the warm-up and the sweep."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.progress_lock = threading.Lock()
        self.levels_done = []
        self.warnings = []

    def body(self, model, prompt):
        body = {
            'model': model,
            'messages': [{'role': 'user', 'content': prompt}],
            'max_tokens': self.params['max_tokens'],
            'stream': True,
            'stream_options': {'include_usage': True},
        }
        if self.params['ignore_eos']:
            body['ignore_eos'] = True
        if self.params['greedy']:
            body['temperature'] = 0
        body.update(self.params['sampling'])
        return body

    def progress(self, line):
        with self.progress_lock:
            write_progress(self.params['progress_path'], line)

    def run_level(self, index, n_levels, level, endpoint, model, n_words, serial):
        total = bench_stats.requests_at_level(level, self.params['requests_per_level'])
        pending = list(range(total))
        results = []
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    if not pending:
                        return
                    number = pending.pop(0)
                prompt = bench_stats.synthetic_prompt(n_words, '%d-%d-%d' % (serial, level, number))
                record = stream_request(endpoint, self.body(model, prompt))
                with lock:
                    results.append(bench_stats.request_metrics(record))
                    done, failed = len(results), sum(1 for m in results if not m['ok'])
                self.progress('level %d/%d (concurrency %d): %d/%d requests done, %d failed'
                              % (index, n_levels, level, done, total, failed))

        self.progress('level %d/%d (concurrency %d): 0/%d requests done' % (index, n_levels, level, total))
        started = time.monotonic()
        threads = [threading.Thread(target=worker) for _stream in range(level)]
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            thread.join()
        return bench_stats.level_summary(level, results, time.monotonic() - started)

    def run(self):
        params = self.params
        started = time.monotonic()
        levels = bench_stats.validate_options(params['concurrency'], params['requests_per_level'], params['warmup_requests'],
                                              params['max_tokens'], params['prompt_tokens'], params['timeout_s'])
        problem = bench_stats.output_path_problem(params['progress_path'], 'progress_path')
        if problem:
            raise BenchInputError(problem)
        weights = self.read_weights()
        endpoint = Endpoint(params['base_url'], params['api_key'], params['timeout_s'])
        model = choose_model(params['model'], served_models(endpoint))
        engine = detect_engine(endpoint)
        counter = token_counter(endpoint, model)
        if counter is None:
            n_words, tokens, sizing = params['prompt_tokens'], None, 'estimate'
        else:
            n_words, tokens = bench_stats.fit_prompt_words(params['prompt_tokens'], counter)
            sizing = 'tokenizer'
        result = {
            'base_url': endpoint.base_url,
            'engine': engine,
            'model': model,
            'prompt': {'target_tokens': params['prompt_tokens'], 'tokens': tokens, 'words': n_words, 'sizing': sizing},
            'request': {'max_tokens': params['max_tokens'], 'ignore_eos': params['ignore_eos'],
                        'sampling': self.sampling_sent()},
            'levels': [],
            'model_weights': weights,
            'summary': [],
            'warnings': [],
        }
        # One request first: it checks streaming, usage and the key on the real path, and warms up.
        for number in range(max(params['warmup_requests'], 1)):
            self.progress('warm-up request %d/%d' % (number + 1, max(params['warmup_requests'], 1)))
            record = stream_request(endpoint, self.body(model, bench_stats.synthetic_prompt(n_words, 'warmup-%d' % number)))
            metrics = bench_stats.request_metrics(record)
            if not metrics['ok']:
                raise EndpointError('the first request failed: %s' % metrics['error'])
        if self.module.check_mode:
            result['duration_s'] = round(time.monotonic() - started, 3)
            return result
        for index, level in enumerate(levels):
            result['levels'].append(self.run_level(index + 1, len(levels), level, endpoint, model, n_words, index))
        result['warnings'] = bench_stats.sweep_warnings(result['levels'])
        if not any(level['requests_ok'] for level in result['levels']):
            raise EndpointError('every request of the sweep failed: %s' % '; '.join(result['warnings']))
        result['duration_s'] = round(time.monotonic() - started, 3)
        result['summary'] = [bench_stats.level_line(level) for level in result['levels']]
        self.progress('done: %d levels in %.1f s' % (len(levels), result['duration_s']))
        return result

    def sampling_sent(self):
        sent = dict(self.params['sampling'])
        if self.params['greedy']:
            sent['temperature'] = 0
        return sent

    def read_weights(self):
        path = self.params['gguf_path']
        if not path:
            return None
        from ansible_collections.gpulab.inference.plugins.module_utils import gguf
        try:
            files = [gguf.read_gguf(shard) for shard in bench_stats.split_gguf_paths(path)]
        except gguf.GGUFError as exc:
            raise BenchInputError('gguf_path: %s' % exc)
        return bench_stats.model_weights(files)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            base_url=dict(type='str', required=True),
            api_key=dict(type='str', default='', no_log=True),
            model=dict(type='str', default=''),
            prompt_tokens=dict(type='int', default=128, no_log=False),
            max_tokens=dict(type='int', default=128, no_log=False),
            ignore_eos=dict(type='bool', default=True),
            concurrency=dict(type='list', elements='int', default=[1, 2, 4]),
            requests_per_level=dict(type='int', default=4),
            warmup_requests=dict(type='int', default=1),
            timeout_s=dict(type='int', default=300),
            greedy=dict(type='bool', default=False),
            sampling=dict(type='dict', default={}),
            gguf_path=dict(type='path'),
            progress_path=dict(type='path'),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    bench = Benchmark(module)
    try:
        result = bench.run()
    except (BenchInputError, EndpointError) as exc:
        try:
            bench.progress('failed: %s' % exc)
        except BenchInputError:
            pass  # the progress file is what failed; the message says so
        module.fail_json(msg=str(exc))
    for warning in result['warnings']:
        module.warn(warning)
    module.exit_json(changed=False, benchmark=result)


if __name__ == '__main__':
    main()
