# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP side of llm_benchmark: one OpenAI-compatible endpoint, its checks, streamed requests
and the sweeps. The arithmetic is in bench_stats, the stream's format in sse; the module file
holds only its documentation and main().
"""

from __future__ import annotations

import http.client as http_client
import json
import os
import threading
import time

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


def choose_model(requested, served, where=''):
    if requested:
        if requested not in served:
            raise EndpointError('%smodel %r is not served here; the server lists %s: set model to one of them'
                                % (where, requested, ', '.join(repr(m) for m in served) or 'none'))
        return requested
    if len(served) != 1:
        raise EndpointError('%sthe server lists %d models (%s): set model to the one to benchmark'
                            % (where, len(served), ', '.join(repr(m) for m in served)))
    return served[0]


def compare_entries(compare, label):
    """The endpoints to compare, each with a label unique among them and the first endpoint's."""
    entries = []
    seen = set([label]) if label else set()
    for position, entry in enumerate(compare or []):
        if not entry.get('label') or not entry.get('base_url'):
            raise BenchInputError('compare entry %d: give label and base_url, got %r' % (position, dict(entry, api_key='***')))
        if entry['label'] in seen:
            raise BenchInputError('compare entry %d: label %r is used twice; give each endpoint its own'
                                  % (position, entry['label']))
        seen.add(entry['label'])
        bench_stats.parse_base_url(entry['base_url'])
        entries.append({'label': entry['label'], 'base_url': entry['base_url'], 'api_key': entry.get('api_key') or '',
                        'model': entry.get('model') or ''})
    return entries


def detect_engine(endpoint):
    status, data, _text = endpoint.call('GET', '/props')
    if status == 200 and isinstance(data, dict) and 'default_generation_settings' in data:
        return 'llama.cpp'
    status, data, _text = endpoint.call('GET', '/version')
    if status == 200 and isinstance(data, dict) and 'version' in data:
        return 'vllm'
    return 'openai-compatible'


