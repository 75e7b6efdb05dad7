# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arithmetic of an inference benchmark, as pure functions.

Definitions (the ones serving benchmarks use):
- TTFT: from sending the request to the first chunk that carries text (answer or reasoning).
- decode time: from that first chunk to the last one that carries text.
- time per output token (TPOT): decode time / (output tokens - 1); per-stream decode tok/s is
  its inverse. llama-server's own `predicted_per_second` divides the tokens it decoded by the
  time from its first token to its last (tools/server/server-context.cpp: t_start_generation
  is taken when n_decoded becomes 1), so it counts n tokens over n-1 intervals; the agreement
  ratio compares the client's figure with the server's on the same footing,
  (predicted_n - 1) / predicted_ms.
- inter-token latency (ITL): the gaps between successive chunks that carry text.
- prefill tok/s: prompt tokens / TTFT (so it includes queueing and the network at high
  concurrency); llama-server's own `prompt_per_second` is reported beside it.
- aggregate output tok/s: all output tokens of a level / the level's wall time.
Tokens are counted from the server's usage block, never from chunks.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import path_problem

WORDS = (
    'amber', 'basalt', 'cedar', 'delta', 'ember', 'fjord', 'granite', 'harbor', 'island', 'juniper',
    'kelp', 'lagoon', 'meadow', 'nectar', 'orchid', 'prairie', 'quartz', 'river', 'summit', 'tundra',
    'upland', 'valley', 'willow', 'xylem', 'yarrow', 'zephyr',
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
def validate_options(concurrency, requests_per_level, warmup_requests, max_tokens, prompt_tokens, timeout_s):
    """Raise BenchInputError naming the first bad option; return the sorted, unique levels."""
    if not concurrency:
        raise BenchInputError('concurrency: give at least one level, for example [1, 2, 4]')
    for level in concurrency:
        if level < 1:
            raise BenchInputError('concurrency: every level must be 1 or more, got %d in %s' % (level, list(concurrency)))
    for name, value, least in (('requests_per_level', requests_per_level, 1), ('warmup_requests', warmup_requests, 0),
                               ('max_tokens', max_tokens, 2), ('prompt_tokens', prompt_tokens, 1),
                               ('timeout_s', timeout_s, 1)):
        if value < least:
            raise BenchInputError('%s must be %d or more, got %s' % (name, least, value))
    return sorted(set(concurrency))


def parse_base_url(base_url):
    """(scheme, host, port, path prefix) of an OpenAI-compatible server's base URL.

    The host may be an IPv6 address in brackets; the port defaults to the scheme's. A port out of
    range, spaces, a query or credentials in the URL are refused with the value named.
    """
    if not isinstance(base_url, str) or not re.match(r'\A[!-~]+\Z', base_url):
        raise BenchInputError('base_url %r has spaces, control characters or nothing in it; give http://HOST:PORT'
                              % (base_url,))
    parts = urlsplit(base_url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise BenchInputError('base_url must look like http://HOST:PORT, got %r' % base_url)
    if parts.query or parts.fragment or parts.username is not None:
        raise BenchInputError('base_url %r has a query, a fragment or credentials; give http://HOST:PORT '
                              '(the API key goes in api_key)' % base_url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port < 65536:
        raise BenchInputError('base_url %r has a port that is not a number in 1-65535; give http://HOST:PORT, '
                              'e.g. http://127.0.0.1:8080' % base_url)
    return parts.scheme, parts.hostname, port, parts.path.rstrip('/')


def requests_at_level(level, requests_per_level):
    """A level sends at least one request per stream, so that every stream has work."""
    return max(level, requests_per_level)


# --------------------------------------------------------------------------- prompts
def synthetic_prompt(n_words, salt):
    """A prompt of n_words words; salt (the request number) leads it, so that no two requests
    share a prefix a server could take from its prompt cache."""
    words = ['%s.' % salt] + [WORDS[(i * 7 + len(str(salt))) % len(WORDS)] for i in range(max(n_words - 1, 0))]
    return 'Request ' + ' '.join(words)


def fit_prompt_words(target_tokens, count_tokens, attempts=5):
    """Number of words whose prompt the tokenizer counts closest to target_tokens.

    count_tokens(n_words) -> tokens (the server's tokenizer). Scales the word count by the
    ratio seen, a few times; returns (n_words, tokens).
    """
    n_words = max(target_tokens, 1)
    best = None
    for _attempt in range(attempts):
        tokens = count_tokens(n_words)
        if best is None or abs(tokens - target_tokens) < abs(best[1] - target_tokens):
            best = (n_words, tokens)
        if tokens == target_tokens or tokens <= 0:
            break
        next_words = max(1, int(round(n_words * float(target_tokens) / tokens)))
        if next_words == n_words:
            next_words = n_words + (1 if tokens < target_tokens else -1)
        if next_words < 1:
            break
        n_words = next_words
    return best


# --------------------------------------------------------------------------- one request
def request_metrics(record):
    """Figures of one finished StreamRecord (plugins/module_utils/sse.py), or its failure.

    Returns a dict with ok False and error set when the request failed or the server sent no
    usage block.
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
    ttft = first - record.start
    decode_s = last - first
    gaps = [b - a for a, b in zip(record.token_times, record.token_times[1:])]
    reasoning_tokens, reasoning_source = split_reasoning_tokens(
        completion, record.usage, record.reasoning_chunks, record.content_chunks)
    result.update({
        'ok': True,
        'error': None,
        'prompt_tokens': prompt,
        'completion_tokens': completion,
        'reasoning_tokens': reasoning_tokens,
        'answer_tokens': completion - reasoning_tokens,
        'reasoning_tokens_source': reasoning_source,
        'finish_reason': record.finish_reason,
        'answer_empty_budget_spent_reasoning': budget_spent_reasoning(record),
        'ttft_s': ttft,
        'decode_s': decode_s,
        'tpot_s': decode_s / (completion - 1) if completion > 1 and decode_s > 0 else None,
        'decode_tok_s': (completion - 1) / decode_s if completion > 1 and decode_s > 0 else None,
        'prefill_tok_s': prompt / ttft if prompt and ttft > 0 else None,
        'itl_s': gaps,
        'end_s': record.end if record.end is not None else last,
        'server': server_timings(record.timings),
    })
    return result


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


# --------------------------------------------------------------------------- one level
def level_summary(concurrency, metrics, wall_s):
    """Figures of one concurrency level from its requests' request_metrics and wall time."""
    ok = [m for m in metrics if m['ok']]
    failed = [m for m in metrics if not m['ok']]
    decode = [m['decode_tok_s'] for m in ok if m['decode_tok_s'] is not None]
    itls = [gap for m in ok for gap in m['itl_s']]
    output_tokens = sum(m['completion_tokens'] for m in ok)
    server = [m['server'] for m in ok if m['server']]
    server_decode = [s['decode_tok_s'] for s in server if s.get('decode_tok_s')]
    server_prefill = [s['prefill_tok_s'] for s in server if s.get('prefill_tok_s')]
    server_intervals = [s['decode_tok_s_intervals'] for s in server if s.get('decode_tok_s_intervals')]
    decode_mean = mean(decode)
    summary = {
        'concurrency': concurrency,
        'requests': len(metrics),
        'requests_ok': len(ok),
        'requests_failed': len(failed),
        'errors': sorted(set(m['error'] for m in failed))[:3],
        'wall_s': round(wall_s, 3),
        'prompt_tokens_mean': _round(mean(m['prompt_tokens'] for m in ok), 1),
        'output_tokens': output_tokens,
        'ttft_s': describe(m['ttft_s'] for m in ok),
        'tpot_s': describe(m['tpot_s'] for m in ok),
        'itl_s': describe(itls),
        'prefill_tok_s': _round(mean([m['prefill_tok_s'] for m in ok if m['prefill_tok_s']]), 2),
        'decode_tok_s': _round(decode_mean, 2),
        'decode_tok_s_p50': _round(percentile(decode, 50), 2),
        'decode_tok_s_stdev': _round(stdev(decode), 3),
        'decode_tok_s_cv_percent': _round(100.0 * stdev(decode) / decode_mean, 2) if decode_mean else None,
        'aggregate_output_tok_s': round(output_tokens / wall_s, 2) if wall_s > 0 else None,
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


def level_line(level):
    """One line per level, for the play's output."""
    line = 'concurrency %d: %d/%d ok' % (level['concurrency'], level['requests_ok'], level['requests'])
    if level['requests_ok']:
        line += ', TTFT p50 %.3f s, decode %s tok/s per stream (spread %s %%), aggregate %s tok/s' % (
            level['ttft_s']['p50'], level['decode_tok_s'], level['decode_tok_s_cv_percent'], level['aggregate_output_tok_s'])
    if level.get('server'):
        line += ', llama-server decode %s tok/s (ratio %s)' % (level['server']['decode_tok_s'], level['server']['decode_ratio'])
    return line


def sweep_warnings(levels):
    """Messages an operator should read: failures, empty answers, a server that disagrees."""
    warnings = []
    for level in levels:
        if level['requests_failed']:
            warnings.append('concurrency %d: %d of %d requests failed: %s' % (
                level['concurrency'], level['requests_failed'], level['requests'], '; '.join(level['errors'])))
        if level['answers_empty_budget_spent_reasoning']:
            warnings.append(
                'concurrency %d: %d answers are empty because max_tokens ran out while the model was still '
                'reasoning; raise max_tokens or disable reasoning (for example chat_template_kwargs '
                'enable_thinking false, or llama-server --reasoning-budget 0)'
                % (level['concurrency'], level['answers_empty_budget_spent_reasoning']))
    return warnings


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
