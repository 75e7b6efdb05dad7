#!/usr/bin/env bash
# Served decode against llama-bench on one GPU host, on the same build and model, without Ansible
# (issue 35): builds llama.cpp from the source archive (CUDA for one architecture, RPC), writes the
# harness's named synthetic model with the collection's own generator, then measures
#   - llama-bench tg128 (-ngl 99 -fa 1) at depth 0 and at the server's depth (128-token prompt),
#   - llama-batched-bench (the server's context parameters through common, no server loop),
#   - llama-server with the role's own command line (llama_server.server_argv: verbosity 4, four
#     slots, flash attention auto), the same at llama.cpp's default verbosity, a bare server
#     (-ngl 99 -fa on -c 8192 -np 1) and the bare server with --backend-sampling: each with
#     scripts/served-speed.py (greedy, 128 tokens, the server's own timings),
#   - one trace of llama-bench and of the bare server through scripts/cupti-trace.c: kernels, GPU
#     busy and idle time, copies and synchronisations per token (scripts/cupti-trace-summary.py),
# with `nvidia-smi dmon` running throughout. Everything lands in OUTDIR; traces stay in the work dir.
#
#   scripts/gpu-served-speed.sh OUTDIR
#
# GPULAB_SPEED_ARCHIVE (.cache/llama.cpp-0c1e570.tar.gz), GPULAB_SPEED_WORK (/tmp/gpulab-speed),
# GPULAB_SPEED_CUDA_ARCH (90-real), GPULAB_SPEED_MODEL_NAME (m2-62), GPULAB_SPEED_REQUESTS (5),
# GPULAB_SPEED_TRACE (1: trace too). OUTDIR/DONE appears at the end.
set -uo pipefail

out=${1:?usage: scripts/gpu-served-speed.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
archive=$(realpath -m "${GPULAB_SPEED_ARCHIVE:-$repo/.cache/llama.cpp-0c1e570.tar.gz}")
work=${GPULAB_SPEED_WORK:-/tmp/gpulab-speed}
arch=${GPULAB_SPEED_CUDA_ARCH:-90-real}
requests=${GPULAB_SPEED_REQUESTS:-5}
model_name=${GPULAB_SPEED_MODEL_NAME:-m2-62}
# shellcheck source=scripts/gpu-e2e-models.sh
. "$repo/scripts/gpu-e2e-models.sh"
python=$(command -v python3)
export NCCL_NVLS_ENABLE=0 PATH=/usr/local/cuda/bin:$PATH CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
bin=$work/build/bin
model=$work/models/$named_stem-00001-of-00002.gguf
vocab=151936 # models/ggml-vocab-qwen2.gguf
url=http://127.0.0.1:8080
mkdir -p "$work/models" "$work/coll/ansible_collections/gpulab"
ln -sfn "$repo" "$work/coll/ansible_collections/gpulab/inference"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }

# ---- the machine ---------------------------------------------------------------------------------
{ nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER; nproc; free -g; command -v nsys ncu gcc c++filt; } >"$out/machine.txt" 2>&1
nvidia-smi dmon -s puc -d 1 -o T >"$out/dmon.txt" 2>&1 &
dmon_pid=$!

# ---- build, model and tracer side by side --------------------------------------------------------
build() {
  tar -C "$work" -xzf "$archive" || return 1
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$work/llama.cpp" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_CUDA=ON -DGGML_RPC=ON -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF "-DCMAKE_CUDA_ARCHITECTURES=$arch" || return 1
  cmake --build "$work/build" -j "$(nproc)" --target llama-server llama-bench llama-batched-bench
}

# The collection's generator (synthetic_model), one process per shard.
write_model() {
  tar -C "$work" -xzf "$archive" llama.cpp/models/ggml-vocab-qwen2.gguf || return 1
  mv "$work/llama.cpp/models/ggml-vocab-qwen2.gguf" "$work/models/vocab-qwen2.gguf"
  PYTHONPATH=$work/coll "$python" - "$named_options" "$work/models/$named_stem.gguf" "$work/models/vocab-qwen2.gguf" <<'PY'
import json, multiprocessing, os, sys
from ansible_collections.gpulab.inference.plugins.module_utils import atomic_file, synthetic_model as sm
options, path, vocab_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
opts = sm.validate_options(dict(options, vocab_gguf=vocab_path))
plan = sm.ModelPlan(opts, path, sm.load_vocab(vocab_path), sm.file_sha256(vocab_path))

def write(index):
    shard, metadata, members = plan.files[index]
    temp = atomic_file.write_temp(os.path.abspath(shard), sm._shard_writer(metadata, members, opts["seed"]), 0o644)
    os.replace(temp, shard)

with multiprocessing.Pool(len(plan.files)) as pool:
    pool.map(write, range(len(plan.files)))
print("%d parameters, %d bytes in %d files" % (plan.n_params, sum(plan.file_sizes()), len(plan.files)))
PY
}

