"""llm_benchmark against the OpenAI-style test double (tests/doubles): arithmetic and bad input."""

import itertools
import os
import socket

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import bench_client
from ansible_collections.gpulab.inference.plugins.modules import llm_benchmark

from module_harness import ExitJson, FailJson, run_module
from doubles.openai_stream_server import TEMPLATE_TOKENS, OpenAIDouble, tokenize


def bench(args):
    return run_module(llm_benchmark.main, args, answers={}, bin_path=None)


def closed_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_ttft_and_inter_token_arithmetic_within_tolerance(tmp_path):
    progress = tmp_path / 'progress'
    with OpenAIDouble(ttft_s=0.15, itl_s=0.02) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1], 'requests_per_level': 2,
                     'warmup_requests': 0, 'max_tokens': 21, 'prompt_tokens': 40, 'progress_path': str(progress)})
        sent = server.requests
    assert run.kind is ExitJson, run.result
    result = run.result['benchmark']
    assert result['engine'] == 'llama.cpp' and result['model'] == 'double-model'
    prompt = result['prompt']
    assert (prompt['target_tokens'], prompt['sizing'], prompt['seed_source']) == (40, 'tokenizer', 'fresh')
    # the double counts words over six letters as two tokens: fewer words than tokens, and where one
    # more word adds two tokens the nearest count is one off
    assert prompt['words'] < 40 and prompt['max_error_tokens'] <= 1 and 39 <= prompt['tokens'] <= 41
    level = result['levels'][0]
    assert (level['requests'], level['requests_ok'], level['output_tokens']) == (2, 2, 42)
    assert level['ttft_s']['mean'] == pytest.approx(0.15, abs=0.04)
    assert level['tpot_s']['mean'] == pytest.approx(0.02, rel=0.2)
    assert level['itl_s']['p50'] == pytest.approx(0.02, rel=0.2)
    assert level['decode_tok_s'] == pytest.approx(50.0, rel=0.2)
    assert level['server']['decode_ratio'] == pytest.approx(1.0, abs=0.05)
    # the sized prompt + the double's chat template
    assert abs(level['prompt_tokens_mean'] - 40 - TEMPLATE_TOKENS) <= 1
    # one warm-up request is always sent: it checks the real path before the sweep
    assert len(sent) == 3
    body = sent[-1]
    assert body['stream'] is True and body['stream_options'] == {'include_usage': True}
    assert body['ignore_eos'] is True and 'temperature' not in body
    assert sent[1]['messages'][0]['content'] != sent[2]['messages'][0]['content']
    assert progress.read_text().startswith('done: 1 levels')
    assert result['summary'][0].startswith('concurrency 1: 2/2 ok, TTFT p50 0.1')


def test_aggregate_throughput_rises_with_concurrency():
    with OpenAIDouble(ttft_s=0.02, itl_s=0.01) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [4, 1], 'requests_per_level': 4,
                     'warmup_requests': 0, 'max_tokens': 16, 'greedy': True, 'sampling': {'top_k': 1}})
        max_active = server.max_active
        body = server.requests[-1]
    assert run.kind is ExitJson, run.result
    levels = run.result['benchmark']['levels']
    assert [lv['concurrency'] for lv in levels] == [1, 4]
    assert levels[1]['aggregate_output_tok_s'] > 2.5 * levels[0]['aggregate_output_tok_s']
    assert max_active == 4
    assert body['temperature'] == 0 and body['top_k'] == 1
    assert run.result['benchmark']['request']['sampling'] == {'top_k': 1, 'temperature': 0}


@pytest.mark.parametrize('field', ['reasoning_content', 'reasoning'])
def test_answers_empty_because_the_budget_went_to_reasoning_are_flagged(field):
    with OpenAIDouble(ttft_s=0.01, itl_s=0.001, reasoning_tokens=50, reasoning_field=field) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1], 'requests_per_level': 1,
                     'warmup_requests': 0, 'max_tokens': 8})
    assert run.kind is ExitJson, run.result
    level = run.result['benchmark']['levels'][0]
    assert (level['reasoning_tokens'], level['answer_tokens']) == (8, 0)
    assert level['answers_empty_budget_spent_reasoning'] == 1
    assert 'raise max_tokens or disable reasoning' in run.warnings[0]


def test_reasoning_and_answer_tokens_apart():
    with OpenAIDouble(ttft_s=0.01, itl_s=0.001, reasoning_tokens=6) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1], 'requests_per_level': 1,
                     'warmup_requests': 0, 'max_tokens': 10})
    level = run.result['benchmark']['levels'][0]
    assert (level['reasoning_tokens'], level['answer_tokens'], level['answers_empty_budget_spent_reasoning']) == (6, 4, 0)
    assert run.warnings == []


