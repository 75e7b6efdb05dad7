# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC guard: no ggml RPC server runs while its nftables table is gone.

`nft flush ruleset`, or `nft delete table inet gpulab_rpc`, by hand removes the rules without
systemd noticing: the firewall unit stays active and the servers keep listening, their ports open
to every host that reaches the fabric address (systemd's IPAddressDeny= is the only layer left,
and it is not enforced where cgroup BPF is not, as in containers). The guard is a root service
that reads the table a couple of times a second; when the table no longer drops the RPC ports
from other hosts it stops every running RPC server and records which; when the table is back it
starts the ones it stopped. Run with --check it is the servers' pre-start check (systemd
`ExecStartPre=+`): a server does not start while the table is missing.

The decisions (what the table must contain, which servers to stop or start) are pure functions
tested on their own; the role copies this file to the node, where a wrapper script runs it with
the node's Python (it imports nothing outside the standard library).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# seconds one nft, systemctl or supervisorctl call may take (the guard must not hang on one)
COMMAND_LIMIT_S = 10
DEFAULT_INTERVAL_S = 0.5
RUNNING_STATES = ('active', 'activating', 'reloading', 'RUNNING', 'STARTING', 'BACKOFF')


class GuardError(Exception):
    pass


def table_protects(nft_output, ports):
    """(True, '') when `nft list table` output is a table whose input-hook chain drops the given
    ports, else (False, why). Anything else (an empty table, a flushed chain, other ports) counts
    as missing: the guard fails closed."""
    if not nft_output.strip():
        return False, 'the table is not loaded'
    if not re.search(r'type filter hook input\b', nft_output):
        return False, 'the table has no input-hook chain'
    for line in nft_output.splitlines():
        match = re.search(r'tcp dport (\{ ([0-9, ]+) \}|([0-9]+))\s.*\bdrop\b', line)
        if match:
            listed = set(int(p) for p in re.findall(r'[0-9]+', match.group(1)))
            missing = sorted(set(ports) - listed)
            if missing:
                return False, 'the table does not drop port(s) %s' % ', '.join(str(p) for p in missing)
            return True, ''
    return False, 'the table has no rule that drops the RPC ports'


def running_units(states):
    """The units of states (unit -> the service manager's state word) that run or are starting."""
    return [unit for unit, state in states.items() if state in RUNNING_STATES]


def decide(protected, states, stopped):
    """What to do now: {'stop': [...], 'start': [...], 'stopped': [...]}.

    protected: whether the table protects the ports; states: unit -> state; stopped: the units
    this guard stopped earlier (and must start again). Without the table every running server
    stops; with it back, the ones the guard stopped start, and no other (a server an operator or
    gpu_drain stopped stays stopped).
    """
    if not protected:
        stop = running_units(states)
        return {'stop': stop, 'start': [], 'stopped': sorted(set(stopped) | set(stop))}
    start = [unit for unit in sorted(stopped) if unit in states and states[unit] not in RUNNING_STATES]
    return {'stop': [], 'start': start, 'stopped': []}


