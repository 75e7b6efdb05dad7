# The vLLM part of scripts/gpu-e2e.sh (sourced by it, after the tools and the GPU facts):
# a MiniMax-M2-shaped FP8 checkpoint (synthetic_hf), then the collection's own deploy.yml with
# gpulab_engine vllm (preflight, plan, drain, vLLM installed from a local wheelhouse and run under
# the service manager, /health, /v1/models, one chat completion), a second deploy.yml that must
# change and restart nothing, playbooks/bench.yml at concurrency 1, 8 and 64 with the report,
# planned against measured (vllm_plan, vLLM's own log, nvidia-smi per process), playbooks/stop.yml.
# vLLM runs as the role deploys it, with CUDA graphs (vllm_server_enforce_eager false);
# GPULAB_E2E_VLLM_EAGER=1 runs it with --enforce-eager instead (faster start, slower decode).
# GPULAB_E2E_VLLM_LAYOUT=auto leaves every layout value unset (parallel sizes, the context, the KV
# cache: the plan chooses and pins them) and compares what vLLM runs with against the plan
# (scripts/gpu-e2e-planned.py); GPULAB_E2E_VLLM_BENCH=0 skips playbooks/bench.yml.
# GPULAB_E2E_VLLM_EXTRA: host variables (JSON) laid over the inventory's, e.g.
# '{"gpulab_serving_intent": "interactive"}'; GPULAB_E2E_VLLM_IDEMPOTENCE=0 skips the second deploy;
# GPULAB_E2E_VLLM_SERVED: llm_benchmark options (JSON, e.g. '{"concurrency": [1]}') run against the
# deployed vLLM into OUT/vllm/served.json (scripts/gpu-e2e-intent.sh measures each intent so).
# GPULAB_E2E_VLLM_STASH=DIR: the wheelhouse arrives in parts (scripts/vllm-wheelhouse.sh stash) while
# the checkpoint is written; the harness waits for DIR/READY, then joins them into the wheelhouse.
# Needs a wheelhouse (GPULAB_E2E_VLLM_WHEELHOUSE, default /tmp/gpulab-wheelhouse: vLLM's wheel and
# the wheels it needs beyond the Python's own packages; scripts/vllm-wheelhouse.sh makes one), and
# a Python that already holds the torch vLLM pins (the venv sees it: vllm_server_venv_site_packages).
# shellcheck shell=bash disable=SC2154
vllm_wheelhouse=${GPULAB_E2E_VLLM_WHEELHOUSE:-/tmp/gpulab-wheelhouse}
vllm_model=$model_dir/${GPULAB_E2E_VLLM_MODEL_STEM:-e2e-minimax-m2-fp8}
# 24 layers, hidden 3072, 48 heads / 8 KV heads of 128, 32 experts / 8 used, expert FFN 1536, FP8
# [128, 128] blocks: about 12 GB.
vllm_eager=$([ "${GPULAB_E2E_VLLM_EAGER:-0}" = 1 ] && echo true || echo false)
vllm_model_options=${GPULAB_E2E_VLLM_MODEL:-'{"layers": 24, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8, "head_dim": 128, "experts": 32, "experts_used": 8, "expert_ffn_size": 1536, "max_position_embeddings": 8192, "shard_max_mib": 4096}'}
vdir=$out/vllm
mkdir -p "$model_dir"
mkdir -p "$vdir"

start=$SECONDS
module "$work/facts.yml" gpulab.inference.synthetic_hf \
  "$("$python" -c 'import json,sys; o=json.loads(sys.argv[1]); o["path"]=sys.argv[2]; print(json.dumps(o))' "$vllm_model_options" "$vllm_model")" \
  "$vdir/synthetic_hf.json"
log "synthetic_hf: $((SECONDS - start)) s, $("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("msg") or "changed=%s %s bytes" % (r.get("changed"), r.get("size_bytes")))' "$vdir/synthetic_hf.json")"
if [ "${GPULAB_E2E_PHASE:-all}" = prepare ]; then
  return 0
