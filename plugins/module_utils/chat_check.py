# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One chat completion through an OpenAI-compatible server and its judgement: the check that a
deployed llama-server or vLLM answers (roles llama_server and vllm_server, playbooks/report.yml).

The HTTP goes through bench_client's Endpoint (the benchmark's client: one connection per request,
the API key as a bearer token); what a reply means is decided by pure functions over the parsed
JSON, so tests feed them replies and need no server.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpulab.inference.plugins.module_utils import bench_client


class ChatCheckError(Exception):
    """The server did not answer as a serving one must; the message names it and what came back."""


def chat_body(prompt, max_tokens, model=''):
    """The request: the prompt as the user's one message; the model only where one is named
    (llama-server serves the one it loaded whatever the request says, vLLM wants its id)."""
    body = {'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': max_tokens}
    if model:
        body = dict({'model': model}, **body)
    return body


def first_model(data, name):
    """The id of the first model /v1/models lists; an error naming the server when it lists none."""
    entries = data.get('data') if isinstance(data, dict) else None
    ids = [entry.get('id') for entry in entries or [] if isinstance(entry, dict) and entry.get('id')]
    if not ids:
        raise ChatCheckError('%s lists no model at /v1/models: %s' % (name, data if data is not None else {}))
    return ids[0]


def _whole(value):
    # As Jinja's `int` filter read it before: anything that is not a whole number counts as 0.
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def completion_summary(data, name):
    """What one chat completion gave: tokens (usage.completion_tokens), tok_s (llama-server's
    timings.predicted_per_second, None without timings), answer and reasoning (vLLM's reasoning
    parser writes `reasoning`, older versions and llama-server `reasoning_content`).

    A reply without tokens is an error naming the server and quoting the reply.
    """
    reply = data if isinstance(data, dict) else {}
    usage = reply.get('usage') if isinstance(reply.get('usage'), dict) else {}
    tokens = _whole(usage.get('completion_tokens', 0))
    if tokens <= 0:
        raise ChatCheckError('%s answered without tokens: %s' % (name, data if data is not None else {}))
    choices = reply.get('choices') if isinstance(reply.get('choices'), list) else []
    message = choices[0].get('message') if choices and isinstance(choices[0], dict) else None
    message = message if isinstance(message, dict) else {}
    timings = reply.get('timings') if isinstance(reply.get('timings'), dict) else {}
    tok_s = timings.get('predicted_per_second')
    if isinstance(tok_s, bool) or not isinstance(tok_s, (int, float)):
        tok_s = None
    return {
        'tokens': tokens,
        'tok_s': tok_s,
        'answer': str(message.get('content') or ''),
        'reasoning': str(message.get('reasoning') or message.get('reasoning_content') or ''),
    }


def _answered(endpoint, status, data, text, path, name):
    if status in (401, 403):
        raise bench_client.unauthorized(endpoint, path, status)
    if status != 200:
        raise ChatCheckError('%s answered %s%s with %d: %s' % (name, endpoint.base_url, path, status, text[:500]))
    return data


def check(endpoint, prompt, max_tokens, name, model='', find_model=False, send=True):
    """Ask endpoint (a bench_client.Endpoint) one question: with find_model the model is the first
    /v1/models lists; without send only that model is found. Returns {model, sent} plus
    completion_summary's fields (None where nothing was sent).

    Raises ChatCheckError, or bench_client.EndpointError when the server cannot be reached or
    refuses the key.
    """
    if find_model:
        status, data, text = endpoint.call('GET', '/v1/models')
        model = first_model(_answered(endpoint, status, data, text, '/v1/models', name), name)
    result = {'model': model or None, 'sent': bool(send), 'tokens': None, 'tok_s': None, 'answer': None,
              'reasoning': None}
    if not send:
        return result
    path = '/v1/chat/completions'
    status, data, text = endpoint.call('POST', path, chat_body(prompt, max_tokens, model))
    result.update(completion_summary(_answered(endpoint, status, data, text, path, name), name))
    return result
