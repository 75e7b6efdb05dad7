"""One chat completion and its judgement (chat_check): the request, the model from /v1/models, tokens,
tok/s, answer and reasoning from llama-server's and vLLM's replies, and the failures named; the HTTP
against a server on 127.0.0.1 that answers what each test gives it, and against the OpenAI double."""

import json
from http.server import BaseHTTPRequestHandler

import pytest
from doubles.openai_stream_server import LoopbackServer, OpenAIDouble

from ansible_collections.gpulab.inference.plugins.module_utils import bench_client
from ansible_collections.gpulab.inference.plugins.module_utils.chat_check import (
    ChatCheckError,
    chat_body,
    check,
    completion_summary,
    first_model,
)

# llama-server's non-streamed answer (tools/server: usage and timings beside choices), cut down.
LLAMA_REPLY = {
    'choices': [{'finish_reason': 'length', 'index': 0, 'message': {'role': 'assistant', 'content': ' Hello!'}}],
    'usage': {'completion_tokens': 8, 'prompt_tokens': 14, 'total_tokens': 22},
    'timings': {'predicted_n': 8, 'predicted_ms': 191.8, 'predicted_per_second': 41.71011470281543},
}
# vLLM with a reasoning parser: the thinking in `reasoning`, no timings.
VLLM_REPLY = {
    'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'Hello', 'reasoning': 'The user wants a word.'}}],
    'usage': {'completion_tokens': 12, 'prompt_tokens': 10, 'total_tokens': 22},
}


class Canned(LoopbackServer):
    """A server on 127.0.0.1 answering each path with (status, JSON) and recording the requests."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, body=None):
                canned.requests.append((self.command, self.path, self.headers.get('Authorization'), body))
                status, payload = canned.answers[self.path]
                data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer()

            def do_POST(self):
                self._answer(json.loads(self.rfile.read(int(self.headers.get('Content-Length') or 0))))

        super().__init__(Handler)


def test_the_request_names_a_model_only_where_one_is_given():
    assert chat_body('Say hello.', 8) == {'messages': [{'role': 'user', 'content': 'Say hello.'}], 'max_tokens': 8}
    assert chat_body('Say hello.', 64, 'minimax-m2') == {
        'model': 'minimax-m2', 'messages': [{'role': 'user', 'content': 'Say hello.'}], 'max_tokens': 64}


def test_llama_server_reply_gives_tokens_and_its_speed():
    assert completion_summary(LLAMA_REPLY, 'llama-server on node-a') == {
        'tokens': 8, 'tok_s': 41.71011470281543, 'answer': ' Hello!', 'reasoning': ''}


def test_vllm_reply_gives_the_reasoning_and_no_speed():
    assert completion_summary(VLLM_REPLY, 'vLLM on node-a') == {
        'tokens': 12, 'tok_s': None, 'answer': 'Hello', 'reasoning': 'The user wants a word.'}
    older = {'choices': [{'message': {'content': None, 'reasoning_content': 'thinking'}}], 'usage': {'completion_tokens': '3'}}
    assert completion_summary(older, 'vLLM on node-a') == {'tokens': 3, 'tok_s': None, 'answer': '', 'reasoning': 'thinking'}


@pytest.mark.parametrize('reply', [
    {'choices': [], 'usage': {'completion_tokens': 0}},
    {'choices': [{'message': {'content': ''}}]},
    {'usage': {'completion_tokens': 'many'}},
    [],
    None,
])
def test_a_reply_without_tokens_is_refused_naming_the_server_and_quoting_it(reply):
    with pytest.raises(ChatCheckError) as caught:
        completion_summary(reply, 'llama-server on node-a')
    assert str(caught.value) == 'llama-server on node-a answered without tokens: %s' % (reply if reply is not None else {})


def test_first_model_or_an_error_quoting_the_list():
    assert first_model({'data': [{'id': 'minimax-m2'}, {'id': 'other'}]}, 'vLLM on node-a') == 'minimax-m2'
    with pytest.raises(ChatCheckError, match=r"^vLLM on node-a lists no model at /v1/models: \{'object': 'list', 'data': \[\]\}$"):
        first_model({'object': 'list', 'data': []}, 'vLLM on node-a')


def test_check_against_llama_server_sends_the_key_and_no_model():
    with Canned({'/v1/chat/completions': (200, LLAMA_REPLY)}) as server:
        result = check(bench_client.Endpoint(server.base_url, 'sk-lab', 5), 'Say hello.', 8, 'llama-server on node-a')
    assert result == {'model': None, 'sent': True, 'tokens': 8, 'tok_s': 41.71011470281543, 'answer': ' Hello!',
                      'reasoning': ''}
    assert server.requests == [('POST', '/v1/chat/completions', 'Bearer sk-lab',
                                {'messages': [{'role': 'user', 'content': 'Say hello.'}], 'max_tokens': 8})]


def test_check_against_vllm_asks_the_model_it_lists():
    with Canned({'/v1/models': (200, {'object': 'list', 'data': [{'id': 'minimax-m2'}]}),
                 '/v1/chat/completions': (200, VLLM_REPLY)}) as server:
        result = check(bench_client.Endpoint(server.base_url, '', 5), 'Say hello.', 64, 'vLLM on node-a', find_model=True)
    assert (result['model'], result['tokens'], result['reasoning']) == ('minimax-m2', 12, 'The user wants a word.')
    assert [r[:3] for r in server.requests] == [('GET', '/v1/models', None), ('POST', '/v1/chat/completions', None)]
    assert server.requests[1][3]['model'] == 'minimax-m2'


def test_check_without_send_only_finds_the_model():
    with Canned({'/v1/models': (200, {'data': [{'id': 'm'}]})}) as server:
        result = check(bench_client.Endpoint(server.base_url, '', 5), 'x', 1, 'vLLM on node-a', find_model=True, send=False)
    assert result == {'model': 'm', 'sent': False, 'tokens': None, 'tok_s': None, 'answer': None, 'reasoning': None}
    assert [r[1] for r in server.requests] == ['/v1/models']


def test_check_fails_on_a_status_other_than_200_or_a_refused_key():
    with Canned({'/v1/chat/completions': (500, {'error': {'message': 'decode failed'}})}) as server:
        with pytest.raises(ChatCheckError, match=r"^llama-server on node-a answered http://127\.0\.0\.1:[0-9]+/v1/chat/"
                                                 r"completions with 500: .*decode failed"):
            check(bench_client.Endpoint(server.base_url, '', 5), 'x', 1, 'llama-server on node-a')
    with OpenAIDouble(api_key='right') as server:
        with pytest.raises(bench_client.EndpointError, match='answered 401: the api_key was refused'):
            check(bench_client.Endpoint(server.base_url, 'wrong', 5), 'x', 1, 'vLLM on node-a', find_model=True)


def test_check_against_the_openai_double_with_its_key():
    with OpenAIDouble(api_key='right', model='double-model') as server:
        result = check(bench_client.Endpoint(server.base_url, 'right', 5), 'Name three colours.', 4, 'the head',
                       find_model=True)
    assert (result['model'], result['tokens'], result['answer']) == ('double-model', 4, 'x x x x ')
    assert server.requests[0]['model'] == 'double-model' and server.requests[0]['max_tokens'] == 4


def test_an_unreachable_server_is_named():
    with Canned({}) as server:
        url = server.base_url
    with pytest.raises(bench_client.EndpointError, match='cannot reach http://127.0.0.1:[0-9]+/v1/chat/completions'):
        check(bench_client.Endpoint(url, '', 2), 'x', 1, 'the head')
