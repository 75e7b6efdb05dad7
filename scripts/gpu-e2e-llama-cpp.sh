# The llama.cpp part of scripts/gpu-e2e.sh (sourced by it, after the tools and the GPU facts):
# per layout an inventory, deploy.yml twice, the benchmark, residency, the memory plan, llama-bench.
# shellcheck shell=bash disable=SC2154

# ---- inventories -------------------------------------------------------------------------------
# The head takes GPU 0; `split` adds one RPC server on GPU 0, `rpc` one per other GPU, each on its
# own port (llama_rpc_server_port_base + index). Everything on loopback. `auto` has the servers of
# `split` on one GPU and of `rpc` on more, and sets no layout value (tensor split, context): the
# memory plan chooses them. A context of `auto` leaves llama_server_ctx_size unset in any layout.
write_inventory() { # LAYOUT CTX FILE [EXTRA_JSON]
  "$python" - "$@" <<PY
import json, os, sys
layout, ctx, path = sys.argv[1], sys.argv[2], sys.argv[3]
# GPULAB_E2E_LLAMA_EXTRA: host variables (JSON) of every inventory; EXTRA_JSON those of one.
extra = json.loads(os.environ.get("GPULAB_E2E_LLAMA_EXTRA") or "{}")
extra.update(json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else {})
gpus = json.load(open("$out/gpu_facts.json"))["ansible_facts"]["gpulab_gpus"]
indices = sorted(g["index"] for g in gpus)
if layout == "auto":
    layout = "rpc" if len(indices) > 1 else "split"
if layout == "rpc" and len(indices) < 2:
    sys.exit("layout rpc needs 2 or more GPUs, this host has %d" % len(indices))
model = dict(json.loads('''$model_options'''), path="$model_dir/$model_stem.gguf")
hostvars = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "$python",
    "gpulab_fabric_address": "127.0.0.1",
    "gpulab_service_manager": "$manager",
    "gpulab_engine": "llama_cpp",
    "supervisor_wheel_src": "$supervisor_wheel",
    "supervisor_python": "$python",
    "llama_cpp_source": "archive",
    "llama_cpp_archive_src": "$archive",
    "llama_cpp_build_number": "0",
    "llama_cpp_build_commit": "$commit",
    "llama_cpp_distribute_controller_cache": "$work/controller-cache",
    "model_synthetic": model,
    "model_vocab_archive": "$archive",
    "model_vocab_archive_member": "llama.cpp/models/ggml-vocab-qwen2.gguf",
    "llama_server_model_path": "$model_path",
    "llama_server_supervisor_environment": {"CUDA_VISIBLE_DEVICES": str(indices[0])},
    "gpulab_bench_profile": "short",
    "bench_report_dir": "$out/reports",
}
if layout == "split":
    hostvars["llama_rpc_server_gpu_indices"] = [indices[0]]
elif layout == "rpc":
    hostvars["llama_rpc_server_gpu_indices"] = indices[1:]
if ctx != "auto":
    hostvars["llama_server_ctx_size"] = int(ctx)
hostvars.update(extra)
inventory = {"gpu_nodes": {"children": {
    "inference_head": {"hosts": {"$host": hostvars}},
    "rpc_workers": {"hosts": {"$host": {}} if layout in ("split", "rpc") else {}},
}}}
json.dump(inventory, open(path, "w"), indent=2)
PY
}

# nvidia-smi indices: the n-th GPU, and the GPUs a layout gives to RPC servers.
gpu_index() { "$python" -c 'import json,sys; print(sorted(g["index"] for g in json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"])[int(sys.argv[2])])' "$out/gpu_facts.json" "$1"; }
rpc_gpus() {
  case $1 in
    local) ;;
    split) gpu_index 0 ;;
    rpc) for ((n = 1; n < gpus; n++)); do gpu_index "$n"; done ;;
    auto) if [ "$gpus" -gt 1 ]; then rpc_gpus rpc; else rpc_gpus split; fi ;;
  esac
}

for layout in $layouts; do
  mkdir -p "$out/$layout"
  write_inventory "$layout" "${ctx_sizes[0]}" "$out/$layout/hosts.json"
done
log "layouts: $layouts; inventories in $out/<layout>/hosts.json"
if [ "${GPULAB_E2E_DRY_RUN:-0}" = 1 ]; then
  return 0
fi

