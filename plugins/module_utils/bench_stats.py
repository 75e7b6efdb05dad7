# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arithmetic of an inference benchmark, as pure functions.

DEFINITIONS below names each figure once, with its equivalent in `vllm bench serve` and
GuideLLM. Two server-side notes: llama-server's own `predicted_per_second` divides the tokens it
decoded by the time from its first token to its last (tools/server/server-context.cpp:
t_start_generation is taken when n_decoded becomes 1), so it counts n tokens over n-1
intervals; the agreement ratio compares the client's figure with the server's on the same
footing, (predicted_n - 1) / predicted_ms. Tokens are counted from the server's usage block,
never from chunks.
"""

from __future__ import annotations

import math
import random

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import path_problem
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import parse_url

# Common English words, most of them one token in the usual vocabularies: a prompt drawn from
# them has about as many tokens as words, and 64 of them make two prompts share no first words.
WORDS = (
    'amber', 'basalt', 'cedar', 'delta', 'ember', 'fjord', 'granite', 'harbor', 'island', 'juniper',
    'kelp', 'lagoon', 'meadow', 'nectar', 'orchid', 'prairie', 'quartz', 'river', 'summit', 'tundra',
    'upland', 'valley', 'willow', 'yarrow', 'zephyr', 'apple', 'bridge', 'candle', 'door', 'engine',
    'forest', 'garden', 'hammer', 'window', 'jacket', 'kitchen', 'ladder', 'market', 'needle', 'ocean',
    'pencil', 'rabbit', 'silver', 'table', 'umbrella', 'village', 'water', 'yellow', 'anchor', 'basket',
    'cloud', 'dragon', 'feather', 'glass', 'honey', 'iron', 'lemon', 'mirror', 'night', 'orange',
    'paper', 'stone', 'thunder', 'winter',
)


class BenchInputError(ValueError):
    """An option or a server answer the benchmark cannot work with."""


# --------------------------------------------------------------------------- statistics
def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else None


def percentile(values, pct):
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    values = sorted(values)
    if not values:
        return None
    if not 0 <= pct <= 100:
        raise ValueError('percentile must be within 0..100, got %r' % (pct,))
    rank = (len(values) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def stdev(values):
    """Sample standard deviation; 0.0 for a single value, None for none."""
    values = list(values)
    if not values:
        return None
    if len(values) == 1:
        return 0.0
    avg = mean(values)
    return math.sqrt(sum((v - avg) ** 2 for v in values) / (len(values) - 1))


def describe(values, digits=4):
    """mean, p50, p99 of values (None each when there are none)."""
    values = [v for v in values if v is not None]
    return {
        'mean': _round(mean(values), digits),
        'p50': _round(percentile(values, 50), digits),
        'p99': _round(percentile(values, 99), digits),
    }


def _round(value, digits):
    return None if value is None else round(value, digits)


# --------------------------------------------------------------------------- options
def validate_options(concurrency, requests_per_level, warmup_requests, max_tokens, prompt_tokens, timeout_s,
                     request_rates=(), slo_ttft_s=None, slo_tpot_ms=None):
    """Raise BenchInputError naming the first bad option; return the sorted, unique levels."""
    if not concurrency:
        raise BenchInputError('concurrency: give at least one level, for example [1, 2, 4]')
    for level in concurrency:
        if level < 1:
            raise BenchInputError('concurrency: every level must be 1 or more, got %d in %s' % (level, list(concurrency)))
    for rate in request_rates or ():
        if not rate > 0:
            raise BenchInputError('request_rates: every rate must be above 0 requests per second, got %r in %s'
                                  % (rate, list(request_rates)))
    for name, value in (('slo_ttft_s', slo_ttft_s), ('slo_tpot_ms', slo_tpot_ms)):
        if value is not None and not value > 0:
            raise BenchInputError('%s must be above 0 (or unset for no objective), got %r' % (name, value))
    for name, value, least in (('requests_per_level', requests_per_level, 1), ('warmup_requests', warmup_requests, 0),
                               ('max_tokens', max_tokens, 2), ('prompt_tokens', prompt_tokens, 1),
                               ('timeout_s', timeout_s, 1)):
        if value < least:
            raise BenchInputError('%s must be %d or more, got %s' % (name, least, value))
    return sorted(set(concurrency))


def parse_base_url(base_url):
    """(scheme, host, port, path prefix) of a server's base URL: endpoint_rule.parse_url, the one URL parser."""
    return parse_url(base_url, 'base_url', BenchInputError)


