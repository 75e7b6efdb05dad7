"""On the worker: SIGSTOP the server and time the watch: seen, restarted, serving (HELLO) again."""
import json
import os
import signal
import subprocess
import sys
import time

unit, state = sys.argv[1], sys.argv[2]


def main_pid():
    return subprocess.run(['systemctl', 'show', '-p', 'MainPID', '--value', unit], stdout=subprocess.PIPE,
                          universal_newlines=True, check=False).stdout.strip()


def watch():
    try:
        with open(state) as handle:
            seen = json.load(handle)
        return seen['can_serve'], seen['servers'][0]['verdict'], seen['looked_at']
    except (IOError, OSError, ValueError, KeyError):
        return None, None, 0


pid = main_pid()
t0 = time.time()
os.kill(int(pid), signal.SIGSTOP)
out = {'pid': pid}
while time.time() - t0 < 60:
    can, verdict, looked = watch()
    now = time.time() - t0
    if 'detected_s' not in out and can is False and looked > t0:
        out['detected_s'] = round(now, 2)
        out['verdict'] = verdict
    new = main_pid()
    if 'restarted_s' not in out and new not in ('0', '', pid):
        out['restarted_s'] = round(now, 2)
    if 'restarted_s' in out and can is True and looked > t0 + out['restarted_s']:
        out['can_serve_again_s'] = round(now, 2)
        out['verdict_after'] = verdict
        break
    time.sleep(0.1)
print(json.dumps(out))
