# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC watch: a ggml RPC server that hangs (alive, not answering) is killed and started again.

A stopped process (SIGSTOP, a debugger), a GPU that no longer returns or a stuck driver call keeps
the server's process alive and its port open: the service manager sees a running service, the
head's /health answers ok, and every request times out. The watch runs beside the RPC guard on
each worker (the guard's program loads this file with --watch-code) and looks at each server once
a second:

- the ggml RPC HELLO handshake, with a bounded timeout: the command byte 14 (RPC_CMD_HELLO), its
  size (8 bytes, little-endian) and 24 zero bytes of connection capabilities (TCP, no RDMA); the
  server answers the size 28 and its protocol version major.minor.patch, a padding byte and its own
  24 bytes of capabilities (llama.cpp ggml/src/ggml-rpc/ggml-rpc.cpp: rpc_cmd, rpc_msg_hello_req,
  rpc_msg_hello_rsp, send_rpc_cmd, rpc_serve_client; transport.h RPC_CONN_CAPS_SIZE = 24);
- the server serves one client at a time (ggml_backend_rpc_start_server: accept, then
  rpc_serve_client until that client leaves), so while the head is connected the kernel accepts
  the probe and nobody answers it. An unanswered probe alone therefore says "busy" when a client
  is connected; the watch then reads the kernel's view instead: the process state
  (/proc/<pid>/stat: T is stopped), and the client's socket (/proc/net/tcp): bytes the head sent
  that the server does not read (the same receive queue, above 0, look after look), or a connection
  the head closed that the server never noticed (CLOSE_WAIT).

A stopped process for hang_after_s on end, or one of the other signs for stall_after_s on end
(a graph computation may keep a request unread for seconds) is a hung server: the watch sends
it SIGKILL and starts it again through the service manager; the head's wrapper then sees its
connection lost and restarts llama-server, which connects again. The watch writes what it saw to a
state file (status.yml reads it): a worker that hangs says so there at once, before it is killed.
It never starts a server that is not running (the guard's and the operator's stops stand).

Standard library only: the file runs on the node with the node's Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import socket
import struct
import tempfile
import time

RPC_CMD_HELLO = 14
RPC_CONN_CAPS_SIZE = 24
# rpc_msg_hello_rsp: major, minor, patch, padding, conn_caps
HELLO_REPLY_SIZE = 4 + RPC_CONN_CAPS_SIZE
RPC_PROTO_MAJOR_VERSION = 7

DEFAULT_PROBE_TIMEOUT_S = 2.0
DEFAULT_HANG_AFTER_S = 5.0
# Unread bytes, an unnoticed close or an unanswered HELLO may also be a long graph computation: the
# head sends RPC_CMD_GRAPH_COMPUTE, which has no reply, and its next command waits unread until the
# graph is done. Those signs must last this long; a stopped process needs only DEFAULT_HANG_AFTER_S.
DEFAULT_STALL_AFTER_S = 30.0

# /proc/net/tcp's st column (include/net/tcp_states.h)
TCP_ESTABLISHED = '01'
TCP_CLOSE_WAIT = '08'
TCP_LISTEN = '0A'


class WatchError(Exception):
    pass


# --- The HELLO handshake ----------------------------------------------------------------------

def hello_request():
    """RPC request: | rpc_cmd (1 byte) | request_size (8 bytes) | request_data | with zero capabilities."""
    return struct.pack('<BQ', RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + b'\0' * RPC_CONN_CAPS_SIZE


def parse_hello_reply(data):
    """(major, minor, patch) from | response_size (8 bytes) | rpc_msg_hello_rsp |; WatchError otherwise."""
    if len(data) < 8:
        raise WatchError('a reply of %d byte(s), shorter than its size field' % len(data))
    size = struct.unpack('<Q', data[:8])[0]
    if size != HELLO_REPLY_SIZE:
        raise WatchError('a HELLO reply of %d bytes; the protocol sends %d' % (size, HELLO_REPLY_SIZE))
    if len(data) < 8 + HELLO_REPLY_SIZE:
        raise WatchError('a HELLO reply cut short at %d of %d bytes' % (len(data) - 8, HELLO_REPLY_SIZE))
    major, minor, patch = struct.unpack('<BBB', data[8:11])
    return major, minor, patch


def probe_hello(address, port, timeout_s=DEFAULT_PROBE_TIMEOUT_S):
    """One HELLO, the whole exchange within timeout_s. Returns a dict: result (ok, refused, unreachable:
    no connection within the time, unanswered: connected and no full reply, closed: the server closed
    the connection, bad_reply), version ('7.0.0' when ok), detail, elapsed_s."""
    started = time.monotonic()
    deadline = started + timeout_s

    def done(result, detail='', version=None):
        return {'result': result, 'detail': detail, 'version': version,
                'elapsed_s': round(time.monotonic() - started, 3)}

    try:
        sock = socket.create_connection((address, port), timeout=timeout_s)
    except socket.timeout:
        return done('unreachable', 'no connection within %.1f s' % timeout_s)
    except ConnectionRefusedError:
        return done('refused', 'connection refused')
    except OSError as exc:
        return done('unreachable', str(exc))
    try:
        sock.sendall(hello_request())
        data = b''
        while len(data) < 8 + HELLO_REPLY_SIZE:
            left = deadline - time.monotonic()
            if left <= 0:
                return done('unanswered', '%d of %d reply bytes within %.1f s' % (len(data), 8 + HELLO_REPLY_SIZE, timeout_s))
            sock.settimeout(left)
            try:
                chunk = sock.recv(8 + HELLO_REPLY_SIZE - len(data))
            except socket.timeout:
                continue
            if not chunk:
                return done('closed', 'the server closed the connection after %d reply bytes' % len(data))
            data += chunk
        try:
            version = parse_hello_reply(data)
        except WatchError as exc:
            return done('bad_reply', str(exc))
        if version[0] != RPC_PROTO_MAJOR_VERSION:
            return done('bad_reply', 'protocol %d.%d.%d; this watch speaks %d.x' % (version + (RPC_PROTO_MAJOR_VERSION,)))
        return done('ok', version='%d.%d.%d' % version)
    except (ConnectionResetError, BrokenPipeError) as exc:
        return done('closed', str(exc))
    except OSError as exc:
        return done('unreachable', str(exc))
    finally:
        sock.close()


# --- The kernel's view ------------------------------------------------------------------------

def _hex_address(text):
    """'0100007F:1F90' -> ('127.0.0.1', 8080); IPv6 as the kernel's 32 hex digits, 4-byte words in host order."""
    address, port = text.split(':')
    raw = bytes.fromhex(address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    words = b''.join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words), int(port, 16)


def parse_proc_net_tcp(text):
    """Rows of /proc/net/tcp or tcp6: local, remote ((address, port)), state (hex), tx_queue, rx_queue, inode."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        tx_queue, rx_queue = fields[4].split(':')
        rows.append({'local': _hex_address(fields[1]), 'remote': _hex_address(fields[2]), 'state': fields[3].upper(),
                     'tx_queue': int(tx_queue, 16), 'rx_queue': int(rx_queue, 16), 'inode': int(fields[9])})
    return rows


def server_sockets(rows, port):
    """(listener inode or None, the clients' connections) of the server listening on port."""
    listener = None
    clients = []
    for row in rows:
        if row['local'][1] != port:
            continue
        if row['state'] == TCP_LISTEN:
            listener = row['inode']
        elif row['state'] in (TCP_ESTABLISHED, TCP_CLOSE_WAIT) and row['inode']:
            # inode 0: a connection no process has accepted yet (the backlog, our own probe among them)
            clients.append(row)
    return listener, clients


def waiting_connections(rows, port):
    """Connections to port that no process has accepted yet (inode 0: the listen backlog)."""
    return [row for row in rows if row['local'][1] == port and row['state'] in (TCP_ESTABLISHED, TCP_CLOSE_WAIT)
            and not row['inode']]


def parse_proc_stat_state(text):
    """The state letter of /proc/<pid>/stat (after the command name, which may hold spaces and parentheses)."""
    rest = text[text.rindex(')') + 1:].split()
    if not rest:
        raise WatchError('no state in %r' % text)
    return rest[0]


# --- The decision -----------------------------------------------------------------------------

def classify(probe, proc_state, clients, previous_clients=None, waiting=None):
    """(verdict, why) for one look at one server.

    probe: probe_hello's result; proc_state: the process's state letter (None: no process found);
    clients: server_sockets' clients now, previous_clients: at the last look.
    verdict: serving (answered HELLO), busy (serves a client; no sign of a stall), stopped (the
    process is stopped: a hang for sure), suspect (a sign of a hang that a long computation may
    give too), down (not running: the service manager's and the guard's business, not the watch's),
    stale (the client is gone: it connects again, waiting in the backlog, while its old connection
    stays idle; a fabric cut swallowed its close, and the server would wait on it forever).
    waiting: waiting_connections' rows.
    """
    previous = dict((c['remote'], c['rx_queue']) for c in previous_clients or [])
    if proc_state in ('T', 't'):
        return 'stopped', 'the process is stopped (state %s: SIGSTOP or a debugger)' % proc_state
    if probe['result'] == 'ok':
        return 'serving', 'answered HELLO (protocol %s) in %.3f s' % (probe['version'], probe['elapsed_s'])
    if proc_state is None or proc_state in ('Z', 'X'):
        return 'down', 'no running process listens (%s)' % (probe['detail'] or probe['result'])
    for client in clients:
        peer = '%s:%d' % client['remote']
        if client['state'] == TCP_CLOSE_WAIT:
            return 'suspect', 'client %s closed its connection and the server has not noticed' % peer
        if client['rx_queue'] > 0 and previous.get(client['remote']) == client['rx_queue']:
            return 'suspect', '%d byte(s) from %s unread since the last look' % (client['rx_queue'], peer)
    # The head holds one connection per server and opens another only when it has none (its wrapper's
    # probe, llama-server's start): an idle client from the same address is a connection the head no
    # longer has. Its close or reset was lost in a fabric cut; TCP without keepalive never tells.
    again = set(row['remote'][0] for row in waiting or [])
    for client in clients:
        if client['state'] == TCP_ESTABLISHED and client['rx_queue'] == 0 and client['remote'][0] in again:
            return 'stale', ('client %s is gone: %s connects again (a connection waits to be accepted) while this one '
                             'stays idle' % ('%s:%d' % client['remote'], client['remote'][0]))
    if probe['result'] in ('unanswered', 'closed', 'bad_reply') and not clients:
        return 'suspect', 'no client to serve, and HELLO %s (%s)' % (probe['result'], probe['detail'])
    if clients:
        return 'busy', 'serving %s' % ', '.join('%s:%d' % c['remote'] for c in clients)
    # refused or unreachable (the firewall drops the probe) with a live process and nobody served
    return 'busy', 'HELLO %s (%s); the process runs and no client is connected' % (probe['result'], probe['detail'])


def hang_decision(verdict, suspect_since, now, hang_after_s=DEFAULT_HANG_AFTER_S, stall_after_s=DEFAULT_STALL_AFTER_S):
    """(kill, suspect_since): a server stopped or serving a stale client for hang_after_s, or
    suspect for stall_after_s, on end is killed; any other verdict clears the count (a server that
    answers again was only slow)."""
    if verdict not in ('stopped', 'suspect', 'stale'):
        return False, None
    since = now if suspect_since is None else suspect_since
    bound = hang_after_s if verdict in ('stopped', 'stale') else max(hang_after_s, stall_after_s)
    return now - since >= bound, since


def restart_commands(manager, unit, supervisor_config=None):
    """After the SIGKILL: start it again through the service manager (a restart under systemd, which
    also clears a pending auto-restart's delay; start under supervisord, whose autorestart may have
    started it already, which then answers 'already started')."""
    if manager == 'systemd':
        return [['systemctl', 'restart', '--no-block', '--', unit]]
    base = ['supervisorctl'] + (['-c', supervisor_config] if supervisor_config else [])
    return [base + ['start', unit]]


def pid_command(manager, unit, supervisor_config=None):
    """The service manager's main process of unit, where /proc/<pid>/fd cannot be read (no
    CAP_SYS_PTRACE, as in a container): the wrappers exec the server, so it is the server."""
    if manager == 'systemd':
        return ['systemctl', 'show', '--property=MainPID', '--value', '--', unit]
    return ['supervisorctl'] + (['-c', supervisor_config] if supervisor_config else []) + ['pid', unit]


def parse_pid(output):
    """A process id from pid_command's answer; None for 0 or anything else (not running)."""
    text = output.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def serving_state(servers):
    """The state file's summary: can_serve is False while any server is suspect or down."""
    problems = ['%s: %s (%s)' % (s['unit'], s['verdict'], s['why']) for s in servers
                if s['verdict'] in ('stopped', 'suspect', 'stale', 'down')]
    return {'can_serve': not problems, 'problems': problems, 'servers': servers}


def parse_endpoints(text):
    """'10.0.0.2:50052,10.0.0.2:50053' -> [('10.0.0.2', 50052), ...]."""
    endpoints = []
    for item in text.split(','):
        address, dummy, port = item.strip().rpartition(':')
        if not address or not port.isdigit() or not 0 < int(port) < 65536:
            raise WatchError('--watch-endpoints %r: give address:port pairs separated by commas' % text)
        endpoints.append((address.strip('[]'), int(port)))
    return endpoints


# --- On the node ------------------------------------------------------------------------------

def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return ''


def pid_of_socket(inode, proc='/proc'):
    """The process holding the socket inode (the server's listener), or None."""
    target = 'socket:[%d]' % inode
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        fd_dir = os.path.join(proc, name, 'fd')
        try:
            for fd in os.listdir(fd_dir):
                if os.readlink(os.path.join(fd_dir, fd)) == target:
                    return int(name)
        except (IOError, OSError):
            continue
    return None


def write_state(path, value):
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    handle, temporary = tempfile.mkstemp(prefix='.rpc-watch-', dir=directory)
    try:
        with os.fdopen(handle, 'w') as out:
            json.dump(value, out, indent=1, sort_keys=True)
        os.chmod(temporary, 0o644)
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


class Watch(object):
    """The watch's memory between looks: per unit, since when it is suspect and its clients."""

    def __init__(self, units, endpoints, manager, supervisor_config=None, state_file='/run/gpulab/rpc-watch.json',
                 probe_timeout_s=DEFAULT_PROBE_TIMEOUT_S, hang_after_s=DEFAULT_HANG_AFTER_S, proc='/proc',
                 stall_after_s=DEFAULT_STALL_AFTER_S):
        if len(units) != len(endpoints):
            raise WatchError('%d unit(s) and %d endpoint(s): give one endpoint per unit, in order' % (len(units), len(endpoints)))
        self.units = list(zip(units, endpoints))
        self.manager = manager
        self.supervisor_config = supervisor_config
        self.state_file = state_file
        self.probe_timeout_s = probe_timeout_s
        self.hang_after_s = hang_after_s
        self.stall_after_s = stall_after_s
        self.proc = proc
        self.suspect_since = {}
        self.clients = {}

    def probe(self, address, port, state, clients):
        """HELLO only when it can be answered: a stopped process answers nothing, and while a client is
        served the probe would wait in the listen backlog (listen(sockfd, 1) in transport.cpp's
        create_server), fill it and delay the head's next connection."""
        if state in ('T', 't'):
            return {'result': 'skipped', 'detail': 'the process is stopped', 'version': None, 'elapsed_s': 0.0}
        if state is not None and any(c['state'] == TCP_ESTABLISHED for c in clients):
            return {'result': 'skipped', 'detail': 'a client is served', 'version': None, 'elapsed_s': 0.0}
        return probe_hello(address, port, self.probe_timeout_s)

    def look(self, unit, address, port, rows, now, run=None):
        listener, clients = server_sockets(rows, port)
        pid = pid_of_socket(listener, self.proc) if listener else None
        if listener and pid is None and run is not None:
            rc, out, dummy = run(pid_command(self.manager, unit, self.supervisor_config))
            pid = parse_pid(out) if rc == 0 else None
        state = parse_proc_stat_state(_read(os.path.join(self.proc, str(pid), 'stat')) or '() X') if pid else None
        probe = self.probe(address, port, state, clients)
        verdict, why = classify(probe, state, clients, self.clients.get(unit), waiting_connections(rows, port))
        self.clients[unit] = clients
        kill, since = hang_decision(verdict, self.suspect_since.get(unit), now, self.hang_after_s, self.stall_after_s)
        self.suspect_since[unit] = since
        return {'unit': unit, 'address': address, 'port': port, 'pid': pid, 'verdict': verdict, 'why': why,
                'suspect_for_s': round(now - since, 1) if since is not None else 0.0, 'kill': kill}

    def step(self, log, run):
        rows = parse_proc_net_tcp(_read(os.path.join(self.proc, 'net', 'tcp'))) + \
            parse_proc_net_tcp(_read(os.path.join(self.proc, 'net', 'tcp6')))
        servers = []
        for unit, (address, port) in self.units:
            seen = self.look(unit, address, port, rows, time.monotonic(), run)
            if seen['kill'] and seen['pid']:
                log('%s (pid %d) hangs for %.1f s: %s; SIGKILL, then a start through the service manager'
                    % (unit, seen['pid'], seen['suspect_for_s'], seen['why']))
                try:
                    os.kill(seen['pid'], signal.SIGKILL)
                except OSError as exc:
                    log('SIGKILL of pid %d: %s' % (seen['pid'], exc))
                for argv in restart_commands(self.manager, unit, self.supervisor_config):
                    rc, out, err = run(argv)
                    if rc != 0:
                        log('%s: rc %d %s' % (' '.join(argv), rc, (err or out).strip()))
                self.suspect_since[unit] = None
                seen['killed_at'] = time.time()
            servers.append(seen)
        state = serving_state(servers)
        state['looked_at'] = time.time()
        write_state(self.state_file, state)
        return state