def requests_at_level(level, requests_per_level):
    """A level sends at least one request per stream, so that every stream has work."""
    return max(level, requests_per_level)


# --------------------------------------------------------------------------- prompts
def new_seed(entropy):
    """A run's prompt seed from bytes of entropy (os.urandom on the target): a whole number
    below 2**31, short enough to copy into bench_prompt_seed."""
    return int.from_bytes(bytes(entropy[:8]), 'big') % (2 ** 31)


def synthetic_prompt(n_words, seed, label):
    """n_words words drawn from WORDS by a generator seeded with (seed, label).

    label names the request ('warmup-0', 'c4-3', 'r2.0-5'), so that every request of a run and
    every run (a new seed) starts with different words: a server's prompt cache then finds no
    common prefix beyond the chat template's own tokens. The words for n and n+1 share their
    first n, so the sizing below can count a longer or a shorter prompt of the same text.
    """
    rng = random.Random('%s/%s' % (seed, label))
    return ' '.join(rng.choice(WORDS) for _word in range(max(n_words, 1)))


def size_prompt(target_tokens, count_tokens, seed, label, words_guess=None, attempts=12):
    """(text, n_words, tokens): the prompt of this request whose exact text the tokenizer counts
    closest to target_tokens (equal wherever a word count reaches it, else one token off).

    count_tokens(text) -> tokens (the server's /tokenize of the text that is then sent). The word
    count starts at words_guess (the previous request's) and moves by the tokens still missing
    per token of a word, inside the bracket of counts seen below and above the target.
    """
    n_words = max(1, words_guess or target_tokens)
    below, above = 0, None
    best = None
    for _attempt in range(attempts):
        text = synthetic_prompt(n_words, seed, label)
        tokens = count_tokens(text)
        if best is None or abs(tokens - target_tokens) < abs(best[2] - target_tokens):
            best = (text, n_words, tokens)
        if tokens == target_tokens:
            break
        per_word = float(tokens) / n_words if tokens > 0 else 1.0
        step = max(1, int(round(abs(target_tokens - tokens) / per_word)))
        if tokens < target_tokens:
            below = max(below, n_words)
            following = n_words + step
        else:
            above = n_words if above is None else min(above, n_words)
            following = n_words - step
        if above is not None and not below < following < above:
            following = (below + above) // 2
        if following < 1 or following == n_words or (above is not None and above - below <= 1):
            break
        n_words = following
    return best


def estimated_prompt(target_tokens, seed, label):
    """Without a tokenizer: one token per word (the report says 'estimate')."""
    return synthetic_prompt(target_tokens, seed, label), target_tokens, None


def poisson_arrivals(count, rate, seed):
    """Send times (s from the start) of count requests at rate per second, exponential gaps from a
    generator seeded with seed, scaled so that the last one is at count / rate as `vllm bench
    serve` does (vllm/benchmarks/serve.py get_request): runs with other seeds then send the same
    number of requests in the same time, and only the bunching differs."""
    if count < 1:
        return []
    if rate <= 0:
        raise BenchInputError('request_rates: every rate must be above 0 requests per second, got %r' % (rate,))
    rng = random.Random('arrivals/%s/%s' % (seed, rate))
    times, now = [], 0.0
    for _request in range(count):
        now += rng.expovariate(rate)
        times.append(now)
    scale = (count / float(rate)) / times[-1]
    return [t * scale for t in times]


