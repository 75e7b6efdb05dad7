#!/usr/bin/env bash
# The serving intent on one GPU host (issue 55): both engines, both intents, one lease, every
# deployment from deploy.yml with nothing set but gpulab_serving_intent (and the harness's host
# wiring); each figure against its target:
#   llama.cpp interactive  served decode at one stream (the server's own timings, scripts/served-speed.py)
#                          >= 95% of llama-bench tg128 at the same depth, same build, model and GPU
#   llama.cpp throughput   aggregate at 4 streams (llm_benchmark, 128-token prompts, 64 tokens) >= 188.8 tok/s
#   vLLM interactive       TTFT p50 <= 0.052 s and decode per stream >= 380 tok/s at one stream
#   vLLM throughput        aggregate at 64 streams (512-token prompts, 64 tokens) >= 3,694 tok/s
# then both engines side by side, one client, one report with plots (playbooks/bench.yml, bench_compare).
# Models: llama.cpp m2-62 (scripts/gpu-e2e-models.sh, trained context 4096), vLLM the 24-layer FP8
# MiniMax-M2-shaped checkpoint (scripts/gpu-e2e-vllm.sh); the figures of docs/benchmarks.md's
# 2026-12-02 runs are the targets.
#
#   scripts/gpu-e2e-intent.sh start      copy this tree to BASE/tree, run the steps there in the
#                                        background (setsid), return at once
#   scripts/gpu-e2e-intent.sh collect DEST   progress.log, summary.md/json, intent-out.tar.gz (BASE/out,
#                                        the run's log, the step marks) and the side-by-side report.md
#                                        with its three plots into DEST; the progress log's tail
#   scripts/gpu-e2e-intent.sh wait SECONDS DEST   collect once the run has ended or SECONDS have passed
#   scripts/gpu-e2e-intent.sh stop       end the background run (its process group)
#   scripts/gpu-e2e-intent.sh run        the steps in the foreground (what start runs)
#   scripts/gpu-e2e-intent.sh wheels [DIR]   on the controller: ansible-core, supervisor and the part of
#                                        community.general the roles use, into DIR (default .whl/ansible)
#
# BASE: GPULAB_E2E_INTENT_BASE, default /tmp/gpulab-intent (outputs BASE/out, step marks
# BASE/state, the run's own log BASE/run.log). Resumable: a step that ended well leaves
# BASE/state/STEP.done and a later start skips it (GPULAB_E2E_INTENT_STEPS names the steps to run,
# default all of them in order):
#   prepare            llama.cpp build and m2-62 model (background, CPU) beside the vLLM steps
#   vllm-interactive   FP8 checkpoint, vLLM deployed for interactive, llm_benchmark at 1 stream
#   vllm-throughput    vLLM redeployed for throughput, llm_benchmark at 1 and 64 streams, stopped
#   llama-bench        llama-bench tg128 at depths 0 and 128 on the idle GPU (waits for prepare)
#   llama-interactive  deploy.yml for interactive, served-speed.py (plain and streamed chat), llm_benchmark at 1
#   llama-throughput   deploy.yml for throughput, llm_benchmark at 1 and 4 streams
#   compare            vLLM as deployed for throughput, started by hand from its wrapper beside the
#                      llama.cpp deployment (KV cache 40 GiB), bench.yml against both; llama.cpp stopped
#   summary            BASE/out/summary.md and summary.json: each figure against its target
# Needs what scripts/gpu-e2e.sh needs (GPULAB_E2E_WHEELS, GPULAB_E2E_ARCHIVE) and the vLLM
# wheelhouse: its parts stashed into GPULAB_E2E_VLLM_STASH (default /tmp/gpulab-stash, READY when
# all are there; scripts/vllm-wheelhouse.sh stash), or that variable empty and the wheelhouse in
# place (GPULAB_E2E_VLLM_WHEELHOUSE, default /tmp/gpulab-wheelhouse).
set -uo pipefail

base=${GPULAB_E2E_INTENT_BASE:-/tmp/gpulab-intent}
mode=${1:-run}
all_steps="prepare vllm-interactive vllm-throughput llama-bench llama-interactive llama-throughput compare summary"