measure() { # LAYOUT CTX INVENTORY DIR
  local layout=$1 ctx=$2 inv=$3 dir=$4 devices
  module "$inv" gpulab.inference.gpu_residency '{}' "$dir/residency-ctx$ctx.json"
  sup status >"$dir/supervisor-ctx$ctx.txt" 2>&1 || true
  # pgrep alone would not show the resident set size next to each command line.
  # shellcheck disable=SC2009
  ps -eo pid,rss,args | grep -E 'llama-server|rpc-server' | grep -v grep >"$dir/processes-ctx$ctx.txt" || true
  devices=$("$python" - "$layout" <<PY
import json, sys
gpus = json.load(open("$out/gpu_facts.json"))["ansible_facts"]["gpulab_gpus"]
layout = sys.argv[1]
topology = {"auto": "rpc" if len(gpus) > 1 else "split"}.get(layout, layout)
by_index = {g["index"]: g for g in gpus}
first = min(by_index)
rpc = {"local": [], "split": [first], "rpc": sorted(by_index)[1:]}[topology]
devices = [{"name": "RPC%d" % i, "host": "$host", "free_mib": by_index[g]["memory_total_mib"]} for i, g in enumerate(rpc)]
devices.append({"name": "CUDA0", "host": "$host", "free_mib": by_index[first]["memory_total_mib"]})
print(json.dumps(devices))
PY
)
  if [ "$ctx" = auto ] || [ "$layout" = auto ]; then
    # What the deployment planned and pinned (memory-plan.json) against the process list and nvidia-smi.
    cp /var/lib/gpulab/memory-plan.json "$dir/memory-plan-ctx$ctx.json" 2>/dev/null || true
    "$python" "$repo/scripts/gpu-e2e-planned.py" llama >"$dir/planned-ctx$ctx.txt" 2>&1 || true
    grep -v '^{' "$dir/planned-ctx$ctx.txt" | while read -r line; do log "  ${line:0:400}"; done
    return 0
  fi
  module "$inv" gpulab.inference.gguf_plan \
    "{\"path\": \"$model_path\", \"devices\": $devices, \"tensor_split\": \"equal\", \"ctx_size\": $ctx, \"parallel\": 4, \"flash_attn\": \"auto\"}" \
    "$dir/plan-ctx$ctx.json"
}

# The benchmark on the head, its summary into the progress log. served_with sends request fields
# (`sampling`) and a request count; served the default request or greedy, 4 requests.
served_with() { # INVENTORY OUTFILE CONCURRENCY SAMPLING_JSON REQUESTS [GREEDY]
  module "$1" gpulab.inference.llm_benchmark \
    "{\"base_url\": \"http://127.0.0.1:8080\", \"gguf_path\": \"$model_path\", \"concurrency\": $3, \"requests_per_level\": $5, \"warmup_requests\": 1, \"sampling\": $4, \"greedy\": ${6:-false}}" \
    "$2"
  "$python" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("benchmark", {}).get("summary") or ["no summary"]))' "$2" | while read -r line; do log "  $(basename "$2"): $line"; done || true
}

served() { # INVENTORY OUTFILE GREEDY CONCURRENCY
  served_with "$1" "$2" "$4" '{}' 4 "$3"
}