@pytest.mark.parametrize('key, message', [
    ('wrong', r'/v1/models answered 401: the api_key was refused'),
    ('', r'/v1/models answered 401: the server wants an API key; set api_key'),
])
def test_401(key, message):
    with OpenAIDouble(api_key='right') as server:
        run = bench({'base_url': server.base_url, 'api_key': key})
        assert server.requests == []
    assert run.kind is FailJson
    assert run.result['msg'].startswith(server.base_url)
    assert message in run.result['msg']
    assert 'right' not in str(run.result) and (not key or key not in run.result['msg'])


def test_unreachable_endpoint():
    url = 'http://127.0.0.1:%d' % closed_port()
    run = bench({'base_url': url})
    assert run.kind is FailJson
    assert run.result['msg'].startswith('cannot reach %s/v1/models: ' % url)
    assert 'check base_url and that the server runs' in run.result['msg']


def test_a_model_the_server_does_not_serve():
    with OpenAIDouble() as server:
        run = bench({'base_url': server.base_url, 'model': 'MiniMax-M2'})
        assert server.requests == []
    assert run.kind is FailJson
    assert run.result['msg'] == "model 'MiniMax-M2' is not served here; the server lists 'double-model': set model to one of them"


def test_a_server_that_does_not_stream():
    with OpenAIDouble(mode='nonstream', ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, 'max_tokens': 4})
    assert run.kind is FailJson
    assert 'answered a streaming request with application/json' in run.result['msg']
    assert 'does not stream' in run.result['msg']


def test_concurrency_zero_is_refused_before_any_request():
    with OpenAIDouble() as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1, 0]})
        assert server.requests == []
    assert run.kind is FailJson
    assert run.result['msg'] == 'concurrency: every level must be 1 or more, got 0 in [1, 0]'


def test_error_events_and_missing_usage_fail_the_first_request():
    with OpenAIDouble(mode='error', ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, 'max_tokens': 8})
    assert run.kind is FailJson
    assert run.result['msg'] == 'the first request failed: double: decode failed'
    with OpenAIDouble(mode='no_usage', ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, 'max_tokens': 8})
    assert run.kind is FailJson
    assert 'no usage block' in run.result['msg']


def test_bad_base_url():
    run = bench({'base_url': 'localhost:8080'})
    assert run.kind is FailJson
    assert run.result['msg'] == "base_url must look like http://HOST:PORT, got 'localhost:8080'"


def test_check_mode_sends_no_load():
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, '_ansible_check_mode': True, 'max_tokens': 4})
        assert len(server.requests) == 1
    assert run.kind is ExitJson and run.result['benchmark']['levels'] == []


@pytest.mark.parametrize('url, message', [
    ('http://127.0.0.1:99999', "base_url 'http://127.0.0.1:99999' has a port that is not a number in 1-65535"),
    ('http://127.0.0.1:0', "has a port that is not a number in 1-65535"),
    ('http://127.0.0.1:80a', "has a port that is not a number in 1-65535"),
    ('http://[fd00::10]:70000', "has a port that is not a number in 1-65535"),
    ('http://127.0.0.1:8080 ', "has spaces, control characters"),
    ('http://127.0.0.1:8080\n', "has spaces, control characters"),
    ('', "has spaces, control characters or nothing in it"),
    ('http://user:pw@127.0.0.1:8080', 'has a query, a fragment or credentials'),
    ('http://127.0.0.1:8080/?x=1', 'has a query, a fragment or credentials'),
    ('ftp://127.0.0.1:21', 'base_url must look like http://HOST:PORT'),
    ('http://:8080', 'base_url must look like http://HOST:PORT'),
])
def test_base_url_that_cannot_work_is_refused_before_any_request(url, message):
    run = bench({'base_url': url})
    assert run.kind is FailJson, run.result
    assert message in run.result['msg']


def _progress_problem(tmp_path, kind):
    if kind == 'missing directory':
        return tmp_path / 'absent' / 'progress', 'directory %s does not exist' % (tmp_path / 'absent')
    if kind == 'a directory':
        (tmp_path / 'progress').mkdir()
        return tmp_path / 'progress', 'progress_path %s is a directory' % (tmp_path / 'progress')
    raise AssertionError(kind)