case $mode in
  start)
    # a running copy is left alone (bash reads its script as it goes)
    if [ -e "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null; then
      echo "already running: pid $(cat "$base/pid")"; exit 0
    fi
    mkdir -p "$base/tree" "$base/out" "$base/state"
    # A copy: the device tool replaces its working tree on every call.
    src=$(cd "$(dirname "$0")/.." && pwd)
    tar -C "$src" --exclude=.git --exclude=.venv --exclude=.build --exclude=.whl/vllm --exclude=.whl/wheels -cf - . \
      | tar -C "$base/tree" -xf -
    setsid "$base/tree/scripts/gpu-e2e-intent.sh" run >>"$base/run.log" 2>&1 </dev/null &
    echo $! >"$base/pid"
    echo "started: pid $!, outputs in $base/out, state in $base/state"
    exit 0 ;;
  collect | wait)
    # wait SECONDS DEST: until the run ends or SECONDS pass, then collect. The device tool returns at
    # most 8 files from its $OUT, two folders down: the progress log, the summary and one tarball.
    if [ "$mode" = wait ]; then
      limit=${2:?usage: scripts/gpu-e2e-intent.sh wait SECONDS DEST}
      shift
      t0=$SECONDS
      while [ ! -e "$base/out/DONE" ] && [ $((SECONDS - t0)) -lt "$limit" ] \
        && [ -e "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null; do sleep 5; done
    fi
    dest=${2:?usage: scripts/gpu-e2e-intent.sh collect DEST}
    mkdir -p "$dest"
    cp "$base/out/progress.log" "$base/out/summary.md" "$base/out/summary.json" "$dest/" 2>/dev/null || true
    # the side-by-side report and its three plots, to read without unpacking (8 files in all)
    report=$(find "$base/out/compare/reports" -name report.md 2>/dev/null | sort | tail -n 1)
    [ -z "$report" ] || cp "$report" "$(dirname "$report")"/{throughput,latency,pareto}.png "$dest/" 2>/dev/null || true
    tar -C "$base" -czf "$dest/intent-out.tar.gz" --exclude='*.raw' out run.log state 2>/dev/null || true
    echo "steps done: $(find "$base/state" -name '*.done' -printf '%f ' 2>/dev/null)"
    if [ -e "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null; then echo "running: pid $(cat "$base/pid")"; else echo "not running"; fi
    tail -n 40 "$base/out/progress.log" 2>/dev/null
    exit 0 ;;
  stop)
    [ -e "$base/pid" ] && kill -- -"$(cat "$base/pid")" 2>/dev/null && echo "stopped $(cat "$base/pid")"
    exit 0 ;;
  wheels)
    # On the controller (where PyPI is reachable): DIR (default .whl/ansible) with ansible-core and
    # its dependencies for the GPU host's Python 3.12, supervisor, and the part of community.general the
    # roles use (supervisorctl, modprobe, nmcli, dict_kv), small enough to travel with the llama.cpp archive.
    dir=${2:-$(cd "$(dirname "$0")/.." && pwd)/.whl/ansible}
    platforms=()
    for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64; do platforms+=(--platform "$p"); done
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
      -d "$dir" "ansible-core==${GPULAB_E2E_ANSIBLE_CORE:-2.19.14}" "supervisor==${GPULAB_E2E_SUPERVISOR:-4.3.0}" || exit 1
    general=$(python3 -c 'import ansible_collections.community.general as g, os; print(os.path.dirname(g.__file__))' 2>/dev/null \
      || find "$(dirname "$0")/../.venv" -type d -path '*ansible_collections/community/general' | head -n 1)
    [ -d "$general" ] || { echo "no community.general found (run make deps, or activate the venv)" >&2; exit 1; }
    dst=$dir/collections/ansible_collections/community/general
    rm -rf "$dst" && mkdir -p "$dst/plugins/modules" "$dst/plugins/filter"
    cp -r "$general/meta" "$general/MANIFEST.json" "$dst/"
    cp -r "$general/plugins/module_utils" "$general/plugins/doc_fragments" "$dst/plugins/"
    for m in supervisorctl modprobe nmcli; do cp "$general/plugins/modules/$m.py" "$dst/plugins/modules/"; done
    cp "$general/plugins/filter/dict_kv.py" "$dst/plugins/filter/"
    du -sh "$dir"; ls "$dir"
    exit 0 ;;
  run) ;;
  *) echo "usage: scripts/gpu-e2e-intent.sh start|collect DEST|wait SECONDS DEST|stop|run|wheels [DIR]" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