# --------------------------------------------------------------------------- one request
def request_metrics(record):
    """Figures of one finished StreamRecord (plugins/module_utils/sse.py), or its failure.

    Returns a dict with ok False and error set when the request failed or the server sent no
    usage block. DEFINITIONS (below) says what each figure is.
    """
    result = {'ok': False, 'error': record.error}
    if record.error:
        return result
    if not record.usage or 'completion_tokens' not in record.usage:
        result['error'] = ('the stream carried no usage block: the server ignores '
                           'stream_options.include_usage, so tokens cannot be counted')
        return result
    if not record.token_times:
        result['error'] = 'the stream carried no text at all (finish_reason %s)' % record.finish_reason
        return result
    completion = int(record.usage['completion_tokens'])
    prompt = int(record.usage.get('prompt_tokens') or 0)
    first, last = record.token_times[0], record.token_times[-1]
    end = record.end if record.end is not None else last
    ttft = first - record.start
    decode_s = last - first
    gaps = [b - a for a, b in zip(record.token_times, record.token_times[1:])]
    reasoning_tokens, reasoning_source = split_reasoning_tokens(
        completion, record.usage, record.reasoning_chunks, record.content_chunks)
    result.update({
        'ok': True,
        'error': None,
        'prompt_tokens': prompt,
        'cached_tokens': cached_prompt_tokens(record.usage, record.timings),
        'completion_tokens': completion,
        'chunks': len(record.token_times),
        'reasoning_tokens': reasoning_tokens,
        'answer_tokens': completion - reasoning_tokens,
        'reasoning_tokens_source': reasoning_source,
        'finish_reason': record.finish_reason,
        'answer_empty_budget_spent_reasoning': budget_spent_reasoning(record),
        'ttft_s': ttft,
        'e2e_s': end - record.start,
        'decode_s': decode_s,
        'tpot_s': decode_s / (completion - 1) if completion > 1 and decode_s > 0 else None,
        'decode_tok_s': (completion - 1) / decode_s if completion > 1 and decode_s > 0 else None,
        'prefill_tok_s': prompt / ttft if prompt and ttft > 0 else None,
        'itl_s': gaps,
        'itl_token_s': token_gaps(gaps, completion),
        'start_s': record.start,
        'end_s': end,
        'server': server_timings(record.timings),
    })
    return result


def token_gaps(chunk_gaps, completion_tokens):
    """Inter-token latency per token: each gap between chunks shared by the tokens the later
    chunk brought. A server that streams k tokens a chunk (vLLM sends 2 with some settings)
    has gaps k times a token's; spread over the (n - 1) tokens after the first, their mean is
    TPOT. With one token a chunk they are the chunk gaps."""
    if not chunk_gaps or completion_tokens < 2:
        return []
    per_gap = max(1.0, float(completion_tokens - 1) / len(chunk_gaps))
    return [gap / per_gap for gap in chunk_gaps]


def cached_prompt_tokens(usage, timings):
    """Prompt tokens the server took from its prompt cache, as it reports them: the OpenAI usage
    field usage.prompt_tokens_details.cached_tokens (vLLM with prefix caching; llama-server
    since b6000 or so), else llama-server's own timings.cache_n. None when neither is sent."""
    details = (usage or {}).get('prompt_tokens_details') or {}
    if isinstance(details, dict) and isinstance(details.get('cached_tokens'), int):
        return details['cached_tokens']
    if timings and isinstance(timings.get('cache_n'), int):
        return timings['cache_n']
    return None


def split_reasoning_tokens(completion_tokens, usage, reasoning_chunks, content_chunks):
    """(reasoning tokens, source): from usage.completion_tokens_details.reasoning_tokens when
    the server sends it, else the output tokens split in proportion to the chunks of each
    channel (llama-server and vLLM send about one token per chunk)."""
    details = usage.get('completion_tokens_details') or {}
    if isinstance(details, dict) and details.get('reasoning_tokens') is not None:
        return int(details['reasoning_tokens']), 'usage'
    total = reasoning_chunks + content_chunks
    if not reasoning_chunks or not total:
        return 0, 'chunks'
    return int(round(completion_tokens * float(reasoning_chunks) / total)), 'chunks'


