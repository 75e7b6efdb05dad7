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
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests' / 'playbooks'))
sys.path.insert(0, str(REPO / '.build' / 'collections'))
from ansible_collections.gpulab.inference.plugins.module_utils import fault_matrix, tcp_stall  # noqa: E402 pylint: disable=wrong-import-position

HEAD, WORKER, OTHER = 'node-a', 'node-b', 'node-c'
NODES = (HEAD, WORKER, OTHER)
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

    def unreachable_from_head(self, address):
        """The head's connections to address that wait for an ACK (what status.yml says on the head)."""
        rc, out = self.sh(HEAD, 'cat /proc/net/tcp')
        return tcp_stall.unreachable_peers(tcp_stall.connections(out), [address]) if rc == 0 else []

    def fabric_address(self, node):
        return self.sh(node, "ip -4 -o addr show | awk '/%s/ {print $4}' | cut -d/ -f1" %
                       os.environ.get('GPULAB_LAB_FABRIC_PREFIX', '10.231.83'))[1]

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


def lab_env(lab):
    return {'ANSIBLE_CONFIG': str(REPO / 'ansible.cfg'), 'GPULAB_LAB_NAME': lab.name,
            'GPULAB_LAB_FABRIC_PREFIX': os.environ.get('GPULAB_LAB_FABRIC_PREFIX', '10.231.83')}


def deploy(lab, private, playbook='deploy.yml', extravars=None):
    """deploy.yml (or another playbook) with ansible-runner; 'changed=N/N/N' (node-a/b/c) or where it failed."""
    from playbook_runner import run_in  # pylint: disable=import-outside-toplevel
    began = time.time()
    run = run_in(private, playbook, str(REPO / 'inventory' / 'demo'), extravars=extravars, envvars=lab_env(lab))
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
        took_1 = row.pop('deploy_1_s', None)
        if 'deploy_1' not in row:
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
        head_address, worker_address = lab.fabric_address(HEAD), lab.fabric_address(WORKER)
        fault_at = time.time()
        lab.sh(WORKER, 'nft add table inet gpulab_fault && nft add chain inet gpulab_fault input '
                       "'{ type filter hook input priority -50; }' && nft add rule inet gpulab_fault input ip saddr %s drop && "
                       "nft add chain inet gpulab_fault output '{ type filter hook output priority -50; }' && "
                       'nft add rule inet gpulab_fault output ip daddr %s drop' % (head_address, head_address), check=True)
        # First sign of each: the head's view of its connection to the worker (status.yml's
        # unreachable_peers), the head's /health, the worker's watch.
        first = {}

        def look():
            at = time.time() - fault_at
            if 'view' not in first and lab.unreachable_from_head(worker_address):
                first['view'] = at
            if 'health' not in first and lab.health() != '200':
                first['health'] = at
            if 'watch' not in first and (lab.watch_state(WORKER) or {}).get('can_serve') is False:
                first['watch'] = at
            return 'view' in first and 'health' in first
        wait_for(look, seconds)
        left = seconds - (time.time() - fault_at)
        if left > 0:
            time.sleep(left)
        lab.sh(WORKER, 'nft delete table inet gpulab_fault', check=True)

        def said(key):
            return fault_matrix.seconds(first.get(key))
        health = ('head /health not 200 after %s s (its wrapper restarted llama-server)' % said('health')
                  if 'health' in first else 'head /health 200 throughout (no restart)')
        row['notes'] = ('drop rules on %s against %s for %d s; the head\'s connections said %s unreachable after %s s '
                        '(status.yml), %s; the worker\'s watch can_serve false after %s s.'
                        % (WORKER, head_address, seconds, worker_address, said('view'), health, said('watch')))
        return fault_at, min(first.values()) if first else None
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


# --- the controller killed in deploy.yml's drain and serving play ------------------------------

DRAINED_UNIT = 'gpu-embed.service'
DRAINED_STOP_S = 15
DRAIN_STATE = '/var/lib/gpulab/drain-state.json'
GPU_QUERY = ('--query-gpu=index,uuid,name,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,'
             'memory.free,utilization.gpu --format=csv,noheader,nounits')


