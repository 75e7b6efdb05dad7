# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE: a small OpenAI-style chat completion server, not a model server.

It replays the streaming format of llama-server (llama.cpp tools/server/server-task.cpp,
to_json_oaicompat_chat_stream; field names as in /work/shared/fixtures/llama.cpp-h200/chat.json
and timings.json) with delays the test controls, so that TTFT and inter-token arithmetic can
be checked against known values:

- a first chunk with only the role, sent at once (it carries no text and must not count);
- `reasoning_tokens` chunks on the reasoning channel (`reasoning_content`, or `reasoning` as
  vLLM names it), then the answer's chunks, one token each, `itl_s` apart, after `ttft_s`;
- usage only in a last chunk with empty `choices`, llama-server's `timings` beside it;
- keep-alive comments (`: ping`) between chunks, events written in two halves so that reads
  cut them anywhere, chunked transfer encoding as llama-server uses;
- modes: `stream` (default), `nonstream` (answers JSON even when asked to stream),
  `error` (an error event in the middle of the stream), `no_usage` (never sends usage);
- 401 for a wrong key, /v1/models, llama-server's /props and /tokenize (vLLM's with
  tokenizer='vllm', a BOS token counted unless add_special_tokens is false): a word of up to six
  letters is one token, a longer one two (so that sizing a prompt has to count, not assume),
  and the chat template adds TEMPLATE_TOKENS around the user's message in usage.prompt_tokens;
- a prompt cache as llama-server's: the longest common prefix of a prompt's tokens with any
  earlier prompt (at most all but one token) is reported as `timings.cache_n` and
  `usage.prompt_tokens_details.cached_tokens`.

Listens on 127.0.0.1 only. Use it in-process:

    with OpenAIDouble(ttft_s=0.2, itl_s=0.02) as server:
        server.base_url  # http://127.0.0.1:<port>

or as a program on a lab node (the "echo" engine of tests/engines, a third engine added to the
engine table by a test only): python3 openai_stream_server.py PORT [MODEL], on 127.0.0.1:PORT until
SIGTERM, with llama-server's /health.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


TEMPLATE_HEAD = ['<|im_start|>', 'user', '\n']
TEMPLATE_TAIL = ['<|im_end|>', '\n']
TEMPLATE_TOKENS = len(TEMPLATE_HEAD) + len(TEMPLATE_TAIL)


def tokenize(text):
    """The double's tokenizer: words of up to six letters are one token, longer ones two."""
    tokens = []
    for piece in re.findall(r'\w+|[^\w\s]', text):
        tokens.extend([piece[:6], piece[6:]] if len(piece) > 6 else [piece])
    return tokens


def common_prefix(first, second):
    count = 0
    for a, b in zip(first, second):
        if a != b:
            break
        count += 1
    return count