out=$base/out
state=$base/state
mkdir -p "$out" "$state"
python=$(command -v python3)
steps=${GPULAB_E2E_INTENT_STEPS:-$all_steps}
export GPULAB_E2E_VLLM_STASH=${GPULAB_E2E_VLLM_STASH-/tmp/gpulab-stash}
# ansible-core's wheels, supervisor's and community.general under collections/ (scripts/gpu-e2e.sh)
export GPULAB_E2E_WHEELS=${GPULAB_E2E_WHEELS:-$repo/.whl/ansible}
# A wheelhouse joined by an earlier run on this machine needs no parts.
if find "${GPULAB_E2E_VLLM_WHEELHOUSE:-/tmp/gpulab-wheelhouse}" -maxdepth 1 -name 'vllm-*.whl' 2>/dev/null | grep -q .; then
  GPULAB_E2E_VLLM_STASH=
fi
# vLLM's KV cache beside llama.cpp in the side-by-side step: 40 GiB on an H200, 16 GiB on a GPU of
# 80 GB (llama.cpp's m2-62 holds about 23 GB, vLLM's checkpoint 11 GiB).
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -dc 0-9)
compare_kv_gib=${GPULAB_E2E_COMPARE_KV_GIB:-$([ "${gpu_mib:-0}" -ge 130000 ] && echo 40 || echo 16)}
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }
sup() { /opt/gpulab/supervisor/bin/supervisorctl -c /etc/gpulab/supervisord.conf "$@"; }
# The tools scripts/gpu-e2e.sh installed for the llama.cpp part (work directory /tmp/gpulab-e2e).
harness() {
  env PYTHONPATH=/tmp/gpulab-e2e/site ANSIBLE_CONFIG=/tmp/gpulab-e2e/ansible.cfg PATH="/opt/gpulab-e2e/bin:/usr/local/cuda/bin:$PATH" \
    ANSIBLE_COLLECTIONS_PATH="/tmp/gpulab-e2e/collections:${GPULAB_E2E_WHEELS:-$repo/.whl}/collections" \
    ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default ANSIBLE_CALLBACK_RESULT_FORMAT=yaml ANSIBLE_HOST_KEY_CHECKING=false \
    ANSIBLE_RETRY_FILES_ENABLED=false ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false \
    NCCL_NVLS_ENABLE=0 "$@"
}
playbook() { harness "$python" -m ansible.cli.playbook "$@"; }
recap() { grep -E '^gpu-host +:' "$1" | tail -n 1 | tr -s ' '; }
# One module run on the host, its JSON result into a file (as scripts/gpu-e2e.sh's module()).
module() { # INVENTORY MODULE ARGS_JSON OUTFILE
  harness "$python" -m ansible.cli.adhoc -i "$1" gpu-host -m "$2" -a "$3" -o >"$4.raw" 2>"$4.err" || true
  "$python" - "$4" <<'PY'
import json, sys
raw = open(sys.argv[1] + ".raw").read()
try:
    data = json.loads(raw.split("=> ", 1)[1])
except (IndexError, ValueError):
    data = {"failed": True, "msg": "no JSON result", "raw": raw[-4000:]}
json.dump(data, open(sys.argv[1], "w"), indent=1, sort_keys=True)
PY
}
summary_lines() { "$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("\n".join(r.get("benchmark", {}).get("summary") or [r.get("msg") or "no summary"]))' "$1"; }
done_step() { [ -e "$state/$1.done" ]; }
wanted() { [[ " $steps " == *" $1 "* ]] && ! done_step "$1"; }
mark() { touch "$state/$1.done"; log "step $1: done, $((SECONDS - step_start)) s"; }
begin() { step_start=$SECONDS; log "== step $1"; }
# The m2-62 inventory the prepare step wrote (layout local: llama-server alone on GPU 0, no context
# or split set), with the intent and the run's own settings laid over it.
llama_inventory() { # INTENT FILE
  "$python" - "$out/llama/local/hosts.json" "$1" "$2" "$out/reports-$1" <<'PY'
import json, sys
inv = json.load(open(sys.argv[1]))
hostvars = inv["gpu_nodes"]["children"]["inference_head"]["hosts"]["gpu-host"]
# the intent alone; the deploy's own short benchmark is left to the steps below
hostvars.update(gpulab_serving_intent=sys.argv[2], gpulab_bench_enabled=False, bench_report_dir=sys.argv[4])
json.dump(inv, open(sys.argv[3], "w"), indent=2)
PY
}
model_gguf() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu_nodes"]["children"]["inference_head"]["hosts"]["gpu-host"]["llama_server_model_path"])' "$out/llama/local/hosts.json"; }
keep_llama_files() { # DIR
  cp /var/lib/gpulab/memory-plan.json "$1/" 2>/dev/null || true
  cp /opt/gpulab/bin/gpulab-llama-server "$1/" 2>/dev/null || true
  # shellcheck disable=SC2009
  ps -eo pid,args | grep -E 'llama-server|rpc-server' | grep -v grep >"$1/processes.txt" || true
  "$python" -c 'import json,sys; i=json.load(open(sys.argv[1])).get("intent"); print("memory plan intent: %s" % json.dumps(i))' "$1/memory-plan.json" 2>/dev/null | while read -r line; do log "  $line"; done
  grep -o -- '--parallel [0-9]*\|--ctx-size [0-9]*\|--backend-sampling' "$1/processes.txt" | sort -u | tr '\n' ' ' | while read -r line; do log "  llama-server argv: $line"; done
}
vllm_part() { # INTENT SERVED_JSON STOP
  GPULAB_E2E_WORK=/tmp/gpulab-e2e-vllm GPULAB_E2E_ENGINES=vllm GPULAB_E2E_VLLM_LAYOUT=auto GPULAB_E2E_VLLM_BENCH=0 \
    GPULAB_E2E_VLLM_IDEMPOTENCE=0 GPULAB_E2E_STOP=$3 GPULAB_E2E_VLLM_EXTRA="{\"gpulab_serving_intent\": \"$1\"}" \
    GPULAB_E2E_VLLM_SERVED="$2" "$repo/scripts/gpu-e2e.sh" "$out/vllm-$1" >"$out/vllm-$1.log" 2>&1
}

log "steps: $steps; done before: $(find "$state" -name '*.done' -printf '%f ')"
run_start=$SECONDS

# ---- prepare (background): the build and the model, CPU only ----------------------------------
prepare_pid=
if wanted prepare; then
  log "== step prepare (background)"
  (
    env GPULAB_E2E_ENGINES=llama_cpp GPULAB_E2E_LAYOUTS=local GPULAB_E2E_CTX_SIZES=auto GPULAB_E2E_MODEL_NAME=m2-62 \
      GPULAB_E2E_LLAMA_BENCH=0 GPULAB_E2E_PHASE=prepare GPULAB_E2E_PREPARE_PARALLEL=1 \
      "$repo/scripts/gpu-e2e.sh" "$out/llama" >"$out/llama-prepare.log" 2>&1 && touch "$state/prepare.done"
  ) &
  prepare_pid=$!
fi
wait_prepare() {
  if [ -n "$prepare_pid" ]; then wait "$prepare_pid"; prepare_pid=; fi
  done_step prepare || { log "prepare failed: $(tail -n 5 "$out/llama-prepare.log" | tr '\n' ' ')"; return 1; }
  log "prepare: done, $((SECONDS - run_start)) s into the run"
}

# ---- vLLM, each intent ------------------------------------------------------------------------
if wanted vllm-interactive; then
  begin vllm-interactive
  vllm_part interactive '{"concurrency": [1], "requests_per_level": 16, "prompt_tokens": 128, "max_tokens": 64, "warmup_requests": 2}' 0
  grep -E '^[0-9:]+ ' "$out/vllm-interactive/progress.log" 2>/dev/null | tail -n 12 | while read -r line; do log "  ${line:0:300}"; done
  [ -s "$out/vllm-interactive/vllm/served.json" ] && ! grep -q '"failed": true' "$out/vllm-interactive/vllm/served.json" && mark vllm-interactive
fi
# Later vLLM runs find the wheelhouse in place.
GPULAB_E2E_VLLM_STASH=
if wanted vllm-throughput; then
  begin vllm-throughput
  vllm_part throughput '{"concurrency": [1, 64], "requests_per_level": 64, "prompt_tokens": 512, "max_tokens": 64, "warmup_requests": 2}' 1
  grep -E '^[0-9:]+ ' "$out/vllm-throughput/progress.log" 2>/dev/null | tail -n 12 | while read -r line; do log "  ${line:0:300}"; done
  [ -s "$out/vllm-throughput/vllm/served.json" ] && ! grep -q '"failed": true' "$out/vllm-throughput/vllm/served.json" \
    && [ -s "$out/vllm-throughput/vllm/gpulab-vllm" ] && mark vllm-throughput
fi

# ---- llama.cpp: llama-bench on the idle GPU, then each intent --------------------------------
if wanted llama-bench; then
  wait_prepare || exit 1
  begin llama-bench
  mkdir -p "$out/llama-bench"
  CUDA_VISIBLE_DEVICES=0 /opt/gpulab/llama.cpp/current/bin/llama-bench -m "$(model_gguf)" -ngl 99 -fa 1 -p 0 -n 128 -d 0,128 -r 5 -o json \
    >"$out/llama-bench/tg128.json" 2>"$out/llama-bench/tg128.err"
  "$python" -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("llama-bench tg%d at depth %d: %.2f tok/s (+- %.2f)" % (r["n_gen"], r.get("n_depth", 0), r["avg_ts"], r["stddev_ts"]))' \
    "$out/llama-bench/tg128.json" 2>&1 | while read -r line; do log "  $line"; done
  "$python" -c 'import json,sys; assert json.load(open(sys.argv[1]))' "$out/llama-bench/tg128.json" 2>/dev/null && mark llama-bench
fi
if wanted llama-interactive; then
  wait_prepare || exit 1
  begin llama-interactive
  dir=$out/llama-interactive
  mkdir -p "$dir"
  llama_inventory interactive "$dir/hosts.json"
  if playbook -i "$dir/hosts.json" "$repo/deploy.yml" >"$dir/deploy.log" 2>&1; then
    log "  deploy.yml: $(recap "$dir/deploy.log")"
    keep_llama_files "$dir"
    # The server's own timings, one request at a time: plain /completion (as llama-bench decodes), then
    # a streamed chat completion (as chat clients ask).
    "$python" "$repo/scripts/served-speed.py" http://127.0.0.1:8080 --prompt-tokens 128 --n-predict 128 --requests 5 --warmup 1 \
      >"$dir/served-speed.json" 2>"$dir/served-speed.err"
    "$python" "$repo/scripts/served-speed.py" http://127.0.0.1:8080 --prompt-tokens 128 --n-predict 128 --requests 5 --warmup 1 \
      --chat --stream >"$dir/served-speed-chat.json" 2>"$dir/served-speed-chat.err"
    module "$dir/hosts.json" gpulab.inference.llm_benchmark \
      "{\"base_url\": \"http://127.0.0.1:8080\", \"concurrency\": [1], \"requests_per_level\": 8, \"prompt_tokens\": 128, \"max_tokens\": 128, \"warmup_requests\": 1}" \
      "$dir/served.json"
    summary_lines "$dir/served.json" | while read -r line; do log "  served: $line"; done
    "$python" -c 'import json,sys; [print("%s: median %s tok/s" % (n, json.load(open(n))["tok_s"]["median"])) for n in sys.argv[1:]]' \
      "$dir/served-speed.json" "$dir/served-speed-chat.json" 2>&1 | while read -r line; do log "  ${line#"$out"/}"; done
    [ -s "$dir/served-speed.json" ] && mark llama-interactive
  else
    log "  deploy.yml failed: $(recap "$dir/deploy.log")"; tail -n 30 "$dir/deploy.log" >&2
  fi
fi
if wanted llama-throughput; then
  wait_prepare || exit 1
  begin llama-throughput
  dir=$out/llama-throughput
  mkdir -p "$dir"
  llama_inventory throughput "$dir/hosts.json"
  if playbook -i "$dir/hosts.json" "$repo/deploy.yml" >"$dir/deploy.log" 2>&1; then
    log "  deploy.yml: $(recap "$dir/deploy.log")"
    keep_llama_files "$dir"
    module "$dir/hosts.json" gpulab.inference.llm_benchmark \
      "{\"base_url\": \"http://127.0.0.1:8080\", \"concurrency\": [1, 4], \"requests_per_level\": 16, \"prompt_tokens\": 128, \"max_tokens\": 64, \"warmup_requests\": 1}" \
      "$dir/served.json"
    summary_lines "$dir/served.json" | while read -r line; do log "  served: $line"; done
    grep -q '"failed": true' "$dir/served.json" || mark llama-throughput
  else
    log "  deploy.yml failed: $(recap "$dir/deploy.log")"; tail -n 30 "$dir/deploy.log" >&2
  fi
fi

# ---- both engines, one client ------------------------------------------------------------------
if wanted compare; then
  begin compare
  cdir=$out/compare
  vdir=$out/vllm-throughput/vllm
  mkdir -p "$cdir"
  if [ -x "$vdir/gpulab-vllm" ] && [ -s "$out/llama-throughput/hosts.json" ] && curl -sf http://127.0.0.1:8080/health >/dev/null; then
    # argparse keeps an option's last value: the KV cache and the GPU share shrink so vLLM fits
    # beside the deployed llama.cpp; everything else is the throughput deployment's argv.
    # shellcheck disable=SC2046
    env $(grep -v '^#' "$vdir/environment") setsid "$vdir/gpulab-vllm" \
      --kv-cache-memory-bytes $((compare_kv_gib << 30)) --gpu-memory-utilization 0.5 >"$cdir/vllm-by-hand.log" 2>&1 </dev/null &
    vllm_group=$!
    t0=$SECONDS
    until curl -sf http://127.0.0.1:8000/health >/dev/null; do
      if [ $((SECONDS - t0)) -gt 420 ] || ! kill -0 "$vllm_group" 2>/dev/null; then log "  vLLM by hand: not healthy after $((SECONDS - t0)) s"; tail -n 20 "$cdir/vllm-by-hand.log" >&2; break; fi
      sleep 3
    done
    log "  vLLM by hand: healthy after $((SECONDS - t0)) s; $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ';')"
    bstart=$SECONDS
    playbook -i "$out/llama-throughput/hosts.json" "$repo/playbooks/bench.yml" \
      -e '{"bench_compare": [{"label": "vLLM", "base_url": "http://127.0.0.1:8000"}], "bench_label": "llama.cpp", "gpulab_bench_profile": "short", "bench_request_rates": [2]}' \
      -e "bench_report_dir=$cdir/reports" >"$cdir/bench-playbook.log" 2>&1 || log "  bench.yml (compare) failed: $(tail -n 5 "$cdir/bench-playbook.log" | tr '\n' ' ')"
    log "  bench.yml (compare): $((SECONDS - bstart)) s, $(recap "$cdir/bench-playbook.log")"
    kill -- -"$vllm_group" 2>/dev/null || true
    find "$cdir/reports" -name report.md 2>/dev/null | head -n 1 | grep -q . && mark compare
  else
    log "  compare needs vLLM's throughput wrapper ($vdir/gpulab-vllm) and the llama.cpp throughput deployment serving"
  fi
  playbook -i "$out/llama-throughput/hosts.json" "$repo/playbooks/stop.yml" >"$cdir/stop.log" 2>&1 || true
  log "  stop.yml (llama.cpp): $(recap "$cdir/stop.log")"
fi

# ---- each figure against its target ------------------------------------------------------------
if [[ " $steps " == *" summary "* ]]; then
  "$python" - "$out" <<'PY' | tee -a "$out/progress.log"
import glob, json, os, sys
out = sys.argv[1]


def load(path):
    try:
        return json.load(open(os.path.join(out, path)))
    except (OSError, ValueError):
        return None


def level(path, concurrency):
    doc = load(path) or {}
    for entry in (doc.get("benchmark") or {}).get("levels") or []:
        if entry.get("concurrency") == concurrency:
            return entry
    return None


def pick(entry, *keys):
    for key in keys:
        entry = entry.get(key) if isinstance(entry, dict) else None
    return entry


rows = []


def row(what, measured, target, better, unit):
    ok = None if measured is None or target is None else (measured >= target if better == "higher" else measured <= target)
    rows.append({"what": what, "measured": measured, "target": target, "better": better, "unit": unit,
                 "met": ok})


bench = load("llama-bench/tg128.json") or []
by_depth = {r.get("n_depth", 0): r["avg_ts"] for r in bench if r.get("n_gen")}
served = pick(load("llama-interactive/served-speed.json"), "tok_s", "median")
reference = by_depth.get(128, by_depth.get(0))
row("llama.cpp interactive: served decode / llama-bench tg128 at depth 128, one stream",
    None if not (served and reference) else round(100.0 * served / reference, 2), 95.0, "higher", "%")
chat = pick(load("llama-interactive/served-speed-chat.json"), "tok_s", "median")
row("llama.cpp interactive: streamed chat decode / llama-bench (no target; what chat clients see)",
    None if not (chat and reference) else round(100.0 * chat / reference, 2), None, "higher", "%")
row("llama.cpp throughput: aggregate at 4 streams",
    pick(level("llama-throughput/served.json", 4), "aggregate_output_tok_s"), 188.8, "higher", "tok/s")
row("vLLM interactive: TTFT p50 at one stream",
    pick(level("vllm-interactive/vllm/served.json", 1), "ttft_s", "p50"), 0.052, "lower", "s")
row("vLLM interactive: decode per stream at one stream",
    pick(level("vllm-interactive/vllm/served.json", 1), "decode_tok_s"), 380.0, "higher", "tok/s")
row("vLLM throughput: aggregate at 64 streams",
    pick(level("vllm-throughput/vllm/served.json", 64), "aggregate_output_tok_s"), 3694.0, "higher", "tok/s")
reports = sorted(glob.glob(os.path.join(out, "compare", "reports", "**", "report.md"), recursive=True))
plots = sorted(glob.glob(os.path.join(out, "compare", "reports", "**", "*.png"), recursive=True))
lines = ["# Serving intent on the GPU (scripts/gpu-e2e-intent.sh)", "",
         "| figure | measured | target | met |", "| --- | --- | --- | --- |"]
for r in rows:
    lines.append("| %s | %s | %s | %s |" % (
        r["what"], "-" if r["measured"] is None else "%s %s" % (r["measured"], r["unit"]),
        "-" if r["target"] is None else "%s %s %s" % (">=" if r["better"] == "higher" else "<=", r["target"], r["unit"]),
        "-" if r["met"] is None else ("yes" if r["met"] else "NO")))
lines += ["", "llama-bench: %s" % ", ".join("depth %d %.2f tok/s" % kv for kv in sorted(by_depth.items())),
          "side-by-side report: %s" % (os.path.relpath(reports[-1], out) if reports else "none"),
          "plots: %s" % (", ".join(os.path.relpath(p, out) for p in plots) or "none")]
for name in ("llama-interactive", "llama-throughput"):
    plan = load("%s/memory-plan.json" % name) or {}
    lines.append("%s memory plan intent: %s" % (name, json.dumps(plan.get("intent"))))
for name in ("vllm-interactive", "vllm-throughput"):
    plan = load("%s/vllm/vllm-plan.json" % name) or {}
    lines.append("%s plan intent: %s" % (name, json.dumps(plan.get("intent"))[:600]))
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
json.dump({"rows": rows, "llama_bench": by_depth, "report": reports, "plots": plots},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
print(text)
PY
fi
[ -z "$prepare_pid" ] || wait "$prepare_pid"
log "run ended, $((SECONDS - run_start)) s; steps done: $(find "$state" -name '*.done' -printf '%f ')"
touch "$out/DONE"
