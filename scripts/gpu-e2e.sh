#!/usr/bin/env bash
# GPU end-to-end run of the collection on one GPU host, as root, with the host itself as controller
# (ansible_connection: local). Works on hosts without systemd (services under supervisord) and
# with systemd (GPULAB_E2E_SERVICE_MANAGER=systemd).
#
#   scripts/gpu-e2e.sh OUTDIR            (or: make gpu-e2e GPU_E2E_OUT=OUTDIR)
#
# For each layout it writes an inventory from gpu_facts, runs the collection's own deploy.yml
# (preflight, the CUDA build with the architecture detected, a synthetic MiniMax-M2-shaped model,
# RPC servers and llama-server as services, the smoke request, the report), runs it again and
# records that nothing changed and nothing restarted, then measures: playbooks/bench.yml
# (residency, utilisation sampler, benchmark sweep, report), the benchmark at concurrency 1 with
# the server's sampling defaults and greedy, GPU residency per process and per GPU, the memory
# plan (gguf_plan) for the same layout at two context sizes, and llama-bench on the same build,
# model and layout. Layouts (GPULAB_E2E_LAYOUTS, default: every one the GPUs allow):
#   local  llama-server on GPU 0 with all layers (the reference)
#   split  llama-server and one RPC server on GPU 0, layers split equally, RPC over loopback
#   rpc    llama-server on GPU 0 and one RPC server per other GPU (2 or more GPUs), split equally
# Needs: python3 with ansible-core importable, or wheels of ansible-core and its dependencies in
# GPULAB_E2E_WHEELS (installed into the work directory); the supervisor wheel there too; the
# llama.cpp source archive (GPULAB_E2E_ARCHIVE). GPULAB_E2E_DRY_RUN=1 writes the inventories and stops.
set -euo pipefail

out=${1:?usage: scripts/gpu-e2e.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${GPULAB_E2E_WORK:-/tmp/gpulab-e2e}
archive=$(realpath "${GPULAB_E2E_ARCHIVE:-$repo/.cache/llama.cpp-0c1e570.tar.gz}")
wheels=${GPULAB_E2E_WHEELS:-$repo/.whl}
commit=${GPULAB_E2E_COMMIT:-0c1e570}
manager=${GPULAB_E2E_SERVICE_MANAGER:-supervisor}
read -r -a ctx_sizes <<<"${GPULAB_E2E_CTX_SIZES:-8192 65536}"
idempotence_layouts=${GPULAB_E2E_IDEMPOTENCE:-split}
bench_playbook_layouts=${GPULAB_E2E_BENCH_PLAYBOOK:-split rpc}
model_dir=/var/lib/gpulab/models
model_stem=${GPULAB_E2E_MODEL_STEM:-e2e-minimax-m2}
# 16 layers, hidden 3072, 64 experts / 8 used, expert FFN 1536, Q8_0, 2 shards: 15.06 GiB.
model_options=${GPULAB_E2E_MODEL:-'{"layers": 16, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8, "experts": 64, "experts_used": 8, "expert_ffn_size": 1536, "shards": 2}'}
model_path=$model_dir/$model_stem-00001-of-00002.gguf
host=gpu-host
python=$(command -v python3)
export NCCL_NVLS_ENABLE=0
mkdir -p "$work"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/progress.log" >&2; }

# ---- tools -------------------------------------------------------------------------------------
if ! "$python" -c 'import ansible' 2>/dev/null; then
  log "installing ansible-core from $wheels"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" "$wheels"/*.whl
  export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
fi
supervisor_wheel=$(find "$wheels" -maxdepth 1 -name 'supervisor-*-none-any.whl' 2>/dev/null | sort | tail -n 1 || true)
mkdir -p "$work/collections/ansible_collections/gpulab"
ln -sfn "$repo" "$work/collections/ansible_collections/gpulab/inference"
collections=$work/collections
# community.general (supervisorctl): the controller's own, else one carried beside the wheels.
[ -d "$wheels/collections/ansible_collections/community" ] && collections=$collections:$wheels/collections
export ANSIBLE_COLLECTIONS_PATH=$collections
: >"$work/ansible.cfg"
export ANSIBLE_CONFIG=$work/ansible.cfg ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
export ANSIBLE_CALLBACK_RESULT_FORMAT=yaml ANSIBLE_HOST_KEY_CHECKING=false ANSIBLE_RETRY_FILES_ENABLED=false
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false
export PATH=/usr/local/cuda/bin:$PATH
# Hosts without iproute2: a minimal ss (the RPC role's listen check and the head's watch use it).
if ! command -v ss >/dev/null; then
  install -d -m 0755 /opt/gpulab-e2e/bin
  install -m 0644 "$repo/scripts/ss-proc.py" /opt/gpulab-e2e/bin/ss-proc.py
  printf '#!/bin/sh\nexec %s /opt/gpulab-e2e/bin/ss-proc.py "$@"\n' "$python" >/opt/gpulab-e2e/bin/ss
  chmod 0755 /opt/gpulab-e2e/bin/ss
  export PATH=/opt/gpulab-e2e/bin:$PATH
  log "no ss on this host: using scripts/ss-proc.py"
fi

playbook() { "$python" -m ansible.cli.playbook "$@"; }

# One module run on the host; its JSON result into a file.
module() { # INVENTORY MODULE ARGS_JSON OUTFILE
  local args=()
  [ "$3" = "{}" ] || args=(-a "$3")
  "$python" -m ansible.cli.adhoc -i "$1" "$host" -m "$2" "${args[@]}" -o >"$4.raw" 2>"$4.err" || true
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

recap() { grep -E "^$host +:" "$1" | tail -n 1 | sed 's/  */ /g'; }

# ---- GPUs --------------------------------------------------------------------------------------
cat >"$work/facts.yml" <<INV
all:
  hosts:
    $host:
      ansible_connection: local
      ansible_python_interpreter: $python
INV
module "$work/facts.yml" gpulab.inference.gpu_facts '{}' "$out/gpu_facts.json"
gpus=$("$python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"]))' "$out/gpu_facts.json")
log "$gpus GPU(s): $("$python" -c 'import json,sys; print(", ".join("%s %s MiB cc %s" % (g["name"], g["memory_total_mib"], g["compute_cap"]) for g in json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"]))' "$out/gpu_facts.json")"
layouts=${GPULAB_E2E_LAYOUTS:-local split$(if [ "$gpus" -ge 2 ]; then echo ' rpc'; fi)}

