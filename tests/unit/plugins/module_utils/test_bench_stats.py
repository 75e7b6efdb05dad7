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


def test_prompts_differ_from_the_first_word_and_fit_the_tokenizer():
    first, second = bs.synthetic_prompt(10, 1), bs.synthetic_prompt(10, 2)
    assert len(first.split()) == 11 and first.split()[1] != second.split()[1]
    # a tokenizer that makes 1.5 tokens of every word plus 3
    assert bs.fit_prompt_words(120, lambda n: int(n * 1.5) + 3) == (78, 120)
    assert bs.fit_prompt_words(5, lambda n: n) == (5, 5)


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
    assert warnings == ['concurrency 2: 1 of 3 requests failed: boom']


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
