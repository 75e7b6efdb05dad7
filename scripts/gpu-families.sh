#!/usr/bin/env bash
# vllm_plan against vLLM itself, per model family, on one GPU host: for each family a reduced-depth
# checkpoint at the released model's full width (synthetic_hf.family_options: config.json, the
# tokenizer, safetensors headers over sparse holes), vLLM started on it with --load-format dummy
# and --enforce-eager (offline LLM API, one process per family, bounded in time), and the plan for
# the same config and headers. Per family, OUTDIR/FAMILY/ holds vllm.log, write.json and
# result.json; OUTDIR/families.json gathers every result (planned against reported: weights,
# "Model loading took"; KV tokens, "GPU KV cache size"; "Available KV cache memory"), and
# OUTDIR/progress.log the steps.
#
#   scripts/gpu-families.sh OUTDIR [FAMILY ...]
#
# FAMILY: deepseek-v3 qwen3-moe glm4-moe gpt-oss qwen3-next minimax-m2 minimax-m3 (default: all, in that
# order). minimax-m3 is skipped (logged, result.json "skipped") where flashinfer is not importable, unless
# GPULAB_FAMILIES_FLASHINFER_NORM_DOUBLE=1 (its two norms in torch: tests/doubles/flashinfer_norm): vLLM's
# MiniMax-M3 calls flashinfer.norm in every RMSNorm (scripts/gpu-families.py NEEDS_FLASHINFER).
# A first start of an FP8 or MXFP4 MoE family compiles Triton kernels (minutes); the cache
# (GPULAB_FAMILIES_WORK/cache) serves later starts on the same machine, so a host whose commands are
# bounded runs the families in two or three calls while it stays warm.
# Environment:
#   GPULAB_VLLM_SITE          a --target directory holding vLLM (VLLM-ON-DEVICE.md: /tmp/vsite), put on
#                             PYTHONPATH; used when it exists and vLLM is not importable otherwise
#   GPULAB_VLLM_WHEELHOUSE    else: a wheelhouse (scripts/vllm-wheelhouse.sh) installed --no-deps into
#                             GPULAB_FAMILIES_WORK/vsite
#   GPULAB_FAMILIES_TIMEOUT_S per family (default 300); the whole process group is stopped after it
#   GPULAB_FAMILIES_BUDGET_S  the whole run (default 570, for a host that ends a command at 600 s): a
#                             family gets what is left of it, less 30 s, and none below 60 s is started
#   GPULAB_FAMILIES_MAX_MODEL_LEN (default 4096), GPULAB_FAMILIES_UTIL (default 0.9)
#   GPULAB_FAMILIES_PIN_KV=1  pin the planned KV cache (--kv-cache-memory-bytes) as role vllm_server does
#   GPULAB_FAMILIES_WORK      models and caches (default /tmp/gpulab-families)
#   GPULAB_FAMILIES_LAYERS_<family, - as _>  layers of that family (defaults below)
set -euo pipefail

out=${1:?usage: scripts/gpu-families.sh OUTDIR [FAMILY ...]}
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${GPULAB_FAMILIES_WORK:-/tmp/gpulab-families}
timeout_s=${GPULAB_FAMILIES_TIMEOUT_S:-300}
deadline=$((SECONDS + ${GPULAB_FAMILIES_BUDGET_S:-570}))
max_model_len=${GPULAB_FAMILIES_MAX_MODEL_LEN:-4096}
util=${GPULAB_FAMILIES_UTIL:-0.9}
python=$(command -v python3)
all_families=(deepseek-v3 qwen3-moe glm4-moe gpt-oss qwen3-next minimax-m2 minimax-m3)
if [ "$#" -gt 0 ]; then families=("$@"); else families=("${all_families[@]}"); fi
# Reduced depth: two layers (DeepSeek-V3 and GLM: one dense, one MoE; gpt-oss: one sliding, one
# full; MiniMax-M3: one dense with full attention, one MoE with block-sparse attention and the indexer),
# Qwen3-Next one group of four (three gated delta net, one full attention).
declare -A default_layers=([deepseek-v3]=2 [qwen3-moe]=2 [glm4-moe]=2 [gpt-oss]=2 [qwen3-next]=4 [minimax-m2]=2
  [minimax-m3]=2)

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }
die() { log "FAILED: $*"; exit 1; }

for family in "${families[@]}"; do
  [ -n "${default_layers[$family]:-}" ] || die "unknown family $family (known: ${all_families[*]})"
done
command -v nvidia-smi >/dev/null || die "no nvidia-smi: this runs on a GPU host"
mkdir -p "$work/collections/ansible_collections/gpulab" "$work/cache/triton" "$work/cache/vllm"
ln -sfn "$repo" "$work/collections/ansible_collections/gpulab/inference"
export PYTHONPATH=$work/collections${PYTHONPATH:+:$PYTHONPATH}

# ---- vLLM ---------------------------------------------------------------------------------------
if ! "$python" -c 'import vllm' 2>/dev/null; then
  site=${GPULAB_VLLM_SITE:-/tmp/vsite}
  if [ -d "$site/vllm" ]; then
    export PYTHONPATH=$PYTHONPATH:$site
  elif [ -n "${GPULAB_VLLM_WHEELHOUSE:-}" ]; then
    log "installing vLLM from $GPULAB_VLLM_WHEELHOUSE into $work/vsite"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/vsite" \
      "$GPULAB_VLLM_WHEELHOUSE"/*.whl >"$out/pip.log" 2>&1 || die "pip install (see $out/pip.log)"
    export PYTHONPATH=$PYTHONPATH:$work/vsite
  fi
