"""Benchmark arithmetic: statistics, per-request figures, level summaries, weights per token."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import bench_stats as bs
from ansible_collections.gpulab.inference.plugins.module_utils.sse import StreamRecord


def test_percentiles_interpolate_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert bs.percentile(values, 50) == 3.0
    assert bs.percentile(values, 0) == 1.0 and bs.percentile(values, 100) == 10.0
    assert bs.percentile(values, 99) == pytest.approx(9.76)
    assert bs.percentile(values, 25) == 2.0
    assert bs.percentile([], 50) is None
    with pytest.raises(ValueError):
        bs.percentile(values, 101)


def test_stdev_and_describe():
    assert bs.stdev([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(2.13809, rel=1e-4)
    assert bs.stdev([3.0]) == 0.0 and bs.stdev([]) is None
    assert bs.describe([1.0, None, 3.0]) == {'mean': 2.0, 'p50': 2.0, 'p99': 2.98}


@pytest.mark.parametrize('args, message', [
    (([], 4, 1, 16, 8, 10), 'concurrency: give at least one level'),
    (([1, 0, 4], 4, 1, 16, 8, 10), r'concurrency: every level must be 1 or more, got 0 in \[1, 0, 4\]'),
    (([1], 0, 1, 16, 8, 10), 'requests_per_level must be 1 or more, got 0'),
    (([1], 4, -1, 16, 8, 10), 'warmup_requests must be 0 or more'),
    (([1], 4, 1, 1, 8, 10), 'max_tokens must be 2 or more'),
    (([1], 4, 1, 16, 0, 10), 'prompt_tokens must be 1 or more'),
    (([1], 4, 1, 16, 8, 0), 'timeout_s must be 1 or more'),
])
def test_bad_options_are_named(args, message):
    with pytest.raises(bs.BenchInputError, match=message):
        bs.validate_options(*args)


def test_levels_are_sorted_and_unique_and_every_stream_gets_work():
    assert bs.validate_options([4, 1, 2, 1], 4, 1, 16, 8, 10) == [1, 2, 4]
    assert bs.requests_at_level(8, 4) == 8
    assert bs.requests_at_level(1, 4) == 4


def test_prompts_are_fresh_per_request_and_per_seed_and_reproducible_with_one():
    first, second = bs.synthetic_prompt(10, 1, 'c1-0'), bs.synthetic_prompt(10, 1, 'c1-1')
    assert len(first.split()) == 10 and first.split()[:3] != second.split()[:3]
    assert bs.synthetic_prompt(10, 2, 'c1-0') != first
    assert bs.synthetic_prompt(10, 1, 'c1-0') == first
    # a longer prompt of the same request starts with the shorter one: sizing counts one text
    assert bs.synthetic_prompt(14, 1, 'c1-0').startswith(first + ' ')
    assert bs.new_seed(b'\x00' * 7 + b'\x05') == 5 and 0 <= bs.new_seed(b'\xff' * 8) < 2 ** 31


def long_words_count_twice(text):
    return sum(2 if len(word) > 6 else 1 for word in text.split())


@pytest.mark.parametrize('target', [1, 2, 17, 128, 512, 2000])
def test_prompt_sizing_counts_the_text_that_is_sent(target):
    for label in ('warmup-0', 'c4-3', 'r2.0-1'):
        text, words, tokens = bs.size_prompt(target, long_words_count_twice, 99, label)
        assert text == bs.synthetic_prompt(words, 99, label)
        assert tokens == long_words_count_twice(text)
        assert abs(tokens - target) <= 1, (label, words, tokens)


def test_prompt_sizing_is_within_one_token_where_no_word_count_hits_the_target():
    # every word three tokens: 128 cannot be reached, 127 or 129 is the nearest
    text, words, tokens = bs.size_prompt(128, lambda t: 3 * len(t.split()), 5, 'c1-0')
    assert (words, tokens, len(text.split())) == (43, 129, 43)
    calls = []
    bs.size_prompt(128, lambda t: calls.append(t) or len(t.split()) + 5, 5, 'c1-0', words_guess=123)
    assert len(calls) == 1  # the previous request's word count hits at once


def test_estimated_prompts_count_one_token_a_word():
    assert bs.estimated_prompt(12, 3, 'c1-0') == (bs.synthetic_prompt(12, 3, 'c1-0'), 12, None)


def test_poisson_arrivals_keep_the_rate_and_differ_by_seed():
    times = bs.poisson_arrivals(50, 4.0, 7)
    assert len(times) == 50 and times == sorted(times)
    assert times[-1] == pytest.approx(50 / 4.0)
    assert bs.poisson_arrivals(50, 4.0, 7) == times and bs.poisson_arrivals(50, 4.0, 8) != times
    gaps = [b - a for a, b in zip([0.0] + times, times)]
    # exponential gaps: their spread is about their mean (a fixed interval would have none)
    assert bs.stdev(gaps) / bs.mean(gaps) > 0.5
    assert bs.poisson_arrivals(0, 4.0, 7) == []
    with pytest.raises(bs.BenchInputError, match='above 0 requests per second'):
        bs.poisson_arrivals(3, 0, 7)


def record(times, usage, start=0.0, reasoning=0, finish_reason='length', timings=None):
    rec = StreamRecord(start)
    rec.token_times = list(times)
    rec.content_chunks = len(times) - reasoning
    rec.reasoning_chunks = reasoning
    rec.content = 'x' if rec.content_chunks else ''
    rec.reasoning = 'r' if reasoning else ''
    rec.usage = usage
    rec.timings = timings
    rec.finish_reason = finish_reason
    rec.done = True
    rec.end = times[-1] + 0.001 if times else None
    return rec


def test_request_figures():
    # first text at 0.5 s, then 10 more tokens 0.1 s apart
    times = [0.5 + 0.1 * i for i in range(11)]
    metrics = bs.request_metrics(record(times, {'completion_tokens': 11, 'prompt_tokens': 100},
                                        timings={'predicted_n': 11, 'predicted_ms': 1000.0,
                                                 'predicted_per_second': 11.0, 'prompt_per_second': 250.0}))
    assert metrics['ok']
    assert metrics['ttft_s'] == pytest.approx(0.5)
    assert metrics['tpot_s'] == pytest.approx(0.1)
    assert metrics['decode_tok_s'] == pytest.approx(10.0)
    assert metrics['prefill_tok_s'] == pytest.approx(200.0)
    assert metrics['itl_s'] == pytest.approx([0.1] * 10)
    assert metrics['server']['decode_tok_s'] == 11.0
    assert metrics['server']['decode_tok_s_intervals'] == pytest.approx(10.0)


def test_failures_and_missing_usage():
    failed = StreamRecord(0.0)
    failed.error = 'boom'
    assert bs.request_metrics(failed) == {'ok': False, 'error': 'boom'}
    no_usage = bs.request_metrics(record([0.1, 0.2], None))
    assert not no_usage['ok'] and 'no usage block' in no_usage['error']
    no_text = bs.request_metrics(record([], {'completion_tokens': 0}))
    assert not no_text['ok'] and 'no text' in no_text['error']


def test_reasoning_tokens_from_usage_or_chunks_and_the_empty_answer_flag():
    usage = {'completion_tokens': 10, 'completion_tokens_details': {'reasoning_tokens': 7}}
    assert bs.split_reasoning_tokens(10, usage, 5, 5) == (7, 'usage')
    assert bs.split_reasoning_tokens(10, {}, 6, 2) == (8, 'chunks')
    assert bs.split_reasoning_tokens(10, {}, 0, 10) == (0, 'chunks')
    spent = bs.request_metrics(record([0.1 * i for i in range(1, 5)], {'completion_tokens': 4}, reasoning=4))
    assert spent['answer_empty_budget_spent_reasoning'] and spent['reasoning_tokens'] == 4 and spent['answer_tokens'] == 0
    stopped = bs.request_metrics(record([0.1 * i for i in range(1, 5)], {'completion_tokens': 4}, reasoning=4,
                                        finish_reason='stop'))
    assert not stopped['answer_empty_budget_spent_reasoning']


def test_level_summary():
    ok = [bs.request_metrics(record([1.0 + 0.1 * i for i in range(11)], {'completion_tokens': 11, 'prompt_tokens': 50},
                                    timings={'predicted_n': 11, 'predicted_ms': 1000.0, 'predicted_per_second': 11.0})),
          bs.request_metrics(record([1.0 + 0.2 * i for i in range(11)], {'completion_tokens': 11, 'prompt_tokens': 50},
                                    timings={'predicted_n': 11, 'predicted_ms': 2000.0, 'predicted_per_second': 5.5}))]
    failed = StreamRecord(0.0)
    failed.error = 'boom'
    summary = bs.level_summary(2, ok + [bs.request_metrics(failed)], wall_s=4.0)
    assert (summary['requests'], summary['requests_ok'], summary['requests_failed']) == (3, 2, 1)
    assert summary['errors'] == ['boom']
    assert summary['output_tokens'] == 22
    assert summary['aggregate_output_tok_s'] == 5.5
    assert summary['decode_tok_s'] == 7.5
    assert summary['decode_tok_s_cv_percent'] == pytest.approx(47.14, abs=0.01)
    assert summary['ttft_s']['mean'] == 1.0
    assert summary['server'] == {'decode_tok_s': 8.25, 'decode_tok_s_intervals': 7.5, 'prefill_tok_s': None,
                                 'cached_prompt_tokens': 0, 'decode_ratio': 1.0}
    assert bs.level_line(summary) == ('concurrency 2: 2/3 ok, TTFT p50 1.000 s, decode 7.5 tok/s per stream (spread 47.14 %), '
                                      'aggregate 5.5 tok/s, llama-server decode 8.25 tok/s (ratio 1.0)')
    warnings = bs.sweep_warnings([summary])
    assert warnings[0] == 'concurrency 2: 1 of 3 requests failed: boom'
    assert warnings[1].startswith('concurrency 2: per-stream decode spreads 47.1 % over its requests (above 10 %)')


def test_weights_per_token_count_the_used_experts_only():
    tensors = [('token_embd.weight', 1000), ('output.weight', 1000), ('blk.0.attn_q.weight', 100),
               ('blk.0.ffn_gate_exps.weight', 6400), ('blk.0.ffn_up_exps.weight', 6400)]
    assert bs.weight_bytes_per_token(tensors, 64, 8) == (1000 + 100 + 800 + 800, 14900)
    assert bs.weight_bytes_per_token(tensors) == (1000 + 100 + 12800, 14900)


def test_split_gguf_paths():
    assert bs.split_gguf_paths('/m/x-00001-of-00003.gguf') == [
        '/m/x-00001-of-00003.gguf', '/m/x-00002-of-00003.gguf', '/m/x-00003-of-00003.gguf']
    assert bs.split_gguf_paths('/m/x.gguf') == ['/m/x.gguf']


@pytest.mark.parametrize('url, expected', [
    ('http://127.0.0.1:8080', ('http', '127.0.0.1', 8080, '')),
    ('http://[fd00::10]:8080/', ('http', 'fd00::10', 8080, '')),
    ('https://head.lab.example/openai/', ('https', 'head.lab.example', None, '/openai')),
])
def test_base_url_parts(url, expected):
    assert bs.parse_base_url(url) == expected


def test_output_path_problems(tmp_path):
    assert bs.output_path_problem(None, 'x') is None
    assert bs.output_path_problem(str(tmp_path / 'f'), 'x') is None
    assert 'is a directory' in bs.output_path_problem(str(tmp_path), 'x')
    assert 'does not exist' in bs.output_path_problem(str(tmp_path / 'a' / 'f'), 'x')


class _Shard:
    path = '/models/m.gguf'
    tensors = []

    def __init__(self, **metadata):
        self.metadata = dict({'general.architecture': 'minimax-m2'}, **metadata)

    def get(self, key, default=None):
        return self.metadata.get(key, default)


@pytest.mark.parametrize('metadata, message', [
    ({'minimax-m2.expert_count': 'many'}, "minimax-m2.expert_count is 'many', expected a whole number >= 0"),
    ({'minimax-m2.expert_count': -8}, 'expert_count is -8'),
    ({'minimax-m2.expert_used_count': 2.5}, 'expert_used_count is 2.5'),
    ({'minimax-m2.expert_used_count': True}, 'expert_used_count is True'),
    ({'minimax-m2.expert_count': 8, 'minimax-m2.expert_used_count': 9}, 'expert_used_count 9 is above expert_count 8'),
    ({'general.architecture': ['minimax-m2']}, "general.architecture is ['minimax-m2']"),
])
def test_gguf_metadata_of_the_wrong_type_is_named(metadata, message):
    with pytest.raises(bs.BenchInputError) as raised:
        bs.model_weights([_Shard(**metadata)])
    assert str(raised.value).startswith('/models/m.gguf: metadata ')
    assert message in str(raised.value)


def test_split_gguf_paths_needs_the_whole_name():
    assert bs.split_gguf_paths('/m/x-00001-of-00002.gguf') == ['/m/x-00001-of-00002.gguf', '/m/x-00002-of-00002.gguf']
    assert bs.split_gguf_paths('/m/x-00001-of-00002.gguf\n') == ['/m/x-00001-of-00002.gguf\n']


def chunked_stream(start=0.0):
    """7 output tokens streamed as vLLM does with 2 tokens a chunk: 1 token at 0.2 s, then
    2 tokens at 0.3, 0.4 and 0.5 s; [DONE] at 0.52 s."""
    usage = {'completion_tokens': 7, 'prompt_tokens': 20, 'prompt_tokens_details': {'cached_tokens': 3}}
    rec = record([start + t for t in (0.2, 0.3, 0.4, 0.5)], usage, start=start)
    rec.end = start + 0.52
    return rec


def test_definitions_against_a_hand_computed_stream():
    m = bs.request_metrics(chunked_stream())
    assert m['ttft_s'] == pytest.approx(0.2)
    assert m['tpot_s'] == pytest.approx(0.3 / 6)  # first token excluded: 6 tokens over 0.3 s
    assert m['decode_tok_s'] == pytest.approx(20.0)
    assert m['itl_s'] == pytest.approx([0.1, 0.1, 0.1])  # per chunk, as vllm bench serve's itl
    assert m['itl_token_s'] == pytest.approx([0.05, 0.05, 0.05])  # per token: its mean is TPOT
    assert m['e2e_s'] == pytest.approx(0.52)
    assert m['prefill_tok_s'] == pytest.approx(100.0)
    assert (m['cached_tokens'], m['chunks']) == (3, 4)


def test_cached_tokens_from_usage_or_llama_server_timings():
    assert bs.cached_prompt_tokens({'prompt_tokens_details': {'cached_tokens': 149}}, {'cache_n': 1}) == 149
    assert bs.cached_prompt_tokens({'prompt_tokens': 150}, {'cache_n': 149}) == 149
    assert bs.cached_prompt_tokens({'prompt_tokens': 150}, None) is None
    assert bs.cached_prompt_tokens({'prompt_tokens_details': None}, {}) is None


def test_a_level_under_vllm_bench_serve_keys():
    ok = [bs.request_metrics(chunked_stream(0.0)), bs.request_metrics(chunked_stream(0.1))]
    level = bs.level_summary(2, ok, wall_s=1.0, slo_ttft_s=0.25, slo_tpot_ms=60.0)
    vllm = level['vllm']
    assert (vllm['completed'], vllm['failed'], vllm['total_input_tokens'], vllm['total_output_tokens']) == (2, 0, 40, 14)
    assert (vllm['request_throughput'], vllm['output_throughput'], vllm['total_token_throughput']) == (2.0, 14.0, 54.0)
    assert vllm['mean_ttft_ms'] == pytest.approx(200.0) and vllm['std_ttft_ms'] == pytest.approx(0.0)
    assert vllm['median_itl_ms'] == pytest.approx(100.0) and vllm['p99_itl_ms'] == pytest.approx(100.0)
    # vLLM's TPOT runs to the end of the stream: (0.52 - 0.2) / 6
    assert vllm['mean_tpot_ms'] == pytest.approx(320.0 / 6, abs=1e-3)
    assert vllm['mean_e2el_ms'] == pytest.approx(520.0)
    assert vllm['max_concurrent_requests'] == 2  # [0, 0.52) and [0.1, 0.62) overlap
    assert vllm['request_goodput'] == 2.0
    assert level['itl_token_s']['mean'] == pytest.approx(0.05) and level['tpot_s']['mean'] == pytest.approx(0.05)
    assert level['e2e_s']['p50'] == pytest.approx(0.52)
    assert (level['cached_prompt_tokens'], level['cached_prompt_fraction']) == (6, 0.15)
    assert any('took 15 % of the prompt tokens from its prompt cache' in w for w in bs.sweep_warnings([level]))


def test_goodput_counts_requests_that_meet_every_objective():
    ok = [{'ttft_s': 0.1, 'tpot_s': 0.01}, {'ttft_s': 0.5, 'tpot_s': 0.02}, {'ttft_s': 1.0, 'tpot_s': 0.05},
          {'ttft_s': 0.1, 'tpot_s': None}]
    both = bs.goodput(ok, sent=5, wall_s=2.0, slo_ttft_s=0.6, slo_tpot_ms=30)
    assert both == {'slo_ttft_s': 0.6, 'slo_tpot_ms': 30, 'requests_good': 3, 'fraction': 0.6, 'request_goodput': 1.5}
    assert bs.goodput(ok, 5, 2.0, slo_tpot_ms=15)['requests_good'] == 2
    assert bs.goodput(ok, 5, 2.0, slo_ttft_s=0.1)['requests_good'] == 2
    assert bs.goodput(ok, 5, 2.0) is None


def test_bootstrap_interval_is_seeded_and_about_as_wide_as_the_normal_one():
    values = [float(v) for v in range(1, 101)]
    low, high = bs.bootstrap_ci(values, bs.mean, seed=1)
    assert low < 50.5 < high
    # normal approximation: 2 x 1.96 x 29.0 / 10 = 11.4
    assert 8.0 < high - low < 15.0
    assert bs.bootstrap_ci(values, bs.mean, seed=1) == [low, high]
    assert bs.bootstrap_ci(values, bs.mean, seed=2) != [low, high]
    assert bs.bootstrap_ci([3.0, 3.0, 3.0], bs.median, seed=1) == [3.0, 3.0]
    assert bs.bootstrap_ci([3.0, None], bs.mean, seed=1) is None


def test_definitions_name_each_figure_once_with_both_tools():
    keys = [entry[1] for entry in bs.DEFINITIONS]
    assert len(keys) == len(set(keys))
    assert {'ttft_s', 'tpot_s', 'itl_s', 'itl_token_s', 'e2e_s', 'decode_tok_s', 'aggregate_output_tok_s'} <= set(keys)
    assert all(len(entry) == 5 and all(entry) for entry in bs.DEFINITIONS)


def test_request_records_for_json_lines():
    metrics = bs.request_metrics(chunked_stream())
    line = bs.request_record('concurrency 1', 0, 'c1-0', metrics, 17)
    assert (line['level'], line['label'], line['prompt_tokens_sized'], line['completion_tokens']) == ('concurrency 1', 'c1-0', 17, 7)
    assert line['itl_s'] == [0.1, 0.1, 0.1] and line['ttft_s'] == 0.2
    failed = StreamRecord(0.0)
    failed.error = 'boom'
    assert bs.request_record('rate 2.0 req/s', 3, 'r2.0-3', bs.request_metrics(failed), 17) == {
        'level': 'rate 2.0 req/s', 'number': 3, 'label': 'r2.0-3', 'ok': False, 'error': 'boom', 'prompt_tokens_sized': 17}