@pytest.mark.parametrize('kind', ['missing directory', 'a directory'])
def test_progress_path_that_cannot_be_written_is_refused_before_any_request(tmp_path, kind):
    path, message = _progress_problem(tmp_path, kind)
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, 'progress_path': str(path), 'max_tokens': 4})
        assert server.requests == []
    assert run.kind is FailJson, run.result
    assert message in run.result['msg']
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith('.progress-')] == []


def test_progress_file_that_becomes_a_directory_fails_cleanly_and_leaves_no_temp_file(tmp_path):
    # The check before the run is bypassed: the path turns into a directory after it.
    progress = tmp_path / 'progress'
    progress.mkdir()
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bench_client.bench_stats, 'output_path_problem', lambda *a: None)
            run = bench({'base_url': server.base_url, 'progress_path': str(progress), 'max_tokens': 4,
                         'concurrency': [1], 'requests_per_level': 1})
    assert run.kind is FailJson, run.result
    assert run.result['msg'].startswith('progress_path %s cannot be written' % progress)
    assert [p.name for p in tmp_path.iterdir()] == ['progress']


def contents(server):
    return [body['messages'][0]['content'] for body in server.requests]


@pytest.mark.parametrize('target', [7, 40, 128, 300])
def test_every_prompt_sent_is_sized_to_the_target_on_its_own_text(target):
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1, 2], 'requests_per_level': 3,
                     'warmup_requests': 1, 'max_tokens': 2, 'prompt_tokens': target})
        sent = contents(server)
    assert run.kind is ExitJson, run.result
    assert len(sent) == 1 + 3 + 3
    # counted by the server's tokenizer on what was sent, not on a stand-in text
    assert all(abs(len(tokenize(text)) - target) <= 1 for text in sent), [len(tokenize(t)) for t in sent]
    records = run.result['benchmark']['requests']
    assert len(records) == 6 and all(abs(r['prompt_tokens'] - TEMPLATE_TOKENS - target) <= 1 for r in records)
    assert all(r['prompt_tokens_sized'] == r['prompt_tokens'] - TEMPLATE_TOKENS for r in records)


def test_prompts_are_fresh_per_request_and_per_run_and_the_cache_finds_only_the_template():
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        first = bench({'base_url': server.base_url, 'concurrency': [2], 'requests_per_level': 4, 'max_tokens': 2,
                       'prompt_tokens': 64})
        second = bench({'base_url': server.base_url, 'concurrency': [2], 'requests_per_level': 4, 'max_tokens': 2,
                        'prompt_tokens': 64})
        sent = contents(server)
    assert first.kind is ExitJson and second.kind is ExitJson
    assert len(set(sent)) == len(sent) == 10
    # Random words from 64: two of ten prompts share their first two words about once in a hundred
    # runs, their first four about once in 400,000.
    assert max(len(os.path.commonprefix([a.split(), b.split()])) for a, b in itertools.combinations(sent, 2)) < 4
    seeds = (first.result['benchmark']['prompt']['seed'], second.result['benchmark']['prompt']['seed'])
    assert seeds[0] != seeds[1]
    level = second.result['benchmark']['levels'][0]
    # the double's cache holds every earlier prompt: only the template's three leading tokens
    # (and now and then a first word that two prompts share) are found
    assert 3 * 4 <= level['cached_prompt_tokens'] and level['cached_prompt_fraction'] < 0.1
    assert not any('prompt cache' in w for w in second.result['benchmark']['warnings'])


def test_a_seed_given_on_purpose_sends_the_same_prompts_and_the_cache_is_counted_and_warned_about():
    options = {'concurrency': [1], 'requests_per_level': 3, 'max_tokens': 2, 'prompt_tokens': 50, 'prompt_seed': 1234}
    with OpenAIDouble(ttft_s=0.0, itl_s=0.0) as server:
        first = bench(dict(options, base_url=server.base_url))
        second = bench(dict(options, base_url=server.base_url))
        sent = contents(server)
    assert sent[:4] == sent[4:]
    prompt = second.result['benchmark']['prompt']
    assert (prompt['seed'], prompt['seed_source']) == (1234, 'bench_prompt_seed')
    assert first.result['benchmark']['levels'][0]['cached_prompt_tokens'] <= 3 * 4
    level = second.result['benchmark']['levels'][0]
    # all but the last token of each prompt came from the cache
    prompts = [r['prompt_tokens'] for r in second.result['benchmark']['requests']]
    assert len(prompts) == 3 and level['cached_prompt_tokens'] == sum(prompts) - 3
    assert level['server']['cached_prompt_tokens'] == level['cached_prompt_tokens']
    assert any('prompt cache' in w and 'bench_prompt_seed' in w for w in second.warnings), second.warnings
    assert '%d prompt tokens cached' % level['cached_prompt_tokens'] in second.result['benchmark']['summary'][0]


