#!/usr/bin/env bash
# Times deploy.yml on a lab where nothing is left to change, for two commits side by side: each
# commit a clean clone with its own collection link, run against the same lab, alternating round
# by round after one warm-up run, so that the load of the moment falls on both. Each run prints
# its wall time, the CPU the whole machine spent meanwhile (the root cgroup's cpuacct.usage:
# controller, SSH and the lab containers together), the CPU of ansible-playbook and its children,
# and how many nodes reported changed=0. Every run shares one bench_report_dir: the bench step
# compares the report directory with its last benchmark, so a directory per clone would measure
# again in every run.
# Needs a deployed lab (make demo) and a cgroup v1 cpuacct hierarchy (the CI machine type).
# Commits too far apart for one lab (each one's roles rewrite files the other's left, so neither
# run is a no-op): a lab per commit, BENCH_LAB_BASE and BENCH_LAB_NEW as NAME:FABRIC_PREFIX (e.g.
# gpulab-ab1:10.231.86); the script then creates each lab and deploys it with its own commit's
# clone first (molecule/lab/create.yml, deploy.yml; CONTAINERS_CONF as `make lab` sets it), and warms
# up both before the rounds.
# Usage: [BENCH_LAB_BASE=NAME:PREFIX BENCH_LAB_NEW=NAME:PREFIX] scripts/bench-noop-ab.sh BASE NEW [rounds, default 3]
set -euo pipefail

usage="usage: $0 BASE NEW [rounds]"
declare -A commits=([base]=${1:?$usage} [new]=${2:?$usage})
declare -A labs=([base]=${BENCH_LAB_BASE:-} [new]=${BENCH_LAB_NEW:-})
rounds=${3:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
usage_file=/sys/fs/cgroup/cpuacct/cpuacct.usage
work=$(mktemp -d /tmp/gpulab-bench-noop-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -r "$usage_file" ] || { echo "no $usage_file: this script reads cgroup v1's cpuacct" >&2; exit 2; }
# The lab's key, ssh_config and caches stay this checkout's.
export PATH="$repo/.venv/bin:$PATH" MOLECULE_PROJECT_DIRECTORY=$repo

for label in base new; do
  git clone -q "$repo" "$work/$label"
  git -C "$work/$label" checkout -q "${commits[$label]}"
  mkdir -p "$work/$label/.build/collections/ansible_collections/gpulab"
  ln -s "$work/$label" "$work/$label/.build/collections/ansible_collections/gpulab/inference"
done

# in_clone LABEL COMMAND...: the command in LABEL's clone, with its collection and, if given, its lab.
in_clone() {
  local clone=$work/$1 lab=${labs[$1]}; shift
  local env=(ANSIBLE_COLLECTIONS_PATH="$clone/.build/collections" ANSIBLE_CONFIG="$clone/ansible.cfg")
  [ -z "$lab" ] || env+=(GPULAB_LAB_NAME="${lab%%:*}" GPULAB_LAB_FABRIC_PREFIX="${lab#*:}")
  (cd "$clone" && env "${env[@]}" "$@")
}

run() {
  local label=$1 cpu0 cpu1 t0 t1 user sys
  cpu0=$(cat "$usage_file"); t0=$(date +%s.%N)
  if ! in_clone "$label" /usr/bin/time -f "%U %S" -o "$work/time" ansible-playbook -i inventory/demo deploy.yml \
      -e bench_report_dir="$work/reports" >"$work/$label.log" 2>&1; then
    echo "$label: deploy.yml failed, its log:" >&2; tail -40 "$work/$label.log" >&2; exit 1
  fi
  t1=$(date +%s.%N); cpu1=$(cat "$usage_file")
  read -r user sys <"$work/time"
  printf '%s %-4s %s wall %6.1f s  machine CPU %6.1f s  ansible-playbook CPU %5.1f s  nodes with changed=0: %s\n' \
    "$(date -u +%H:%M:%S)" "$label" "${commits[$label]}" "$(echo "$t1 - $t0" | bc)" \
    "$(echo "($cpu1 - $cpu0) / 1000000000" | bc -l)" "$(echo "$user + $sys" | bc)" "$(grep -c ' changed=0 ' "$work/$label.log" || true)"
}

for label in base new; do
  [ -n "${labs[$label]}" ] || continue
  echo "$(date -u +%H:%M:%S) $label: creating lab ${labs[$label]%%:*}; its first deploy.yml (not a round):"
  if ! in_clone "$label" ansible-playbook -i inventory/demo molecule/lab/create.yml >"$work/$label-setup.log" 2>&1; then
    echo "$label: create.yml failed, its log:" >&2; tail -40 "$work/$label-setup.log" >&2; exit 1
  fi
  run "$label"
done

# The warm-up is nobody's: it warms the page cache and the SSH control connections, and it makes
# the benchmark whose report the measured runs then find standing (on each lab, if two).
run base >/dev/null
[ -z "${labs[new]}" ] || run new >/dev/null
for _ in $(seq 1 "$rounds"); do
  run base
  run new
done
