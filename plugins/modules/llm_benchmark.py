#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_benchmark
short_description: Measure TTFT, inter-token latency and throughput of an OpenAI-compatible endpoint
version_added: 0.1.0
description:
  - Sends streaming chat completions to an OpenAI-compatible server (llama-server, vLLM) at a
    list of concurrency levels and returns, per level, requests ok and failed, time to first
    token, time per output token and inter-token latency (mean, p50, p99), prefill tok/s,
    per-stream decode tok/s with its run-to-run spread, and aggregate output tok/s.
  - Tokens are counted from the server's usage block (C(stream_options.include_usage)), never
    from chunks. Reasoning deltas (C(reasoning_content), and C(reasoning) as newer vLLM names
    it) are counted apart from the answer; answers left empty because O(max_tokens) ran out
    while the model was reasoning are counted and warned about.
  - Where the server is llama-server, its own per-request C(timings) are read too and
    reported beside the client's figures, with their ratio.
  - Every request gets its own synthetic prompt, words drawn by a generator seeded with the
    run's seed (new every run unless O(prompt_seed) is set) and the request's name, so that
    a server's prompt cache finds no common prefix beyond the chat template. Each prompt is
    sized with the server's tokenizer (C(/tokenize)) on the exact text that is sent, within
    one token of O(prompt_tokens).
  - The prompt tokens the server took from its cache (C(usage.prompt_tokens_details.cached_tokens),
    or llama-server's C(timings.cache_n)) are counted per level and warned about when they
    exceed a tenth of the prompt tokens, since they make TTFT and prefill read optimistic.
  - After the concurrency sweep, a request-rate sweep (O(request_rates)) sends requests at
    Poisson arrival times, as C(vllm bench serve --request-rate) does.
  - Per level, the figures of C(vllm bench serve)'s result file (C(mean_ttft_ms), ...),
    95% bootstrap confidence intervals of the headline figures, and goodput at the stated
    objective (O(slo_ttft_s), O(slo_tpot_ms)); every request's figures are returned too.
  - Checks the endpoint before any load (reachable, key accepted, model served, answers with
    an event stream) and fails with a message naming the option to fix.
  - Uses only the Python standard library on the target.
author:
  - gpulab.inference contributors (@gpulab)
options:
  base_url:
    description:
      - Root of the server, without C(/v1), for example C(http://127.0.0.1:8080).
    type: str
    required: true
  api_key:
    description:
      - Bearer token sent with every request. Empty sends none.
    type: str
    default: ""
  model:
    description:
      - Model name sent in requests. Empty takes the only model C(/v1/models) lists; a name the
        server does not list fails the task.
    type: str
    default: ""
  prompt_tokens:
    description:
      - Length of the synthetic user message in tokens of the server's tokenizer (estimated as
        one token per word where the server has no C(/tokenize)). The chat template adds a few.
    type: int
    default: 128
  prompt_seed:
    description:
      - Seed of the prompts' words. Unset, every run draws a new one (returned in
        C(prompt.seed)), so no run reuses an earlier run's prompts; set it to send the same
        prompts again on purpose (a prompt-cache test).
    type: int
  request_rates:
    description:
      - Request rates (requests per second) of a second sweep with Poisson arrivals and no
        limit on concurrency, each sending O(requests_per_level) requests (at least two). Empty
        runs none.
    type: list
    elements: float
    default: []
  slo_ttft_s:
    description:
      - Objective for TTFT in seconds; a request meets it when its TTFT is at most this. Goodput
        counts the requests that meet every objective set. Unset with O(slo_tpot_ms) unset, no
        goodput is computed.
    type: float
  slo_tpot_ms:
    description:
      - Objective for TPOT (the first token excluded) in milliseconds, as O(slo_ttft_s).
    type: float
  profile:
    description:
      - Name of the sweep's profile, recorded in the run's conditions only.
    type: str
    default: ""
  label:
    description:
      - Name of O(base_url)'s server in a comparison. Empty takes the engine's name.
    type: str
    default: ""
  compare:
    description:
      - Other endpoints that get the same request set after O(base_url), one after the other -
        the same prompts (sized on O(base_url)'s tokenizer), the same levels and rates - for
        two engines on the same GPUs side by side in one report. Each server sees each prompt
        once, so none is served from its cache.
    type: list
    elements: dict
    default: []
    suboptions:
      label:
        description: Name of the endpoint in the report, unique among them.
        type: str
        required: true
      base_url:
        description: Root of the server, without C(/v1).
        type: str
        required: true
      api_key:
        description: Bearer token sent with its requests. Empty sends none.
        type: str
        default: ""
      model:
        description: Model name sent; empty takes the only model C(/v1/models) lists.
        type: str
        default: ""
  max_tokens:
    description:
      - Output tokens asked for per request.
    type: int
    default: 128
  ignore_eos:
    description:
      - Send C(ignore_eos) (understood by llama-server and vLLM) so that every request decodes
        O(max_tokens) tokens and the figures of all requests cover the same length.
    type: bool
    default: true
  concurrency:
    description:
      - Concurrency levels, each run in turn (ascending), every level with that many streams.
    type: list
    elements: int
    default: [1, 2, 4]
  requests_per_level:
    description:
      - Requests sent at each level; a level sends at least one per stream.
    type: int
    default: 4
  warmup_requests:
    description:
      - Requests sent one at a time before the sweep and not counted (first-request costs such
        as CUDA graph capture). At least one is always sent - it checks the streaming path, the
        usage block and the key before the sweep.
    type: int
    default: 1
  timeout_s:
    description:
      - Seconds a request may wait for the next byte of its answer.
    type: int
    default: 300
  greedy:
    description:
      - Send C(temperature=0) (greedy decoding). By default no sampling parameter is sent, so
        the server's defaults apply, as for a plain chat client.
    type: bool
    default: false
  sampling:
    description:
      - More request fields, sent as given (for example C(top_p), C(chat_template_kwargs)).
    type: dict
    default: {}
  gguf_path:
    description:
      - The served GGUF on this host (the first shard of a split model). When set, its header
        gives the weights' size and the bytes a decode step reads per token (experts counted
        for the used fraction), for the report's bandwidth figure.
    type: path
  progress_path:
    description:
      - File rewritten (atomically) with one line saying where the sweep is, for a play that
        runs this module with C(async) and shows its progress.
    type: path
