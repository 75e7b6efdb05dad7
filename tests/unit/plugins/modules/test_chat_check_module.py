"""gpulab.inference.chat_check: the module's result and failures against the OpenAI double on 127.0.0.1,
and the API key kept out of its output."""

from doubles.openai_stream_server import OpenAIDouble

from ansible_collections.gpulab.inference.plugins.modules import chat_check
import module_harness
from module_harness import ExitJson, FailJson


def run(args):
    return module_harness.run_module(chat_check.main, args, {}, None)


def test_one_completion_with_the_key_and_the_model_found():
    with OpenAIDouble(api_key='sk-lab') as server:
        result = run({'base_url': server.base_url, 'api_key': 'sk-lab', 'prompt': 'Say hello in one word.',
                      'max_tokens': 3, 'find_model': True, 'name': 'vLLM on node-a'})
    assert result.kind is ExitJson
    assert {k: result.result[k] for k in ('changed', 'model', 'sent', 'tokens', 'tok_s', 'answer', 'reasoning')} == {
        'changed': False, 'model': 'double-model', 'sent': True, 'tokens': 3, 'tok_s': None, 'answer': 'x x x ',
        'reasoning': ''}
    assert server.requests == [{'model': 'double-model', 'messages': [{'role': 'user', 'content': 'Say hello in one word.'}],
                                'max_tokens': 3}]


def test_a_refused_key_fails_naming_it():
    with OpenAIDouble(api_key='sk-lab') as server:
        result = run({'base_url': server.base_url, 'api_key': 'sk-wrong', 'prompt': 'x'})
    assert result.kind is FailJson
    assert result.result['msg'].endswith('/v1/chat/completions answered 401: the api_key was refused')


def test_bad_input_is_refused_before_any_request():
    result = run({'base_url': 'http://127.0.0.1:8080 ', 'prompt': 'x'})
    assert result.kind is FailJson and result.result['msg'].startswith("base_url 'http://127.0.0.1:8080 ' has spaces")
    result = run({'base_url': 'http://127.0.0.1:8080', 'prompt': 'x', 'max_tokens': 0})
    assert result.kind is FailJson and result.result['msg'] == 'max_tokens (0) and timeout_s (120) must be 1 or more'


def test_the_key_is_no_log():
    assert chat_check.ARGUMENT_SPEC['api_key'] == {'type': 'str', 'default': '', 'no_log': True}
