"""A stand-in supervisorctl for playbook tests on local hosts: it keeps its programs' states in
states.json beside itself, logs each call to calls.log, and answers status, start, stop, restart, reread,
update, add and remove as supervisor 4.3.0's supervisorctl does (tests/unit/fixtures/supervisorctl)."""

import json
import stat
import sys

from playbook_runner import local_host

FAKE_SUPERVISORCTL = r'''#!%s
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
if args[:1] == ["-c"]:
    args = args[2:]
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(" ".join(args) + "\n")
with open(os.path.join(here, "states.json")) as stream:
    states = json.load(stream)
command, names = args[0], args[1:]
rc = 0
if command == "status":
    for name in sorted(states):
        running = states[name] == "RUNNING"
        print("%%-32s %%-9s %%s" %% (name, states[name], "pid %%d, uptime 0:01:00" %% (1000 + sorted(states).index(name))
                                                       if running else "Dec 02 04:24 AM"))
    rc = 0 if all(state == "RUNNING" for state in states.values()) else 3
elif command in ("stop", "start"):
    done, now = ("stopped", "STOPPED") if command == "stop" else ("started", "RUNNING")
    for name in names:
        if name not in states:
            print("%%s: ERROR (no such process)" %% name)
            rc = 1
        elif states[name] == now:
            print("%%s: ERROR (%%s)" %% (name, "not running" if command == "stop" else "already started"))
        else:
            states[name] = now
            print("%%s: %%s" %% (name, done))
elif command == "reread":
    print("No config updates to processes")
elif command == "add":
    for name in names:
        states[name] = "RUNNING"
        print("%%s: added process group" %% name)
elif command == "update":
    pass
elif command == "restart":
    for name in names:
        states[name] = "RUNNING"
        print("%%s: stopped\n%%s: started" %% (name, name))
elif command == "remove":
    for name in names:
        states.pop(name)
        print("%%s: removed process group" %% name)
else:
    print("unexpected command %%s" %% command)
    rc = 2
with open(os.path.join(here, "states.json"), "w") as stream:
    json.dump(states, stream)
sys.exit(rc)
''' % sys.executable


def supervisord_node(root, states, **hostvars):
    """Host variables of a local node whose supervisord (the stand-in) runs `states` ({program:
    RUNNING or STOPPED}), each with a program file under root/etc/supervisor.d."""
    programs_dir = root / "etc" / "supervisor.d"
    programs_dir.mkdir(parents=True)
    (root / "etc" / "supervisord.conf").write_text("[supervisord]\n")
    for program in states:
        (programs_dir / (program + ".conf")).write_text(
            "; managed by gpulab.inference\n[program:%s]\ncommand=/bin/true\nautostart=true\n" % program)
    (root / "states.json").write_text(json.dumps(states))
    ctl = root / "supervisorctl"
    ctl.write_text(FAKE_SUPERVISORCTL)
    ctl.chmod(ctl.stat().st_mode | stat.S_IEXEC)
    return local_host(gpulab_service_manager="supervisor", gpulab_config_dir=str(root / "etc"),
                      gpulab_supervisor_config=str(root / "etc" / "supervisord.conf"), gpulab_supervisorctl=str(ctl),
                      **hostvars)


def programs(root):
    return json.loads((root / "states.json").read_text())


def calls(root, command):
    """The stand-in's calls of one command, as argument lists."""
    log = root / "calls.log"
    return [line.split() for line in (log.read_text() if log.exists() else "").splitlines() if line.split()[0] == command]
