#!/usr/bin/env bash
# The supervisord fault cases on one GPU host without systemd (issue 53, item 4; docs/faults.md), run
# through the collection's own deploy.yml as scripts/gpu-e2e.sh runs it (the host its own controller,
# services under supervisord, the CUDA build by role build), layout split (llama-server and one RPC
# server on GPU 0), a small synthetic model (GPULAB_E2E_MODEL, default 4 layers, hidden 512, 2 shards),
# context 4096, deploy.yml without its benchmark (gpulab_bench_enabled: false: it would measure again
# after every restart, and is not what a case measures).
#
#   GPULAB_E2E_FAULTS_STEP=prepare|deploy|cases|all scripts/gpu-e2e-faults.sh OUTDIR
#
# Steps, each meant for one device command (600 s), the work directory (/tmp/gpulab-e2e) kept between them:
#   prepare  the llama.cpp build and the model side by side (scripts/gpu-e2e.sh's prepare phase)
#   deploy   supervisord (its role alone), a program `asr` that is not the collection's holding
#            GPULAB_E2E_FAULTS_KEPT_GIB (4) GiB of GPU 0 through torch, then the first deploy.yml with
#            gpu_drain_keep: [asr], whose looks at the GPUs record what asr holds (gpulab_kept_history_file)
#   cases    with one chat completion a second on the head (scripts/faults_load.py), in this order:
#     kept              asr stopped, deploy.yml: the plan reserves asr's room and says so; asr starts again,
#                       RUNNING with its memory held
#     fail-after-drain  a program `trainer` (GPULAB_E2E_FAULTS_DRAINED_GIB, 2 GiB) that the drain stops, then a
#                       deploy.yml that fails after the drain (llama-server refuses an argument given in
#                       llama_server_extra_args): the rescue's contract (docs/CONTRACTS.md, GPU drain): trainer
#                       RUNNING again, the collection's programs stopped, no drain state file, asr untouched;
#                       then trainer (the harness's own) is removed and a plain deploy.yml converges
#     head-sigkill, rpc-sigkill  SIGKILL of llama-server, then of the RPC server; then deploy.yml twice
#   all      the three steps in turn (default; more than one device command allows)
#
# GPULAB_E2E_FAULTS_CASES: the cases of the step cases (comma-separated; default all four). A case that
# would not end within GPULAB_E2E_FAULTS_BUDGET_S (570) of the step's start is left out and named, for
# the next call. OUTDIR: progress.log (UTC times), faults.json (every case run in this work directory,
# each with its checks), faults.md (the table of docs/faults.md), the deploy logs. At the end of the
# cases nothing is left stopped: asr and the collection's programs run, trainer is gone.
# Exit status: 0 every check held, 1 a check failed or a step could not run, 3 some cases left out.
# Needs what scripts/gpu-e2e.sh needs (GPULAB_E2E_WHEELS, GPULAB_E2E_ARCHIVE: copied into the work
# directory by the first call, so later calls need not carry them) and torch for the programs.
# GPULAB_E2E_DRY_RUN=1: the inventories and what the step would do, nothing run.
set -euo pipefail

out=${1:?usage: GPULAB_E2E_FAULTS_STEP=prepare|deploy|cases|all scripts/gpu-e2e-faults.sh OUTDIR}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
step=${GPULAB_E2E_FAULTS_STEP:-all}
selected=${GPULAB_E2E_FAULTS_CASES:-kept,fail-after-drain,head-sigkill,rpc-sigkill}
budget_s=${GPULAB_E2E_FAULTS_BUDGET_S:-570}
kept_gib=${GPULAB_E2E_FAULTS_KEPT_GIB:-4}
drained_gib=${GPULAB_E2E_FAULTS_DRAINED_GIB:-2}
dry_run=${GPULAB_E2E_DRY_RUN:-0}
work=${GPULAB_E2E_WORK:-/tmp/gpulab-e2e}
state=$work/faults
rows=$state/rows.json
case $step in prepare | deploy | cases | all) ;; *) echo "GPULAB_E2E_FAULTS_STEP is $step; use prepare, deploy, cases or all" >&2; exit 2 ;; esac
for c in ${selected//,/ }; do
  case $c in kept | fail-after-drain | head-sigkill | rpc-sigkill) ;; *) echo "no case $c: kept, fail-after-drain, head-sigkill, rpc-sigkill" >&2; exit 2 ;; esac