fi
if [ -n "${GPULAB_E2E_VLLM_STASH:-}" ]; then
  log "waiting for the wheelhouse parts in $GPULAB_E2E_VLLM_STASH"
  while [ ! -e "$GPULAB_E2E_VLLM_STASH/READY" ]; do sleep 2; done
  rm -f "$GPULAB_E2E_VLLM_STASH/READY"
  "$repo/scripts/vllm-wheelhouse.sh" join "$GPULAB_E2E_VLLM_STASH" "$vllm_wheelhouse" 2>&1 | while read -r line; do log "  $line"; done
fi
vllm_layout=${GPULAB_E2E_VLLM_LAYOUT:-fixed}

# The wheelhouse's other packages are installed beside vLLM (--no-deps: the set is complete), each
# at its wheel's version, so one that the Python already holds at another version is installed too.
vllm_packages=$("$python" - "$vllm_wheelhouse" <<'PY'
import glob, json, os, sys
pins = sorted(set("%s==%s" % tuple(os.path.basename(w).split("-")[:2])
                  for w in glob.glob(os.path.join(sys.argv[1], "*.whl"))))
print(json.dumps([p for p in pins if not p.startswith("vllm==")]))
PY
)
"$python" - "$vdir/hosts.json" "$vllm_packages" "$vllm_eager" "$vllm_layout" "${GPULAB_E2E_VLLM_EXTRA:-}" <<PY
import json, sys
gpus = json.load(open("$out/gpu_facts.json"))["ansible_facts"]["gpulab_gpus"]
first = str(min(g["index"] for g in gpus))
hostvars = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "$python",
    "gpulab_fabric_address": "127.0.0.1",
    "gpulab_service_manager": "$manager",
    "gpulab_engine": "vllm",
    "supervisor_wheel_src": "$supervisor_wheel",
    "supervisor_python": "$python",
    "vllm_server_model_path": "$vllm_model",
    "vllm_server_served_model_name": "e2e-minimax-m2-fp8",
    "vllm_server_install": "pip",
    "vllm_server_python": "$python",
    "vllm_server_pip_find_links": "$vllm_wheelhouse",
    "vllm_server_pip_no_deps": True,
    "vllm_server_pip_packages": json.loads(sys.argv[2]),
    "vllm_server_venv_site_packages": True,
    "vllm_server_enforce_eager": sys.argv[3] == "true",
    "vllm_server_max_model_len": 8192,
    # a start that fails shows in minutes, not after the default half hour
    "vllm_server_health_timeout_s": 480,
    "vllm_server_environment": {
        "CUDA_VISIBLE_DEVICES": first, "HF_HUB_OFFLINE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0",
        "VLLM_USE_DEEP_GEMM": "0", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1"},
    "gpulab_bench_enabled": False,
    "bench_concurrency": [1, 8, 64],
    "bench_requests_per_level": 64,
    "bench_max_tokens": 64,
    "bench_report_dir": "$out/reports",
}
if sys.argv[4] == "auto":
    del hostvars["vllm_server_max_model_len"]
