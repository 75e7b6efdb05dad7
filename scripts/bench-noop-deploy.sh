#!/usr/bin/env bash
# Times deploy.yml on a lab where nothing is left to change, with and without the controller's
# preload callback (plugins/callback/preload.py), alternating run by run so that the load of the
# moment falls on both. Each run prints its wall time, the CPU the whole machine spent meanwhile
# (the root cgroup's cpuacct.usage: controller, SSH and the lab containers together), the CPU of
# ansible-playbook and its children, and whether every node reported changed=0. A run that changed
# something is said, not averaged away.
# Needs a deployed lab (make demo) with GPULAB_LAB_NAME and GPULAB_LAB_FABRIC_PREFIX as it was made,
# and a cgroup v1 cpuacct hierarchy (the CI machine type).
# Usage: scripts/bench-noop-deploy.sh [rounds, default 3]
set -euo pipefail

rounds=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
usage_file=/sys/fs/cgroup/cpuacct/cpuacct.usage
work=$(mktemp -d /tmp/gpulab-bench-noop.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$repo/.build/collections" ANSIBLE_CONFIG="$repo/ansible.cfg"

[ -r "$usage_file" ] || { echo "no $usage_file: this script reads cgroup v1's cpuacct" >&2; exit 2; }

# label, then the callbacks ansible.cfg's list is replaced with
run() {
  local label=$1 callbacks=$2 cpu0 cpu1 t0 t1 unchanged user sys
  cpu0=$(cat "$usage_file"); t0=$(date +%s.%N)
  if ! ANSIBLE_CALLBACKS_ENABLED=$callbacks /usr/bin/time -f "%U %S" -o "$work/time" \
      ansible-playbook -i "$repo/inventory/demo" "$repo/deploy.yml" >"$work/$label.log" 2>&1; then
    echo "$label: deploy.yml failed, its log:" >&2; tail -40 "$work/$label.log" >&2; exit 1
  fi
  t1=$(date +%s.%N); cpu1=$(cat "$usage_file")
  read -r user sys <"$work/time"
  unchanged=$(grep -c ' changed=0 ' "$work/$label.log" || true)
  printf '%-12s wall %6.1f s  machine CPU %6.1f s  ansible-playbook CPU %5.1f s  nodes with changed=0: %s\n' \
    "$label" "$(echo "$t1 - $t0" | bc)" "$(echo "($cpu1 - $cpu0) / 1000000000" | bc -l)" "$(echo "$user + $sys" | bc)" "$unchanged"
}

# The first run is nobody's: it warms the page cache and the SSH control connections.
run warm-up gpulab.inference.preload >/dev/null
for round in $(seq 1 "$rounds"); do
  # The stdout callback named again: no other callback is enabled.
  run "without-$round" ansible.builtin.default
  run "with-$round" gpulab.inference.preload
done
