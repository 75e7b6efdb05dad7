#!/usr/bin/env bash
# Runs `make test`'s steps in lanes at once: each argument is "NAME=COMMAND", run with bash -c.
# Most steps keep one core busy (one ansible-playbook controller, one pytest process), so on a
# 2-core machine two lanes finish in little more than the longer one. Each lane's lines are
# printed as they come, prefixed with [NAME HH:MM:SS] (UTC, so each step's time can be read
# off the CI log), and kept whole in .build/lanes/NAME.log; the run
# fails when any lane fails, after every lane has ended (a molecule scenario ends by destroying
# its lab, so none is cut off half-way).
set -u
log_dir=${LANES_LOG_DIR:-.build/lanes}
mkdir -p "$log_dir"

# bash's own clock (printf %(...)T): no process per line.
prefix() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    TZ=UTC printf '[%s %(%H:%M:%S)T] %s\n' "$1" -1 "$line"
  done
}

names=() pids=()
for lane in "$@"; do
  name=${lane%%=*}
  command=${lane#*=}
  case $name in
    ''|*[!A-Za-z0-9_-]*) echo "lanes.sh: lane name '$name' must be letters, digits, - or _" >&2; exit 2 ;;
  esac
  log="$log_dir/$name.log"
  # pipefail: the lane's status is the command's, not sed's.
  ( set -o pipefail; bash -c "$command" 2>&1 | tee "$log" | prefix "$name" ) &
  names+=("$name") pids+=("$!")
  echo "==> lane $name started $(date -u +%H:%M:%S): $command"
done

# A stop (Ctrl-C, CI cancelling the job) ends every lane; their own traps clean up.
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 130' INT TERM

failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "==> lane ${names[$i]} ended $(date -u +%H:%M:%S) rc=$rc (log: $log_dir/${names[$i]}.log)"
  [ "$rc" -eq 0 ] || failed+=("${names[$i]}")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "==> failed lane(s): ${failed[*]}; each lane's last lines:" >&2
  for name in "${failed[@]}"; do
    echo "---- $name" >&2
    tail -n 40 "$log_dir/$name.log" >&2
  done
  exit 1
fi