# llama-bench on the deployed build and model, in a layout's device order (RPC devices, then the
# local GPU), with its own RPC servers on other ports (an RPC server serves one client at a time).
bench_cpp() { # LAYOUT OUTFILE
  local layout=$1 bin=/opt/gpulab/llama.cpp/current/bin args=() eps=() pids=() i=0 g
  args=(-m "$model_path" -ngl 99 -fa 1 -p "128,512" -n 128 -r 3 -o json)
  for g in $(rpc_gpus "$layout"); do
    CUDA_VISIBLE_DEVICES=$g "$bin/ggml-rpc-server" -H 127.0.0.1 -p $((50152 + i)) >"$2.rpc$i.log" 2>&1 &
    pids+=($!)
    eps+=("127.0.0.1:$((50152 + i))")
    i=$((i + 1))
  done
  if [ "${#eps[@]}" -gt 0 ]; then
    sleep 3
    args+=(--rpc "$(IFS=,; echo "${eps[*]}")" -ts "$("$python" -c 'import sys; print("/".join(["1"] * int(sys.argv[1])))' $((${#eps[@]} + 1)))")
  fi
  CUDA_VISIBLE_DEVICES=$(gpu_index 0) "$bin/llama-bench" "${args[@]}" >"$2" 2>"$2.err" || log "llama-bench failed: $(tail -n 3 "$2.err")"
  [ "${#pids[@]}" -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  "$python" -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("pp%d tg%d %.1f tok/s (+- %.1f)" % (r["n_prompt"], r["n_gen"], r["avg_ts"], r["stddev_ts"]))' "$2" 2>/dev/null | while read -r line; do log "  llama-bench $layout: $line"; done || true
}

# ---- build and model, then llama-bench per layout (no services needed) ------------------------
prepare_inv=$out/$(echo "$layouts" | awk '{print $1}')/hosts.json
if [ "${GPULAB_E2E_PREPARE:-1}" = 1 ]; then
  start=$SECONDS
  # GPULAB_E2E_PREPARE_PARALLEL=1: the model is written while the build compiles (both CPU-bound,
  # neither needs the other), instead of after it.
  model_pid=
  if [ "${GPULAB_E2E_PREPARE_PARALLEL:-0}" = 1 ]; then
    playbook -i "$prepare_inv" "$repo/playbooks/model.yml" >"$out/model.log" 2>&1 &
    model_pid=$!
  fi
  playbook -i "$prepare_inv" "$repo/playbooks/build.yml" >"$out/build.log" 2>&1 || { log "build.yml failed"; tail -n 30 "$out/build.log" >&2; exit 1; }
  log "build.yml: $((SECONDS - start)) s, $(recap "$out/build.log")"
  cp /opt/gpulab/llama.cpp/current/BUILD_INFO.json "$out/"
  if [ -n "$model_pid" ]; then
    wait "$model_pid" || { log "model.yml failed"; tail -n 30 "$out/model.log" >&2; exit 1; }
  else
    playbook -i "$prepare_inv" "$repo/playbooks/model.yml" >"$out/model.log" 2>&1 || { log "model.yml failed"; tail -n 30 "$out/model.log" >&2; exit 1; }
  fi
  log "model.yml: done $((SECONDS - start)) s after the build started, $(recap "$out/model.log"), $(du -cb "$model_dir/$model_stem"-*.gguf | tail -n 1 | cut -f1) bytes"
fi
# GPULAB_E2E_LLAMA_BENCH=0 leaves the GPU alone in this phase (a prepare run beside other GPU work).
if [ "${GPULAB_E2E_LLAMA_BENCH:-1}" = 1 ]; then
  for layout in $layouts; do
    bench_cpp "$layout" "$out/$layout/llama-bench.json"
  done
fi
[ "${GPULAB_E2E_PHASE:-all}" = prepare ] && return 0

for layout in $layouts; do
  dir=$out/$layout
  inv=$dir/hosts.json
  log "== layout $layout (ctx ${ctx_sizes[0]})"
  if ! deploy "$inv" "$dir/deploy-1.log"; then
    tail -n 40 "$dir/deploy-1.log" >&2
    continue
  fi
  if [[ " $idempotence_layouts " == *" $layout "* ]]; then
    sup status >"$dir/supervisor-before-2.txt" 2>&1 || true
    deploy "$inv" "$dir/deploy-2.log" || true
    sup status >"$dir/supervisor-after-2.txt" 2>&1 || true
    "$python" - "$dir" <<'PY' | tee -a "$out/progress.log"
import re, sys
d = sys.argv[1]
def pids(name):
    return {l.split()[0]: re.search(r"pid (\d+)", l).group(1) for l in open("%s/%s" % (d, name)) if "pid " in l}
before, after = pids("supervisor-before-2.txt"), pids("supervisor-after-2.txt")
restarted = sorted(p for p in before if after.get(p) != before[p])
print("  second deploy: programs %s, restarted: %s" % (sorted(before), restarted or "none"))
PY
  fi
  measure "$layout" "${ctx_sizes[0]}" "$inv" "$dir"
  if [ "${GPULAB_E2E_SERVED:-1}" = 1 ]; then
    served "$inv" "$dir/served-c1-default.json" false "[1]"
    served "$inv" "$dir/served-c1-greedy.json" true "[1]"
  fi
  if [[ " $bench_playbook_layouts " == *" $layout "* ]]; then
    # The report puts llama-bench's figure for this layout beside the served one (docs/CONTRACTS.md).
    [ ! -s "$dir/llama-bench.json" ] || install -D -m 0644 "$dir/llama-bench.json" /var/lib/gpulab/llama-bench.json
    start=$SECONDS
    playbook -i "$inv" "$repo/playbooks/bench.yml" >"$dir/bench-playbook.log" 2>&1 || log "bench.yml failed: $(tail -n 5 "$dir/bench-playbook.log")"
    log "bench.yml: $((SECONDS - start)) s, $(recap "$dir/bench-playbook.log")"
  fi
  for ctx in "${ctx_sizes[@]:1}"; do
    write_inventory "$layout" "$ctx" "$dir/hosts-ctx$ctx.json"
    log "== layout $layout (ctx $ctx)"
    deploy "$dir/hosts-ctx$ctx.json" "$dir/deploy-ctx$ctx.log" && measure "$layout" "$ctx" "$dir/hosts-ctx$ctx.json" "$dir"
  done
  for f in /var/log/gpulab/*.log; do tail -c 2000000 "$f" >"$dir/$(basename "$f")"; done 2>/dev/null || true
done

# Variants of the reference layout, each NAME={more host variables as compact JSON}, separated by
# spaces, e.g. GPULAB_E2E_EXTRA='bs={"llama_server_extra_args":["--backend-sampling"]} v3={"llama_server_log_verbosity":3}'
for spec in ${GPULAB_E2E_EXTRA:-}; do
  name=${spec%%=*}
  dir=$out/extra-$name
  mkdir -p "$dir"
  write_inventory local "${ctx_sizes[0]}" "$dir/hosts.json" "${spec#*=}"
  log "== extra $name: ${spec#*=}"
  deploy "$dir/hosts.json" "$dir/deploy.log" || continue
  served "$dir/hosts.json" "$dir/served-c1-default.json" false "[1]"
  served "$dir/hosts.json" "$dir/served-c1-greedy.json" true "[1]"
done

# Served speed (GPULAB_E2E_SPEED=1): the reference layout with 16 slots, one server; each figure with
# backend sampling on and off through the request's own `backend_sampling` field, at concurrency 1,
# 4 and 16, against llama-bench; the greedy tokens of both compared (scripts/backend-sampling-check.py);
# then the same server at llama.cpp's default verbosity instead of the trace level.
if [ "${GPULAB_E2E_SPEED:-0}" = 1 ]; then
  dir=$out/speed
  mkdir -p "$dir"
  write_inventory local 16384 "$dir/hosts.json" '{"llama_server_parallel": 16}'
  log "== speed: layout local, 16 slots, ctx 16384"
  if deploy "$dir/hosts.json" "$dir/deploy.log"; then
    grep -E '^# Backend sampling' /opt/gpulab/bin/gpulab-llama-server | tee -a "$out/progress.log" || true
    [ -s "$out/local/llama-bench.json" ] || bench_cpp local "$dir/llama-bench.json"
    "$python" "$repo/scripts/backend-sampling-check.py" http://127.0.0.1:8080 >"$dir/backend-sampling-check.json" 2>"$dir/backend-sampling-check.err" \
      || log "backend-sampling-check failed: $(tail -n 3 "$dir/backend-sampling-check.err")"
    log "  backend sampling check: $(head -c 600 "$dir/backend-sampling-check.json")"
    for bs in true false; do
      served_with "$dir/hosts.json" "$dir/served-c1-bs-$bs.json" "[1]" "{\"backend_sampling\": $bs}" 6
      served_with "$dir/hosts.json" "$dir/served-c4-16-bs-$bs.json" "[4, 16]" "{\"backend_sampling\": $bs}" 32
    done
    write_inventory local 16384 "$dir/hosts-v-default.json" '{"llama_server_parallel": 16, "llama_server_log_verbosity": null}'
    if deploy "$dir/hosts-v-default.json" "$dir/deploy-v-default.log"; then
      for bs in true false; do
        served_with "$dir/hosts-v-default.json" "$dir/served-c1-bs-$bs-v-default.json" "[1]" "{\"backend_sampling\": $bs}" 6
      done
    fi
  fi
fi

if [ "${GPULAB_E2E_STOP:-1}" = 1 ]; then
  last=$(echo "$layouts" | awk '{print $NF}')
  playbook -i "$out/$last/hosts.json" "$repo/playbooks/stop.yml" >"$out/stop.log" 2>&1 || true
  log "stop.yml: $(recap "$out/stop.log"); $(sup status 2>&1 | tr '\n' ';')"
fi

