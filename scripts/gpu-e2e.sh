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
# -m: the vLLM part alone needs no llama.cpp archive.
archive=$(realpath -m "${GPULAB_E2E_ARCHIVE:-$repo/.cache/llama.cpp-0c1e570.tar.gz}")
wheels=${GPULAB_E2E_WHEELS:-$repo/.whl}
commit=${GPULAB_E2E_COMMIT:-0c1e570}
manager=${GPULAB_E2E_SERVICE_MANAGER:-supervisor}
read -r -a ctx_sizes <<<"${GPULAB_E2E_CTX_SIZES:-8192 65536}"
idempotence_layouts=${GPULAB_E2E_IDEMPOTENCE:-split}
bench_playbook_layouts=${GPULAB_E2E_BENCH_PLAYBOOK:-split rpc}
model_dir=/var/lib/gpulab/models
# Named models (GPULAB_E2E_MODEL_NAME, default m2-16): scripts/gpu-e2e-models.sh.
# GPULAB_E2E_MODEL (JSON options of synthetic_gguf) and GPULAB_E2E_MODEL_STEM override them.
model_name=${GPULAB_E2E_MODEL_NAME:-m2-16}
# shellcheck source=scripts/gpu-e2e-models.sh
. "$repo/scripts/gpu-e2e-models.sh"
model_stem=${GPULAB_E2E_MODEL_STEM:-$named_stem}
model_options=${GPULAB_E2E_MODEL:-$named_options}
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

sup() { "/opt/gpulab/supervisor/bin/supervisorctl" -c /etc/gpulab/supervisord.conf "$@"; }

deploy() { # INVENTORY LOG
  local start=$SECONDS rc=0
  playbook -i "$1" "$repo/deploy.yml" >"$2" 2>&1 || rc=$?
  log "deploy.yml ($(basename "$2")): rc=$rc, $((SECONDS - start)) s, $(recap "$2")"
  return "$rc"
}

# ---- the engines -------------------------------------------------------------------------------
# GPULAB_E2E_ENGINES: llama_cpp, vllm or both (the default), each part runnable on its own.
engines=${GPULAB_E2E_ENGINES:-llama_cpp,vllm}
for engine in ${engines//,/ }; do
  case $engine in
    llama_cpp) # shellcheck source=scripts/gpu-e2e-llama-cpp.sh
      . "$repo/scripts/gpu-e2e-llama-cpp.sh" ;;
    vllm) # shellcheck source=scripts/gpu-e2e-vllm.sh
      . "$repo/scripts/gpu-e2e-vllm.sh" ;;
    *) log "GPULAB_E2E_ENGINES names $engine; use llama_cpp, vllm or both"; exit 2 ;;
  esac
done

log "done"