hostvars.update(json.loads(sys.argv[5] or "{}"))
inventory = {"gpu_nodes": {"children": {"inference_head": {"hosts": {"$host": hostvars}}, "rpc_workers": {"hosts": {}}}}}
json.dump(inventory, open(sys.argv[1], "w"), indent=2)
PY
log "== vLLM: $vllm_model, enforce_eager $vllm_eager, wheelhouse $vllm_wheelhouse ($(find "$vllm_wheelhouse" -name '*.whl' | wc -l) wheels)"
vinv=$vdir/hosts.json
vsup() { sup status gpulab-vllm 2>&1 | tr -s ' '; }
vpid() { sup status gpulab-vllm 2>&1 | grep -o 'pid [0-9]*' || echo 'no pid'; }
if deploy "$vinv" "$vdir/deploy-1.log"; then
  grep -E 'tokens from|answer:' "$vdir/deploy-1.log" | tail -n 2 | sed 's/^ *//' | while read -r line; do log "  $line"; done || true
  if [ "${GPULAB_E2E_VLLM_IDEMPOTENCE:-1}" = 1 ]; then
    before=$(vpid)
    deploy "$vinv" "$vdir/deploy-2.log" || true
    after=$(vpid)
    log "  second deploy: vLLM $before before, $after after: $( [ "$before" = "$after" ] && echo 'not restarted' || echo 'RESTARTED')"
  fi
  # The wrapper and environment as deployed (a later run can start the same vLLM by hand).
  cp /opt/gpulab/bin/gpulab-vllm /etc/gpulab/vllm/environment "$vdir/" 2>/dev/null || true
  # pgrep alone would not show each command line whole.
  # shellcheck disable=SC2009
  ps -eo pid,args | grep -E 'vllm|VLLM' | grep -v grep >"$vdir/processes.txt" || true
  cp /etc/gpulab/vllm/plan.json "$vdir/vllm-plan.json" 2>/dev/null || true
  "$python" "$repo/scripts/gpu-e2e-planned.py" vllm >"$vdir/planned.txt" 2>&1 || true
  grep -v '^{' "$vdir/planned.txt" | while read -r line; do log "  ${line:0:400}"; done
  if [ -n "${GPULAB_E2E_VLLM_SERVED:-}" ]; then
    start=$SECONDS
    module "$vinv" gpulab.inference.llm_benchmark \
      "$("$python" -c 'import json,sys; o=json.loads(sys.argv[1]); o.setdefault("base_url", "http://127.0.0.1:8000"); print(json.dumps(o))' "$GPULAB_E2E_VLLM_SERVED")" \
      "$vdir/served.json"
    "$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("\n".join(r.get("benchmark", {}).get("summary") or [r.get("msg") or "no summary"]))' "$vdir/served.json" \
      | while read -r line; do log "  served: $line"; done || true
    log "  served: $((SECONDS - start)) s"
  fi
  if [ "${GPULAB_E2E_VLLM_BENCH:-1}" = 1 ]; then
    start=$SECONDS
    playbook -i "$vinv" "$repo/playbooks/bench.yml" >"$vdir/bench-playbook.log" 2>&1 || log "bench.yml failed: $(tail -n 5 "$vdir/bench-playbook.log")"
    log "bench.yml: $((SECONDS - start)) s, $(recap "$vdir/bench-playbook.log")"
    grep -E 'tok/s|TTFT|ITL' "$vdir/bench-playbook.log" | sed 's/^ *//' | head -n 12 | while read -r line; do log "  $line"; done || true
  fi
  module "$vinv" gpulab.inference.gpu_residency '{}' "$vdir/residency.json"
  gpus_json=$("$python" -c 'import json,sys; print(json.dumps([{"index": g["index"], "memory_total_mib": g["memory_total_mib"]} for g in json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"]][:1]))' "$out/gpu_facts.json")
  module "$vinv" gpulab.inference.vllm_plan \
    "{\"model_path\": \"$vllm_model\", \"gpus\": $gpus_json, \"max_model_len\": 8192, \"enforce_eager\": $vllm_eager}" "$vdir/plan.json"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$vdir/nvidia-smi-apps.csv" 2>&1 || true
  tail -c 3000000 /var/log/gpulab/gpulab-vllm.log >"$vdir/gpulab-vllm.log" 2>/dev/null || true
  grep -E 'Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|init engine|torch.compile|Using .* MoE backend|memory profiling|Graph capturing|CUDA graph|Application startup complete' "$vdir/gpulab-vllm.log" | tail -n 16 | while read -r line; do log "  vllm: ${line:0:220}"; done || true
  "$python" -c 'import json,sys; e=json.load(open(sys.argv[1])).get("estimate", {}); print("planned per GPU: weights %s GiB, KV cache %s GiB (%s tokens), reserve %s GiB, budget %s GiB" % (e.get("weights_gib"), e.get("kv_cache_gib"), e.get("kv_tokens_per_gpu"), e.get("reserve_gib"), e.get("budget_gib")))' "$vdir/plan.json" | while read -r line; do log "  $line"; done
  "$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r.get("residency", r))[:600])' "$vdir/residency.json" | while read -r line; do log "  residency: $line"; done
else
  tail -n 40 "$vdir/deploy-1.log" >&2
  tail -n 60 /var/log/gpulab/gpulab-vllm.log >"$vdir/gpulab-vllm-tail.log" 2>/dev/null || true
fi
if [ "${GPULAB_E2E_STOP:-1}" = 1 ]; then
  playbook -i "$vinv" "$repo/playbooks/stop.yml" >"$vdir/stop.log" 2>&1 || true
  log "stop.yml (vLLM): $(recap "$vdir/stop.log"); $(vsup)"
fi