def test_request_rate_sweep_goodput_and_the_vllm_keys():
    with OpenAIDouble(ttft_s=0.05, itl_s=0.01) as server:
        run = bench({'base_url': server.base_url, 'concurrency': [1], 'requests_per_level': 6, 'max_tokens': 6,
                     'request_rates': [50.0], 'slo_ttft_s': 0.5, 'slo_tpot_ms': 1.0})
    assert run.kind is ExitJson, run.result
    result = run.result['benchmark']
    (rate,) = result['rates']
    assert (rate['request_rate'], rate['requests'], rate['requests_ok']) == (50.0, 6, 6)
    # 6 requests due within 0.12 s, each taking about 0.1 s: several were in flight at once
    assert rate['peak_concurrency'] >= 2 and rate['concurrency'] == rate['peak_concurrency']
    # TPOT is about 10 ms, above the 1 ms objective: no request is good
    assert rate['goodput']['requests_good'] == 0 and rate['goodput']['slo_tpot_ms'] == 1.0
    level = result['levels'][0]
    assert level['vllm']['completed'] == 6 and level['vllm']['total_output_tokens'] == 36
    assert level['vllm']['mean_tpot_ms'] == pytest.approx(10.0, rel=0.5)
    assert level['ci95']['ttft_s_mean'][0] <= level['ttft_s']['mean'] <= level['ci95']['ttft_s_mean'][1]
    assert len(result['requests']) == 12 and {r['level'] for r in result['requests']} == {'concurrency 1', 'rate 50.0 req/s'}
    assert result['conditions']['window_end_epoch'] > result['conditions']['window_start_epoch']
    assert result['summary'][1].startswith('rate 50.0 req/s: 6/6 ok')


def test_a_rate_of_zero_is_refused_before_any_request():
    with OpenAIDouble() as server:
        run = bench({'base_url': server.base_url, 'request_rates': [1.0, 0.0]})
        assert server.requests == []
    assert run.kind is FailJson
    assert run.result['msg'] == 'request_rates: every rate must be above 0 requests per second, got 0.0 in [1.0, 0.0]'


def test_two_engines_get_the_same_request_set_one_after_the_other():
    with OpenAIDouble(ttft_s=0.02, itl_s=0.005) as first, \
            OpenAIDouble(ttft_s=0.02, itl_s=0.02, model='other-model', tokenizer=False, props=False) as second:
        run = bench({'base_url': first.base_url, 'label': 'fast', 'concurrency': [1, 2], 'requests_per_level': 2,
                     'max_tokens': 6, 'prompt_tokens': 24, 'request_rates': [40.0],
                     'compare': [{'label': 'slow', 'base_url': second.base_url}]})
        sent_first, sent_second = contents(first), contents(second)
        max_second = second.max_active
    assert run.kind is ExitJson, run.result
    result = run.result['benchmark']
    # the same prompts (sized on the first endpoint's tokenizer), in the same order of levels
    assert sorted(sent_first) == sorted(sent_second) and len(sent_first) == 1 + 2 + 2 + 2
    (other,) = result['compare']
    assert (result['label'], other['label'], other['model'], other['engine']) == ('fast', 'slow', 'other-model', 'openai-compatible')
    assert [lv['concurrency'] for lv in other['levels']] == [1, 2] and other['rates'][0]['request_rate'] == 40.0
    assert max_second == 2
    assert other['levels'][0]['tpot_s']['mean'] == pytest.approx(0.02, rel=0.5)
    assert result['levels'][0]['tpot_s']['mean'] < other['levels'][0]['tpot_s']['mean']
    assert other['window_start_epoch'] >= result['conditions']['window_end_epoch']
    assert [line.split(':')[0] for line in result['summary']] == [
        'concurrency 1', 'concurrency 2', 'rate 40.0 req/s', 'slow', 'slow', 'slow']
    assert {r['endpoint'] for r in result['requests']} == {'fast', 'slow'} and len(result['requests']) == 12


def test_a_compared_endpoint_that_does_not_answer_is_named_before_any_load():
    with OpenAIDouble() as server:
        run = bench({'base_url': server.base_url, 'compare': [{'label': 'vllm', 'base_url': 'http://127.0.0.1:%d' % closed_port()}]})
        assert server.requests == []
    assert run.kind is FailJson
    assert run.result['msg'].startswith('cannot reach http://127.0.0.1:') and '/v1/models' in run.result['msg']
