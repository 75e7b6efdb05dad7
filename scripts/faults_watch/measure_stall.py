"""On the worker: how long the guard's watch takes to find and restart a server that stops reading
(not stopped: the stall path, bound 30 s)."""
import json
import subprocess
import sys
import time

unit, state = sys.argv[1], sys.argv[2]


def main_pid():
    return subprocess.run(['systemctl', 'show', '-p', 'MainPID', '--value', unit], stdout=subprocess.PIPE,
                          universal_newlines=True, check=False).stdout.strip()


pid = main_pid()
t0 = time.time()
out = {}
while time.time() - t0 < 60:
    server = json.load(open(state))['servers'][0]
    if 'suspect_s' not in out and server['verdict'] == 'suspect':
        out['suspect_s'] = round(time.time() - t0, 1)
        out['why'] = server['why']
    if main_pid() not in ('0', '', pid):
        out['restarted_s'] = round(time.time() - t0, 1)
        break
    time.sleep(0.2)
print(json.dumps(out))