tracer() {
  local cuda=/usr/local/cuda lib
  lib=$(dirname "$(find "$cuda/" "$cuda/extras/CUPTI/" -name 'libcupti.so*' 2>/dev/null | head -n 1)")
  gcc -O2 -shared -fPIC -I"$cuda/include" -I"$cuda/extras/CUPTI/include" "$repo/scripts/cupti-trace.c" \
    -L"$lib" -Wl,-rpath,"$lib" -lcupti -o "$work/libcupti-trace.so"
}

start=$SECONDS
build >"$out/build.log" 2>&1 &
build_pid=$!
write_model >"$out/model.log" 2>&1 &
model_pid=$!
tracer >"$out/tracer.log" 2>&1 || log "tracer build failed: $(tail -n 3 "$out/tracer.log")"
if wait "$model_pid"; then
  log "model: $((SECONDS - start)) s, $(tail -n 1 "$out/model.log")"
else
  log "model failed: $(tail -n 5 "$out/model.log")"
fi
if ! wait "$build_pid"; then
  log "build failed: $(tail -n 5 "$out/build.log")"
  touch "$out/DONE"
  exit 1
fi
log "build: $((SECONDS - start)) s"

# ---- measurements --------------------------------------------------------------------------------
bench() { # NAME ARGS...
  local name=$1
  shift
  log "llama-bench $name: $*"
  "$bin/llama-bench" -m "$model" "$@" -o json >"$out/bench-$name.json" 2>"$out/bench-$name.err" || log "  failed: $(tail -n 3 "$out/bench-$name.err")"
  "$python" -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("  pp%d tg%d depth %d: %.2f tok/s (+- %.2f), %.3f ms/token" % (r["n_prompt"], r["n_gen"], r.get("n_depth", 0), r["avg_ts"], r["stddev_ts"], 1000 / r["avg_ts"]))' \
    "$out/bench-$name.json" 2>/dev/null | while read -r line; do log "$line"; done
}

wait_health() {
  "$python" - "$url" <<'PY'
import sys, time, urllib.request
for _ in range(600):
    try:
        with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
}