done
mkdir -p "$state" "$work/wheels"
# The llama.cpp archive and the wheels kept in the work directory: a later call finds them whatever it
# carries, and every inventory names the same paths (the build checks the archive on each deploy.yml).
archive_src=${GPULAB_E2E_ARCHIVE:-$repo/.cache/llama.cpp-0c1e570.tar.gz}
if [ -f "$archive_src" ] && ! cmp -s "$archive_src" "$work/$(basename "$archive_src")"; then cp "$archive_src" "$work/"; fi
wheels_src=${GPULAB_E2E_WHEELS:-$repo/.whl}
if [ -d "$wheels_src" ] && [ "$wheels_src" != "$work/wheels" ]; then cp -r "$wheels_src/." "$work/wheels/"; fi
export GPULAB_E2E_ARCHIVE=$work/${archive_src##*/} GPULAB_E2E_WHEELS=$work/wheels
# The tools an earlier step installed, instead of installing them again.
[ ! -d "$work/site/ansible" ] || export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
kept_file=/var/lib/gpulab/kept-room.json      # gpulab_kept_history_file (role common's default)
drain_file=/var/lib/gpulab/drain-state.json   # gpulab_drain_state_file
url=http://127.0.0.1:8080                     # llama_server_port's default, on loopback
# A flag llama-server refuses at start: the deploy fails in its serving step, after the drain.
fault_flag=--gpulab-fault-injected
playbook_bound_s=300
not_run=()

# ---- scripts/gpu-e2e.sh's tools, GPU facts, inventory and functions (its dry run, sourced) ----------
setup() {
  export GPULAB_E2E_WORK=$work GPULAB_E2E_ENGINES=llama_cpp GPULAB_E2E_LAYOUTS=split
  export GPULAB_E2E_CTX_SIZES=${GPULAB_E2E_CTX_SIZES:-4096}
  export GPULAB_E2E_MODEL=${GPULAB_E2E_MODEL:-'{"shards": 2}'} GPULAB_E2E_MODEL_STEM=${GPULAB_E2E_MODEL_STEM:-e2e-faults}
  export GPULAB_E2E_LLAMA_EXTRA='{"gpu_drain_keep": ["asr"], "gpulab_bench_enabled": false}'
  export GPULAB_E2E_DRY_RUN=1
  # shellcheck source=scripts/gpu-e2e.sh
  . "$repo/scripts/gpu-e2e.sh" "$out"
  export GPULAB_E2E_DRY_RUN=$dry_run
  # shellcheck source=scripts/gpu-e2e-programs.sh
  . "$repo/scripts/gpu-e2e-programs.sh"

  inv=$out/split/hosts.json
  fault_inv=$out/split/hosts-fault.json
  write_inventory split "${ctx_sizes[0]}" "$fault_inv" "{\"llama_server_extra_args\": [\"$fault_flag\"]}"
  gpu0=$(gpu_index 0)
  # Each deploy.yml bounded by what is left of the step's time (at most 300 s; run_deploy sets it).
  playbook() { timeout -k 10 "$playbook_bound_s" "$python" -m ansible.cli.playbook "$@"; }
}

helper() { "$python" "$repo/scripts/faults_supervisor.py" "$@"; }
step_t0=$SECONDS
left() { echo $((budget_s - (SECONDS - step_t0))); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

# BOUND_S COMMAND...: prints the seconds until COMMAND succeeded (polled every 0.25 s); 1 when it did
# not within BOUND_S.
wait_until() {
  local bound=$1 t0
  shift
  t0=$(now)
  until "$@"; do
    awk -v a="$t0" -v b="$(now)" -v m="$bound" 'BEGIN {exit !(b - a > m)}' && return 1
    sleep 0.25
  done
  since "$t0"
}

chat_ok() {
  curl -sf -o /dev/null --max-time 20 -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2}' "$url/v1/chat/completions"
}
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$url/health" || true; }
is_running() { [ "$(program_state "$1")" = RUNNING ]; }
gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu0" 2>/dev/null | awk '{print $1 + 0; exit}' || echo 0; }
# The collection's serving programs (llama-server, the RPC servers: gpulab_own_unit_patterns, what
# the restore stops) as NAME=STATE, and those of them not running.
serving_states() { sup status 2>/dev/null | awk '{n = $1; sub(/.*:/, "", n)} n ~ /^gpulab-(llama-server|rpc-server-[0-9]+)$/ {print $1, $2}' || true; }
own_programs() { serving_states | awk '{printf "%s=%s ", $1, $2}'; }
own_down() { serving_states | awk '$2 != "RUNNING" {print $1}'; }

# NAME INVENTORY: deploy.yml (scripts/gpu-e2e.sh's deploy, OUTDIR/deploy-NAME.log); sets deploy_rc,
# deploy_s and deploy_recap ('changed=N', ' failed on gpu-host' where it failed).
run_deploy() {
  local t0=$SECONDS
  playbook_bound_s=$(($(left) - 20))
  [ "$playbook_bound_s" -le 300 ] || playbook_bound_s=300
  [ "$playbook_bound_s" -ge 60 ] || playbook_bound_s=60
  deploy_rc=0
  deploy "$2" "$out/deploy-$1.log" || deploy_rc=$?
  deploy_s=$((SECONDS - t0))
  deploy_recap=$(helper recap "$out/deploy-$1.log")
  if [ "$deploy_rc" = 124 ] || [ "$deploy_rc" = 137 ]; then deploy_recap="stopped at its bound of $playbook_bound_s s"; fi
  if [ "$deploy_rc" = 0 ]; then echo "$deploy_s" >"$state/deploy_s"; fi
}

# 'after N s', or 'not within BOUND s' when N is empty.
within() { if [ -n "$1" ]; then echo "after $1 s"; else echo "not within $2 s"; fi; }
# 'yes' when the command succeeds, else 'no'; and the conditions the checks use.
ok() { if "$@"; then echo yes; else echo no; fi; }
none_of() { local v=$1 x; shift; for x; do [ "$v" != "$x" ] || return 1; done; }
at_least() { local min=$1 x; shift; for x; do if [ "$x" -ge "$min" ] 2>/dev/null; then return 0; fi; done; return 1; }
same_pid() { [ -n "$1" ] && [ "$1" != 0 ] && [ "$1" = "$2" ]; }
all_stopped() { [ -n "$1" ] && ! grep -qE "=(RUNNING|STARTING|BACKOFF) " <<<"$1"; }

# ---- prepare: the build and the model ------------------------------------------------------------
step_prepare() {
  local t0=$SECONDS
  log "prepare: build.yml and model.yml side by side (scripts/gpu-e2e.sh's prepare phase)"
  env GPULAB_E2E_DRY_RUN=0 GPULAB_E2E_PHASE=prepare GPULAB_E2E_PREPARE=1 GPULAB_E2E_PREPARE_PARALLEL=1 \
    GPULAB_E2E_LLAMA_BENCH=0 "$repo/scripts/gpu-e2e.sh" "$out" >"$out/prepare.log" 2>&1 ||
    { log "prepare failed: $(tail -n 5 "$out/prepare.log" | tr '\n' ' ')"; return 1; }
  log "prepare: $((SECONDS - t0)) s"
}

# ---- deploy: supervisord, the kept program, the first deploy.yml ---------------------------------
step_deploy() {
  if [ ! -x /opt/gpulab/llama.cpp/current/bin/llama-server ] || [ ! -e "$model_path" ]; then
    log "no llama.cpp build or no model ($model_path): run the step prepare first"
    return 1
  fi
  # supervisord from its role alone, so that asr runs before the first deploy.yml looks at the GPUs.
  if ! is_running asr; then
    printf -- '- name: supervisord alone\n  hosts: %s\n  roles: [gpulab.inference.supervisor]\n' "$host" >"$work/supervisor.yml"
    playbook -i "$work/facts.yml" "$work/supervisor.yml" -e "supervisor_wheel_src=$supervisor_wheel supervisor_python=$python" \
      >"$out/supervisor.log" 2>&1 || { log "the supervisor role failed: $(tail -n 5 "$out/supervisor.log" | tr '\n' ' ')"; return 1; }
    log "supervisord: $(recap "$out/supervisor.log")"
    gpu_program asr "$kept_gib" "$gpu0" || return 1
  fi
  run_deploy first "$inv"
  log "first deploy.yml: rc=$deploy_rc, $deploy_s s, $deploy_recap; asr in the kept history: $(helper history "$kept_file" asr || echo none)"
  [ "$deploy_rc" = 0 ] || { tail -n 40 "$out/deploy-first.log" >&2; return 1; }
  chat_ok || { log "no chat completion after the first deploy.yml"; return 1; }
  log "serving; programs: $(own_programs)asr=$(program_state asr)"
}

# ---- the cases -----------------------------------------------------------------------------------
row() { # FAULT_AT UNTIL SERVED(yes|no) ARGS...: the case's row (figures from the load log) into rows.json
  local fault_at=$1 until=$2 served=$3
  shift 3
  helper row --results "$rows" --load "$state/load.jsonl" --fault-at "$fault_at" --until "$until" --served "$served" "$@" >>"$out/progress.log"
}

case_kept() {
  local history lines t0 started held used0 used1 fault_at memory_ok
  history=$(helper history "$kept_file" asr || true)
  fault_at=$(now)
  sup stop asr >>"$out/progress.log" 2>&1 || true
  log "kept: asr $(program_state asr); its history: ${history:-none}"
  run_deploy kept "$inv"
  lines=$(helper reserved "$out/deploy-kept.log" asr || true)
  log "kept: deploy.yml rc=$deploy_rc, $deploy_s s, $deploy_recap; the plan: ${lines:-no reservation line for asr}"
  used0=$(gpu_used_mib)
  t0=$(now)
  sup start asr >>"$out/progress.log" 2>&1 || true
  wait_until 60 is_running asr >/dev/null || true
  started=$(since "$t0")
  held=$(program_mib asr)
  used1=$(gpu_used_mib)
  memory_ok=$(ok at_least $((kept_gib * 1024 * 9 / 10)) "$held" $((used1 - used0)))
  log "kept: asr $(program_state asr) after ${started} s, $held MiB held (GPU $gpu0 used $used0 -> $used1 MiB)"
  row "$fault_at" "$(now)" yes \
    --set id=kept --set "case=kept program stopped, then deploy.yml (asr, $kept_gib GiB, gpu_drain_keep)" \
    --set "lost=$(if is_running asr && [ "$memory_ok" = yes ]; then echo nothing; else echo "asr $(program_state asr), $held MiB"; fi)" \
    --set "deploy_1=$deploy_recap" --set "took_s=$deploy_s" \
    --set "notes=asr's history before: ${history:-none}. deploy.yml with asr stopped took $deploy_s s; its plan: ${lines:-no reservation line}. supervisorctl start asr: $(program_state asr) after $started s, $held MiB held (GPU $gpu0 used $used0 -> $used1 MiB)." \
    --check "history_recorded=$(ok test -n "$history")" --check "deploy_ok=$(ok test "$deploy_rc" = 0)" \
    --check "plan_reserves_asr=$(ok test -n "$lines")" --check "asr_running=$(ok is_running asr)" \
    --check "asr_memory_held=$memory_ok"
}

case_fail_after_drain() {
  local asr_pid asr_after fault_at failed_rc failed_s failed_recap failure message drained rescued trainer_state trainer_mib own own_ok state_left back
  gpu_program trainer "$drained_gib" "$gpu0" || true
  asr_pid=$(sup pid asr 2>/dev/null || true)
  fault_at=$(now)
  run_deploy fail-after-drain "$fault_inv"
  failed_rc=$deploy_rc failed_s=$deploy_s failed_recap=$deploy_recap
  failure=$(helper failure "$out/deploy-fail-after-drain.log" 400)
  message=$(helper failure "$out/deploy-fail-after-drain.log" 240)
  drained=$(helper mentions "$out/deploy-fail-after-drain.log" 'Show what was stopped, kept and freed' trainer || true)
  rescued=$(helper mentions "$out/deploy-fail-after-drain.log" 'Fail with the error of the step that failed' 'were restored' || true)
  log "fail-after-drain: deploy.yml rc=$failed_rc after $failed_s s, $failed_recap: $failure; the drain: ${drained:-trainer not named}"
  wait_until 60 is_running trainer >/dev/null || true
  trainer_state=$(program_state trainer)
  trainer_mib=$(program_mib trainer)
  own=$(own_programs)
  own_ok=$(ok all_stopped "$own")
  state_left=$(ok test -e "$drain_file")
  asr_after=$(sup pid asr 2>/dev/null || true)
  log "fail-after-drain: trainer $trainer_state ($trainer_mib MiB), the collection's programs: $own; drain state file left: $state_left; asr pid $asr_pid -> $asr_after"
  local checks=(--check "deploy_failed=$(ok none_of "$failed_rc" 0 124 137)"
    --check "drain_stopped_trainer=$(ok test -n "$drained")" --check "rescue_restored=$(ok test -n "$rescued")"
    --check "trainer_running_again=$(ok test "$trainer_state" = RUNNING)"
    --check "trainer_memory_held=$(ok at_least $((drained_gib * 1024 * 9 / 10)) "$trainer_mib")"
    --check "own_programs_stopped=$own_ok" --check "no_drain_state_left=$(ok test "$state_left" = no)"
    --check "asr_untouched=$(ok same_pid "$asr_pid" "$asr_after")")
  remove_program trainer
  run_deploy fail-after-drain-converge "$inv"
  back=$(wait_until 180 chat_ok) || back=
  sleep 10
  log "fail-after-drain: deploy.yml after it rc=$deploy_rc, $deploy_s s, $deploy_recap; a chat completion $(within "$back" 180)"
  row "$fault_at" "$(now)" "$(ok test -n "$back")" \
    --set id=fail-after-drain --set "case=deploy.yml failing after the drain (llama-server refuses $fault_flag)" \
    --set "detected_s=$failed_s" \
    --set "lost=$(if [ "$trainer_state" = RUNNING ] && [ "$state_left" = no ]; then echo nothing; else echo "trainer $trainer_state, drain state file left: $state_left"; fi)" \
    --set "deploy_1=$deploy_recap" --set "took_s=$deploy_s" \
    --set "notes=detected: the faulty deploy.yml ($failed_recap) ended after $failed_s s, its restore included; drained: ${drained:-trainer not named}; its message: ${message%.}. Then trainer $trainer_state with $trainer_mib MiB, the collection's programs ${own% }, drain state file left: $state_left. trainer (the harness's program) removed, then deploy.yml took $deploy_s s. Serving again counts from the faulty deploy.yml's start." \
    "${checks[@]}" --check "converged=$(ok test "$deploy_rc" = 0)" --check "serving_again=$(ok test -n "$back")"
}

# A new PROCESS than OLD_PID runs, or (the head) /health is no longer 200.
replaced() {
  local pid
  pid=$(pgrep -o -x "$1" || true)
  if [ -n "$pid" ] && [ "$pid" != "$2" ]; then return 0; fi
  [ "$3" = head ] && [ "$(health)" != 200 ]
}

case_kill() { # head|rpc
  local which=$1 proc pid head_pid fault_at detected back
  if [ "$which" = head ]; then proc=llama-server; else proc='ggml-rpc-server|rpc-server'; fi
  wait_until 120 chat_ok >/dev/null || log "$which-sigkill: no chat completion before the fault"
  sleep 5
  pid=$(pgrep -o -x "$proc" || true)
  head_pid=$(pgrep -o -x llama-server || true)
  if [ -z "$pid" ]; then
    log "$which-sigkill: no $proc process"
    row "$(now)" "$(now)" no --set "id=$which-sigkill" --set "case=SIGKILL of $proc" --check process_found=no
    return 0
  fi
  fault_at=$(now)
  kill -KILL "$pid" || true
  detected=$(wait_until 60 replaced "$proc" "$pid" "$which") || detected=
  back=$(wait_until 180 chat_ok) || back=
  sleep 10
  log "$which-sigkill: pid $pid killed; seen $(within "$detected" 60); a chat completion $(within "$back" 180); programs: $(own_programs)"
  row "$fault_at" "$(now)" "$(ok test -n "$back")" \
    --set "id=$which-sigkill" --set "case=SIGKILL of the $(if [ "$which" = head ]; then echo 'head (llama-server)'; else echo 'RPC server'; fi)" \
    --set "detected_s=$detected" --set "lost=$(if [ -z "$(own_down)" ]; then echo nothing; else echo "not running: $(own_down | tr '\n' ' ')"; fi)" \
    --set "notes=pid $pid killed; $(if [ "$which" = head ]; then echo 'seen: a new llama-server or /health not 200'; else echo 'seen: a new RPC server process (supervisord)'; fi); llama-server $head_pid -> $(pgrep -o -x llama-server || echo none)." \
    --check "detected=$(ok test -n "$detected")" --check "serving_again=$(ok test -n "$back")" \
    --check "programs_running=$(ok test -z "$(own_down)")"
}

deploys_after_kills() { # CASE_ID...: deploy.yml twice, into each case's row
  local first_recap first_s first_rc id
  run_deploy after-kills-1 "$inv"
  first_recap=$deploy_recap first_s=$deploy_s first_rc=$deploy_rc
  run_deploy after-kills-2 "$inv"
  log "after the kills: deploy.yml $first_recap ($first_s s), then $deploy_recap ($deploy_s s)"
  for id in "$@"; do
    helper update --results "$rows" --id "$id" --set "deploy_1=$first_recap" --set "deploy_2=$deploy_recap" \
      --note "deploy.yml after $(if [ "$#" -gt 1 ]; then echo "the $# kills"; else echo the kill; fi) took $first_s s, then $deploy_s s." \
      --check "next_deploy_ok=$(ok test "$first_rc" = 0)" --check "then_changed_0=$(ok test "$deploy_recap" = changed=0)"
  done
}

write_outputs() {
  local commit machine
  commit=$(git -C "$repo" log -1 --format=%h 2>/dev/null || echo "${GPULAB_E2E_FAULTS_COMMIT:-unknown}")
  machine="$("$python" -c 'import json,sys; print(", ".join("%s %s MiB" % (g["name"], g["memory_total_mib"]) for g in json.load(open(sys.argv[1]))["ansible_facts"]["gpulab_gpus"]))' "$out/gpu_facts.json"), $(nproc) cores, supervisord"
  helper write --results "$rows" --out "$out" --meta "date=$(date -u '+%Y-%m-%d %H:%M UTC')" --meta "commit=$commit" \
    --meta "machine=$machine" --meta "command=GPULAB_E2E_FAULTS_STEP=$step GPULAB_E2E_FAULTS_CASES=$selected scripts/gpu-e2e-faults.sh OUTDIR" \
    --meta "not_run=${not_run[*]}" >>"$out/progress.log"
}

# Whatever a case left: the load stopped, trainer gone, asr and the collection's programs running.
finish() {
  local rc=$? p
  trap - EXIT
  set +e
  [ -z "${load_pid:-}" ] || kill "$load_pid" 2>/dev/null || true
  [ ! -e /etc/gpulab/supervisor.d/trainer.conf ] || remove_program trainer
  is_running asr || sup start asr >>"$out/progress.log" 2>&1 || true
  for p in $(own_down); do sup start "$p" >>"$out/progress.log" 2>&1 || true; done
  [ ! -e "$drain_file" ] || log "the drain's state file is left: $(tr -d '\n' <"$drain_file" | head -c 400)"
  log "end: $(sup status 2>&1 | tr -s ' ' | tr '\n' ';')"
  write_outputs || rc=1
  if [ "$rc" = 0 ] && [ "${#not_run[@]}" -gt 0 ]; then
    log "left out for time: ${not_run[*]}; next: GPULAB_E2E_FAULTS_STEP=cases GPULAB_E2E_FAULTS_CASES=$(IFS=,; echo "${not_run[*]}") scripts/gpu-e2e-faults.sh OUTDIR"
    rc=3
  fi
  log "cases: rc=$rc; table in $out/faults.md"
  exit "$rc"
}

step_cases() {
  local c need estimate kills=()
  is_running asr || { log "no kept program asr: run the step deploy first"; return 1; }
  if ! wait_until 60 chat_ok >/dev/null; then
    log "not serving at the start: deploy.yml first"
    run_deploy before-cases "$inv"
    chat_ok || { log "still not serving (rc=$deploy_rc): run the step deploy"; return 1; }
  fi
  estimate=$(cat "$state/deploy_s" 2>/dev/null || echo 150)
  : >"$state/load.jsonl"
  "$python" "$repo/scripts/faults_load.py" --url "$url" --out "$state/load.jsonl" >"$out/load.out" 2>&1 </dev/null &
  load_pid=$!
  trap finish EXIT
  trap 'exit 143' TERM INT
  for c in ${selected//,/ }; do
    case $c in
      kept) need=$((estimate + 40)) ;;
      fail-after-drain) need=$((2 * estimate + 70)) ;;
      *) need=$((2 * estimate + 60)) ;;
    esac
    if [ "$(left)" -lt "$need" ]; then
      not_run+=("$c")
      log "case $c left out: $(left) s left of $budget_s, about $need s needed"
      continue
    fi
    log "== case $c ($(left) s left)"
    case $c in
      kept) case_kept ;;
      fail-after-drain) case_fail_after_drain ;;
      head-sigkill) case_kill head; kills+=(head-sigkill) ;;
      rpc-sigkill) case_kill rpc; kills+=(rpc-sigkill) ;;
    esac
    estimate=$(cat "$state/deploy_s" 2>/dev/null || echo "$estimate")
  done
  [ "${#kills[@]}" -eq 0 ] || deploys_after_kills "${kills[@]}"
}

main() {
  setup
  if [ "$dry_run" = 1 ]; then
    log "dry run: step $step, cases $selected within $budget_s s; inventories $inv and $fault_inv (llama_server_extra_args [$fault_flag]); asr $kept_gib GiB and trainer $drained_gib GiB on GPU $gpu0; model $model_path"
    return 0
  fi
  case $step in
    prepare) step_prepare ;;
    deploy) step_deploy ;;
    cases) step_cases ;;
    all)
      step_prepare
      step_t0=$SECONDS
      step_deploy
      step_t0=$SECONDS
      step_cases
      ;;
  esac
}

# Sourced (a test of the functions), nothing runs.
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