def budget_spent_reasoning(record):
    """True when the answer is empty because max_tokens ran out while the model was thinking."""
    return bool(record.finish_reason == 'length' and record.reasoning.strip() and not record.content.strip())


def server_timings(timings):
    """llama-server's own figures for one request (None for servers that send none)."""
    if not timings:
        return None
    predicted_n, predicted_ms = timings.get('predicted_n'), timings.get('predicted_ms')
    intervals = None
    if predicted_n and predicted_n > 1 and predicted_ms:
        intervals = (predicted_n - 1) / (predicted_ms / 1000.0)
    return {
        'prompt_tokens': timings.get('prompt_n'),
        'cached_tokens': timings.get('cache_n'),
        'prefill_tok_s': timings.get('prompt_per_second'),
        'predicted_tokens': timings.get('predicted_n'),
        'decode_ms': timings.get('predicted_ms'),
        'decode_tok_s': timings.get('predicted_per_second'),
        'decode_tok_s_intervals': intervals,
    }


# --------------------------------------------------------------------------- definitions
# Each figure once: its key here, what it measures, and the name the same quantity has in
# `vllm bench serve` (vllm/benchmarks/serve.py calculate_metrics) and in GuideLLM. A name in
# parentheses is a near equivalent; the note says where it differs.
DEFINITIONS = (
    ('TTFT', 'ttft_s', 'time to first token: from sending the request to the first streamed chunk that carries '
     'text (answer or reasoning); queueing, prefill and the network included',
     'ttft (mean_ttft_ms, median_ttft_ms, p99_ttft_ms)', 'time_to_first_token_ms'),
    ('TPOT', 'tpot_s', 'time per output token, the first excluded: (last text chunk - first text chunk) / '
     '(output tokens - 1)',
     'tpot (vLLM runs to the end of the stream: (e2el - ttft) / (output tokens - 1))',
     'inter_token_latency_ms (GuideLLM\'s time_per_output_token_ms counts the first token and TTFT)'),
    ('ITL per chunk', 'itl_s', 'the gaps between successive streamed chunks that carry text; a server that '
     'streams k tokens a chunk shows gaps k times a token\'s', 'itl (mean_itl_ms, median_itl_ms, p99_itl_ms)',
     'none'),
    ('ITL per token', 'itl_token_s', 'each chunk gap shared by the tokens its chunk brought ((output tokens - 1) / '
     'gaps a chunk); its mean is TPOT', 'none (equal to itl where one token comes a chunk)',
     'inter_token_latency_ms (its mean)'),
    ('E2E latency', 'e2e_s', 'from sending the request to the end of the stream ([DONE])',
     'e2el (mean_e2el_ms, ...)', 'request_latency'),
    ('decode per stream', 'decode_tok_s', 'one request\'s output tokens after the first over its decode time, '
     '1 / TPOT; the mean over requests', 'none (1000 / mean_tpot_ms is close)',
     'none (GuideLLM\'s per-request output tokens per second counts the first token and TTFT)'),
    ('aggregate decode', 'aggregate_output_tok_s', 'every output token of a level over the level\'s wall time, '
     'from its first request sent to its last answer read', 'output_throughput', 'output_tokens_per_second'),
    ('prefill', 'prefill_tok_s', 'prompt tokens / TTFT, the mean over requests: cached prompt tokens inflate it, '
     'so they are counted beside it', 'none', 'none'),
    ('goodput', 'goodput', 'requests that met every stated objective (TTFT at most bench_slo_ttft_s, TPOT at '
     'most bench_slo_tpot_ms), per second of the level', 'request_goodput (--goodput ttft:MS tpot:MS)', 'none'),
)