# ---- inventories -------------------------------------------------------------------------------
# The head takes GPU 0; `split` adds one RPC server on GPU 0, `rpc` one per other GPU, each on its
# own port (llama_rpc_server_port_base + index). Everything on loopback.
write_inventory() { # LAYOUT CTX FILE [EXTRA_JSON]
  "$python" - "$@" <<PY
import json, sys
layout, ctx, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else {}
gpus = json.load(open("$out/gpu_facts.json"))["ansible_facts"]["gpulab_gpus"]
indices = sorted(g["index"] for g in gpus)
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
    "llama_server_ctx_size": ctx,
    "llama_server_supervisor_environment": {"CUDA_VISIBLE_DEVICES": str(indices[0])},
    "gpulab_bench_profile": "short",
    "bench_report_dir": "$out/reports",
}
if layout == "split":
    hostvars["llama_rpc_server_gpu_indices"] = [indices[0]]
elif layout == "rpc":
    hostvars["llama_rpc_server_gpu_indices"] = indices[1:]
hostvars.update(extra)
inventory = {"gpu_nodes": {"children": {
    "inference_head": {"hosts": {"$host": hostvars}},
    "rpc_workers": {"hosts": {"$host": {}} if layout in ("split", "rpc") else {}},
}}}
json.dump(inventory, open(path, "w"), indent=2)
PY
}

for layout in $layouts; do
  mkdir -p "$out/$layout"
  write_inventory "$layout" "${ctx_sizes[0]}" "$out/$layout/hosts.json"
done
log "layouts: $layouts; inventories in $out/<layout>/hosts.json"
if [ "${GPULAB_E2E_DRY_RUN:-0}" = 1 ]; then
  exit 0
fi

sup() { "/opt/gpulab/supervisor/bin/supervisorctl" -c /etc/gpulab/supervisord.conf "$@"; }