attributes:
  check_mode:
    support: partial
    description: Can run in check mode.
    details: In check mode only the endpoint checks and one request run; no sweep is sent.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Every level runs after the previous one has ended; a level's wall time runs from its first
    request sent to its last answer read.
seealso:
  - module: gpulab.inference.gpu_sampler
  - module: gpulab.inference.inference_report
"""

EXAMPLES = r"""
- name: Benchmark the head's llama-server
  gpulab.inference.llm_benchmark:
    base_url: http://127.0.0.1:8080
    concurrency: [1, 2, 4, 8]
  register: bench

- name: Benchmark vLLM with a key from the vault, greedy
  gpulab.inference.llm_benchmark:
    base_url: http://10.0.0.10:8000
    api_key: "{{ vllm_api_key }}"
    model: MiniMaxAI/MiniMax-M2
    greedy: true
    prompt_tokens: 512
    max_tokens: 256
  register: bench

- name: The same requests against llama-server and vLLM on the same GPU, one after the other
  gpulab.inference.llm_benchmark:
    base_url: http://127.0.0.1:8080
    label: llama.cpp
    compare:
      - label: vllm
        base_url: http://127.0.0.1:8000
        api_key: "{{ vllm_api_key }}"
  register: bench

- name: Show the decode figure at concurrency 1
  ansible.builtin.debug:
    msg: "{{ bench.benchmark.levels[0].decode_tok_s }} tok/s"