def install_drained_service(lab):
    """On every node a GPU service the drain stops (a test double, as in molecule drain): 1024 MiB on
    GPU 0 of the fake nvidia-smi while it runs, 15 s to stop (its SIGTERM handler sleeps), so the
    controller can be killed while the drain waits for it. Started and enabled."""
    unit = Path(args_tmp()) / DRAINED_UNIT
    unit.write_text('# TEST DOUBLE for scripts/faults.py: a GPU service the drain stops\n[Unit]\n'
                    'Description=GPU consumer (test double)\n[Service]\n'
                    'ExecStart=/bin/bash -c \'trap "sleep %d; exit 0" TERM; while :; do sleep 1; done\'\n'
                    '[Install]\nWantedBy=multi-user.target\n' % DRAINED_STOP_S)
    for node in NODES:
        subprocess.run(['podman', 'cp', str(unit), '%s-%s:/etc/systemd/system/%s' % (lab.name, node, DRAINED_UNIT)], check=True)
        uuid = lab.sh(node, "nvidia-smi %s | head -n 1 | cut -d, -f2 | tr -d ' '" % GPU_QUERY)[1]
        lab.sh(node, "f=/etc/gpulab-fake-nvidia-smi/consumers; touch $f; grep -q '^%s,' $f || echo '%s,%s,1024' >> $f; "
                     'systemctl daemon-reload && systemctl enable --now %s' % (DRAINED_UNIT, DRAINED_UNIT, uuid, DRAINED_UNIT),
               check=True)


def active_units(lab, unit):
    return dict((node, [unit] if lab.sh(node, 'systemctl is-active %s' % unit)[1] == 'active' else []) for node in NODES)


# The kill point in each play of deploy.yml (playbooks/deploy.yml, engine.yml and what they import):
# phase -> (words of the play's banner, words of a task's banner in that play, what the case's title
# says). The kill comes when that task has begun in that play (fault_matrix.task_in_play); 'drain' and
# 'serve' have their own points (below). The monitoring play has no hosts in the lab
# (gpulab_monitoring_enabled is false there), so it has no task to kill in.
PLAY_KILL_POINTS = {
    'preflight': ('Preflight checks and GPU facts', 'Read the GPUs, the driver and the GPU memory residency',
                  'the preflight (reading the GPUs)'),
    # the play's own banner: two later plays also hold "RoCE fabric", and the lab's nodes skip this
    # play's task at once, so shorter words would already name the next play when the poll looks
    'roce': ('RoCE fabric (nodes with gpulab_fabric_interface)', 'Configure the RoCE fabric of this host',
             'the RoCE fabric play'),
    'fabric-check': ("Check every node's side of the RoCE fabric", 'Leave out nodes without a fabric interface',
                     'the fabric check'),
    'check': ('Check the engine can be planned', 'Look for the deployed build on the build host',
              "the engine's check play"),
    'build': ('Build the engine and ship it to every node', 'Look for a valid build with this id',
              'the build play (looking for the build)'),
    'distribute': ('Build the engine and ship it to every node', 'Look for that build on this node',
                   'the build play (shipping the build)'),
    'model': ('Model on the nodes that read it', 'Fetch the model once', 'the model play'),
    'plan': ('Plan the engine before anything', "Plan the model over llama.cpp's devices", 'the plan play'),
    'retire': ('Stop the engines on the other nodes', "Read the node's units", 'the retiring of the other engines'),
    'report': ('Report what is served', 'Ask the head one question', 'the report play'),
    'bench': ('Benchmark what is served and write the report', 'Tell whether anything changed since the last benchmark',
              'the benchmark play'),
    'warnings': ('Warnings that stand after the run', "Validating arguments against arg spec 'warnings'",
                 'the warnings play'),
}