deploy() { # INVENTORY LOG
  local start=$SECONDS rc=0
  playbook -i "$1" "$repo/deploy.yml" >"$2" 2>&1 || rc=$?
  log "deploy.yml ($(basename "$2")): rc=$rc, $((SECONDS - start)) s, $(recap "$2")"
  return "$rc"
}

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
by_index = {g["index"]: g for g in gpus}
first = min(by_index)
rpc = {"local": [], "split": [first], "rpc": sorted(by_index)[1:]}[layout]
devices = [{"name": "RPC%d" % i, "host": "$host", "free_mib": by_index[g]["memory_total_mib"]} for i, g in enumerate(rpc)]
devices.append({"name": "CUDA0", "host": "$host", "free_mib": by_index[first]["memory_total_mib"]})
print(json.dumps(devices))
PY
)
  module "$inv" gpulab.inference.gguf_plan \
    "{\"path\": \"$model_path\", \"devices\": $devices, \"tensor_split\": \"equal\", \"ctx_size\": $ctx, \"parallel\": 4, \"flash_attn\": \"auto\"}" \
    "$dir/plan-ctx$ctx.json"
}

served() { # INVENTORY OUTFILE GREEDY CONCURRENCY
  module "$1" gpulab.inference.llm_benchmark \
    "{\"base_url\": \"http://127.0.0.1:8080\", \"gguf_path\": \"$model_path\", \"concurrency\": $4, \"requests_per_level\": 4, \"warmup_requests\": 1, \"greedy\": $3}" \
    "$2"
  "$python" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("benchmark", {}).get("summary") or ["no summary"]))' "$2" | while read -r line; do log "  $(basename "$2"): $line"; done || true
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

# nvidia-smi indices: the n-th GPU, and the GPUs a layout gives to RPC servers.
gpu_index() { "$python" -c 'import json,sys; print(sorted(g["index"] for g in json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"])[int(sys.argv[2])])' "$out/gpu_facts.json" "$1"; }
rpc_gpus() {
  case $1 in
    local) ;;
    split) gpu_index 0 ;;
    rpc) for ((n = 1; n < gpus; n++)); do gpu_index "$n"; done ;;
  esac
}

# ---- build and model, then llama-bench per layout (no services needed) ------------------------
prepare_inv=$out/$(echo "$layouts" | awk '{print $1}')/hosts.json
if [ "${GPULAB_E2E_PREPARE:-1}" = 1 ]; then
  start=$SECONDS
  playbook -i "$prepare_inv" "$repo/playbooks/build.yml" >"$out/build.log" 2>&1 || { log "build.yml failed"; tail -n 30 "$out/build.log" >&2; exit 1; }
  log "build.yml: $((SECONDS - start)) s, $(recap "$out/build.log")"
  cp /opt/gpulab/llama.cpp/current/BUILD_INFO.json "$out/"
  start=$SECONDS
  playbook -i "$prepare_inv" "$repo/playbooks/model.yml" >"$out/model.log" 2>&1 || { log "model.yml failed"; tail -n 30 "$out/model.log" >&2; exit 1; }
  log "model.yml: $((SECONDS - start)) s, $(recap "$out/model.log"), $(du -cb "$model_dir/$model_stem"-*.gguf | tail -n 1 | cut -f1) bytes"
  for layout in $layouts; do
    bench_cpp "$layout" "$out/$layout/llama-bench.json"
  done
fi
[ "${GPULAB_E2E_PHASE:-all}" = prepare ] && { log "done"; exit 0; }

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
  served "$inv" "$dir/served-c1-default.json" false "[1]"
  served "$inv" "$dir/served-c1-greedy.json" true "[1]"
  if [[ " $bench_playbook_layouts " == *" $layout "* ]]; then
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

if [ "${GPULAB_E2E_STOP:-1}" = 1 ]; then
  last=$(echo "$layouts" | awk '{print $NF}')
  playbook -i "$out/$last/hosts.json" "$repo/playbooks/stop.yml" >"$out/stop.log" 2>&1 || true
  log "stop.yml: $(recap "$out/stop.log"); $(sup status 2>&1 | tr '\n' ';')"
fi

log "done"
