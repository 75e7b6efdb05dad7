# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server-sent events of OpenAI-style streaming chat completions, as pure functions.

No sockets in here: SseParser takes bytes as they arrive (cut anywhere) and returns whole
events; read_chat_chunk turns one event's data into what a benchmark counts; StreamRecord
collects the events of one request with their arrival times.

The formats, from the servers' code:
- llama.cpp tools/server/server-task.cpp (server_task_result_cmpl_final::to_json_oaicompat_chat_stream):
  deltas carry `content` or `reasoning_content`; with stream_options.include_usage the last
  chunk has an empty `choices` list and `usage`; the last chunk also carries llama-server's own
  `timings` (prompt_n, prompt_ms, predicted_n, predicted_ms, predicted_per_second, ...).
  tools/server/server-http.cpp / server-context.cpp: an error during the stream is sent as
  `data: {"error": {...}}`; keep-alive pings are SSE comments (lines starting with ':').
- vLLM vllm/entrypoints/openai/engine/protocol.py (DeltaMessage): the reasoning delta is
  `reasoning`, formerly `reasoning_content` (vllm-project/vllm issue 27755); usage likewise
  comes in a last chunk with empty `choices` when include_usage is set.
Both end the stream with `data: [DONE]`.
"""

from __future__ import annotations

import json

DONE = '[DONE]'
REASONING_FIELDS = ('reasoning_content', 'reasoning')


class SseError(ValueError):
    """The stream held something that is not a chat completion chunk."""


class SseParser:
    """Incremental SSE parser (WHATWG event-stream rules, the parts servers use).

    feed() takes any slice of the byte stream and returns the events completed by it, each a
    dict with `event` (None unless an `event:` field was sent) and `data` (the data lines
    joined by newlines). Comment lines (keep-alives) are counted in `comments`.
    """

    def __init__(self):
        self._buffer = b''
        self._data = []
        self._event = None
        self.comments = 0

    def feed(self, chunk):
        self._buffer += chunk
        events = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            end, width = cut
            line = self._buffer[:end].decode('utf-8', 'replace')
            self._buffer = self._buffer[end + width:]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def close(self):
        """Events left when the stream ends (a last event without its blank line)."""
        events = []
        if self._buffer:
            event = self._line(self._buffer.decode('utf-8', 'replace'))
            self._buffer = b''
            if event is not None:
                events.append(event)
        event = self._line('')
        if event is not None:
            events.append(event)
        return events

    def _line(self, line):
        if line == '':
            if not self._data and self._event is None:
                return None
            event = {'event': self._event, 'data': '\n'.join(self._data)}
            self._data, self._event = [], None
            return event
        if line.startswith(':'):
            self.comments += 1
            return None
        field, _sep, value = line.partition(':')
        if value.startswith(' '):
            value = value[1:]
        if field == 'data':
            self._data.append(value)
        elif field == 'event':
            self._event = value
        return None


def _line_end(buffer):
    """(index, width) of the first line end (CRLF, LF or CR) in buffer, or None."""
    lf = buffer.find(b'\n')
    cr = buffer.find(b'\r')
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if cr + 1 == len(buffer):
        return None  # a CR at the end may be the first half of CRLF: wait for more
    return cr, 2 if buffer[cr + 1:cr + 2] == b'\n' else 1


def read_chat_chunk(event):
    """What one SSE event of a streaming chat completion says.

    Returns a dict: kind (`done`, `error` or `chunk`); for chunks content and reasoning
    (text of this delta, '' when none), finish_reason, usage, timings (None when absent);
    for errors message. Raises SseError for data that is not JSON.
    """
    data = event['data']
    if data.strip() == DONE:
        return {'kind': 'done'}
    try:
        payload = json.loads(data)
    except ValueError:
        raise SseError('stream event is not JSON: %r' % data[:200])
    if not isinstance(payload, dict):
        raise SseError('stream event is not a JSON object: %r' % data[:200])
    if event.get('event') == 'error' or 'error' in payload:
        error = payload.get('error', payload)
        if isinstance(error, dict):
            message = error.get('message') or json.dumps(error)
        else:
            message = str(error)
        return {'kind': 'error', 'message': message}
    content, reasoning, finish_reason = '', '', None
    for choice in payload.get('choices') or []:
        delta = choice.get('delta') or {}
        content += delta.get('content') or ''
        for field in REASONING_FIELDS:
            if delta.get(field):
                reasoning += delta[field]
                break
        finish_reason = choice.get('finish_reason') or finish_reason
    return {
        'kind': 'chunk',
        'content': content,
        'reasoning': reasoning,
        'finish_reason': finish_reason,
        'usage': payload.get('usage') or None,
        'timings': payload.get('timings') or None,
    }


class StreamRecord:
    """One streamed request: the arrival time of every chunk that carried text, and the rest.

    add(event, t) with t in seconds on one clock; start is the time the request was sent.
    """

    def __init__(self, start):
        self.start = start
        self.token_times = []
        self.content_chunks = 0
        self.reasoning_chunks = 0
        self.content = ''
        self.reasoning = ''
        self.usage = None
        self.timings = None
        self.finish_reason = None
        self.error = None
        self.done = False
        self.end = None

    def add(self, event, now):
        chunk = read_chat_chunk(event)
        if chunk['kind'] == 'done':
            self.done = True
            self.end = now
            return chunk
        if chunk['kind'] == 'error':
            self.error = chunk['message']
            self.end = now
            return chunk
        if chunk['content'] or chunk['reasoning']:
            self.token_times.append(now)
        if chunk['content']:
            self.content_chunks += 1
            self.content += chunk['content']
        if chunk['reasoning']:
            self.reasoning_chunks += 1
            self.reasoning += chunk['reasoning']
        if chunk['usage']:
            self.usage = chunk['usage']
        if chunk['timings']:
            self.timings = chunk['timings']
        if chunk['finish_reason']:
            self.finish_reason = chunk['finish_reason']
        return chunk
