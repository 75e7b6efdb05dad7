#!/usr/bin/env bash
# The layout autopilot on one GPU host (issue 34's device check), through scripts/gpu-e2e.sh, and
# both engines benchmarked side by side in one report (issue 37):
# 1. vLLM: deploy.yml with every layout value left at auto for the synthetic FP8 checkpoint
#    (parallel sizes and the pinned KV cache from vllm_plan), deployed twice (the second must change
#    nothing), the pinned argv and vLLM's own KV cache against the plan (scripts/gpu-e2e-planned.py).
# 2. A kept service: a supervisord program `asr` that is not the collection's holds
#    GPULAB_E2E_KEPT_GIB (default 80) GiB of GPU 0, as the seed deployment's live speech service did;
#    the llama.cpp deploy keeps it (gpu_drain_keep) and plans around it.
# 3. llama.cpp: deploy.yml with every layout value left at auto for the m2-62 model with a trained
#    context of GPULAB_E2E_TRAINED_CTX (default 262144: more than fits beside the kept service, so the
#    context is chosen from memory), one RPC server and the head on GPU 0, deployed twice, the pinned
#    argv and each process's memory against memory-plan.json.
# 4. Both engines, one client: the kept service stops, vLLM runs by hand from the wrapper the
#    collection wrote (KV cache pinned to GPULAB_E2E_COMPARE_KV_GIB, default 40 GiB, in the room the
#    kept service left) beside the deployed llama.cpp, and playbooks/bench.yml sends the same request
#    set to both (bench_compare): one report.
#
#   scripts/gpu-e2e-auto.sh OUTDIR
#
# Ordered for one lease: the llama.cpp build and model are written side by side while vLLM is
# deployed and measured on the otherwise idle GPU (the build needs no GPU). GPULAB_E2E_VLLM_STASH
# (default /tmp/gpulab-stash): where the vLLM wheelhouse parts arrive (scripts/vllm-wheelhouse.sh
# stash), READY once all are there; set and empty: the wheelhouse is already in place.
# GPULAB_E2E_AUTO_ENGINES (default "vllm llama_cpp"): "llama_cpp" alone skips the vLLM part and the
# side-by-side bench (no wheelhouse needed). OUTDIR/llama, OUTDIR/vllm, OUTDIR/compare: the outputs;
# OUTDIR/DONE at the end. Run it from a
# copy of the tree outside the device tool's working tree (each call replaces that tree).
set -uo pipefail

out=${1:?usage: scripts/gpu-e2e-auto.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/compare"
out=$(cd "$out" && pwd)
export GPULAB_E2E_VLLM_STASH=${GPULAB_E2E_VLLM_STASH-/tmp/gpulab-stash}
kept_gib=${GPULAB_E2E_KEPT_GIB:-80}
engines=${GPULAB_E2E_AUTO_ENGINES:-vllm llama_cpp}
trained_ctx=${GPULAB_E2E_TRAINED_CTX:-262144}
compare_kv_gib=${GPULAB_E2E_COMPARE_KV_GIB:-40}
python=$(command -v python3)
sup() { /opt/gpulab/supervisor/bin/supervisorctl -c /etc/gpulab/supervisord.conf "$@"; }
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }
model_name=m2-62
# shellcheck source=scripts/gpu-e2e-models.sh
. "$repo/scripts/gpu-e2e-models.sh"
model_options=$("$python" -c 'import json,sys; o=json.loads(sys.argv[1]); o["context_length"]=int(sys.argv[2]); print(json.dumps(o))' \
  "$named_options" "$trained_ctx")
llama_auto=(GPULAB_E2E_ENGINES=llama_cpp GPULAB_E2E_LAYOUTS=auto GPULAB_E2E_CTX_SIZES=auto
  "GPULAB_E2E_MODEL_NAME=$model_name" "GPULAB_E2E_MODEL=$model_options" GPULAB_E2E_LLAMA_BENCH=0
  'GPULAB_E2E_LLAMA_EXTRA={"gpu_drain_keep": ["asr"]}')

# The kept service: not the collection's, so the drain leaves it and the plan counts its memory.
# shellcheck source=scripts/gpu-e2e-programs.sh
. "$repo/scripts/gpu-e2e-programs.sh"
start_kept_service() { gpu_program asr "$kept_gib" 0; }

# The tools the llama.cpp part's harness installed (scripts/gpu-e2e.sh).
harness() {
  env PYTHONPATH=/tmp/gpulab-e2e/site ANSIBLE_CONFIG=/tmp/gpulab-e2e/ansible.cfg PATH="/opt/gpulab-e2e/bin:$PATH" \
    ANSIBLE_COLLECTIONS_PATH="/tmp/gpulab-e2e/collections:${GPULAB_E2E_WHEELS:-$repo/.whl}/collections" "$@"
}

start=$SECONDS
env "${llama_auto[@]}" GPULAB_E2E_PHASE=prepare GPULAB_E2E_PREPARE_PARALLEL=1 \
  "$repo/scripts/gpu-e2e.sh" "$out/llama" >"$out/llama-prepare.log" 2>&1 &
