#!/usr/bin/env bash
# Measures the build's fetch over the fabric (playbooks/build.yml, role llama_cpp_distribute:
# model_serve on node-a, model_fetch on node-b) against scp of the same tarball between the same
# two lab containers, alternating round by round so that the load of the moment falls on both.
# Each fabric round moves node-b's copy of the build aside, so build.yml fetches it again; its rate
# is model_fetch's own (bytes over the seconds from the first request to the fsynced, checked
# file); the fetch task's wall time (profile_tasks: the module's start on the node included) is
# shown beside it. scp runs on node-b with the lab's SSH key, as the lab's user, from node-a's
# fabric address, timed inside node-b with the sync of the file: once as a user runs it (a new
# SSH connection) and once over a connection opened before (ControlMaster), the copy alone.
# Needs a deployed lab (make demo) with GPULAB_LAB_NAME and GPULAB_LAB_FABRIC_PREFIX as it was made.
# Usage: scripts/bench-build-fetch.sh [rounds, default 5]
set -euo pipefail

rounds=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
lab=${GPULAB_LAB_NAME:-gpulab}
prefix=${GPULAB_LAB_FABRIC_PREFIX:-10.231.77}
head="$lab-node-a" peer="$lab-node-b"
install=/opt/gpulab/llama.cpp
key=/root/.ssh/gpulab-bench-build-fetch
copy=/var/tmp/gpulab-bench-build.tar.gz
work=$(mktemp -d /tmp/gpulab-bench-build-fetch.XXXXXX)
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$repo/.build/collections" ANSIBLE_CONFIG="$repo/ansible.cfg"

build_id=$(podman exec "$head" readlink "$install/current")
cleanup() {
  podman exec "$peer" rm -f "$key" "$copy" || true
  podman exec "$head" rm -f "$copy" || true
  # A round stopped midway leaves node-b's build aside: it goes back where build.yml did not refill it.
  podman exec "$peer" sh -c "if [ -d $install/$build_id.aside ]; then
    if [ -d $install/$build_id ]; then rm -rf $install/$build_id.aside; else mv $install/$build_id.aside $install/$build_id; fi; fi" || true
  rm -rf "$work"
}
trap cleanup EXIT

# The same bytes as role llama_cpp_distribute packs (names sorted, gzip without name or time),
# readable by the lab's user, for scp.
podman exec "$head" sh -c "tar -C $install --sort=name -cf - $build_id | gzip -n >$copy && chmod 0644 $copy"
bytes=$(podman exec "$head" stat -c %s "$copy")
podman cp "$repo/.build/lab-ssh/$lab/id_ed25519" "$peer:$key"
podman exec "$peer" chmod 0600 "$key"
ssh_opts="-i $key -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

run_fabric() {
  local round=$1
  podman exec "$peer" mv "$install/$build_id" "$install/$build_id.aside"
  ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=all \
    ansible-playbook -i "$repo/inventory/demo" "$repo/playbooks/build.yml" -e gpulab_build_preflight=false \
    >"$work/build-$round.log"
  podman exec "$peer" rm -rf "$install/$build_id.aside"
  # "node-b: BYTES bytes from node-a in SECONDS s (RATE MiB/s)", the role's own report; the fetch
  # task's line of profile_tasks' summary ("... before it gets its name --- 0.85s"); and the four
  # tasks of the fabric copy together (serve, wait for the server, fetch, stop the server).
  echo "$(grep -o 'node-b: [0-9]* bytes from node-a in [0-9.]* s' "$work/build-$round.log" | awk '{print $2, $7}')" \
    "$(task_s 'Fetch the tarball and check its sha256' "$round")" \
    "$(for task in 'Serve the tarball read-only' 'Wait until the build host' 'Fetch the tarball and check its sha256' \
      'Stop the build host'; do task_s "$task" "$round"; done | paste -sd+ | bc)"
}
task_s() {
  grep -- "$1.* --- *[0-9.]*s$" "$work/build-$2.log" | grep -o '[0-9.]*s$' | tail -n 1 | tr -d s
}
run_scp() {
  # Four timestamps taken inside node-b: scp on a new connection (then the sync), and scp over a
  # master connection opened before the third timestamp's copy.
  podman exec "$peer" sh -c "
    date +%s.%N
    scp -q $ssh_opts gpulab@$prefix.10:$copy $copy && sync $copy
    date +%s.%N
    rm -f $copy && sync
    ssh $ssh_opts -o ControlMaster=yes -o ControlPath=/root/.ssh/bench-cm -fN gpulab@$prefix.10
    date +%s.%N
    scp -q $ssh_opts -o ControlPath=/root/.ssh/bench-cm gpulab@$prefix.10:$copy $copy && sync $copy
    date +%s.%N
    ssh -o ControlPath=/root/.ssh/bench-cm -O exit gpulab@$prefix.10 2>/dev/null
    rm -f $copy" | paste -sd' '
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "build $build_id, tarball $bytes bytes; $rounds rounds, fabric fetch then scp each round"
for round in $(seq 1 "$rounds"); do
  echo "round $round: load $(cut -d' ' -f1-3 /proc/loadavg)"
  read -r fabric_bytes fabric_s fetch_task_s copy_tasks_s < <(run_fabric "$round")
  echo "fabric $fabric_bytes $fabric_s $fetch_task_s $copy_tasks_s" | tee -a "$work/results"
  read -r t0 t1 t2 t3 < <(run_scp)
  echo "scp $bytes $(awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN { print b - a, d - c }')" | tee -a "$work/results"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

echo "load average at the start $load_start, at the end $load_end"
python3 - "$work/results" <<'PY'
import statistics
import sys

rows = {'fabric': [], 'task': [], 'tasks': [], 'scp': [], 'scp_open': []}
with open(sys.argv[1]) as handle:
    for line in handle:
        fields = line.split()
        mib = int(fields[1]) / 1048576.0
        if fields[0] == 'fabric':
            rows['fabric'].append(mib / float(fields[2]))
            rows['task'].append(mib / float(fields[3]))
            rows['tasks'].append(mib / float(fields[4]))
        else:
            rows['scp'].append(mib / float(fields[2]))
            rows['scp_open'].append(mib / float(fields[3]))


def cell(values):
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return '%.1f ± %.1f (%.1f-%.1f)' % (statistics.mean(values), spread, min(values), max(values))


def ratio(fabric, name):
    return '%.0f %%' % (100.0 * statistics.mean(rows[fabric]) / statistics.mean(rows[name]))


print('\nMiB/s over %d rounds, mean ± standard deviation (min-max)\n' % len(rows['fabric']))
print('| copy node-a -> node-b | MiB/s | fabric (model_fetch\'s seconds) over it '
      '| fabric (fetch task) over it | fabric (four tasks) over it |')
print('| --- | --- | --- | --- | --- |')
print('| fabric fetch, model_fetch\'s own seconds (fsync and sha256 included) | %s | | | |' % cell(rows['fabric']))
print('| fabric fetch, the fetch task\'s wall time (profile_tasks) | %s | | | |' % cell(rows['task']))
print('| fabric copy, its four tasks\' wall time (serve, wait, fetch, stop) | %s | | | |' % cell(rows['tasks']))
for name, label in (('scp', 'scp + sync, new SSH connection (as a user runs it)'),
                    ('scp_open', 'scp + sync over an open SSH connection (the copy alone)')):
    print('| %s | %s | %s | %s | %s |' % (label, cell(rows[name]), ratio('fabric', name), ratio('task', name),
                                           ratio('tasks', name)))
PY
