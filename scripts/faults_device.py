#!/usr/bin/env python3
"""The hung-worker cases against real llama.cpp processes on one host (a GPU host without systemd,
or any Linux box): an rpc-server and a llama-server --rpc over loopback, each kept running by a
restart loop standing in for supervisord (autorestart, 1 s), the head restarted when its RPC
connection is lost (as the head's wrapper does), the collection's watch (module_utils/rpc_watch.py)
looking once a second, and scripts/faults_load.py sending one chat completion a second. Faults:
SIGKILL of the RPC server, SIGSTOP of it for 10 s and 60 s, SIGKILL of the head. Prints one JSON
line per case with the fault_matrix figures.

  python3 scripts/faults_device.py --bin-dir build/bin --model model.gguf --out results.json
"""

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rpc_watch = load('rpc_watch', os.path.join(REPO, 'plugins', 'module_utils', 'rpc_watch.py'))
fault_matrix = load('fault_matrix', os.path.join(REPO, 'plugins', 'module_utils', 'fault_matrix.py'))

RPC_PORT = 50152
HEAD_PORT = 8180


class Kept:
    """A program kept running: restarted 1 s after it exits (supervisord's autorestart)."""

    def __init__(self, name, argv, log, before=None):
        self.name, self.argv, self.log, self.before = name, argv, log, before
        self.process = None
        self.starts = 0
        self.stopping = False
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while not self.stopping:
            if self.before:
                self.before()
            with open(self.log, 'a') as log:
                self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
                self.starts += 1
                self.process.wait()
            time.sleep(1)

    def pid(self):
        return self.process.pid if self.process and self.process.poll() is None else None


def rpc_accepts():
    import socket
    try:
        socket.create_connection(('127.0.0.1', RPC_PORT), timeout=2).close()
        return True
    except OSError:
        return False


def head_connected():
    with open('/proc/net/tcp') as handle:
        rows = rpc_watch.parse_proc_net_tcp(handle.read())
    return any(r['remote'][1] == RPC_PORT and r['state'] == rpc_watch.TCP_ESTABLISHED for r in rows)