prepare=$!
log "llama.cpp build and model (trained context $trained_ctx) started (pid $prepare)"

if [[ " $engines " == *" vllm "* ]]; then
  # Its own work directory: the two harness runs install their tools side by side.
  env GPULAB_E2E_WORK=/tmp/gpulab-e2e-vllm GPULAB_E2E_ENGINES=vllm GPULAB_E2E_VLLM_LAYOUT=auto \
    GPULAB_E2E_VLLM_BENCH=0 "$repo/scripts/gpu-e2e.sh" "$out/vllm" >"$out/vllm.log" 2>&1
  log "vLLM part: rc=$?, $((SECONDS - start)) s"
  # The wrapper and environment the collection wrote, for the side-by-side run (the llama.cpp deploy
  # retires vLLM's program, not these files; copied all the same).
  cp /opt/gpulab/bin/gpulab-vllm /etc/gpulab/vllm/environment "$out/compare/" 2>/dev/null || log "no vLLM wrapper to copy"
  start_kept_service
  wait "$prepare"
  rc=$?
else
  wait "$prepare"
  rc=$?
  # Without the vLLM part nothing has installed supervisord yet: its role alone, as deploy.yml runs it.
  wheel=$(find "${GPULAB_E2E_WHEELS:-$repo/.whl}" -maxdepth 1 -name 'supervisor-*-none-any.whl' | sort | tail -n 1)
  printf -- '- name: supervisord alone\n  hosts: gpu-host\n  roles: [gpulab.inference.supervisor]\n' >/tmp/gpulab-e2e/supervisor.yml
  harness "$python" -m ansible.cli.playbook -i /tmp/gpulab-e2e/facts.yml /tmp/gpulab-e2e/supervisor.yml \
    -e "supervisor_wheel_src=$wheel supervisor_python=$python" >"$out/supervisor.log" 2>&1 || log "supervisor role failed: $(tail -n 5 "$out/supervisor.log")"
  start_kept_service
fi
log "llama.cpp build and model: rc=$rc, $((SECONDS - start)) s"
if [ "$rc" = 0 ]; then
  env "${llama_auto[@]}" GPULAB_E2E_PREPARE=0 GPULAB_E2E_IDEMPOTENCE=auto GPULAB_E2E_BENCH_PLAYBOOK=none \
    GPULAB_E2E_SERVED=0 GPULAB_E2E_STOP=0 "$repo/scripts/gpu-e2e.sh" "$out/llama" >"$out/llama.log" 2>&1
  log "llama.cpp part: rc=$?, $((SECONDS - start)) s"
  grep -h "auto:" "$out/llama/auto/deploy-1.log" 2>/dev/null | sed 's/^ *//' | sort -u | head -n 6 | while read -r line; do log "  ${line:0:300}"; done
fi

# ---- both engines, one client ------------------------------------------------------------------
cdir=$out/compare
if [ -x "$cdir/gpulab-vllm" ] && [ -s "$out/llama/auto/hosts.json" ]; then
  sup stop asr >>"$out/progress.log" 2>&1
  # argparse keeps an option's last value: these override the pinned KV cache and the share of
  # the GPU the wrapper asks for, so vLLM fits beside the deployed llama.cpp.
  # As the wrapper's own comment runs it by hand, with the service's environment.
  # shellcheck disable=SC2046
  env $(grep -v '^#' "$cdir/environment") setsid "$cdir/gpulab-vllm" \
    --kv-cache-memory-bytes $((compare_kv_gib << 30)) --gpu-memory-utilization 0.5 >"$cdir/vllm-by-hand.log" 2>&1 </dev/null &
  vllm_group=$!
  t0=$SECONDS
  until curl -sf http://127.0.0.1:8000/health >/dev/null; do
    if [ $((SECONDS - t0)) -gt 420 ]; then log "vLLM by hand: no /health after 420 s"; tail -n 20 "$cdir/vllm-by-hand.log" >&2; break; fi
    sleep 3
  done
  log "vLLM by hand: healthy after $((SECONDS - t0)) s; $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ';')"
  bstart=$SECONDS
  harness "$python" -m ansible.cli.playbook -i "$out/llama/auto/hosts.json" "$repo/playbooks/bench.yml" \
    -e '{"bench_compare": [{"label": "vllm", "base_url": "http://127.0.0.1:8000"}], "bench_label": "llama.cpp", "gpulab_bench_profile": "short", "bench_request_rates": [2]}' \
    -e "bench_report_dir=$cdir/reports" >"$cdir/bench-playbook.log" 2>&1 || log "bench.yml (compare) failed: $(tail -n 5 "$cdir/bench-playbook.log")"
  log "bench.yml (compare): $((SECONDS - bstart)) s, $(grep -E '^gpu-host +:' "$cdir/bench-playbook.log" | tail -n 1 | tr -s ' ')"
  kill -- -"$vllm_group" 2>/dev/null || true
fi
log "done, $((SECONDS - start)) s"
touch "$out/DONE"
