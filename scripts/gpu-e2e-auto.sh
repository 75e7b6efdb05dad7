#!/usr/bin/env bash
# The layout autopilot on one GPU host (issue 34's device check), through scripts/gpu-e2e.sh:
# deploy.yml with every layout value left at auto, for the m2-62 llama.cpp model (RPC server and
# head, tensor split and context from the memory plan) and for the synthetic FP8 checkpoint
# (parallel sizes and the pinned KV cache from vllm_plan), each deployed twice (the second must
# change nothing), the pinned argv in the process list compared with the plan, and the plan
# against nvidia-smi per process and vLLM's own KV cache (scripts/gpu-e2e-planned.py).
#
#   scripts/gpu-e2e-auto.sh OUTDIR
#
# Ordered for one lease: the llama.cpp build and model are written side by side while vLLM is
# deployed and measured on the otherwise idle GPU (the build needs no GPU); llama.cpp is deployed
# once vLLM has stopped. GPULAB_E2E_VLLM_STASH (default /tmp/gpulab-stash): where the vLLM
# wheelhouse parts arrive (scripts/vllm-wheelhouse.sh stash), READY once all are there.
# OUTDIR/llama, OUTDIR/vllm: the harness's outputs; OUTDIR/DONE at the end.
set -uo pipefail

out=${1:?usage: scripts/gpu-e2e-auto.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GPULAB_E2E_VLLM_STASH=${GPULAB_E2E_VLLM_STASH:-/tmp/gpulab-stash}
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }
llama_auto=(GPULAB_E2E_ENGINES=llama_cpp GPULAB_E2E_LAYOUTS=auto GPULAB_E2E_CTX_SIZES=auto
  GPULAB_E2E_MODEL_NAME=m2-62 GPULAB_E2E_LLAMA_BENCH=0)

start=$SECONDS
env "${llama_auto[@]}" GPULAB_E2E_PHASE=prepare GPULAB_E2E_PREPARE_PARALLEL=1 \
  "$repo/scripts/gpu-e2e.sh" "$out/llama" >"$out/llama-prepare.log" 2>&1 &
prepare=$!
log "llama.cpp build and model started (pid $prepare)"

# Its own work directory: the two harness runs install their tools side by side.
env GPULAB_E2E_WORK=/tmp/gpulab-e2e-vllm GPULAB_E2E_ENGINES=vllm GPULAB_E2E_VLLM_LAYOUT=auto \
  GPULAB_E2E_VLLM_BENCH=0 "$repo/scripts/gpu-e2e.sh" "$out/vllm" >"$out/vllm.log" 2>&1
log "vLLM part: rc=$?, $((SECONDS - start)) s"

wait "$prepare"
rc=$?
log "llama.cpp build and model: rc=$rc, $((SECONDS - start)) s"
if [ "$rc" = 0 ]; then
  env "${llama_auto[@]}" GPULAB_E2E_PREPARE=0 GPULAB_E2E_IDEMPOTENCE=auto GPULAB_E2E_BENCH_PLAYBOOK=none \
    GPULAB_E2E_SERVED=0 GPULAB_E2E_STOP=0 "$repo/scripts/gpu-e2e.sh" "$out/llama" >"$out/llama.log" 2>&1
  log "llama.cpp part: rc=$?, $((SECONDS - start)) s"
fi
touch "$out/DONE"
