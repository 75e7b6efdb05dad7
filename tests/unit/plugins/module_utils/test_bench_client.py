"""The benchmark's HTTP client against the OpenAI-style test double (tests/doubles): the tokenizer,
prompts sized on the text sent, one streamed request, and what the report says of the prompts."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import bench_client, bench_stats

from doubles.openai_stream_server import TEMPLATE_TOKENS, OpenAIDouble, tokenize


def params(**extra):
    values = {'base_url': '', 'api_key': '', 'model': '', 'prompt_tokens': 30, 'max_tokens': 4, 'ignore_eos': True,
              'concurrency': [1], 'requests_per_level': 2, 'warmup_requests': 1, 'timeout_s': 30, 'greedy': False,
              'sampling': {}, 'gguf_path': None, 'progress_path': None, 'prompt_seed': None, 'request_rates': [],
              'slo_ttft_s': None, 'slo_tpot_ms': None, 'profile': '', 'label': '', 'compare': []}
    values.update(extra)
    return values


def test_the_tokenizer_counts_the_text_it_is_given():
    with OpenAIDouble() as server:
        endpoint = bench_client.Endpoint(server.base_url, '', 10)
        count = bench_client.token_counter(endpoint, 'double-model')
        assert count('granite amber') == 3
    with OpenAIDouble(tokenizer='vllm', props=False) as server:
        count = bench_client.token_counter(bench_client.Endpoint(server.base_url, '', 10), 'double-model')
        assert count('granite amber') == 3  # the text alone: no BOS token
        assert server.tokenize_requests[-1] == {'model': 'double-model', 'prompt': 'granite amber',
                                                'add_special_tokens': False}
    with OpenAIDouble(tokenizer=False) as server:
        assert bench_client.token_counter(bench_client.Endpoint(server.base_url, '', 10), 'double-model') is None


def test_prompts_are_sized_on_their_own_text_and_summarised():
    with OpenAIDouble() as server:
        endpoint = bench_client.Endpoint(server.base_url, '', 10)
        count = bench_client.token_counter(endpoint, 'double-model')
        bench = bench_client.Benchmark(params(), entropy=lambda n: b'\x01' * n)
        prompts = bench.prompts(['warmup-0', 'c1-0', 'c1-1'], count, 77)
    for label, (text, words, tokens) in prompts.items():
        assert text == bench_stats.synthetic_prompt(words, 77, label)
        assert tokens == len(tokenize(text)) and abs(tokens - 30) <= 1
    summary = bench_client.prompt_summary(30, prompts, 77, False, count)
    assert (summary['seed'], summary['seed_source'], summary['sizing'], summary['prompts']) == (77, 'fresh', 'tokenizer', 3)
    assert summary['max_error_tokens'] <= 1
    estimated = bench_client.Benchmark(params()).prompts(['c1-0'], None, 77)
    assert estimated['c1-0'][1:] == (30, None)
    assert bench_client.prompt_summary(30, estimated, 77, True, None)['sizing'] == 'estimate'


def test_a_fresh_seed_comes_from_the_entropy_and_a_given_one_is_kept():
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        fresh = bench_client.Benchmark(params(base_url=server.base_url), check_mode=True,
                                       entropy=lambda n: b'\x00' * (n - 1) + b'\x09').run()
        given = bench_client.Benchmark(params(base_url=server.base_url, prompt_seed=5), check_mode=True).run()
    assert (fresh['prompt']['seed'], fresh['prompt']['seed_source']) == (9, 'fresh')
    assert (given['prompt']['seed'], given['prompt']['seed_source']) == (5, 'bench_prompt_seed')
    assert fresh['conditions']['warmup_requests'] == 1 and fresh['levels'] == []


def test_one_streamed_request_is_timed_on_the_given_clock():
    ticks = iter(float(t) for t in range(1000))
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        endpoint = bench_client.Endpoint(server.base_url, '', 10)
        record = bench_client.stream_request(endpoint, {'model': 'double-model', 'max_tokens': 3, 'stream': True,
                                                        'stream_options': {'include_usage': True},
                                                        'messages': [{'role': 'user', 'content': 'amber cedar'}]},
                                             clock=lambda: next(ticks))
    metrics = bench_stats.request_metrics(record)
    assert metrics['ok'] and metrics['completion_tokens'] == 3
    assert metrics['prompt_tokens'] == 2 + TEMPLATE_TOKENS and metrics['cached_tokens'] == 0
    assert metrics['ttft_s'] >= 1.0 and all(gap >= 1.0 for gap in metrics['itl_s'])


def test_load_average_is_three_numbers():
    load = bench_client.load_average()
    assert load is None or (len(load) == 3 and all(value >= 0 for value in load))


@pytest.mark.parametrize('status, key, message', [
    (401, 'k', 'the api_key was refused'),
    (403, '', 'the server wants an API key; set api_key'),
])
def test_refusals_say_what_to_set(status, key, message):
    endpoint = bench_client.Endpoint('http://127.0.0.1:1', key, 1)
    assert str(bench_client.unauthorized(endpoint, '/v1/models', status)) == (
        'http://127.0.0.1:1/v1/models answered %d: %s' % (status, message))


@pytest.mark.parametrize('compare, message', [
    ([{'label': 'vllm', 'base_url': ''}], 'compare entry 0: give label and base_url'),
    ([{'label': 'a', 'base_url': 'http://127.0.0.1:1'}, {'label': 'a', 'base_url': 'http://127.0.0.1:2'}],
     "compare entry 1: label 'a' is used twice"),
    ([{'label': 'llama.cpp', 'base_url': 'http://127.0.0.1:1'}], "compare entry 0: label 'llama.cpp' is used twice"),
    ([{'label': 'v', 'base_url': 'localhost:8000'}], "base_url must look like http://HOST:PORT, got 'localhost:8000'"),
])
def test_compare_entries_that_cannot_work_are_named(compare, message):
    with pytest.raises(bench_stats.BenchInputError, match=message):
        bench_client.compare_entries(compare, 'llama.cpp')