# --------------------------------------------------------------------------- uncertainty
def bootstrap_ci(values, statistic, seed, resamples=1000, confidence=0.95):
    """[low, high] of a percentile bootstrap over values (resampled with replacement, seeded so
    that a report's figures repeat); None for fewer than two values."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    rng = random.Random('bootstrap/%s' % (seed,))
    size = len(values)
    stats = sorted(statistic([values[rng.randrange(size)] for _draw in range(size)]) for _resample in range(resamples))
    tail = 50.0 * (1.0 - confidence)
    return [percentile(stats, tail), percentile(stats, 100.0 - tail)]


def median(values):
    return percentile(values, 50)


def pstdev(values):
    """Population standard deviation (numpy's np.std, as vllm bench serve reports std_*_ms)."""
    values = list(values)
    if not values:
        return None
    avg = mean(values)
    return math.sqrt(sum((v - avg) ** 2 for v in values) / len(values))


def goodput(ok, sent, wall_s, slo_ttft_s=None, slo_tpot_ms=None):
    """Requests that met the objectives, as `vllm bench serve --goodput` counts them: TTFT at most
    slo_ttft_s and TPOT at most slo_tpot_ms (a one-token answer's TPOT counts as 0); failed
    requests are never good. None when no objective is set."""
    if slo_ttft_s is None and slo_tpot_ms is None:
        return None
    good = 0
    for metrics in ok:
        if slo_ttft_s is not None and metrics['ttft_s'] > slo_ttft_s:
            continue
        if slo_tpot_ms is not None and 1000.0 * (metrics['tpot_s'] or 0.0) > slo_tpot_ms:
            continue
        good += 1
    return {
        'slo_ttft_s': slo_ttft_s,
        'slo_tpot_ms': slo_tpot_ms,
        'requests_good': good,
        'fraction': round(float(good) / sent, 4) if sent else None,
        'request_goodput': round(good / wall_s, 4) if wall_s > 0 else None,
    }


def peak_concurrency(ok):
    """Most requests in flight at once, over half-open [start, end) intervals."""
    events = sorted([(m['start_s'], 1) for m in ok] + [(m['end_s'], -1) for m in ok])
    current = peak = 0
    for _time, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def vllm_result(ok, failed, wall_s, good=None):
    """A level under the result keys of `vllm bench serve --save-result` (vllm/benchmarks/serve.py),
    times in ms, so that a notebook reads both tools' files alike."""
    result = {
        'duration': round(wall_s, 4),
        'completed': len(ok),
        'failed': failed,
        'total_input_tokens': sum(m['prompt_tokens'] for m in ok),
        'total_output_tokens': sum(m['completion_tokens'] for m in ok),
        'request_throughput': None,
        'request_goodput': (good or {}).get('request_goodput'),
        'output_throughput': None,
        'total_token_throughput': None,
        'max_concurrent_requests': peak_concurrency(ok),
    }
    if wall_s > 0:
        result['request_throughput'] = round(len(ok) / wall_s, 4)
        result['output_throughput'] = round(result['total_output_tokens'] / wall_s, 4)
        result['total_token_throughput'] = round((result['total_input_tokens'] + result['total_output_tokens']) / wall_s, 4)
    # vLLM's TPOT runs from the first token to the end of the stream (its latency)
    tpots = [(m['e2e_s'] - m['ttft_s']) / (m['completion_tokens'] - 1) for m in ok if m['completion_tokens'] > 1]
    series = (('ttft', [m['ttft_s'] for m in ok]), ('tpot', tpots),
              ('itl', [gap for m in ok for gap in m['itl_s']]), ('e2el', [m['e2e_s'] for m in ok]))
    for name, values in series:
        ms = [1000.0 * v for v in values]
        result['mean_%s_ms' % name] = _round(mean(ms), 4)
        result['median_%s_ms' % name] = _round(median(ms), 4)
        result['std_%s_ms' % name] = _round(pstdev(ms), 4)
        result['p99_%s_ms' % name] = _round(percentile(ms, 99), 4)
    return result


# --------------------------------------------------------------------------- one level
CI_FIGURES = (('ttft_s_mean', 'ttft_s', mean), ('ttft_s_p50', 'ttft_s', median), ('tpot_s_mean', 'tpot_s', mean),
              ('e2e_s_mean', 'e2e_s', mean), ('decode_tok_s', 'decode_tok_s', mean),
              ('prefill_tok_s', 'prefill_tok_s', mean))


def level_summary(concurrency, metrics, wall_s, slo_ttft_s=None, slo_tpot_ms=None, seed=0, request_rate=None):
    """Figures of one level (a concurrency, or a request rate with Poisson arrivals) from its
    requests' request_metrics and wall time."""
    ok = [m for m in metrics if m['ok']]
    failed = [m for m in metrics if not m['ok']]
    decode = [m['decode_tok_s'] for m in ok if m['decode_tok_s'] is not None]
    itls = [gap for m in ok for gap in m['itl_s']]
    output_tokens = sum(m['completion_tokens'] for m in ok)
    cached = [m['cached_tokens'] for m in ok if m.get('cached_tokens') is not None]
    prompt_total = sum(m['prompt_tokens'] for m in ok)
    server = [m['server'] for m in ok if m['server']]
    server_decode = [s['decode_tok_s'] for s in server if s.get('decode_tok_s')]
    server_prefill = [s['prefill_tok_s'] for s in server if s.get('prefill_tok_s')]
    server_intervals = [s['decode_tok_s_intervals'] for s in server if s.get('decode_tok_s_intervals')]
    decode_mean = mean(decode)
    if concurrency is None:
        concurrency = peak_concurrency(ok)
    good = goodput(ok, len(metrics), wall_s, slo_ttft_s, slo_tpot_ms)
    summary = {
        'concurrency': concurrency,
        'request_rate': request_rate,
        'requests': len(metrics),
        'requests_ok': len(ok),
        'requests_failed': len(failed),
        'errors': sorted(set(m['error'] for m in failed))[:3],
        'wall_s': round(wall_s, 3),
        'prompt_tokens_mean': _round(mean(m['prompt_tokens'] for m in ok), 1),
        'cached_prompt_tokens': sum(cached) if cached else None,
        'cached_prompt_fraction': round(float(sum(cached)) / prompt_total, 4) if cached and prompt_total else None,
        'output_tokens': output_tokens,
        'ttft_s': describe(m['ttft_s'] for m in ok),
        'tpot_s': describe(m['tpot_s'] for m in ok),
        'itl_s': describe(itls),
        'itl_token_s': describe(gap for m in ok for gap in m['itl_token_s']),
        'e2e_s': describe(m['e2e_s'] for m in ok),
        'prefill_tok_s': _round(mean([m['prefill_tok_s'] for m in ok if m['prefill_tok_s']]), 2),
        'decode_tok_s': _round(decode_mean, 2),
        'decode_tok_s_p50': _round(percentile(decode, 50), 2),
        'decode_tok_s_stdev': _round(stdev(decode), 3),
        'decode_tok_s_cv_percent': _round(100.0 * stdev(decode) / decode_mean, 2) if decode_mean else None,
        'aggregate_output_tok_s': round(output_tokens / wall_s, 2) if wall_s > 0 else None,
        'request_throughput': round(len(ok) / wall_s, 4) if wall_s > 0 else None,
        'peak_concurrency': peak_concurrency(ok),
        'goodput': good,
        'ci95': dict((name, _round_pair(bootstrap_ci([m[key] for m in ok], stat, '%s/%s/%s' % (seed, concurrency, name))))
                     for name, key, stat in CI_FIGURES),
        'vllm': vllm_result(ok, len(failed), wall_s, good),
        'reasoning_tokens': sum(m['reasoning_tokens'] for m in ok),
        'answer_tokens': sum(m['answer_tokens'] for m in ok),
        'answers_empty_budget_spent_reasoning': sum(1 for m in ok if m['answer_empty_budget_spent_reasoning']),
        'server': None,
    }
    if server:
        server_intervals_mean = mean(server_intervals)
        summary['server'] = {
            'decode_tok_s': _round(mean(server_decode), 2),
            'decode_tok_s_intervals': _round(server_intervals_mean, 2),
            'prefill_tok_s': _round(mean(server_prefill), 2),
            'cached_prompt_tokens': sum(s.get('cached_tokens') or 0 for s in server),
            'decode_ratio': _round(decode_mean / server_intervals_mean, 4) if decode_mean and server_intervals_mean else None,
        }
    return summary


def _round_pair(pair, digits=4):
    return None if pair is None else [round(pair[0], digits), round(pair[1], digits)]


def level_name(level):
    if level.get('request_rate') is not None:
        return 'rate %s req/s' % level['request_rate']
    return 'concurrency %d' % level['concurrency']


def level_line(level):
    """One line per level, for the play's output."""
    line = '%s: %d/%d ok' % (level_name(level), level['requests_ok'], level['requests'])
    if level['requests_ok']:
        line += ', TTFT p50 %.3f s, decode %s tok/s per stream (spread %s %%), aggregate %s tok/s' % (
            level['ttft_s']['p50'], level['decode_tok_s'], level['decode_tok_s_cv_percent'], level['aggregate_output_tok_s'])
    if level.get('cached_prompt_tokens'):
        line += ', %d prompt tokens cached' % level['cached_prompt_tokens']
    if level.get('server'):
        line += ', llama-server decode %s tok/s (ratio %s)' % (level['server']['decode_tok_s'], level['server']['decode_ratio'])
    return line


# A spread of per-stream decode above this (coefficient of variation, %) means the requests of a
# level did not run alike: another load on the machine, a server that batches unevenly.
SPREAD_WARNING_PERCENT = 10.0
# Cached prompt tokens above this share make the prefill figure and TTFT optimistic.
CACHED_WARNING_FRACTION = 0.1


def sweep_warnings(levels):
    """Messages an operator should read: failures, empty answers, cached prompts, a large spread."""
    warnings = []
    for level in levels:
        name = level_name(level)
        if level['requests_failed']:
            warnings.append('%s: %d of %d requests failed: %s' % (
                name, level['requests_failed'], level['requests'], '; '.join(level['errors'])))
        if level['answers_empty_budget_spent_reasoning']:
            warnings.append(
                '%s: %d answers are empty because max_tokens ran out while the model was still '
                'reasoning; raise max_tokens or disable reasoning (for example chat_template_kwargs '
                'enable_thinking false, or llama-server --reasoning-budget 0)'
                % (name, level['answers_empty_budget_spent_reasoning']))
        if (level.get('cached_prompt_fraction') or 0) > CACHED_WARNING_FRACTION:
            warnings.append('%s: the server took %.0f %% of the prompt tokens from its prompt cache, so TTFT and '
                            'prefill read optimistic; leave bench_prompt_seed unset for fresh prompts'
                            % (name, 100.0 * level['cached_prompt_fraction']))
        if (level.get('decode_tok_s_cv_percent') or 0) > SPREAD_WARNING_PERCENT:
            warnings.append('%s: per-stream decode spreads %.1f %% over its requests (above %.0f %%): something else '
                            'loaded the machine or the server, so compare this level with care; run it again on a '
                            'quiet machine or with more requests'
                            % (name, level['decode_tok_s_cv_percent'], SPREAD_WARNING_PERCENT))
    return warnings


def request_record(level, number, label, metrics, prompt_tokens_sized):
    """One request as a JSON line for requests.jsonl: the figures of DEFINITIONS, times in s."""
    record = {'level': level, 'number': number, 'label': label, 'ok': metrics['ok'], 'error': metrics['error'],
              'prompt_tokens_sized': prompt_tokens_sized}
    if metrics['ok']:
        for key in ('prompt_tokens', 'cached_tokens', 'completion_tokens', 'chunks', 'reasoning_tokens', 'finish_reason'):
            record[key] = metrics[key]
        for key in ('ttft_s', 'tpot_s', 'e2e_s', 'decode_tok_s', 'prefill_tok_s'):
            record[key] = _round(metrics[key], 6)
        record['itl_s'] = [round(gap, 6) for gap in metrics['itl_s']]
        record['server'] = metrics['server']
    return record


# --------------------------------------------------------------------------- model weights
def weight_bytes_per_token(tensors, expert_count=None, expert_used_count=None):
    """Bytes of weights a decode step reads for one token.

    tensors: (name, nbytes) pairs of every GGUF tensor. Expert tensors (`*_exps.*`, llama.cpp's
    naming in src/llama-arch.cpp: ffn_gate_exps, ffn_up_exps, ffn_down_exps) count for the
    used fraction of experts only; the token embedding counts for one row, which is negligible,
    so it is left out. Returns (bytes_per_token, bytes_total).
    """
    total = 0
    per_token = 0.0
    expert_fraction = 1.0
    if expert_count and expert_used_count:
        expert_fraction = float(expert_used_count) / float(expert_count)
    for name, nbytes in tensors:
        total += nbytes
        if name.startswith('token_embd.'):
            continue
        if '_exps.' in name:
            per_token += nbytes * expert_fraction
        else:
            per_token += nbytes
    return int(round(per_token)), total


def split_gguf_paths(first_path):
    """Every shard of a gguf-split model given its first shard (`<stem>-00001-of-0000N.gguf`,
    llama.cpp's naming in src/llama.cpp llama_split_path), or [first_path] for one file."""
    import re
    match = re.match(r'^(.*)-00001-of-(\d{5})\.gguf\Z', first_path)
    if not match:
        return [first_path]
    count = int(match.group(2))
    return ['%s-%05d-of-%05d.gguf' % (match.group(1), i + 1, count) for i in range(count)]


def model_weights(files):
    """Weights summary of a GGUF model: files are plugins/module_utils/gguf.py GGUFFile objects
    of every shard (the first holds the metadata)."""
    first = files[0]
    arch = first.get('general.architecture')
    if arch is not None and not isinstance(arch, str):
        raise BenchInputError('%s: metadata general.architecture is %r, expected a name; the file is damaged'
                              % (first.path, arch))
    expert_count = first.get('%s.expert_count' % arch) if arch else None
    expert_used = first.get('%s.expert_used_count' % arch) if arch else None
    for key, value in (('expert_count', expert_count), ('expert_used_count', expert_used)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise BenchInputError('%s: metadata %s.%s is %r, expected a whole number >= 0; the file is damaged or '
                                  'not written for llama.cpp' % (first.path, arch, key, value))
    if expert_count is not None and expert_used is not None and expert_used > expert_count:
        raise BenchInputError('%s: metadata %s.expert_used_count %d is above expert_count %d'
                              % (first.path, arch, expert_used, expert_count))
    tensors = [(info.name, info.nbytes) for gfile in files for info in gfile.tensors]
    names = set(name for name, _nbytes in tensors)
    per_token, total = weight_bytes_per_token(tensors, expert_count, expert_used)
    if 'output.weight' not in names:
        # tied embeddings: the output projection reads the whole token embedding
        per_token += sum(nbytes for name, nbytes in tensors if name.startswith('token_embd.'))
    n_params = sum(info.n_elements for gfile in files for info in gfile.tensors)
    return {
        'architecture': arch,
        'name': first.get('general.name'),
        'parameters': n_params,
        'expert_count': expert_count,
        'expert_used_count': expert_used,
        'weights_bytes': total,
        'bytes_read_per_token': per_token,
        'bits_per_weight': round(8.0 * total / n_params, 3) if n_params else None,
    }


# --------------------------------------------------------------------------- output files
def output_path_problem(path, option):
    """Why a file cannot be written at path (None when it can), checked before any work starts.

    option names the module option in the message. The directory must exist and be writable
    (the file is written through a temporary file beside it), and path must not be a directory.
    """
    if not path:
        return None
    problem = path_problem(path)
    return '%s %s' % (option, problem) if problem else None