def chat_ok():
    body = json.dumps({'messages': [{'role': 'user', 'content': 'Say hello.'}], 'max_tokens': 2}).encode()
    try:
        request = urllib.request.Request('http://127.0.0.1:%d/v1/chat/completions' % HEAD_PORT, data=body,
                                         headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status == 200
    except Exception:  # pylint: disable=broad-except
        return False


def health():
    try:
        with urllib.request.urlopen('http://127.0.0.1:%d/health' % HEAD_PORT, timeout=3) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except Exception:  # pylint: disable=broad-except
        return -1


def wait_for(predicate, bound_s, step_s=0.25):
    began = time.time()
    while time.time() - began < bound_s:
        if predicate():
            return round(time.time() - began, 2)
        time.sleep(step_s)
    return None


def rss_mib(pid):
    try:
        with open('/proc/%d/status' % pid) as handle:
            for line in handle:
                if line.startswith('VmRSS:'):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except (IOError, OSError, TypeError):
        return None
    return None


def soak(args, rpc, head, state_file, up):
    """4 streams in a closed loop; at 20 s into each minute one fault: SIGKILL of the RPC server, its
    SIGSTOP (held 10 s), SIGKILL of the head, in turn. Requests, failures (inside and outside the
    fault windows), TTFT p50/p99 with and without faults, and each service's RSS at start and end."""
    load_log = os.path.join(args.work, 'soak.jsonl')
    loader = subprocess.Popen([sys.executable, os.path.join(HERE, 'faults_load.py'), '--url', 'http://127.0.0.1:%d' % HEAD_PORT,
                               '--workers', '4', '--duration-s', str(args.soak_minutes * 60), '--out', load_log])
    memory_start = {'rpc': rss_mib(rpc.pid()), 'head': rss_mib(head.pid())}
    began = time.time()
    windows, faults = [], []
    cycle = ('rpc-sigkill', 'hang-10', 'head-sigkill')
    for minute in range(args.soak_minutes):
        time.sleep(max(0.0, began + minute * 60 + 20 - time.time()))
        case = cycle[minute % len(cycle)]
        fault_at = time.time()
        if case == 'rpc-sigkill':
            os.kill(rpc.pid(), signal.SIGKILL)
        elif case == 'hang-10':
            pid = rpc.pid()
            os.kill(pid, signal.SIGSTOP)
            time.sleep(10)
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        else:
            os.kill(head.pid(), signal.SIGKILL)
        back = wait_for(chat_ok, 60, 0.5)
        windows.append((fault_at, time.time() + 2))
        faults.append({'case': case, 'at_s': round(fault_at - began, 1),
                       'serving_again_s': None if back is None else round(time.time() - fault_at, 1)})
        print(json.dumps(faults[-1]), flush=True)
    loader.wait()
    memory_end = {'rpc': rss_mib(rpc.pid()), 'head': rss_mib(head.pid())}
    with open(load_log) as handle:
        requests = [json.loads(line) for line in handle if line.strip()]
    inside = [r for r in requests if any(a <= r['start'] <= b for a, b in windows)]
    outside = [r for r in requests if not any(a <= r['start'] <= b for a, b in windows)]

    def ttft(rows, fraction):
        return fault_matrix.percentile([r['ttft_s'] for r in rows if r['ok'] and r.get('ttft_s') is not None], fraction)
    result = {'first_serving_s': up, 'minutes': args.soak_minutes, 'streams': 4, 'sent': len(requests),
              'failed': sum(1 for r in requests if not r['ok']),
              'failed_outside_faults': fault_matrix.failed_outside(requests, windows),
              'ttft_p50_s_without_faults': ttft(outside, 0.5), 'ttft_p99_s_without_faults': ttft(outside, 0.99),
              'ttft_p50_s_during_faults': ttft(inside, 0.5), 'ttft_p99_s_during_faults': ttft(inside, 0.99),
              'faults': faults, 'rss_mib_start': memory_start, 'rss_mib_end': memory_end,
              'errors': sorted(set(r['error'][:80] for r in requests if not r['ok']))[:8]}
    print(json.dumps(result, indent=1), flush=True)
    with open(args.out, 'w') as handle:
        json.dump(result, handle, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--bin-dir', required=True)
    parser.add_argument('--model', required=True)
    parser.add_argument('--out', required=True)
    parser.add_argument('--work', default='/tmp/faults-device')
    parser.add_argument('--cases', default='rpc-sigkill,hang-10,hang-60,head-sigkill')
    parser.add_argument('--soak-minutes', type=int, default=0,
                        help='instead of the cases: 4 streams for this many minutes, a fault at 20 s into each minute')
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    # ggml-rpc-server in current llama.cpp (tools/rpc/CMakeLists.txt), rpc-server in older ones
    binary = next(os.path.join(args.bin_dir, name) for name in ('ggml-rpc-server', 'rpc-server')
                  if os.path.exists(os.path.join(args.bin_dir, name)))
    rpc = Kept('rpc', [binary, '-H', '127.0.0.1', '-p', str(RPC_PORT)],
               os.path.join(args.work, 'rpc.log'))
    head_cmd = [os.path.join(args.bin_dir, 'llama-server'), '-m', args.model, '--rpc', '127.0.0.1:%d' % RPC_PORT,
                '-ngl', '99', '--host', '127.0.0.1', '--port', str(HEAD_PORT), '-c', '2048', '-np', '2']
    head = Kept('head', head_cmd, os.path.join(args.work, 'head.log'), before=lambda: wait_for(rpc_accepts, 120))

    # the head's wrapper: once every connection was seen, a lost one restarts llama-server
    def head_watch():
        armed = False
        while True:
            time.sleep(5)
            if head.pid() is None:
                armed = False
                continue
            if head_connected():
                armed = True
            elif armed:
                os.kill(head.pid(), signal.SIGTERM)
                armed = False
    threading.Thread(target=head_watch, daemon=True).start()

    state_file = os.path.join(args.work, 'rpc-watch.json')
    watch = rpc_watch.Watch(['rpc'], [('127.0.0.1', RPC_PORT)], 'supervisor', state_file=state_file, hang_after_s=5.0)
    logs = []

    def watch_loop():
        while True:
            try:
                watch.step(lambda m: logs.append('%.1f %s' % (time.time(), m)), lambda argv: (0, '', ''))
            except Exception as exc:  # pylint: disable=broad-except
                logs.append('watch: %s' % exc)
            time.sleep(1)
    threading.Thread(target=watch_loop, daemon=True).start()

    up = wait_for(chat_ok, 300, 1)
    if args.soak_minutes:
        soak(args, rpc, head, state_file, up)
        return
    results = {'first_serving_s': up, 'cases': []}
    load_log = os.path.join(args.work, 'load.jsonl')
    loader = subprocess.Popen([sys.executable, os.path.join(HERE, 'faults_load.py'), '--url', 'http://127.0.0.1:%d' % HEAD_PORT,
                               '--out', load_log])
    for case in args.cases.split(','):
        wait_for(chat_ok, 180, 1)
        time.sleep(5)
        row = {'id': case}
        pid = rpc.pid()
        fault_at = time.time()
        if case == 'rpc-sigkill':
            os.kill(pid, signal.SIGKILL)
            row['detected_s'] = wait_for(lambda: rpc.pid() not in (None, pid), 30)
        elif case.startswith('hang-'):
            seconds = int(case.split('-')[1])
            os.kill(pid, signal.SIGSTOP)
            row['detected_s'] = wait_for(lambda: json.load(open(state_file)).get('can_serve') is False, 30)
            row['killed_after_s'] = wait_for(lambda: rpc.pid() not in (None, pid), 30)
            if row['killed_after_s'] is not None:
                row['killed_after_s'] = round(row['killed_after_s'] + row['detected_s'], 2)
            row['health_not_ok_after_s'] = wait_for(lambda: health() != 200, 30)
            time.sleep(max(0, seconds - (time.time() - fault_at)))
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        elif case == 'head-sigkill':
            hp = head.pid()
            os.kill(hp, signal.SIGKILL)
            row['detected_s'] = wait_for(lambda: health() != 200, 30)
        back = wait_for(chat_ok, 240, 1)
        time.sleep(10)
        with open(load_log) as handle:
            requests = [json.loads(line) for line in handle if line.strip()]
        until = time.time()
        row['serving_again_s'] = fault_matrix.serving_again_after(requests, fault_at, until) if back is not None else None
        row['sent'], row['failed'] = fault_matrix.failed_during(requests, fault_at, until)
        row['rpc_starts'], row['head_starts'] = rpc.starts, head.starts
        print(json.dumps(row), flush=True)
        results['cases'].append(row)
    loader.terminate()
    results['watch_log'] = logs[-20:]
    results['watch_state'] = json.load(open(state_file))
    with open(args.out, 'w') as handle:
        json.dump(results, handle, indent=1)
    rpc.stopping = head.stopping = True
    for kept in (head, rpc):
        if kept.pid():
            os.kill(kept.pid(), signal.SIGKILL)


if __name__ == '__main__':
    main()
