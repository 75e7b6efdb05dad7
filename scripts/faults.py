#!/usr/bin/env python3
"""The fault matrix on the container lab (`make faults`): each case injects one fault while
scripts/faults_load.py sends a chat completion every second on the head node, then measures when
the fault was seen, when serving came back, how many requests failed, and what the next two
deploy.yml runs reported; docs/faults.md gets the table.

  python scripts/faults.py --lab gpulab-flt [--cases rpc-sigkill,hang-10] [--out docs/faults.md]

The lab must exist and be deployed (the Makefile target does both). Every command goes to the
lab's containers (podman exec) or to loopback inside them; the playbooks run with ansible-runner.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests' / 'playbooks'))
sys.path.insert(0, str(REPO / '.build' / 'collections'))
from ansible_collections.gpulab.inference.plugins.module_utils import fault_matrix  # noqa: E402 pylint: disable=wrong-import-position

HEAD, WORKER, OTHER = 'node-a', 'node-b', 'node-c'
RPC_UNIT = 'gpulab-rpc-server@0.service'
HEAD_UNIT = 'gpulab-llama-server.service'
LOAD_LOG = '/tmp/faults-load.jsonl'
# The bounds each case is held to (the document states them); serving must be back within these.
SERVING_BOUND_S = 180


class Lab:
    def __init__(self, name):
        self.name = name

    def sh(self, node, command, timeout=60, check=False):
        argv = ['podman', 'exec', '%s-%s' % (self.name, node), 'bash', '-c', command]
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, ''
        if check and done.returncode != 0:
            raise RuntimeError('%s on %s: rc %d %s' % (command, node, done.returncode, done.stderr.strip()))
        return done.returncode, done.stdout.strip()

    def main_pid(self, node, unit):
        return self.sh(node, 'systemctl show -p MainPID --value %s' % unit)[1]

    def health(self):
        return self.sh(HEAD, 'curl -s -o /dev/null -w %{http_code} --max-time 3 http://127.0.0.1:8080/health', timeout=10)[1]

    def chat_ok(self):
        rc, dummy = self.sh(HEAD, 'curl -sf --max-time 20 -H "Content-Type: application/json" -d '
                            '\'{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":2}\' '
                            'http://127.0.0.1:8080/v1/chat/completions', timeout=30)
        return rc == 0

    def watch_state(self, node):
        rc, out = self.sh(node, 'cat /run/gpulab/rpc-watch.json 2>/dev/null')
        try:
            return json.loads(out) if rc == 0 else None
        except ValueError:
            return None

    def requests(self):
        dummy, out = self.sh(HEAD, 'cat %s 2>/dev/null' % LOAD_LOG, timeout=30)
        rows = []
        for line in out.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
        return rows

    def start_load(self, interval_s=1.0):
        subprocess.run(['podman', 'cp', str(REPO / 'scripts' / 'faults_load.py'), '%s-%s:/tmp/faults_load.py' % (self.name, HEAD)],
                       check=True)
        self.sh(HEAD, 'rm -f %s; setsid nohup python3 /tmp/faults_load.py --interval-s %s --out %s '
                      '>/tmp/faults-load.out 2>&1 < /dev/null & echo $! > /tmp/faults-load.pid' % (LOAD_LOG, interval_s, LOAD_LOG),
                check=True)

    def stop_load(self):
        self.sh(HEAD, 'kill $(cat /tmp/faults-load.pid) 2>/dev/null; true')


def args_tmp():
    path = REPO / '.build' / 'faults' / 'tmp'
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def wait_for(predicate, bound_s, step_s=0.5):
    """Seconds until predicate() held (polled every step_s), or None within bound_s."""
    began = time.time()
    while time.time() - began < bound_s:
        if predicate():
            return time.time() - began
        time.sleep(step_s)
    return None


def wait_serving(lab, bound_s=SERVING_BOUND_S):
    return wait_for(lab.chat_ok, bound_s, step_s=1)


def deploy(lab, private):
    """deploy.yml with ansible-runner; 'changed=N/N/N' (node-a/b/c) or where it failed."""
    from playbook_runner import run_in  # pylint: disable=import-outside-toplevel
    env = {'ANSIBLE_CONFIG': str(REPO / 'ansible.cfg'), 'GPULAB_LAB_NAME': lab.name,
           'GPULAB_LAB_FABRIC_PREFIX': os.environ.get('GPULAB_LAB_FABRIC_PREFIX', '10.231.83')}
    began = time.time()
    run = run_in(private, 'deploy.yml', str(REPO / 'inventory' / 'demo'), envvars=env)
    text = fault_matrix.recap_text(run.stats)
    if run.failures:
        text += ' (%s)' % '; '.join('%s: %s' % (host, message.splitlines()[0][:160] if message else task)
                                    for host, task, message in run.failures[:2])
    return text, round(time.time() - began)


def figures(lab, row, fault_at, detected_s, deploys, private):
    """Fill the row: serving again, failed/sent from the load log (the fault until 10 s after serving
    came back), then the next two deploy.yml runs."""
    back = wait_serving(lab)
    time.sleep(10)
    until = time.time()
    requests = lab.requests()
    row['detected_s'] = detected_s
    row['serving_again_s'] = fault_matrix.serving_again_after(requests, fault_at, until)
    if back is None:
        row['serving_again_s'] = None
    row['sent'], row['failed'] = fault_matrix.failed_during(requests, fault_at, until)
    if deploys:
        row['deploy_1'], took_1 = deploy(lab, private / ('%s-1' % row['id']))
        row['deploy_2'], took_2 = deploy(lab, private / ('%s-2' % row['id']))
        row['notes'] = (row.get('notes', '') + ' deploy.yml took %d s, then %d s.' % (took_1, took_2)).strip()
    return row


# --- the cases --------------------------------------------------------------------------------

def rpc_sigkill(lab, row):
    before = lab.main_pid(WORKER, RPC_UNIT)
    fault_at = time.time()
    lab.sh(WORKER, 'kill -KILL %s' % before)
    detected = wait_for(lambda: lab.main_pid(WORKER, RPC_UNIT) not in ('0', '', before), 60)
    return fault_at, detected


def head_sigkill(lab, row):
    before = lab.sh(HEAD, 'pgrep -x llama-server')[1]
    fault_at = time.time()
    lab.sh(HEAD, 'kill -KILL %s' % before)
    detected = wait_for(lambda: lab.sh(HEAD, 'pgrep -x llama-server')[1] not in ('', before) or lab.health() != '200', 60)
    return fault_at, detected


def hang(seconds):
    def case(lab, row):
        pid = lab.main_pid(WORKER, RPC_UNIT)  # the wrapper execs the server (ggml-rpc-server)
        fault_at = time.time()
        lab.sh(WORKER, 'kill -STOP %s' % pid)
        detected = wait_for(lambda: (lab.watch_state(WORKER) or {}).get('can_serve') is False, 30)
        health_not_ok = wait_for(lambda: lab.health() != '200', 30)
        row['notes'] = ('head /health not 200 after %s s; ' % fault_matrix.seconds(health_not_ok) +
                        'rpc-server killed and restarted by the watch: %s.' % (
                            'yes' if wait_for(lambda: lab.main_pid(WORKER, RPC_UNIT) not in ('0', '', pid), 30) is not None
                            else 'no'))
        left = seconds - (time.time() - fault_at)
        if left > 0:
            time.sleep(left)
        lab.sh(WORKER, 'kill -CONT %s 2>/dev/null; true' % pid)
        return fault_at, detected
    return case


def worker_restart(lab, row):
    head_before = lab.main_pid(HEAD, HEAD_UNIT)
    fault_at = time.time()
    subprocess.run(['podman', 'restart', '-t', '0', '%s-%s' % (lab.name, WORKER)], check=True, stdout=subprocess.DEVNULL)
    detected = wait_for(lambda: lab.main_pid(HEAD, HEAD_UNIT) != head_before or lab.health() != '200', 120)
    order = lab.sh(WORKER, "systemctl show -p ActiveEnterTimestampMonotonic --value gpulab-rpc-server-firewall.service "
                           "%s" % RPC_UNIT)[1].split()
    row['notes'] = 'firewall unit active before the RPC server at boot: %s.' % (
        'yes' if len(order) == 2 and int(order[0]) <= int(order[1]) else 'no (%s)' % order)
    return fault_at, detected


def fabric_cut(seconds):
    def case(lab, row):
        head_address = lab.sh(HEAD, "ip -4 -o addr show | awk '/%s/ {print $4}' | cut -d/ -f1" %
                              os.environ.get('GPULAB_LAB_FABRIC_PREFIX', '10.231.83'))[1]
        fault_at = time.time()
        lab.sh(WORKER, 'nft add table inet gpulab_fault && nft add chain inet gpulab_fault input '
                       "'{ type filter hook input priority -50; }' && nft add rule inet gpulab_fault input ip saddr %s drop && "
                       "nft add chain inet gpulab_fault output '{ type filter hook output priority -50; }' && "
                       'nft add rule inet gpulab_fault output ip daddr %s drop' % (head_address, head_address), check=True)
        detected = wait_for(lambda: lab.health() != '200' or (lab.watch_state(WORKER) or {}).get('can_serve') is False,
                            seconds)
        left = seconds - (time.time() - fault_at)
        if left > 0:
            time.sleep(left)
        lab.sh(WORKER, 'nft delete table inet gpulab_fault', check=True)
        row['notes'] = 'drop rules on %s against %s for %d s.' % (WORKER, head_address, seconds)
        return fault_at, detected
    return case


def nvidia_smi(mode):
    """A fake nvidia-smi on node-c that sleeps (hangs) or exits 1; deploy.yml must stop in bounded time naming
    node-c, with nothing drained."""
    def case(lab, row):
        path = lab.sh(OTHER, 'command -v nvidia-smi')[1] or '/usr/bin/nvidia-smi'
        body = '#!/bin/sh\nsleep 3600\n' if mode == 'hang' else '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 1\n'
        local = Path(args_tmp()) / 'nvidia-smi'
        local.write_text(body)
        lab.sh(OTHER, 'cp -p %s %s.faults' % (path, path), check=True)
        subprocess.run(['podman', 'cp', str(local), '%s-%s:%s' % (lab.name, OTHER, path)], check=True)
        lab.sh(OTHER, 'chmod 0755 %s' % path, check=True)
        fault_at = time.time()
        try:
            private = row['private'] / ('%s-run' % row['id'])
            text, took = deploy(lab, private)
        finally:
            lab.sh(OTHER, 'mv %s.faults %s' % (path, path), check=True)
        row['notes'] = 'deploy.yml with the fake: %s, stopped after %d s; running services: %s.' % (
            text, took, lab.sh(OTHER, 'systemctl is-active %s' % RPC_UNIT)[1])
        return fault_at, (took if 'node-c' in text else None)
    return case


CASES = {
    'rpc-sigkill': ('SIGKILL of the RPC server', WORKER, rpc_sigkill),
    'head-sigkill': ('SIGKILL of the head (llama-server)', HEAD, head_sigkill),
    'hang-10': ('RPC server hung (SIGSTOP) 10 s', WORKER, hang(10)),
    'hang-60': ('RPC server hung (SIGSTOP) 60 s', WORKER, hang(60)),
    'worker-restart': ('worker container restarted', WORKER, worker_restart),
    'cut-10': ('fabric cut head-worker (drop rules) 10 s', WORKER, fabric_cut(10)),
    'cut-60': ('fabric cut head-worker (drop rules) 60 s', WORKER, fabric_cut(60)),
    'smi-fail': ('nvidia-smi exits 1, then deploy.yml', OTHER, nvidia_smi('fail')),
    'smi-hang': ('nvidia-smi hangs, then deploy.yml', OTHER, nvidia_smi('hang')),
}


def service_memory(lab):
    """{node: {unit: RSS MiB of its main process}} of the collection's running units."""
    out = {}
    for node in (HEAD, WORKER, OTHER):
        dummy, text = lab.sh(node, "for u in $(systemctl list-units --plain --no-legend --state=running 'gpulab-*' | awk '{print $1}'); "
                             'do p=$(systemctl show -p MainPID --value $u); echo $u $(ps -o rss= -p $p 2>/dev/null || echo 0); done')
        out[node] = dict((line.split()[0], round(int(line.split()[1]) / 1024.0, 1))
                         for line in text.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit())
    return out