def controller_kill(signame, phase):
    """deploy.yml killed (its whole process group: SIGINT as Ctrl-C sends it, or SIGKILL) in one of
    its plays: while the drain waits for a stopping GPU service ('drain'), once the engine's serve
    step began after the drain ('serve'), or when PLAY_KILL_POINTS' task began in its play; then the
    state files, playbooks/restore.yml, and two deploy.yml runs."""
    def case(lab, row):
        install_drained_service(lab)
        before = active_units(lab, DRAINED_UNIT)
        log = Path(args_tmp()) / ('%s.log' % row['id'])
        env = dict(os.environ, ANSIBLE_NOCOLOR='1', PYTHONUNBUFFERED='1', ANSIBLE_COLLECTIONS_PATH=str(REPO / '.build' / 'collections'), **lab_env(lab))
        with open(str(log), 'w') as out:
            proc = subprocess.Popen([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', str(REPO / 'inventory' / 'demo'),
                                     str(REPO / 'deploy.yml')], cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        if phase == 'drain':
            def reached():
                return lab.sh(WORKER, 'systemctl is-active %s' % DRAINED_UNIT)[1] == 'deactivating'
        elif phase == 'serve':
            def reached():
                return fault_matrix.task_started_after(log.read_text(), 'Show what was stopped, kept and freed')
        else:
            play, marker = PLAY_KILL_POINTS[phase][:2]

            def reached():
                return fault_matrix.task_in_play(log.read_text(), play, marker)
        wait_for(lambda: reached() or proc.poll() is not None, 1200, step_s=0.2)
        if proc.poll() is not None:
            raise RuntimeError('deploy.yml ended (rc %s) before the kill point %s; see %s' % (proc.returncode, phase, log))
        at_kill = fault_matrix.TASK_LINE.findall(log.read_text())
        fault_at = time.time()
        # An operator presses Ctrl-C again when the first one seems lost: ansible-core's handler raises
        # KeyboardInterrupt where Python may ignore it (in a weakref callback), and the run goes on.
        sent = 0
        while proc.poll() is None and sent < 3:
            os.killpg(proc.pid, signal.SIGINT if signame == 'SIGINT' else signal.SIGKILL)
            sent += 1
            try:
                proc.wait(10 if signame == 'SIGINT' and sent < 3 else 120)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            exited = 'still running 120 s after %d signals, then SIGKILL' % sent
        else:
            exited = 'exited %s after %d signal%s' % (proc.returncode, sent, '' if sent == 1 else 's')
        tasks = fault_matrix.TASK_LINE.findall(log.read_text())
        time.sleep(DRAINED_STOP_S + 3)
        # What the killed run left running on the nodes: its modules (async jobs go on without it).
        leftover = dict((node, lab.sh(node, "pgrep -f '[A]nsiballZ|[a]nsible_async|[a]sync_wrapper' | wc -l")[1]) for node in NODES)
        recorded = []
        for node in NODES:
            phase_, names = fault_matrix.drain_recorded(lab.sh(node, 'cat %s 2>/dev/null' % DRAIN_STATE)[1])
            recorded.append('%s %s %s (%s)' % (node, phase_ or 'no file', ','.join(names) or '-',
                                               lab.sh(node, 'systemctl is-active %s' % DRAINED_UNIT)[1]))
        # Killed before the drain's task began, this run stopped nothing: the operator runs deploy.yml
        # again, and restore.yml (which stops the collection's units first) would only stop serving.
        drained = any('Drain the GPUs' in name for name in tasks)
        if drained:
            restored, took = deploy(lab, row['private'] / ('%s-restore' % row['id']), 'playbooks/restore.yml')
            recovery = 'restore.yml %s in %d s' % (restored, took)
        else:
            recovery = 'restore.yml not run (the run never reached the drain; a state file there is the last deploy\'s)'
        row['lost'] = fault_matrix.lost_services(before, active_units(lab, DRAINED_UNIT))
        row['deploy_1'], row['deploy_1_s'] = deploy(lab, row['private'] / ('%s-1' % row['id']))
        row['notes'] = ('%s to the process group during task "%s" (ansible-playbook %s, its last task "%s"); state file, unit: %s; '
                        'module processes left running %d s later: %s; %s, %s active on every node before the next deploy.yml: %s.' % (
                            signame, at_kill[-1] if at_kill else '-', exited, tasks[-1] if tasks else '-', '; '.join(recorded),
                            DRAINED_STOP_S + 3, ', '.join('%s %s' % item for item in sorted(leftover.items())), recovery,
                            DRAINED_UNIT, 'yes' if row['lost'] == 'nothing' else 'no'))
        return fault_at, None
    return case


# --- the model: a file corrupted with size and mtime kept, a disk filled during the copy -------

MODEL_DIR = '/srv/flt-disk/flt'  # a 192 MiB tmpfs on every node (the lab made with lab_tmpfs)
MODEL_MANIFEST = '/etc/gpulab/model-flt.json'
MODEL_MIB = 24


def mirror_model(lab):
    """A 24 MiB file with its SHA256SUMS on the lab's mirror (.build/lab-mirror/<lab>/flt/)."""
    directory = REPO / '.build' / 'lab-mirror' / lab.name / 'flt'
    directory.mkdir(parents=True, exist_ok=True)
    blob = directory / 'blob.gguf'
    if not blob.exists() or blob.stat().st_size != MODEL_MIB << 20:
        blob.write_bytes(os.urandom(MODEL_MIB << 20))
    subprocess.run('sha256sum blob.gguf > SHA256SUMS && chmod 0755 . && chmod 0644 blob.gguf SHA256SUMS', shell=True,
                   cwd=str(directory), check=True)
    return blob


def model_vars(lab, slow=False, verify=False):
    """model.yml onto the head and node-b (fetched once onto the head, copied to node-b over the fabric),
    apart from what is served: vLLM's model step, since llama.cpp's workers read no model file."""
    prefix = os.environ.get('GPULAB_LAB_FABRIC_PREFIX', '10.231.83')
    return {'gpulab_engine': 'vllm', 'model_source': 'http://%s.5/%sflt/blob.gguf' % (prefix, 'slow/' if slow else ''), 'model_dir': MODEL_DIR,
            'model_manifest_path': MODEL_MANIFEST, 'model_nodes': [HEAD, WORKER], 'model_verify': verify}


def model_sha(lab, node):
    return lab.sh(node, 'sha256sum %s/blob.gguf 2>/dev/null | cut -d" " -f1' % MODEL_DIR, timeout=120)[1]


def model_corrupt(lab, row):
    """node-b's copy changed in one byte, size and mtime kept; model.yml, then model.yml -e model_verify=true."""
    blob = mirror_model(lab)
    want = subprocess.run(['sha256sum', str(blob)], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.split()[0]
    first, dummy = deploy(lab, row['private'] / ('%s-0' % row['id']), 'playbooks/model.yml', model_vars(lab))
    lab.sh(WORKER, "python3 -c \"import os; p='%s/blob.gguf'; s=os.stat(p); f=open(p,'r+b'); f.seek(%d); b=f.read(1); f.seek(%d); "
                   "f.write(bytes([b[0] ^ 255])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))\"" % (
                       MODEL_DIR, 12 << 20, 12 << 20), check=True)
    fault_at = time.time()
    plain, took_plain = deploy(lab, row['private'] / ('%s-plain' % row['id']), 'playbooks/model.yml', model_vars(lab))
    still_bad = model_sha(lab, WORKER) != want
    row['deploy_1'], took_1 = deploy(lab, row['private'] / ('%s-1' % row['id']), 'playbooks/model.yml', model_vars(lab, verify=True))
    fixed = model_sha(lab, WORKER) == want
    row['deploy_2'], took_2 = deploy(lab, row['private'] / ('%s-2' % row['id']), 'playbooks/model.yml', model_vars(lab, verify=True))
    row['deploy_1'] = 'model.yml -e model_verify=true: ' + row['deploy_1']
    row['deploy_2'] = 'again: ' + row['deploy_2']
    row['lost'] = 'nothing' if fixed else 'node-b keeps a corrupted %s/blob.gguf' % MODEL_DIR
    row['notes'] = ('a %d MiB model (SHA256SUMS on the mirror) on node-a and node-b (model_nodes, copied node to node), '
                    'first model.yml %s; one byte of node-b\'s copy flipped at 12 MiB, size and mtime kept; model.yml without '
                    'model_verify: %s in %d s, the corrupted copy %s; with model_verify=true node-b\'s copy fetched again and '
                    'right: %s (detected after: that run\'s length, %d s; then %d s). The served model was not touched.' % (
                        MODEL_MIB, first, plain, took_plain, 'kept (not read back)' if still_bad else 'replaced',
                        'yes' if fixed else 'no', took_1, took_2))
    return fault_at, took_1


def disk_full(lab, row):
    """node-b's model filesystem filled while node-a fetches the model from the mirror's /slow/ (1 MiB/s),
    before node-b's copy: the copy fails, names the node and path, leaves no file under its final name;
    the next run resumes the .part."""
    mirror_model(lab)
    for node in (HEAD, WORKER):
        lab.sh(node, 'rm -rf %s %s /srv/flt-disk/filler' % (MODEL_DIR, MODEL_MANIFEST), check=True)
    log = Path(args_tmp()) / ('%s.log' % row['id'])
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', PYTHONUNBUFFERED='1', ANSIBLE_COLLECTIONS_PATH=str(REPO / '.build' / 'collections'), **lab_env(lab))
    with open(str(log), 'w') as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', str(REPO / 'inventory' / 'demo'),
                                 str(REPO / 'playbooks' / 'model.yml'), '-e', json.dumps(model_vars(lab, slow=True))],
                                cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, env=env)
    wait_for(lambda: lab.sh(HEAD, 'test -e %s/blob.gguf.part' % MODEL_DIR)[0] == 0 or proc.poll() is not None, 600, step_s=0.5)
    # Leave node-b room for half the file.
    lab.sh(WORKER, 'mkdir -p %s && free=$(df -B1 --output=avail /srv/flt-disk | tail -n 1) && '
                   'fallocate -l $((free - %d)) /srv/flt-disk/filler' % (MODEL_DIR, (MODEL_MIB << 20) // 2), check=True)
    fault_at = time.time()
    rc = proc.wait()
    text = log.read_text()
    failures = [line for line in text.splitlines() if line.startswith('[ERROR]:')]
    message = ' '.join(failures)
    detected = time.time() - fault_at
    final = lab.sh(WORKER, 'test -e %s/blob.gguf' % MODEL_DIR)[0] == 0
    part = lab.sh(WORKER, 'stat -c %%s %s/blob.gguf.part 2>/dev/null' % MODEL_DIR)[1]
    lab.sh(WORKER, 'rm -f /srv/flt-disk/filler', check=True)
    row['deploy_1'], took_1 = deploy(lab, row['private'] / ('%s-1' % row['id']), 'playbooks/model.yml', model_vars(lab))
    resumed = list((row['private'] / ('%s-1' % row['id']) / 'artifacts').glob('*/stdout'))
    resumed_text = ' '.join(line.read_text() for line in resumed)
    row['deploy_2'], took_2 = deploy(lab, row['private'] / ('%s-2' % row['id']), 'playbooks/model.yml', model_vars(lab))
    row['deploy_1'] = 'model.yml: ' + row['deploy_1']
    right = model_sha(lab, WORKER) == model_sha(lab, HEAD) != ''
    row['lost'] = 'nothing' if right else 'node-b has no whole model after the next run'
    missing = fault_matrix.missing_from(message, [WORKER, MODEL_DIR])
    row['notes'] = ('model.yml rc %d; its error: "%s" (names node-b and %s: %s); file under its final name on node-b: %s; '
                    '.part left: %s bytes; the next run (filler removed): %s in %d s, resumed: %s, node-b\'s copy right: %s; '
                    'then %d s.' % (
                        rc, message[:400], MODEL_DIR, 'yes' if not missing else 'no, lacks %s' % ', '.join(missing),
                        'yes' if final else 'no', part or 'none', row['deploy_1'], took_1,
                        'yes' if 'resumed' in resumed_text else 'not said', 'yes' if right else 'no', took_2))
    return fault_at, detected


# --- the disk filled during the RPC cache fill, and on the head while the report is written -----

RPC_CACHE_DIR = '/srv/flt-disk/rpc-cache'  # on the lab's 192 MiB tmpfs; rpc-server writes into <it>/rpc
CACHE_NODE = OTHER  # in the lab only node-c's share holds a tensor above rpc-server's 10 MiB threshold
CHAT_GREEDY = ('curl -sf --max-time 60 -H "Content-Type: application/json" -d \'{"messages":[{"role":"user","content":'
               '"Say hello."}],"max_tokens":8,"temperature":0,"seed":1}\' http://127.0.0.1:8080/v1/chat/completions')


def start_playbook(lab, row, playbook, extravars=None):
    """ansible-playbook in the background, its output in .build/faults/tmp/<id>-<name>.log."""
    log = Path(args_tmp()) / ('%s-%s.log' % (row['id'], Path(playbook).stem))
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', PYTHONUNBUFFERED='1', ANSIBLE_COLLECTIONS_PATH=str(REPO / '.build' / 'collections'),
               **lab_env(lab))
    argv = [str(Path(sys.executable).parent / 'ansible-playbook'), '-i', str(REPO / 'inventory' / 'demo'), str(REPO / playbook)]
    if extravars:
        argv += ['-e', json.dumps(extravars)]
    with open(str(log), 'w') as out:
        proc = subprocess.Popen(argv, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, log


def failure_lines(text):
    """What a failed run said: its error lines, then the hosts it failed on ('fatal: [node-a]')."""
    errors = [line.strip() for line in text.splitlines() if line.startswith('[ERROR]:')]
    hosts = sorted(set(line.split('[', 1)[1].split(']', 1)[0] for line in text.splitlines() if line.startswith('fatal: [')))
    return errors + (['(failed on %s)' % ', '.join(hosts)] if hosts else [])


def fill(lab, node, leave_bytes):
    """Fill node's /srv/flt-disk (a tmpfs) to leave leave_bytes free."""
    lab.sh(node, 'free=$(df -B1 --output=avail /srv/flt-disk | tail -n 1) && fallocate -l $((free - %d)) /srv/flt-disk/filler'
           % leave_bytes, check=True)


def greedy_answer(lab):
    rc, out = lab.sh(HEAD, CHAT_GREEDY, timeout=90)
    try:
        return json.loads(out)['choices'][0]['message']['content'] if rc == 0 else 'no answer (rc %d)' % rc
    except (ValueError, KeyError, IndexError):
        return 'no answer'


def disk_full_rpc(lab, row):
    """node-c's RPC weight cache moved onto its tmpfs; deploy.yml (the servers restart with the new
    cache, the head loads the model again and node-c's server writes the tensor above 10 MiB into
    the cache); when the serve step begins, after the plan's space check passed, the disk is filled
    to leave half that tensor's room. What the run says, what the cache holds, what a head restart
    (which loads that tensor from the cache) serves, and what the next runs do."""
    cache_vars = {'llama_rpc_server_cache_dir': RPC_CACHE_DIR, 'llama_rpc_server_cache_min_free_gib': 0}
    files = '%s/rpc' % RPC_CACHE_DIR
    for node in (WORKER, OTHER):
        lab.sh(node, 'rm -rf %s /srv/flt-disk/filler' % RPC_CACHE_DIR, check=True)
    answer_before = greedy_answer(lab)
    tensor = int(lab.sh(CACHE_NODE, 'stat -c %s /var/cache/gpulab/rpc/rpc/* 2>/dev/null | sort -n | tail -n 1')[1] or 0)
    proc, log = start_playbook(lab, row, 'deploy.yml', cache_vars)
    wait_for(lambda: fault_matrix.task_started_after(log.read_text(), 'Show what was stopped, kept and freed')
             or proc.poll() is not None, 1200, step_s=0.5)
    if proc.poll() is not None:
        raise RuntimeError('deploy.yml ended (rc %s) before the serve step; see %s' % (proc.returncode, log))
    fill(lab, CACHE_NODE, max(tensor // 2, 1 << 20))
    fault_at = time.time()
    rc = proc.wait()
    took = time.time() - fault_at
    message = ' '.join(failure_lines(log.read_text()))
    listing = lab.sh(CACHE_NODE, 'ls -l %s 2>&1 | tail -n +2' % files)[1]
    sizes = [int(line.split()[4]) for line in listing.splitlines() if len(line.split()) > 4 and line.split()[4].isdigit()]
    journal = lab.sh(CACHE_NODE, 'journalctl -u %s --since "-10min" --no-pager -o cat | grep -iE "saved to|error|space" | tail -n 3'
                     % RPC_UNIT)[1]
    answer_after = greedy_answer(lab)
    # The operator frees the space; the next run with the same settings, then a head restart, which
    # sends node-c's tensor by its hash: rpc-server answers from the cache file.
    lab.sh(CACHE_NODE, 'rm -f /srv/flt-disk/filler', check=True)
    next_run, took_next = deploy(lab, row['private'] / ('%s-next' % row['id']), extravars=cache_vars)
    sizes_next = lab.sh(CACHE_NODE, 'stat -c %%s %s/* 2>/dev/null' % files)[1].split()
    lab.sh(HEAD, 'systemctl restart %s' % HEAD_UNIT)
    back = wait_serving(lab)
    answer_restart = greedy_answer(lab)
    # The way out: one deploy with llama_rpc_server_cache_verify, then the head loads again.
    verified, took_verified = deploy(lab, row['private'] / ('%s-verify' % row['id']),
                                     extravars=dict(cache_vars, llama_rpc_server_cache_verify=True))
    sizes_verified = lab.sh(CACHE_NODE, 'stat -c %%s %s/* 2>/dev/null' % files)[1].split()
    lab.sh(HEAD, 'systemctl restart %s' % HEAD_UNIT)
    back_verified = wait_serving(lab)
    sizes_reloaded = lab.sh(CACHE_NODE, 'stat -c %%s %s/* 2>/dev/null' % files)[1].split()
    answer_verified = greedy_answer(lab)
    row['deploy_1'], took_1 = deploy(lab, row['private'] / ('%s-1' % row['id']))
    row['deploy_2'], took_2 = deploy(lab, row['private'] / ('%s-2' % row['id']))
    row['deploy_1'] = 'deploy.yml (cache back at its default): ' + row['deploy_1']
    whole = bool(sizes) and all(size == tensor for size in sizes)
    row['lost'] = 'nothing' if whole or not sizes else 'a cache file under its final name is %s bytes, the tensor %d' % (
        ','.join(str(v) for v in sizes), tensor)
    row['notes'] = ('cache on node-c\'s tmpfs (%s), its tensor above 10 MiB %d bytes; filled to leave %d bytes when the serve step '
                    'began; deploy.yml rc %d after %d s, its error: "%s"; cache files then: %s; rpc-server\'s log: "%s"; '
                    'greedy answer before "%s", after "%s"; filler removed, deploy.yml with the same settings: %s in %d s, cache '
                    'file sizes %s; head restarted (loads node-c\'s tensor from the cache): serving %s, answer "%s"; deploy.yml '
                    '-e llama_rpc_server_cache_verify=true: %s in %d s, cache file sizes %s; head restarted: serving %s, cache '
                    'file sizes %s, answer "%s". deploy.yml took %d s, then %d s.' % (
                        files, tensor, max(tensor // 2, 1 << 20), rc, took, message[:300] or 'none', listing.replace('\n', '; ') or 'none',
                        journal.replace('\n', ' / ')[:300], answer_before, answer_after, next_run, took_next, ','.join(sizes_next) or 'none',
                        'again after %.0f s' % back if back is not None else 'not within the bound', answer_restart,
                        verified, took_verified, ','.join(sizes_verified) or 'none',
                        'again after %.0f s' % back_verified if back_verified is not None else 'not within the bound',
                        ','.join(sizes_reloaded) or 'none', answer_verified, took_1, took_2))
    return fault_at, (took if rc != 0 else None)


def disk_full_bench(point):
    """node-a's benchmark work directory and its record of the last benchmark on its tmpfs; playbooks/bench.yml
    (short profile); the disk filled when the benchmark began ('bench': its progress file) or when the
    report's task began ('report': then the head's record is written). A clear error naming the node
    and the path, no file under its final name half-written, the next run (filler removed) writes it."""
    def case(lab, row):
        work = '/srv/flt-disk/bench'
        bench_vars = {'bench_work_dir': work, 'bench_last_run_file': work + '/last-run.json', 'gpulab_bench_profile': 'short'}
        lab.sh(HEAD, 'rm -rf %s /srv/flt-disk/filler' % work, check=True)
        proc, log = start_playbook(lab, row, 'playbooks/bench.yml', bench_vars)
        if point == 'bench':
            def reached():
                return lab.sh(HEAD, 'test -s %s/benchmark.progress' % work)[0] == 0
        else:
            def reached():
                return fault_matrix.task_in_play(log.read_text(), 'Benchmark and report', 'Write the report')
        wait_for(lambda: reached() or proc.poll() is not None, 900, step_s=0.3)
        if proc.poll() is not None:
            raise RuntimeError('bench.yml ended (rc %s) before the fill; see %s' % (proc.returncode, log))
        fill(lab, HEAD, 0)
        fault_at = time.time()
        rc = proc.wait()
        took = time.time() - fault_at
        message = ' '.join(failure_lines(log.read_text()))
        listing = lab.sh(HEAD, 'ls -la %s | tail -n +4' % work)[1]
        record = lab.sh(HEAD, 'python3 -c "import json,sys; json.load(open(sys.argv[1])); print(\'whole JSON\')" %s/last-run.json 2>&1'
                        % work)[1].splitlines()
        lab.sh(HEAD, 'rm -f /srv/flt-disk/filler', check=True)
        row['deploy_1'], took_1 = deploy(lab, row['private'] / ('%s-1' % row['id']), 'playbooks/bench.yml', bench_vars)
        record_next = lab.sh(HEAD, 'python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\'report\'])" %s/last-run.json 2>&1'
                             % work)[1]
        row['deploy_1'] = 'bench.yml: ' + row['deploy_1']
        missing = fault_matrix.missing_from(message.split(' (failed on ', maxsplit=1)[0], [HEAD, work])
        row['lost'] = 'nothing'
        row['notes'] = ('filled when %s; bench.yml rc %d after %d s; its error: "%s" (names node-a and %s: %s); files left in %s: %s; '
                        'the record last-run.json: %s; filler removed, bench.yml %s in %d s, its record names the report %s.' % (
                            'the benchmark began (its progress file)' if point == 'bench' else 'the task "Write the report" began',
                            rc, took, message[:400], work, 'yes' if not missing else 'no, lacks %s' % ', '.join(missing), work,
                            listing.replace('\n', '; ') or 'none', (record[-1] if record else 'absent')[:120], row['deploy_1'],
                            took_1, record_next[:160]))
        return fault_at, (took if rc != 0 else None)
    return case


# --- the OOM killer's kill of the head -----------------------------------------------------------

def head_oom(lab, row):
    """The OOM killer's kill of llama-server, simulated: the lab's containers see cgroup v1 read-only
    (no unit memory limit can be set inside them), so SIGKILL of the process as the kernel sends it,
    and the kernel's record of it written to the node's journal (priority err, identifier kernel)."""
    pid = lab.sh(HEAD, 'pgrep -x llama-server')[1].split()[0]
    rss_kb = lab.sh(HEAD, 'ps -o rss= -p %s' % pid)[1].strip() or '0'
    fault_at = time.time()
    lab.sh(HEAD, 'kill -KILL %s; logger -p kern.err -t kernel "Out of memory: Killed process %s (llama-server) '
                 'total-vm:0kB, anon-rss:%skB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:0kB oom_score_adj:0 '
                 '(simulated by scripts/faults.py)"' % (pid, pid, rss_kb))
    detected = wait_for(lambda: lab.sh(HEAD, 'pgrep -x llama-server')[1] not in ('', pid) or lab.health() != '200', 60)
    record = lab.sh(HEAD, 'journalctl -t kernel --since "-2min" --no-pager -o cat | grep -m 1 "Out of memory"')[1]
    row['notes'] = ('simulated: SIGKILL of llama-server (pid %s, RSS %s kB) and the kernel\'s record in the journal '
                    '("%s"); a real OOM cannot be provoked in the lab: the containers see cgroup v1 read-only, so no '
                    'unit memory limit can be set inside them. Nothing in the collection reads the record: the head '
                    'heals as from any SIGKILL.' % (pid, rss_kb, record[:120]))
    return fault_at, detected


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
    'ctl-sigkill-drain': ('controller killed (SIGKILL) in the drain', 'controller', controller_kill('SIGKILL', 'drain')),
    'ctl-sigint-drain': ('controller interrupted (SIGINT) in the drain', 'controller', controller_kill('SIGINT', 'drain')),
    'ctl-sigkill-serve': ('controller killed (SIGKILL) in the serve step', 'controller', controller_kill('SIGKILL', 'serve')),
    'ctl-sigint-serve': ('controller interrupted (SIGINT) in the serve step', 'controller', controller_kill('SIGINT', 'serve')),
    # ctl-sigkill-<phase>, ctl-sigint-<phase>: the controller killed in each other play of deploy.yml
    **dict(('ctl-%s-%s' % (signame.lower(), phase), (
        'controller %s (%s) in %s' % ('killed' if signame == 'SIGKILL' else 'interrupted', signame, point[2]),
        'controller', controller_kill(signame, phase)))
        for phase, point in PLAY_KILL_POINTS.items() for signame in ('SIGKILL', 'SIGINT')),
    'model-corrupt': ('model file corrupted, size and mtime kept', WORKER, model_corrupt),
    'disk-full': ('disk filled during the model copy', WORKER, disk_full),
    'disk-full-rpc': ('disk filled during the RPC cache fill', CACHE_NODE, disk_full_rpc),
    'disk-full-bench': ('disk filled on the head during the benchmark', HEAD, disk_full_bench('bench')),
    'disk-full-report': ('disk filled on the head while the report is written', HEAD, disk_full_bench('report')),
    'head-oom': ('OOM killer kills the head (simulated: SIGKILL and its record)', HEAD, head_oom),
    'hang-300': ('RPC server hung (SIGSTOP) 300 s', WORKER, hang(300)),
    'cut-300': ('fabric cut head-worker (drop rules) 300 s', WORKER, fabric_cut(300)),
}
# Cases that run their own playbooks instead of the two deploy.yml runs after the fault.
OWN_RUNS = ('smi-', 'model-', 'disk-')


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
            row = figures(lab, row, fault_at, detected, not args.no_deploys and not case_id.startswith(OWN_RUNS), private)
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
