#!/usr/bin/env bash
# Measures the head's llama-server with GuideLLM and with the collection's llm_benchmark module,
# the same request shape on both sides, the two alternating round by round so that the load of
# the moment falls on both alike; prints one table (mean and spread over rounds per side).
# Needs root, a deployed lab (make demo) with GPULAB_LAB_NAME as it was made, and PyPI for the
# first run (GuideLLM goes into a venv of its own). Nothing reaches for the Hugging Face hub:
# GuideLLM sizes its prompts with the served model's tokenizer, the qwen2 vocabulary of the
# lab's llama.cpp archive, converted once to a local tokenizer directory.
# GuideLLM runs in node-a's network namespace, so both sides talk to 127.0.0.1 of node-a.
# Usage: scripts/bench-peer.sh [rounds, default 4]
# Settings: BENCH_PEER_CONCURRENCY (default "1 4"), BENCH_PEER_PROMPT_TOKENS (128),
# BENCH_PEER_MAX_TOKENS (64), BENCH_PEER_REQUESTS_PER_STREAM (requests per level = streams x this,
# at least 6; default 3), BENCH_PEER_VENV (/tmp/gpulab-guidellm-venv), BENCH_PEER_OUT (kept results).
set -euo pipefail

rounds=${1:-4}
repo=$(cd "$(dirname "$0")/.." && pwd)
lab=${GPULAB_LAB_NAME:-gpulab}
head="$lab-node-a"
levels=${BENCH_PEER_CONCURRENCY:-1 4}
prompt_tokens=${BENCH_PEER_PROMPT_TOKENS:-128}
max_tokens=${BENCH_PEER_MAX_TOKENS:-64}
per_stream=${BENCH_PEER_REQUESTS_PER_STREAM:-3}
venv=${BENCH_PEER_VENV:-/tmp/gpulab-guidellm-venv}
guidellm_version=0.8.1
out=${BENCH_PEER_OUT:-$(mktemp -d /tmp/gpulab-bench-peer.XXXXXX)}
mkdir -p "$out"
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$repo/.build/collections" ANSIBLE_CONFIG="$repo/ansible.cfg"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

if [ ! -x "$venv/bin/guidellm" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "guidellm==$guidellm_version"
fi
tokenizer="$venv/qwen2-tokenizer"
if [ ! -f "$tokenizer/tokenizer.json" ]; then
  tar -xzf "$repo/.cache/llama.cpp-0c1e570.tar.gz" -C "$out" --strip-components=2 llama.cpp/models/ggml-vocab-qwen2.gguf
  "$venv/bin/pip" install -q gguf
  "$venv/bin/python" - "$out" "$tokenizer" <<'PY'
import sys
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1], gguf_file='ggml-vocab-qwen2.gguf').save_pretrained(sys.argv[2])
PY
fi
netns_pid=$(podman inspect -f '{{.State.Pid}}' "$head")

# Requests a level measures. GuideLLM's warm-up (one wave of the level's streams) leaves out the
# requests that end within it, about two waves, so it sends two waves more; the collection's side
# sends one warm-up request before its sweep, not counted.
requests_for() { local n=$(($1 * per_stream)); echo $((n < 6 ? 6 : n)); }
run_guidellm() {
  local round=$1 level
  for level in $levels; do
    # One level a run, as on the collection's side; the seed is new every run, so no prompt is
    # found in the server's cache from an earlier round.
    cat >"$out/guidellm-$round-c$level.scenario.json" <<JSON
{
  "metadata": {"name": "gpulab-bench-peer", "description": "the shape of llm_benchmark's sweep"},
  "spec": {
    "backend": {"kind": "openai_http", "target": "http://127.0.0.1:8080", "request_format": "/v1/chat/completions", "timeout": 300},
    "profile": {"kind": "concurrent", "streams": [$level], "warmup": {"value": $level, "mode": "requests"}},
    "tokenizer": {"kind": "hf_auto", "model": "$tokenizer"},
    "data": [{"kind": "synthetic_text", "prompt_tokens": $prompt_tokens, "output_tokens": $max_tokens}],
    "constraints": [{"kind": "max_requests", "count": $(($(requests_for "$level") + 2 * level))}],
    "seed": {"kind": "static", "value": $RANDOM$RANDOM},
    "outputs": [{"kind": "json", "path": "$out/guidellm-$round-c$level.json"}]
  }
}
JSON
    nsenter -t "$netns_pid" -n "$venv/bin/guidellm" run -c "$out/guidellm-$round-c$level.scenario.json" \
      --disable-console-interactive >"$out/guidellm-$round-c$level.log" 2>&1
  done
}
run_collection() {
  local round=$1 level requests args
  for level in $levels; do
    requests=$(requests_for "$level")
    # One level a call: llm_benchmark sends requests_per_level at every level.
    args="{\"base_url\": \"http://127.0.0.1:8080\", \"concurrency\": [$level], \"requests_per_level\": $requests,"
    args+=" \"warmup_requests\": 1, \"prompt_tokens\": $prompt_tokens, \"max_tokens\": $max_tokens, \"ignore_eos\": true}"
    ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_STDOUT_CALLBACK=ansible.posix.json \
      ansible -i "$repo/inventory/demo" node-a -m gpulab.inference.llm_benchmark -a "$args" \
      >"$out/collection-$round-c$level.json"
  done
}