def token_counter(endpoint, model):
    """A function text -> tokens using the server's tokenizer, or None when it has none.

    llama-server: POST /tokenize {"content"} -> {"tokens": [...]} (tools/server/README.md);
    vLLM: POST /tokenize {"model", "prompt", "add_special_tokens"} -> {"count"}
    (vllm/entrypoints/openai/api_server.py). Both count the text alone, without the chat template
    or a BOS token (llama-server's add_special defaults to false; vLLM's must be turned off, as
    vllm bench serve does when it aligns its prompts).
    """
    def llama(text):
        status, data, _text = endpoint.call('POST', '/tokenize', {'content': text})
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get('tokens'), list):
            raise EndpointError('no llama.cpp tokenizer')
        return len(data['tokens'])

    def vllm(text):
        status, data, _text = endpoint.call('POST', '/tokenize', {'model': model, 'prompt': text, 'add_special_tokens': False})
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get('count'), int):
            raise EndpointError('no vLLM tokenizer')
        return data['count']

    for counter in (llama, vllm):
        try:
            counter('amber basalt cedar delta')
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
    """The checks, the prompts, the warm-up and the sweeps (concurrency, then request rates).

    params: llm_benchmark's options; check_mode: stop after the warm-up. Timing is on
    time.monotonic; the sweep's window is also kept in epoch seconds, to cut the GPU samplers'
    traces (their power draw) to it.
    """

    def __init__(self, params, check_mode=False, entropy=os.urandom, clock=time.monotonic):
        self.params = params
        self.check_mode = check_mode
        self.entropy = entropy
        self.clock = clock
        self.progress_lock = threading.Lock()
        self.records = []
        self.endpoint_label = ''

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

    def prompts(self, labels, counter, seed):
        """label -> (text, words, tokens) for every request of the run, sized before any load so
        that the tokenizer's requests do not fall inside a level."""
        target = self.params['prompt_tokens']
        sized = {}
        guess = None
        for label in labels:
            if counter is None:
                sized[label] = bench_stats.estimated_prompt(target, seed, label)
            else:
                sized[label] = bench_stats.size_prompt(target, counter, seed, label, guess)
                guess = sized[label][1]
        return sized

    def send(self, endpoint, model, prompts, label):
        return bench_stats.request_metrics(stream_request(endpoint, self.body(model, prompts[label][0]), self.clock))

    def keep(self, level, number, label, metrics, prompts):
        record = bench_stats.request_record(level, number, label, metrics, prompts[label][2])
        record['endpoint'] = self.endpoint_label
        self.records.append(record)

    def run_level(self, index, n_levels, level, endpoint, model, prompts, seed, prefix=''):
        total = bench_stats.requests_at_level(level, self.params['requests_per_level'])
        pending = list(range(total))
        results = []
        lock = threading.Lock()
        name = 'concurrency %d' % level
        where = '%s, %s' % (prefix, name) if prefix else name

        def worker():
            while True:
                with lock:
                    if not pending:
                        return
                    number = pending.pop(0)
                self.send_and_keep(endpoint, model, prompts, (name, number, 'c%d-%d' % (level, number)), results, lock,
                                   'level %d/%d (%s)' % (index, n_levels, where), total)

        self.progress('level %d/%d (%s): 0/%d requests done' % (index, n_levels, where, total))
        started = self.clock()
        threads = [threading.Thread(target=worker) for _stream in range(level)]
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            thread.join()
        return self.summary(level, results, self.clock() - started, seed)

    def send_and_keep(self, endpoint, model, prompts, request, results, lock, level_text, total):
        """One request of a level, its record kept and the level's progress said; request is
        (level name, number, label). The concurrency and the rate sweeps share it."""
        name, number, label = request
        metrics = self.send(endpoint, model, prompts, label)
        with lock:
            results.append(metrics)
            self.keep(name, number, label, metrics, prompts)
            done, failed = len(results), sum(1 for m in results if not m['ok'])
        self.progress('%s: %d/%d requests done, %d failed' % (level_text, done, total, failed))

    def run_rate(self, index, n_levels, rate, endpoint, model, prompts, seed, prefix=''):
        """Requests sent at Poisson arrival times, each on its own thread, however many are in flight."""
        total = max(self.params['requests_per_level'], 2)
        arrivals = bench_stats.poisson_arrivals(total, rate, seed)
        results = []
        lock = threading.Lock()
        name = 'rate %s req/s' % rate
        where = '%s, %s' % (prefix, name) if prefix else name

        def request(number):
            self.send_and_keep(endpoint, model, prompts, (name, number, 'r%s-%d' % (rate, number)), results, lock,
                               'level %d/%d (%s)' % (index, n_levels, where), total)

        self.progress('level %d/%d (%s): 0/%d requests done' % (index, n_levels, where, total))
        started = self.clock()
        threads = []
        for number, at in enumerate(arrivals):
            delay = started + at - self.clock()
            if delay > 0:
                time.sleep(delay)
            thread = threading.Thread(target=request, args=(number,))
            thread.daemon = True
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        return self.summary(None, results, self.clock() - started, seed, rate)

    def summary(self, level, results, wall_s, seed, rate=None):
        return bench_stats.level_summary(level, results, wall_s, self.params['slo_ttft_s'], self.params['slo_tpot_ms'],
                                         seed, rate)

    def labels(self, levels, rates):
        warmup = ['warmup-%d' % n for n in range(max(self.params['warmup_requests'], 1))]
        sweep = ['c%d-%d' % (level, n) for level in levels
                 for n in range(bench_stats.requests_at_level(level, self.params['requests_per_level']))]
        sweep += ['r%s-%d' % (rate, n) for rate in rates for n in range(max(self.params['requests_per_level'], 2))]
        return warmup, sweep

    def warm_up(self, endpoint, model, prompts, warmup, name=''):
        """The warm-up checks streaming, usage and the key on the real path first, and warms up."""
        for number, label in enumerate(warmup):
            self.progress('warm-up request %d/%d%s' % (number + 1, len(warmup), ' (%s)' % name if name else ''))
            metrics = self.send(endpoint, model, prompts, label)
            if not metrics['ok']:
                raise EndpointError('%sthe first request failed: %s' % ('compare %s: ' % name if name else '', metrics['error']))

    def sweep(self, endpoint, model, prompts, seed, levels, rates, name=''):
        """Both sweeps against one endpoint: (levels, rates, window in epoch seconds)."""
        window_start = time.time()
        n_levels = len(levels) + len(rates)
        done_levels, done_rates = [], []
        for index, level in enumerate(levels):
            done_levels.append(self.run_level(index + 1, n_levels, level, endpoint, model, prompts, seed, name))
        for index, rate in enumerate(rates):
            done_rates.append(self.run_rate(len(levels) + index + 1, n_levels, rate, endpoint, model, prompts, seed, name))
        return done_levels, done_rates, (round(window_start, 3), round(time.time(), 3))

    def run(self):
        params = self.params
        started = self.clock()
        rates = list(params['request_rates'] or [])
        levels = bench_stats.validate_options(params['concurrency'], params['requests_per_level'], params['warmup_requests'],
                                              params['max_tokens'], params['prompt_tokens'], params['timeout_s'],
                                              rates, params['slo_ttft_s'], params['slo_tpot_ms'])
        compare = compare_entries(params['compare'], params['label'])
        problem = bench_stats.output_path_problem(params['progress_path'], 'progress_path')
        if problem:
            raise BenchInputError(problem)
        weights = self.read_weights()
        endpoint = Endpoint(params['base_url'], params['api_key'], params['timeout_s'])
        model = choose_model(params['model'], served_models(endpoint))
        engine = detect_engine(endpoint)
        others = []
        for entry in compare:
            other = Endpoint(entry['base_url'], entry['api_key'], params['timeout_s'])
            others.append((entry, other, choose_model(entry['model'], served_models(other), 'compare %s: ' % entry['label'])))
        counter = token_counter(endpoint, model)
        seed = params['prompt_seed'] if params['prompt_seed'] is not None else bench_stats.new_seed(self.entropy(8))
        warmup, sweep = self.labels(levels, [] if self.check_mode else rates)
        self.progress('sizing %d prompts of %d tokens' % (len(warmup) + len(sweep), params['prompt_tokens']))
        prompts = self.prompts(warmup + ([] if self.check_mode else sweep), counter, seed)
        self.endpoint_label = params['label'] or engine
        result = {
            'base_url': endpoint.base_url,
            'engine': engine,
            'model': model,
            'label': self.endpoint_label,
            'prompt': prompt_summary(params['prompt_tokens'], prompts, seed, params['prompt_seed'] is not None, counter),
            'request': {'max_tokens': params['max_tokens'], 'ignore_eos': params['ignore_eos'],
                        'sampling': self.sampling_sent()},
            'objective': {'slo_ttft_s': params['slo_ttft_s'], 'slo_tpot_ms': params['slo_tpot_ms']},
            'levels': [],
            'rates': [],
            'compare': [],
            'model_weights': weights,
            'summary': [],
            'warnings': [],
            'conditions': {'profile': params['profile'] or None, 'warmup_requests': len(warmup),
                           'requests_per_level': params['requests_per_level'], 'request_rates': rates,
                           'concurrency': levels, 'cpu_count': os.cpu_count(), 'load_average_before': load_average()},
            'requests': [],
        }
        self.warm_up(endpoint, model, prompts, warmup)
        if self.check_mode:
            result['duration_s'] = round(self.clock() - started, 3)
            return result
        result['levels'], result['rates'], window = self.sweep(endpoint, model, prompts, seed, levels, rates)
        result['conditions'].update({'window_start_epoch': window[0], 'window_end_epoch': window[1],
                                     'load_average_after': load_average()})
        result['warnings'] = bench_stats.sweep_warnings(result['levels'] + result['rates'])
        if not any(level['requests_ok'] for level in result['levels'] + result['rates']):
            raise EndpointError('every request of the sweep failed: %s' % '; '.join(result['warnings']))
        # The same prompts, sized on the first endpoint's tokenizer, against every other endpoint in
        # turn: each server sees each prompt once, so none is served from a cache.
        for entry, other, other_model in others:
            self.endpoint_label = entry['label']
            name = '%s: ' % entry['label']
            self.warm_up(other, other_model, prompts, warmup, entry['label'])
            compared = {'label': entry['label'], 'base_url': other.base_url, 'engine': detect_engine(other),
                        'model': other_model}
            compared['levels'], compared['rates'], window = self.sweep(other, other_model, prompts, seed, levels, rates,
                                                                       entry['label'])
            compared['window_start_epoch'], compared['window_end_epoch'] = window
            compared['warnings'] = [name + w for w in bench_stats.sweep_warnings(compared['levels'] + compared['rates'])]
            compared['summary'] = [name + bench_stats.level_line(lv) for lv in compared['levels'] + compared['rates']]
            result['compare'].append(compared)
            result['warnings'] += compared['warnings']
        result['requests'] = list(self.records)  # in the order the answers ended
        result['duration_s'] = round(self.clock() - started, 3)
        result['summary'] = [bench_stats.level_line(level) for level in result['levels'] + result['rates']]
        for compared in result['compare']:
            result['summary'] += compared['summary']
        self.progress('done: %d levels in %.1f s' % ((len(levels) + len(rates)) * (1 + len(others)), result['duration_s']))
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


def load_average():
    """The host's 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def prompt_summary(target, prompts, seed, seed_given, counter):
    """What the report says of the prompts: the seed, how they were sized and how close they came."""
    tokens = [entry[2] for entry in prompts.values() if entry[2] is not None]
    words = [entry[1] for entry in prompts.values()]
    return {
        'target_tokens': target,
        'seed': seed,
        'seed_source': 'bench_prompt_seed' if seed_given else 'fresh',
        'sizing': 'tokenizer' if counter is not None else 'estimate',
        'prompts': len(prompts),
        'tokens': int(round(bench_stats.mean(tokens))) if tokens else None,
        'tokens_min': min(tokens) if tokens else None,
        'tokens_max': max(tokens) if tokens else None,
        'max_error_tokens': max(abs(t - target) for t in tokens) if tokens else None,
        'words': int(round(bench_stats.mean(words))) if words else None,
    }
