#!/usr/bin/env bash
# Measures the model role's node-to-node copy against a plain TCP copy (netcat) of the same file
# between the same two lab containers and against curl of the same URL from the role's own file
# server (model_serve), and a second run of playbooks/model.yml against the first.
# Needs a running lab (make lab, or molecule create -s models) with GPULAB_LAB_NAME and
# GPULAB_LAB_FABRIC_PREFIX as it was made.
# Usage: [ROUNDS=n] scripts/bench-model-transfer.sh [MiB, default 384] [extra ansible-playbook arguments...]
set -euo pipefail

mib=${1:-384}
shift || true
lab=${GPULAB_LAB_NAME:-gpulab}
prefix=${GPULAB_LAB_FABRIC_PREFIX:-10.231.77}
head="$lab-node-a" peer="$lab-node-b"
dir=/var/lib/gpulab/models/bench
work=$(mktemp -d /tmp/gpulab-bench-model.XXXXXX)
trap 'rm -rf "$work"' EXIT
load_start=$(cut -d" " -f1-3 /proc/loadavg)

for node in "$head" "$peer"; do
  podman exec "$node" rm -rf "$dir" /etc/gpulab/model-bench.json /var/tmp/bench-nc.gguf
done
# Synced, so neither measurement below shares the disk with the flush of this file.
podman exec "$head" sh -c "mkdir -p $dir && dd if=/dev/urandom of=$dir/bench.gguf bs=1M count=$mib status=none && sync $dir/bench.gguf"

# node-b joins vllm_nodes; the file is already on the head (model_source: head).
cat >"$work/vllm_nodes.yml" <<YAML
gpu_nodes:
  children:
    vllm_nodes:
      hosts:
        node-b: {}
YAML
run_model() {
  local start end
  start=$(date +%s.%N)
  local log=$1; shift
  ansible-playbook -i inventory/demo -i "$work/vllm_nodes.yml" playbooks/model.yml \
    -e gpulab_engine=vllm -e model_source=head -e model_path=$dir/bench.gguf \
    -e model_manifest_path=/etc/gpulab/model-bench.json "$@" >"$work/$log.log"
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
# The same file, the same two containers, over plain TCP: netcat on the fabric address, written
# to disk on node-b and synced; once before the playbook runs and once after, so the load of
# the moment shows in both.
run_nc() {
  local start end
  podman exec -d "$head" sh -c "nc -N -l $prefix.10 18099 < $dir/bench.gguf" >/dev/null
  sleep 1
  start=$(date +%s.%N)
  podman exec "$peer" sh -c "nc -d $prefix.10 18099 > /var/tmp/bench-nc.gguf && sync /var/tmp/bench-nc.gguf"
  end=$(date +%s.%N)
  podman exec "$peer" rm -f /var/tmp/bench-nc.gguf
  echo "$end - $start" | bc
}
rate_of() {
  echo "$1 s ($(echo "scale=1; $mib / $1" | bc) MiB/s)"
}
# curl of the same file from the role's file server (model_serve, started as the role starts it:
# in the background on node-a's fabric address), written to disk on node-b and synced.
run_curl() {
  local start end port=18098 pid=/run/gpulab-model-serve-bench.pid
  ansible -i inventory/demo node-a -b -B 300 -P 0 -m gpulab.inference.model_serve \
    -a "path=$dir files=bench.gguf address=$prefix.10 port=$port duration_s=300 pid_file=$pid" >/dev/null
  podman exec "$peer" sh -c "for i in \$(seq 50); do curl -fsI http://$prefix.10:$port/bench.gguf >/dev/null 2>&1 && break; sleep 0.2; done"
  start=$(date +%s.%N)
  podman exec "$peer" sh -c "curl -fsS -o /var/tmp/bench-nc.gguf http://$prefix.10:$port/bench.gguf && sync /var/tmp/bench-nc.gguf"
  end=$(date +%s.%N)
  podman exec "$peer" rm -f /var/tmp/bench-nc.gguf
  ansible -i inventory/demo node-a -b -m gpulab.inference.model_serve -a "state=stopped pid_file=$pid" >/dev/null
  echo "$end - $start" | bc
}
# This machine is a VM whose kernel gives free memory back to its host (virtio_balloon's free page
# reporting, in 2 MiB blocks, seconds after they are freed): a copy that writes a few GiB into
# such memory (the page cache of the received file) pays for every page on first touch, about
# 2.5 s of system time per GiB, whatever copies. A copy right after an idle minute ran at half the
# rate of the same copy right after another, and model.yml's copy always follows several seconds
# of other steps. So every measured copy starts from the same state (MEMORY):
#   cold (default): after SETTLE_S seconds (default 20) idle, memory given back, as in model.yml;
#   warm: right after touching twice the file's size of memory.
# A first copy nobody counts comes first; then ROUNDS rounds of netcat, curl and model.yml, each
# round in a new order.
settle() {
  case ${MEMORY:-cold} in
    warm) python3 -c "bytearray($(( mib * 2 ))<<20)" ;;
    *) sleep "${SETTLE_S:-20}" ;;
  esac
}
run_nc >/dev/null
rounds=${ROUNDS:-1}
report=()
for round in $(seq "$rounds"); do
  case $(( round % 3 )) in
    1) order="nc curl model" ;;
    2) order="model nc curl" ;;
    0) order="curl model nc" ;;
  esac
  for what in $order; do
    case $what in
      nc) settle; report+=("round $round netcat node-a -> node-b: $(rate_of "$(run_nc)")") ;;
      curl) settle; report+=("round $round curl of model_serve node-a -> node-b: $(rate_of "$(run_curl)")") ;;
      model)
        podman exec "$peer" rm -rf "$dir" /etc/gpulab/model-bench.json
        settle
        first=$(run_model "first-$round" "$@")
        rate=$(grep -o 'node-b: [0-9]* bytes in [0-9.]* s ([0-9.]* MiB/s)' "$work/first-$round.log" || true)
        report+=("round $round model.yml first run (hash on node-a, copy to node-b, verify): ${first} s; the copy: ${rate:-not found}")
        ;;
    esac
  done
done
second=$(run_model second "$@")
changed=$(grep -E '^node-(a|b) ' "$work/second.log" | sed -E 's/.*changed=([0-9]+).*/\1/' | paste -sd+ | bc)

for node in "$head" "$peer"; do
  podman exec "$node" rm -rf "$dir" /etc/gpulab/model-bench.json /var/tmp/bench-nc.gguf
done
echo "file: $mib MiB; load average at the start $load_start, at the end $(cut -d" " -f1-3 /proc/loadavg)"
printf '%s\n' "${report[@]}"
echo "model.yml second run: ${second} s, changed=$changed"