# NAME PROMPTS (token counts, comma-separated) then llama-server's argv after the binary; more
# environment for the server in the array serve_env, more scripts/served-speed.py runs (each a
# NAME:OPTIONS word, options space-separated) in serve_clients.
serve_env=()
serve_clients=()
serve() {
  local name=$1 prompts=$2 pid p spec client_options t0=$SECONDS
  shift 2
  log "llama-server $name (env: ${serve_env[*]:-none}): $*"
  env "${serve_env[@]}" "$bin/llama-server" "$@" >"$out/server-$name.log" 2>&1 &
  pid=$!
  if wait_health; then
    log "  up in $((SECONDS - t0)) s; $(grep -m1 -oE 'Flash Attention (enabled|disabled)' "$out/server-$name.log" | tr '\n' ' ')"
    for p in ${prompts//,/ }; do
      "$python" "$repo/scripts/served-speed.py" "$url" --prompt-tokens "$p" --n-predict 128 --requests "$requests" \
        --warmup 1 >"$out/served-$name-p$p.json" 2>"$out/served-$name-p$p.err" || log "  requests failed: $(tail -n 2 "$out/served-$name-p$p.err")"
      "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("  prompt %d: %s tok/s median (%s-%s), %s ms/token; each: %s" % (d["prompt_tokens"], d["tok_s"]["median"], d["tok_s"]["min"], d["tok_s"]["max"], d["ms_per_token"]["median"], [r["tok_s"] for r in d["requests"]]))' \
        "$out/served-$name-p$p.json" 2>/dev/null | while read -r line; do log "$line"; done
    done
    for spec in "${serve_clients[@]}"; do
      read -r -a client_options <<<"${spec#*:}"
      "$python" "$repo/scripts/served-speed.py" "$url" --prompt-tokens 128 --n-predict 128 --requests "$requests" \
        --warmup 1 "${client_options[@]}" >"$out/served-$name-${spec%%:*}.json" 2>"$out/served-$name-${spec%%:*}.err" \
        || log "  ${spec%%:*} failed: $(tail -n 2 "$out/served-$name-${spec%%:*}.err")"
      "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("  %s: %s tok/s median (%s-%s), %s ms/token" % (sys.argv[2], d["tok_s"]["median"], d["tok_s"]["min"], d["tok_s"]["max"], d["ms_per_token"]["median"]))' \
        "$out/served-$name-${spec%%:*}.json" "${spec%%:*}" 2>/dev/null | while read -r line; do log "$line"; done
    done
  else
    log "  not healthy: $(tail -n 3 "$out/server-$name.log")"
  fi
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -E 'graphs reused|eval time|graph nodes|graph splits|Flash Attention|n_ctx_slot|kv_unified' "$out/server-$name.log" | tail -n 8 >"$out/server-$name.summary.txt"
}

role_argv() { # VERBOSITY (or None): the head's argv as the role renders it (harness inventory: ctx 8192, 4 slots)
  PYTHONPATH=$work/coll "$python" - "$bin/llama-server" "$model" "$1" <<'PY'
import sys
from ansible_collections.gpulab.inference.plugins.module_utils import llama_server as ls
verbosity = None if sys.argv[3] == "None" else int(sys.argv[3])
options = {"ctx_size": 8192, "parallel": 4, "log_verbosity": verbosity}
print("\n".join(ls.server_argv(sys.argv[1], sys.argv[2], options, None, "1", False)[1:]))
PY
}

bench tg -ngl 99 -fa 1 -p 0 -n 128 -d 0,128 -r 5
log "llama-batched-bench: -ngl 99 -fa on -c 8192 -npp 128 -ntg 128 -npl 1"
"$bin/llama-batched-bench" -m "$model" -ngl 99 -fa on -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1 >"$out/batched-bench.txt" 2>&1 \
  || log "  failed: $(tail -n 3 "$out/batched-bench.txt")"
grep -E '^\|' "$out/batched-bench.txt" | tail -n 2 | while read -r line; do log "  $line"; done

mapfile -t role < <(role_argv 4)
mapfile -t role_quiet < <(role_argv None)
bare=(--model "$model" --host 127.0.0.1 --port 8080 -ngl 99 -fa on -c 8192 -np 1)
serve role 128,1 "${role[@]}"
serve role-quiet 128 "${role_quiet[@]}"
# the chat client's way too: streamed chat completions, and streamed /completion
serve_clients=("chat-stream:--chat --stream" "completion-stream:--stream")
serve bare 128,1 "${bare[@]}" --jinja
serve_clients=()
serve bare-backend-sampling 128 "${bare[@]}" --backend-sampling

if [ "${GPULAB_SPEED_TRACE:-1}" = 1 ] && [ -s "$work/libcupti-trace.so" ]; then
  trace_env=CUDA_INJECTION64_PATH=$work/libcupti-trace.so
  log "traced llama-bench"
  env "$trace_env" GPULAB_TRACE_OUT="$work/trace-bench.txt" "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d 128 -r 2 -o json \
    >"$out/bench-traced.json" 2>"$out/bench-traced.err" || log "  failed: $(tail -n 3 "$out/bench-traced.err")"
  "$python" "$repo/scripts/cupti-trace-summary.py" "$work/trace-bench.txt" --vocab "$vocab" >"$out/trace-bench.json" 2>&1
  requests_saved=$requests
  requests=3
  serve_env=("$trace_env" "GPULAB_TRACE_OUT=$work/trace-server.txt")
  serve bare-traced 128 "${bare[@]}"
  serve_env=()
  requests=$requests_saved
  "$python" "$repo/scripts/cupti-trace-summary.py" "$work/trace-server.txt" --vocab "$vocab" >"$out/trace-server.json" 2>&1
  ls -la "$work"/trace-*.txt >>"$out/progress.log" 2>&1
  for side in bench server; do
    "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d.get("steady_tokens"), "tokens,", d.get("kernels_per_token"), "kernels/token,", json.dumps(d.get("per_token_median")))' \
      "$out/trace-$side.json" "$side" 2>/dev/null | while read -r line; do log "  trace $line"; done
  done
fi

kill "$dmon_pid" 2>/dev/null
log "done in $((SECONDS - start)) s"
touch "$out/DONE"