SOAK_CYCLE = ('rpc-sigkill', 'hang-10', 'head-sigkill', 'cut-10')


def soak(lab, minutes, results):
    """minutes of a closed loop of 4 streams, one fault of SOAK_CYCLE at 20 s into every minute."""
    lab.stop_load()
    lab.sh(HEAD, 'rm -f %s; setsid nohup python3 /tmp/faults_load.py --workers 4 --duration-s %d --out %s '
                 '>/tmp/faults-load.out 2>&1 < /dev/null & echo $! > /tmp/faults-load.pid' % (LOAD_LOG, minutes * 60, LOAD_LOG),
           check=True)
    memory_start = service_memory(lab)
    began = time.time()
    windows, faults = [], []
    for minute in range(minutes):
        time.sleep(max(0.0, began + minute * 60 + 20 - time.time()))
        case_id = SOAK_CYCLE[minute % len(SOAK_CYCLE)]
        row = {'id': case_id, 'private': None}
        fault_at, detected = CASES[case_id][2](lab, row)
        back = wait_serving(lab, 120)
        windows.append((fault_at, time.time() + 2))
        faults.append({'case': case_id, 'at_s': round(fault_at - began, 1), 'detected_s': detected,
                       'serving_again_s': None if back is None else round(time.time() - fault_at, 1)})
        print('    soak minute %d: %s' % (minute + 1, json.dumps(faults[-1])), flush=True)
    time.sleep(max(0.0, began + minutes * 60 + 35 - time.time()))
    memory_end = service_memory(lab)
    requests = lab.requests()
    inside = [r for r in requests if any(a <= r['start'] <= b for a, b in windows)]
    outside = [r for r in requests if not any(a <= r['start'] <= b for a, b in windows)]

    def ttft(rows, fraction):
        return fault_matrix.percentile([r['ttft_s'] for r in rows if r.get('ok') and r.get('ttft_s') is not None], fraction)
    figures_ = {'minutes': minutes, 'streams': 4, 'sent': len(requests), 'failed': sum(1 for r in requests if not r['ok']),
                'failed_outside_faults': fault_matrix.failed_outside(requests, windows),
                'ttft_p50_s_without_faults': ttft(outside, 0.5), 'ttft_p99_s_without_faults': ttft(outside, 0.99),
                'ttft_p50_s_during_faults': ttft(inside, 0.5), 'ttft_p99_s_during_faults': ttft(inside, 0.99),
                'faults': faults, 'memory_mib_start': memory_start, 'memory_mib_end': memory_end}
    results.write_text(json.dumps(dict(json.loads(results.read_text()) if results.exists() else {}, soak=figures_), indent=1))
    print(json.dumps(figures_, indent=1), flush=True)
    return figures_


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--lab', default=os.environ.get('GPULAB_LAB_NAME', 'gpulab-flt'))
    parser.add_argument('--cases', default=','.join(CASES))
    parser.add_argument('--no-deploys', action='store_true', help='skip the two deploy.yml runs after each case')
    parser.add_argument('--soak-minutes', type=int, default=0, help='then a soak of this many minutes (4 streams)')
    parser.add_argument('--out', default=str(REPO / 'docs' / 'faults.md'))
    parser.add_argument('--results', default=str(REPO / '.build' / 'faults' / 'results.json'))
    args = parser.parse_args()
    lab = Lab(args.lab)
    private = Path(args.results).parent / 'runner'
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(results.read_text()) if results.exists() else []
    rows = rows if isinstance(rows, list) else []
    cases = [c for c in args.cases.split(',') if c]
    if wait_serving(lab) is None:
        raise SystemExit('the lab %s does not serve a chat completion: deploy it first' % args.lab)
    lab.start_load()
    try:
        for case_id in cases:
            title, node, inject = CASES[case_id]
            print('==> %s' % title, flush=True)
            wait_serving(lab)
            time.sleep(5)
            row = {'id': case_id, 'case': title, 'node': node, 'manager': 'systemd', 'private': private}
            fault_at, detected = inject(lab, row)
            row = figures(lab, row, fault_at, detected, not args.no_deploys and not case_id.startswith('smi-'), private)
            row.pop('private')
            row['at'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(fault_at))
            print('    %s' % json.dumps(row), flush=True)
            rows = [r for r in rows if r['id'] != case_id] + [row]
            results.write_text(json.dumps(rows, indent=1))
        if args.soak_minutes:
            soak(lab, args.soak_minutes, results.parent / 'soak.json')
    finally:
        lab.stop_load()
    commit = subprocess.run(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'], stdout=subprocess.PIPE,
                            universal_newlines=True, check=False).stdout.strip()
    header = ('<!-- table written by scripts/faults.py on %s, commit %s, %s (%s, %d cores), lab %s -->\n'
              % (time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), commit, platform.node(), platform.platform(),
                 os.cpu_count() or 0, args.lab))
    table = Path(args.results).parent / 'table.md'
    table.write_text(header + fault_matrix.table(rows) + '\n')
    print(table.read_text())


if __name__ == '__main__':
    main()