fi
vllm_version=$("$python" -c 'import vllm; print(vllm.__version__)' 2>"$out/vllm-import.log") \
  || die "vLLM is not importable (set GPULAB_VLLM_SITE or GPULAB_VLLM_WHEELHOUSE): $(tail -n 3 "$out/vllm-import.log")"

export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_DEEP_GEMM=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export TRITON_CACHE_DIR=$work/cache/triton VLLM_CACHE_ROOT=$work/cache/vllm
gpu=${CUDA_VISIBLE_DEVICES%%,*}
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "$gpu" | tr -d ' ')
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu")
log "vLLM $vllm_version on GPU $gpu ($gpu_name, $gpu_mib MiB); families: ${families[*]}; ${timeout_s} s each"

# Stop a process group: TERM, then KILL after 15 s.
stop_group() {
  local pgid=$1 _
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  for _ in $(seq 15); do kill -0 -- "-$pgid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
}

# Wait until no process holds GPU memory (a dying engine core releases it late).
wait_gpu_free() {
  local _
  for _ in $(seq 60); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader -i "$gpu" 2>/dev/null)" ] && return 0
    sleep 1
  done
  log "  GPU $gpu still held: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -i "$gpu" | tr '\n' ' ')"
}

results=()
for family in "${families[@]}"; do
  dir=$out/$family
  mkdir -p "$dir"
  var=GPULAB_FAMILIES_LAYERS_${family//-/_}
  layers=${!var:-${default_layers[$family]}}
  model=$work/models/$family-$layers
  mkdir -p "$model"
  start=$SECONDS
  if ! "$python" "$repo/scripts/gpu-families.py" write "$family" "$model" "$layers" >"$dir/write.json" 2>"$dir/write.err"; then
    log "$family: writing the checkpoint failed: $(tail -n 3 "$dir/write.err")"
    continue
  fi
  log "$family: $layers layers, $("$python" -c 'import json,sys; w=json.load(open(sys.argv[1])); print("%.2f GiB of weights in %d file(s), %s" % (w["weights_bytes"] / 2**30, len(w["shards"]), w["state_before"]))' "$dir/write.json") ($((SECONDS - start)) s)"
  wait_gpu_free
  limit=$((deadline - SECONDS - 30))
  [ "$limit" -le "$timeout_s" ] || limit=$timeout_s
  if [ "$limit" -lt 60 ]; then
    log "$family: skipped, $((deadline - SECONDS)) s of GPULAB_FAMILIES_BUDGET_S left"
    continue
  fi
  start=$SECONDS
  GPULAB_FAMILIES_GPU_MIB=$gpu_mib setsid "$python" "$repo/scripts/gpu-families.py" load "$model" "$max_model_len" "$util" >"$dir/vllm.log" 2>&1 &
  pid=$!
  status=timeout
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      if wait "$pid"; then status=ok; else status="exit $?"; fi
      break
    fi
    sleep 2
  done
  stop_group "$pid"
  wait "$pid" 2>/dev/null || true
  log "$family: vLLM $status after $((SECONDS - start)) s"
  grep -E 'Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|backend|engine up|generated|skipped' \
    "$dir/vllm.log" | tail -n 10 | while read -r line; do log "  ${line:0:240}"; done || true
  if [ "$status" != ok ]; then
    grep -E 'Error|error:|Traceback' "$dir/vllm.log" | tail -n 4 | while read -r line; do log "  ${line:0:300}"; done || true
  fi
  if "$python" "$repo/scripts/gpu-families.py" compare "$family" "$model" "$dir/vllm.log" "$gpu_mib" "$max_model_len" \
      "$util" >"$dir/result.json" 2>"$dir/compare.err"; then
    "$python" - "$dir/result.json" "$status" "$((SECONDS - start))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["vllm_status"], r["vllm_seconds"] = sys.argv[2], int(sys.argv[3])
json.dump(r, open(sys.argv[1], "w"), indent=2, sort_keys=True)
p, g = r.get("planned", {}), r.get("reported", {})
print("%s: weights planned %s GiB, reported %s GiB; KV tokens planned %s, reported %s (from vLLM's memory with the "
      "plan's bytes per token: %s); reserve implied %s GiB; ratios %s" % (
          r["family"], p.get("weights_gib"), g.get("model_loading_gib"), p.get("kv_tokens"), g.get("kv_cache_tokens"),
          r.get("kv_tokens_from_reported_memory"), r.get("reserve_gib_implied"), r.get("planned_over_reported")),
      file=sys.stderr)
PY
    results+=("$dir/result.json")
  else
    log "$family: compare failed: $(tail -n 3 "$dir/compare.err")"
  fi 2> >(while read -r line; do log "  $line"; done)
done

# Every family compared on this machine so far (GPULAB_FAMILIES_WORK/families.json: a later call
# adds its families to an earlier call's), copied to OUTDIR.
"$python" - "$work/families.json" "$vllm_version" "$gpu_name" "$gpu_mib" ${results[@]+"${results[@]}"} <<'PY'
import json, sys
path, version, name, mib = sys.argv[1:5]
rows = [json.load(open(p)) for p in sys.argv[5:]]
try:
    done = json.load(open(path))["families"]
except (OSError, ValueError, KeyError):
    done = []
merged = dict((r["family"], r) for r in done)
merged.update((r["family"], r) for r in rows)
json.dump({"vllm": version, "gpu": name, "gpu_memory_mib": int(mib), "families": list(merged.values())},
          open(path, "w"), indent=2, sort_keys=True)
PY
cp "$work/families.json" "$out/families.json"
log "done: $out/families.json (${#results[@]} of ${#families[@]} families compared)"