echo "results in $out; $rounds rounds, GuideLLM then llm_benchmark each round; concurrency $levels," \
  "$prompt_tokens prompt tokens, $max_tokens output tokens (ignore_eos), streaming chat completions"
for round in $(seq 1 "$rounds"); do
  echo "round $round: load $(cut -d' ' -f1-3 /proc/loadavg) before GuideLLM"
  run_guidellm "$round"
  echo "round $round: load $(cut -d' ' -f1-3 /proc/loadavg) before llm_benchmark"
  run_collection "$round"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"

# Each side's own figures under the mapped names (report.json's definitions): GuideLLM's
# inter_token_latency_ms is the collection's TPOT (first token excluded); its
# time_per_output_token_ms counts TTFT in, shown apart. Decode per stream, which GuideLLM does not
# report, is 1000 / inter_token_latency_ms per request, the mean over the requests it measured.
python3 - "$out" "$rounds" "$levels" <<'PY'
import glob
import json
import statistics
import sys

out, rounds, levels = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split()]
rows = {}


def add(metric, level, side, value):
    rows.setdefault((metric, level), {}).setdefault(side, []).append(value)


for round_ in range(1, rounds + 1):
    for path in sorted(glob.glob('%s/guidellm-%d-c*[0-9].json' % (out, round_))):
        with open(path) as handle:
            bench = json.load(handle)['benchmarks'][0]
        level = bench['config']['strategy']['streams']
        metrics = bench['metrics']
        # The list holds the warm-up's requests too; GuideLLM's figures count those that ended after it.
        measured = [r for r in bench['requests']['successful'] if r['request_end_time'] >= bench['start_time']]
        if len(measured) != metrics['request_totals']['successful']:
            print('note: %s: %d requests ended in the measured window, GuideLLM counted %d'
                  % (path, len(measured), metrics['request_totals']['successful']))
        add('requests measured', level, 'GuideLLM', metrics['request_totals']['successful'])
        add('TTFT ms', level, 'GuideLLM', metrics['time_to_first_token_ms']['successful']['mean'])
        add('TPOT ms (first token excluded)', level, 'GuideLLM',
            metrics['inter_token_latency_ms']['successful']['mean'])
        add('E2E s', level, 'GuideLLM', metrics['request_latency']['successful']['mean'])
        add('decode tok/s per stream', level, 'GuideLLM',
            statistics.mean(1000.0 / r['inter_token_latency_ms'] for r in measured))
        add('GuideLLM TPOT ms (TTFT counted in)', level, 'GuideLLM',
            metrics['time_per_output_token_ms']['successful']['mean'])
        add('prompt tokens (server)', level, 'GuideLLM', statistics.mean(r['prompt_tokens'] for r in measured))
        add('cached prompt tokens / request', level, 'GuideLLM',
            statistics.mean(r['cached_tokens'] or 0 for r in measured))
    for path in sorted(glob.glob('%s/collection-%d-c*.json' % (out, round_))):
        with open(path) as handle:
            result = json.load(handle)['plays'][0]['tasks'][0]['hosts']['node-a']['benchmark']
        level = result['levels'][0]
        ok = [r for r in result['requests'] if r['ok']]
        add('requests measured', level['concurrency'], 'llm_benchmark', level['requests_ok'])
        add('TTFT ms', level['concurrency'], 'llm_benchmark', 1000.0 * statistics.mean(r['ttft_s'] for r in ok))
        add('TPOT ms (first token excluded)', level['concurrency'], 'llm_benchmark',
            1000.0 * statistics.mean(r['tpot_s'] for r in ok))
        add('E2E s', level['concurrency'], 'llm_benchmark', statistics.mean(r['e2e_s'] for r in ok))
        add('decode tok/s per stream', level['concurrency'], 'llm_benchmark', level['decode_tok_s'])
        add('prompt tokens (server)', level['concurrency'], 'llm_benchmark',
            statistics.mean(r['prompt_tokens'] for r in ok))
        add('cached prompt tokens / request', level['concurrency'], 'llm_benchmark',
            statistics.mean(r['cached_tokens'] or 0 for r in ok))


def cell(values):
    if not values:
        return 'n/a'
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return '%.2f ± %.2f (%.2f-%.2f)' % (statistics.mean(values), spread, min(values), max(values))


print('\nmean ± standard deviation over %d rounds (min-max)\n' % rounds)
print('| metric | concurrency | GuideLLM | llm_benchmark | difference of the means |')
print('| --- | --- | --- | --- | --- |')
order = ['requests measured', 'prompt tokens (server)', 'cached prompt tokens / request', 'TTFT ms',
         'TPOT ms (first token excluded)', 'decode tok/s per stream', 'E2E s', 'GuideLLM TPOT ms (TTFT counted in)']
for metric in order:
    for level in levels:
        sides = rows.get((metric, level), {})
        peer, ours = sides.get('GuideLLM', []), sides.get('llm_benchmark', [])
        diff = ('%+.1f %%' % (100.0 * (statistics.mean(ours) - statistics.mean(peer)) / statistics.mean(peer))
                if peer and ours and statistics.mean(peer) else '')
        print('| %s | %d | %s | %s | %s |' % (metric, level, cell(peer), cell(ours), diff))
PY