class LoopbackServer:
    """An HTTP server on 127.0.0.1 (a free port) run in a thread for the length of a `with` block."""

    def __init__(self, handler, port=0):
        self.httpd = ThreadingHTTPServer(('127.0.0.1', port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self):
        return 'http://127.0.0.1:%d' % self.httpd.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


class OpenAIDouble(LoopbackServer):
    def __init__(self, ttft_s=0.05, itl_s=0.01, api_key='', model='double-model', mode='stream',
                 reasoning_tokens=0, reasoning_field='reasoning_content', keepalive=True, timings=True,
                 tokenizer=True, props=True, port=0):
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.api_key = api_key
        self.model = model
        self.mode = mode
        self.reasoning_tokens = reasoning_tokens
        self.reasoning_field = reasoning_field
        self.keepalive = keepalive
        self.timings = timings
        self.tokenizer = tokenizer
        self.props = props
        self.requests = []
        self.cache = []
        self.tokenize_requests = []
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        super().__init__(_handler(self), port)


def _chunk(choices, **extra):
    payload = {'choices': choices, 'created': int(time.time()), 'id': 'chatcmpl-double',
               'model': 'double-model', 'system_fingerprint': 'double', 'object': 'chat.completion.chunk'}
    payload.update(extra)
    return payload


def _handler(double):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *args):
            pass

        def _authorized(self):
            if not double.api_key:
                return True
            if self.headers.get('Authorization') == 'Bearer %s' % double.api_key:
                return True
            self._json(401, {'error': {'code': 401, 'message': 'Invalid API Key', 'type': 'authentication_error'}})
            return False

        def _json(self, status, payload):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header('Content-Type', 'application/json; charset=utf-8')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self):
            length = int(self.headers.get('Content-Length') or 0)
            return json.loads(self.rfile.read(length) or b'{}')

        def do_GET(self):
            if not self._authorized():
                return
            if self.path == '/v1/models':
                self._json(200, {'object': 'list', 'data': [{'id': double.model, 'object': 'model'}]})
            elif self.path == '/health':
                self._json(200, {'status': 'ok'})
            elif self.path == '/props' and double.props:
                self._json(200, {'default_generation_settings': {'params': {'temperature': 0.8}}})
            else:
                self._json(404, {'error': {'code': 404, 'message': 'File Not Found'}})

        def do_POST(self):
            if not self._authorized():
                return
            body = self._body()
            if self.path == '/tokenize' and double.tokenizer == 'vllm':
                # vLLM's request and answer (vllm/entrypoints/openai/protocol.py TokenizeCompletionRequest)
                if 'prompt' not in body:
                    self._json(400, {'object': 'error', 'message': 'prompt: Field required', 'code': 400})
                    return
                double.tokenize_requests.append(body)
                tokens = tokenize(body['prompt'])
                if body.get('add_special_tokens', True):
                    tokens = ['<s>'] + tokens
                self._json(200, {'count': len(tokens), 'max_model_len': 4096, 'tokens': list(range(len(tokens)))})
                return
            if self.path == '/tokenize' and double.tokenizer:
                self._json(200, {'tokens': list(range(len(tokenize(body.get('content', '')))))})
                return
            if self.path != '/v1/chat/completions':
                self._json(404, {'error': {'code': 404, 'message': 'File Not Found'}})
                return
            with double.lock:
                double.requests.append(body)
                double.active += 1
                double.max_active = max(double.max_active, double.active)
            try:
                self._complete(body)
            finally:
                with double.lock:
                    double.active -= 1

        def _complete(self, body):
            n_out = int(body.get('max_tokens') or 16)
            prompt = TEMPLATE_HEAD + tokenize(body['messages'][-1]['content']) + TEMPLATE_TAIL
            n_prompt = len(prompt)
            with double.lock:
                cached = min(max([common_prefix(prompt, seen) for seen in double.cache] or [0]), n_prompt - 1)
                double.cache.append(prompt)
            if not body.get('stream') or double.mode == 'nonstream':
                time.sleep(double.ttft_s + double.itl_s * (n_out - 1))
                self._json(200, {'choices': [{'finish_reason': 'length', 'index': 0,
                                              'message': {'role': 'assistant', 'content': 'x ' * n_out}}],
                                 'usage': {'completion_tokens': n_out, 'prompt_tokens': n_prompt,
                                           'total_tokens': n_out + n_prompt}})
                return
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            self.send_header('Transfer-Encoding', 'chunked')
            self.end_headers()
            self._event(_chunk([{'finish_reason': None, 'index': 0, 'delta': {'role': 'assistant', 'content': None}}]))
            start = time.monotonic()
            time.sleep(double.ttft_s)
            first = time.monotonic()
            n_reason = min(double.reasoning_tokens, n_out)
            for i in range(n_out):
                if i:
                    time.sleep(double.itl_s)
                if double.mode == 'error' and i == n_out // 2:
                    self._event({'error': {'code': 500, 'message': 'double: decode failed', 'type': 'server_error'}})
                    self._end()
                    return
                delta = {double.reasoning_field: 'think%d ' % i} if i < n_reason else {'content': 'tok%d ' % i}
                last = i == n_out - 1
                self._event(_chunk([{'finish_reason': 'length' if last else None, 'index': 0, 'delta': delta}]))
                if double.keepalive and i % 3 == 0:
                    self._write(b': ping\n\n')
            end = time.monotonic()
            extra = {}
            if double.mode != 'no_usage':
                extra['usage'] = {'completion_tokens': n_out, 'prompt_tokens': n_prompt, 'total_tokens': n_out + n_prompt,
                                  'prompt_tokens_details': {'cached_tokens': cached}}
            if double.timings:
                predicted_ms = (end - first) * 1000.0
                prompt_ms = (first - start) * 1000.0
                extra['timings'] = {'cache_n': cached, 'prompt_n': n_prompt - cached, 'prompt_ms': prompt_ms,
                                    'prompt_per_second': (n_prompt - cached) / (prompt_ms / 1000.0),
                                    'predicted_n': n_out, 'predicted_ms': predicted_ms,
                                    'predicted_per_second': n_out / (predicted_ms / 1000.0)}
            self._event(_chunk([], **extra))
            self._write(b'data: [DONE]\n\n')
            self._end()

        def _event(self, payload):
            data = ('data: %s\n\n' % json.dumps(payload)).encode()
            half = len(data) // 2
            self._write(data[:half])
            self._write(data[half:])

        def _write(self, data):
            self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
            self.wfile.flush()

        def _end(self):
            self.wfile.write(b'0\r\n\r\n')
            self.wfile.flush()
            self.close_connection = True

    return Handler


def serve(argv):
    """Serve on 127.0.0.1:argv[0] (model name argv[1]) until SIGTERM or SIGINT."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    model = argv[1] if len(argv) > 1 else 'double-model'
    with OpenAIDouble(ttft_s=0.02, itl_s=0.005, model=model, port=int(argv[0])) as server:
        print('serving on %s' % server.base_url, flush=True)
        stop.wait()
    return 0


if __name__ == '__main__':
    sys.exit(serve(sys.argv[1:]))