"""

RETURN = r"""
benchmark:
  description: What was measured.
  returned: success
  type: dict
  contains:
    base_url:
      description: The endpoint.
      type: str
      sample: http://127.0.0.1:8080
    engine:
      description: V(llama.cpp) (the server answers C(/props)), V(vllm) (it answers C(/version)) or V(openai-compatible).
      type: str
      sample: llama.cpp
    model:
      description: The model name sent.
      type: str
      sample: minimax-m2.gguf
    prompt:
      description:
        - The prompts' seed and its source (V(fresh) or V(bench_prompt_seed)), their sizing
          (V(tokenizer) or V(estimate)), and the tokens the tokenizer counted - mean, min, max
          and the largest distance from the target.
      type: dict
      sample: {target_tokens: 128, seed: 1466523221, seed_source: fresh, sizing: tokenizer, prompts: 21,
               tokens: 128, tokens_min: 128, tokens_max: 128, max_error_tokens: 0, words: 126}
    request:
      description: max_tokens, ignore_eos and the sampling fields sent.
      type: dict
      sample: {max_tokens: 128, ignore_eos: true, sampling: {}}
    levels:
      description:
        - One entry per concurrency level, ascending. Times in seconds, rates in tokens per second.
        - C(ttft_s), C(tpot_s), C(itl_s) (per chunk), C(itl_token_s), C(e2e_s) each hold mean,
          p50 and p99; C(decode_tok_s) is the mean per-stream decode rate and
          C(decode_tok_s_cv_percent) its spread over requests; C(cached_prompt_tokens) the prompt
          tokens the server took from its cache; C(ci95) 95% bootstrap intervals; C(goodput) the
          requests that met the objectives; C(vllm) the level under C(vllm bench serve)'s keys;
          C(server) holds llama-server's own figures (null for other servers) and
          C(decode_ratio), client over server.
      type: list
      elements: dict
      sample:
        - concurrency: 1
          requests: 4
          requests_ok: 4
          requests_failed: 0
          ttft_s: {mean: 0.051, p50: 0.05, p99: 0.06}
          tpot_s: {mean: 0.012, p50: 0.012, p99: 0.013}
          itl_s: {mean: 0.012, p50: 0.012, p99: 0.02}
          prefill_tok_s: 2702.1
          decode_tok_s: 82.5
          decode_tok_s_cv_percent: 0.6
          aggregate_output_tok_s: 80.1
          server: {decode_tok_s: 83.1, prefill_tok_s: 3120.4, decode_ratio: 0.9928}
    compare:
      description: One entry per endpoint of O(compare) - label, base_url, engine, model, levels, rates, warnings, and the sweep's window.
      type: list
      elements: dict
    rates:
      description: One entry per request rate of O(request_rates), shaped as C(levels), with C(request_rate) set.
      type: list
      elements: dict
    requests:
      description: Every request of the sweeps - level, label, tokens sized and counted, cached tokens, TTFT, TPOT, E2E, chunk gaps.
      type: list
      elements: dict
    conditions:
      description: Profile, warm-up requests, requests per level, load average before and after, the sweep's window in epoch seconds.
      type: dict
    summary:
      description: One line per level - requests ok, TTFT p50, decode per stream, aggregate, llama-server's decode and the ratio.
      type: list
      elements: str
      sample: ['concurrency 1: 4/4 ok, TTFT p50 0.050 s, decode 82.5 tok/s per stream (spread 0.6 %), aggregate 80.1 tok/s']
    model_weights:
      description: From the GGUF header when O(gguf_path) is set, else null.
      type: dict
      sample: {architecture: minimax-m2, parameters: 228700000000, weights_bytes: 243000000000, bytes_read_per_token: 11000000000}
    warnings:
      description: Failed requests, empty answers whose budget went to reasoning.
      type: list
      elements: str
    duration_s:
      description: Wall time of the checks, warm-up and sweep.
      type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.bench_client import Benchmark, EndpointError
from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import BenchInputError


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            base_url=dict(type='str', required=True),
            api_key=dict(type='str', default='', no_log=True),
            model=dict(type='str', default=''),
            prompt_tokens=dict(type='int', default=128, no_log=False),
            max_tokens=dict(type='int', default=128, no_log=False),
            ignore_eos=dict(type='bool', default=True),
            concurrency=dict(type='list', elements='int', default=[1, 2, 4]),
            requests_per_level=dict(type='int', default=4),
            warmup_requests=dict(type='int', default=1),
            timeout_s=dict(type='int', default=300),
            greedy=dict(type='bool', default=False),
            sampling=dict(type='dict', default={}),
            gguf_path=dict(type='path'),
            progress_path=dict(type='path'),
            prompt_seed=dict(type='int'),
            request_rates=dict(type='list', elements='float', default=[]),
            slo_ttft_s=dict(type='float'),
            slo_tpot_ms=dict(type='float'),
            profile=dict(type='str', default=''),
            label=dict(type='str', default=''),
            compare=dict(type='list', elements='dict', default=[], options=dict(
                label=dict(type='str', required=True),
                base_url=dict(type='str', required=True),
                api_key=dict(type='str', default='', no_log=True),
                model=dict(type='str', default=''),
            )),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    bench = Benchmark(module.params, module.check_mode)
    try:
        result = bench.run()
    except (BenchInputError, EndpointError) as exc:
        try:
            bench.progress('failed: %s' % exc)
        except BenchInputError:
            pass  # the progress file is what failed; the message says so
        module.fail_json(msg=str(exc))
    for warning in result['warnings']:
        module.warn(warning)
    module.exit_json(changed=False, benchmark=result)


if __name__ == '__main__':
    main()
