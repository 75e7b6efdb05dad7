# Programs under the collection's supervisord that are not the collection's, each holding GPU memory
# through torch, for the GPU harnesses (sourced by scripts/gpu-e2e-auto.sh and scripts/gpu-e2e-faults.sh
# after they define python, out, log and sup): a kept speech service's stand-in, a job the drain stops.
# shellcheck shell=bash disable=SC2154

# NAME GIB [GPU]: the program written into supervisord's include directory, added and started
# (autostart, autorestart, RUNNING after 10 s), waited for at most 90 s.
gpu_program() {
  local name=$1 gib=$2 gpu=${3:-0} t0=$SECONDS
  mkdir -p /var/log/gpulab /etc/gpulab/supervisor.d
  cat >"/etc/gpulab/supervisor.d/$name.conf" <<CONF
[program:$name]
command=$python -c "import time, torch; held = torch.empty($gib << 30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); time.sleep(10 ** 9)"
environment=CUDA_VISIBLE_DEVICES="$gpu"
autostart=true
autorestart=true
startsecs=10
stdout_logfile=/var/log/gpulab/$name.log
redirect_stderr=true
CONF
  sup update "$name" >>"$out/progress.log" 2>&1 || true
  until [ "$(program_state "$name")" = RUNNING ]; do
    if [ $((SECONDS - t0)) -gt 90 ]; then
      log "$name: not RUNNING after 90 s: $(sup status "$name" 2>&1 | tr -s ' '); $(tail -n 3 "/var/log/gpulab/$name.log" 2>&1 | tr '\n' ' ')"
      return 1
    fi
    sleep 1
  done
  log "$name: $(sup status "$name" 2>&1 | tr -s ' '), $(program_mib "$name") MiB on the GPUs; $(gpu_apps)"
}

# NAME: stopped, taken out of supervisord and its configuration removed.
remove_program() {
  sup stop "$1" >>"$out/progress.log" 2>&1 || true
  rm -f "/etc/gpulab/supervisor.d/$1.conf"
  sup update "$1" >>"$out/progress.log" 2>&1 || true
}

# A program's state as supervisorctl says it (RUNNING, STOPPED, BACKOFF, ...), ERROR when it knows none.
program_state() { sup status "$1" 2>/dev/null | awk '{print $2; exit}' || true; }

# MiB a program's process holds over the GPUs (nvidia-smi's compute apps), 0 when it runs none.
program_mib() {
  local pid
  pid=$(sup pid "$1" 2>/dev/null || true)
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
    awk -F', *' -v pid="${pid:-0}" '$1 == pid {sum += $2} END {print sum + 0}' || echo 0
}

gpu_apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tr '\n' ';' || true; }