def parse_is_active(units, output):
    """`systemctl is-active u1 u2 ...` prints one state per unit, in order."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if len(lines) != len(units):
        raise GuardError('systemctl is-active answered %d line(s) for %d unit(s): %r' % (len(lines), len(units), output))
    return dict(zip(units, lines))


def parse_supervisor_status(programs, output):
    """`supervisorctl status p1 p2` prints `<name> <STATE> ...` per program."""
    states = dict((program, 'UNKNOWN') for program in programs)
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in states:
            states[fields[0]] = fields[1]
    return states


def check_message(why, firewall_unit):
    """What --check says when the table is missing (the server's start then fails with it)."""
    return ('%s: the RPC server does not start without its rules; load them with `systemctl reload %s` '
            '(or `nft -f` its rules file)' % (why, firewall_unit))


def nft_command(family, table):
    return ['nft', 'list', 'table', family, table]


def _supervisorctl(config):
    return ['supervisorctl'] + (['-c', config] if config else [])


def status_command(manager, units, supervisor_config=None):
    if manager == 'systemd':
        return ['systemctl', 'is-active', '--'] + list(units)
    return _supervisorctl(supervisor_config) + ['status'] + list(units)


def change_command(manager, verb, units, supervisor_config=None):
    if manager == 'systemd':
        # --no-block: a server that takes long to stop must not delay the guard's next look
        return ['systemctl', verb, '--no-block', '--'] + list(units)
    return _supervisorctl(supervisor_config) + [verb] + list(units)


def parse_ports(text):
    ports = []
    for item in text.split(','):
        if not re.match(r'\A[0-9]{1,5}\Z', item.strip()) or not 0 < int(item) < 65536:
            raise GuardError('--ports %r: give TCP ports 1-65535 separated by commas' % text)
        ports.append(int(item))
    return ports


def load_stopped(path):
    """The units the guard stopped, from its state file ([] when there is none)."""
    try:
        with open(path) as handle:
            value = json.load(handle)
    except (IOError, OSError):
        return []
    except ValueError:
        return []  # a torn file: start nothing rather than something unknown
    return [unit for unit in value if isinstance(unit, str)] if isinstance(value, list) else []


def save_stopped(path, units):
    """Write the state file atomically (a temporary file beside it, then a rename)."""
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    handle, temporary = tempfile.mkstemp(prefix='.rpc-guard-', dir=directory)
    try:
        with os.fdopen(handle, 'w') as out:
            json.dump(sorted(units), out)
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def run(argv):
    """(rc, stdout, stderr); a command that does not finish in COMMAND_LIMIT_S is rc 124."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=COMMAND_LIMIT_S, check=False)
    except subprocess.TimeoutExpired:
        return 124, '', '%s did not finish within %d s' % (' '.join(argv), COMMAND_LIMIT_S)
    except OSError as exc:
        return 127, '', '%s: %s' % (argv[0], exc)
    return done.returncode, done.stdout, done.stderr


def look(args):
    """(protected, why) for the table now."""
    rc, out, err = run(nft_command(args.family, args.table))
    if rc != 0:
        return False, 'table %s %s is not loaded (%s)' % (args.family, args.table, err.strip() or 'nft rc %d' % rc)
    protected, why = table_protects(out, args.ports)
    return protected, '' if protected else 'table %s %s: %s' % (args.family, args.table, why)


def step(args, log):
    """One look and what follows from it."""
    protected, why = look(args)
    rc, out, err = run(status_command(args.manager, args.units, args.supervisor_config))
    if rc == 124:
        log('%s; the servers are not touched this time' % err)
        return
    states = (parse_is_active(args.units, out) if args.manager == 'systemd'
              else parse_supervisor_status(args.units, out))
    stopped = load_stopped(args.state_file)
    action = decide(protected, states, stopped)
    if action['stop']:
        log('%s: stopping %s until it is loaded again' % (why, ', '.join(action['stop'])))
        save_stopped(args.state_file, action['stopped'])
        run(change_command(args.manager, 'stop', action['stop'], args.supervisor_config))
    elif action['start']:
        log('table %s %s is back: starting %s' % (args.family, args.table, ', '.join(action['start'])))
        rc, out, err = run(change_command(args.manager, 'start', action['start'], args.supervisor_config))
        if rc == 0:
            save_stopped(args.state_file, [])
        else:
            log('start failed (rc %d): %s; trying again' % (rc, (err or out).strip()))
    elif protected and stopped:
        save_stopped(args.state_file, [])


def parse_args(argv):
    parser = argparse.ArgumentParser(description='Stop the ggml RPC servers while their nftables table is gone.')
    parser.add_argument('--family', default='inet')
    parser.add_argument('--table', required=True)
    parser.add_argument('--ports', required=True, type=parse_ports, help='comma-separated RPC ports')
    parser.add_argument('--manager', choices=('systemd', 'supervisor'), default='systemd')
    parser.add_argument('--units', nargs='+', required=True, help='the RPC units (or supervisord programs)')
    parser.add_argument('--supervisor-config', help="supervisord's configuration, for supervisorctl -c")
    parser.add_argument('--firewall-unit', default='gpulab-rpc-server-firewall.service',
                        help='the unit that loads the table, named in the --check message')
    parser.add_argument('--state-file', default='/run/gpulab/rpc-guard-stopped.json')
    parser.add_argument('--interval-s', type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument('--check', action='store_true', help='exit 0 when the table protects the ports, else 1')
    parser.add_argument('--once', action='store_true', help='look once and act, then exit')
    # The hung-server watch (module_utils/rpc_watch.py, copied beside this file), in a thread of its
    # own so that its probes never delay a look at the table.
    parser.add_argument('--watch-code', help="the watch's code; given, the guard also kills and restarts hung servers")
    parser.add_argument('--watch-endpoints', help='address:port of each of --units, in order')
    parser.add_argument('--watch-state-file', default='/run/gpulab/rpc-watch.json')
    parser.add_argument('--watch-hang-after-s', type=float, default=5.0)
    parser.add_argument('--watch-probe-timeout-s', type=float, default=2.0)
    parser.add_argument('--watch-interval-s', type=float, default=1.0)
    return parser.parse_args(argv)


def start_watch(args, log):
    """Load the watch's code from --watch-code and run its looks in a daemon thread."""
    import importlib.util
    import threading
    spec = importlib.util.spec_from_file_location('gpulab_rpc_watch', args.watch_code)
    watch_code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watch_code)
    watch = watch_code.Watch(args.units, watch_code.parse_endpoints(args.watch_endpoints or ''), args.manager,
                             args.supervisor_config, args.watch_state_file, args.watch_probe_timeout_s,
                             args.watch_hang_after_s)

    def loop():
        while True:
            try:
                watch.step(log, run)
            except Exception as exc:  # pylint: disable=broad-except  # the guard's thread must go on
                log('watch: %s' % exc)
            time.sleep(args.watch_interval_s)

    thread = threading.Thread(target=loop, name='rpc-watch')
    thread.daemon = True
    thread.start()
    return thread


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except GuardError as exc:
        sys.stderr.write('%s\n' % exc)
        return 2

    def log(message):
        sys.stderr.write('gpulab-rpc-guard: %s\n' % message)
        sys.stderr.flush()

    if args.check:
        protected, why = look(args)
        if not protected:
            log(check_message(why, args.firewall_unit))
        return 0 if protected else 1
    if args.watch_code and not args.once:
        try:
            start_watch(args, log)
        except Exception as exc:  # pylint: disable=broad-except  # the firewall's guard runs without its watch
            log('the hung-server watch did not start (%s: %s); guarding the table only' % (type(exc).__name__, exc))
    while True:
        try:
            step(args, log)
        except GuardError as exc:
            log(str(exc))
        if args.once:
            return 0
        time.sleep(args.interval_s)


if __name__ == '__main__':
    # run on the node as a program (its wrapper script), not as part of a module
    raise SystemExit(main())
