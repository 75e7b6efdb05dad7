"""rpc_watch: the ggml RPC HELLO probe against fake servers on loopback (one that answers as
llama.cpp's rpc_serve_client does, one that accepts and never answers, a closed port), the
/proc parsers on captured text, the hang rule, and whole looks of the watch at a real process that
is stopped with SIGSTOP (killed and started again through the service manager)."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import rpc_watch
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_watch import (
    WatchError,
    classify,
    hang_decision,
    hello_request,
    parse_endpoints,
    parse_hello_reply,
    parse_proc_net_tcp,
    parse_proc_stat_state,
    probe_hello,
    parse_pid,
    pid_command,
    restart_commands,
    server_sockets,
    serving_state,
    waiting_connections,
)

# What rpc_serve_client reads first: cmd byte, the request's size, rpc_msg_hello_req (24 bytes of caps)
HELLO_REPLY = struct.pack('<Q', 28) + bytes([7, 0, 0, 0]) + b'\0' * 24

# A fake RPC server as a program (stdlib only; the one the fault runs on a lab use): answers HELLO
# like rpc_serve_client, then serves the client until it leaves (one client at a time, listen backlog
# 1, as ggml_backend_rpc_start_server).
FAKE_RPC = Path(__file__).resolve().parents[4] / 'scripts' / 'faults_watch' / 'fake_rpc.py'


def _listener(handler):
    """A loopback server running handler(conn) per connection in a thread; returns its port."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(('127.0.0.1', 0))
    server.listen(1)

    def serve():
        while True:
            try:
                conn, dummy = server.accept()
            except OSError:
                return
            handler(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _answers(conn):
    data = b''
    while len(data) < 33:
        chunk = conn.recv(33 - len(data))
        if not chunk:
            break
        data += chunk
    assert data == hello_request()
    conn.sendall(HELLO_REPLY)
    conn.close()


HELD = []


def _never_answers(conn):
    HELD.append(conn)  # accepted, read nothing, answer nothing


def test_the_hello_request_is_what_rpc_serve_client_reads():
    request = hello_request()
    assert request[0] == 14
    assert struct.unpack('<Q', request[1:9]) == (24,)
    assert request[9:] == b'\0' * 24
    assert len(request) == 33


def test_a_reply_gives_the_protocol_version():
    assert parse_hello_reply(HELLO_REPLY) == (7, 0, 0)
    assert parse_hello_reply(struct.pack('<Q', 28) + bytes([3, 5, 1, 0]) + b'\x01' * 24) == (3, 5, 1)


@pytest.mark.parametrize('data, why', [
    (b'\x1c\0\0', 'shorter than its size field'),
    (struct.pack('<Q', 4) + bytes([7, 0, 0, 0]), 'a HELLO reply of 4 bytes; the protocol sends 28'),
    (struct.pack('<Q', 28) + bytes([7, 0]), 'cut short at 2 of 28 bytes'),
])
def test_a_malformed_reply_is_refused(data, why):
    with pytest.raises(WatchError, match=why):
        parse_hello_reply(data)


def test_a_server_that_answers_hello_is_ok():
    server, port = _listener(_answers)
    try:
        probe = probe_hello('127.0.0.1', port, timeout_s=2)
    finally:
        server.close()
    assert probe['result'] == 'ok'
    assert probe['version'] == '7.0.0'
    assert probe['elapsed_s'] < 2


def test_a_server_that_accepts_and_never_answers_is_unanswered_within_the_timeout():
    server, port = _listener(_never_answers)
    started = time.monotonic()
    try:
        probe = probe_hello('127.0.0.1', port, timeout_s=0.5)
    finally:
        server.close()
    took = time.monotonic() - started
    assert probe['result'] == 'unanswered'
    assert probe['detail'] == '0 of 36 reply bytes within 0.5 s'
    assert 0.5 <= took < 1.5


def test_a_closed_port_is_refused():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()  # bound, never listening: the kernel answers RST
    probe = probe_hello('127.0.0.1', port, timeout_s=1)
    assert probe['result'] == 'refused'


def test_a_server_that_closes_at_once_is_closed():
    server, port = _listener(lambda conn: conn.close())
    try:
        probe = probe_hello('127.0.0.1', port, timeout_s=1)
    finally:
        server.close()
    assert probe['result'] in ('closed',)


def test_another_protocol_is_a_bad_reply():
    def old(conn):
        conn.recv(33)
        conn.sendall(struct.pack('<Q', 28) + bytes([3, 0, 0, 0]) + b'\0' * 24)
        conn.close()
    server, port = _listener(old)
    try:
        probe = probe_hello('127.0.0.1', port, timeout_s=1)
    finally:
        server.close()
    assert probe['result'] == 'bad_reply'
    assert probe['detail'] == 'protocol 3.0.0; this watch speaks 7.x'


# /proc/net/tcp of a worker: rpc-server listening on 10.231.78.12:50052, the head 10.231.78.11
# connected with 120 bytes unread, and a probe in the backlog (inode 0)
FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'rpc_watch'
PROC_NET_TCP = (FIXTURES / 'proc-net-tcp.txt').read_text()
PROC_NET_TCP6 = (FIXTURES / 'proc-net-tcp6.txt').read_text()


def test_proc_net_tcp_rows():
    rows = parse_proc_net_tcp(PROC_NET_TCP)
    assert rows[0] == {'local': ('10.231.78.12', 50052), 'remote': ('0.0.0.0', 0), 'state': '0A',
                       'tx_queue': 0, 'rx_queue': 0, 'inode': 41721}
    assert rows[1]['remote'] == ('10.231.78.11', 41394)
    assert rows[1]['rx_queue'] == 120
    assert parse_proc_net_tcp(PROC_NET_TCP6)[0]['local'] == ('::1', 8080)


def test_the_server_s_listener_and_its_accepted_clients():
    listener, clients = server_sockets(parse_proc_net_tcp(PROC_NET_TCP), 50052)
    assert listener == 41721
    # the backlog's connection (inode 0) is nobody's client yet
    assert [c['remote'] for c in clients] == [('10.231.78.11', 41394)]
    assert server_sockets(parse_proc_net_tcp(PROC_NET_TCP), 50053) == (None, [])


@pytest.mark.parametrize('text, state', [
    ('1234 (rpc-server) S 1 1234 1234 0 -1', 'S'),
    ('1234 (rpc server (0)) T 1 1234 1234 0 -1', 'T'),
    ('99 (python3) R 1 99', 'R'),
])
def test_the_process_state(text, state):
    assert parse_proc_stat_state(text) == state


OK = {'result': 'ok', 'version': '7.0.0', 'elapsed_s': 0.002, 'detail': ''}
UNANSWERED = {'result': 'unanswered', 'version': None, 'elapsed_s': 2.0, 'detail': '0 of 36 reply bytes within 2.0 s'}
REFUSED = {'result': 'refused', 'version': None, 'elapsed_s': 0.0, 'detail': 'connection refused'}
SKIPPED = {'result': 'skipped', 'version': None, 'elapsed_s': 0.0, 'detail': 'a client is served'}
HEAD = {'remote': ('10.231.78.11', 41394), 'state': '01', 'rx_queue': 0, 'tx_queue': 0, 'inode': 5}


def _head(rx, state='01'):
    return dict(HEAD, rx_queue=rx, state=state)


@pytest.mark.parametrize('probe, state, clients, previous, verdict, why', [
    (OK, 'S', [], None, 'serving', 'answered HELLO (protocol 7.0.0) in 0.002 s'),
    (SKIPPED, 'T', [_head(120)], None, 'stopped', 'the process is stopped (state T: SIGSTOP or a debugger)'),
    (REFUSED, None, [], None, 'down', 'no running process listens (connection refused)'),
    (SKIPPED, 'S', [_head(0)], [_head(0)], 'busy', 'serving 10.231.78.11:41394'),
    # a request read in pieces: the queue changes between looks
    (SKIPPED, 'R', [_head(4096)], [_head(120)], 'busy', 'serving 10.231.78.11:41394'),
    (SKIPPED, 'R', [_head(120)], [_head(120)], 'suspect', '120 byte(s) from 10.231.78.11:41394 unread since the last look'),
    (SKIPPED, 'D', [_head(0, '08')], None, 'suspect',
     'client 10.231.78.11:41394 closed its connection and the server has not noticed'),
    (UNANSWERED, 'S', [], None, 'suspect', 'no client to serve, and HELLO unanswered (0 of 36 reply bytes within 2.0 s)'),
])
def test_classify(probe, state, clients, previous, verdict, why):
    assert classify(probe, state, clients, previous) == (verdict, why)


# After a fabric cut outlasted by the head's restart: the old llama-server's close never reached the worker,
# whose server still serves that connection (idle, nothing unread), and the head connects again from the
# same address (its wrapper's probe, in the backlog: inode 0).
AGAIN = {'remote': ('10.231.78.11', 52000), 'state': '01', 'rx_queue': 0, 'tx_queue': 0, 'inode': 0}


def test_a_client_that_connects_again_left_a_stale_connection():
    assert classify(SKIPPED, 'S', [_head(0)], [_head(0)], [AGAIN]) == (
        'stale', 'client 10.231.78.11:41394 is gone: 10.231.78.11 connects again (a connection waits to be accepted) '
                 'while this one stays idle')
    # the worker's own probe or another host in the backlog says nothing of this client
    assert classify(SKIPPED, 'S', [_head(0)], [_head(0)], [dict(AGAIN, remote=('10.231.78.12', 52000))])[0] == 'busy'
    # a request still being read is the stall rule's, not this one's
    assert classify(SKIPPED, 'R', [_head(4096)], [_head(120)], [AGAIN])[0] == 'busy'
    rows = [dict(HEAD, local=('10.231.78.12', 50052)), dict(AGAIN, local=('10.231.78.12', 50052)),
            dict(AGAIN, local=('10.231.78.12', 50053))]
    assert waiting_connections(rows, 50052) == [rows[1]]


@pytest.mark.parametrize('verdict, since, now, expected', [
    ('stopped', None, 100.0, (False, 100.0)),
    ('stopped', 100.0, 104.9, (False, 100.0)),
    ('stopped', 100.0, 105.0, (True, 100.0)),
    # a request left unread may be a long graph computation: 30 s
    ('suspect', 100.0, 105.0, (False, 100.0)),
    ('suspect', 100.0, 130.0, (True, 100.0)),
    # a stale client is certain: killed as soon as a stopped process
    ('stale', 100.0, 105.0, (True, 100.0)),
    ('busy', 100.0, 200.0, (False, None)),
    ('serving', 100.0, 200.0, (False, None)),
])
def test_a_server_is_killed_after_hang_after_s_stopped_or_stall_after_s_suspect(verdict, since, now, expected):
    assert hang_decision(verdict, since, now, hang_after_s=5.0, stall_after_s=30.0) == expected


def test_restart_commands():
    assert restart_commands('systemd', 'gpulab-rpc-server@0.service') == [
        ['systemctl', 'restart', '--no-block', '--', 'gpulab-rpc-server@0.service']]
    assert restart_commands('supervisor', 'gpulab-rpc-server-0', '/etc/supervisor/supervisord.conf') == [
        ['supervisorctl', '-c', '/etc/supervisor/supervisord.conf', 'start', 'gpulab-rpc-server-0']]


def test_serving_state_says_it_cannot_serve_while_one_server_hangs():
    servers = [{'unit': 'a', 'verdict': 'busy', 'why': 'serving x'}, {'unit': 'b', 'verdict': 'stopped', 'why': 'state T'}]
    state = serving_state(servers)
    assert state['can_serve'] is False
    assert state['problems'] == ['b: stopped (state T)']
    assert serving_state(servers[:1])['can_serve'] is True


def test_endpoints():
    assert parse_endpoints('10.0.0.2:50052,[fd00::2]:50053') == [('10.0.0.2', 50052), ('fd00::2', 50053)]
    with pytest.raises(WatchError, match='address:port'):
        parse_endpoints('10.0.0.2')


@pytest.fixture
def fake_rpc_server():
    process = subprocess.Popen([sys.executable, str(FAKE_RPC), '127.0.0.1', '0'], stdout=subprocess.PIPE,
                               universal_newlines=True)
    port = int(process.stdout.readline())
    yield process, port
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
    process.wait()


def test_the_watch_kills_a_stopped_server_after_hang_after_s_and_restarts_it(fake_rpc_server, tmp_path):
    process, port = fake_rpc_server
    state_file = str(tmp_path / 'rpc-watch.json')
    watch = rpc_watch.Watch(['gpulab-rpc-server@0.service'], [('127.0.0.1', port)], 'systemd',
                            state_file=state_file, probe_timeout_s=1.0, hang_after_s=0.6)
    ran = []
    logged = []

    def run(argv):
        ran.append(argv)
        return 0, '', ''

    first = watch.step(logged.append, run)
    assert first['can_serve'] is True
    assert first['servers'][0]['verdict'] == 'serving'
    assert first['servers'][0]['pid'] == process.pid

    # the head connected and idle: busy, not probed
    head = socket.create_connection(('127.0.0.1', port))
    head.sendall(hello_request())
    assert head.recv(36) == HELLO_REPLY
    time.sleep(0.1)
    assert watch.step(logged.append, run)['servers'][0]['verdict'] == 'busy'

    process.send_signal(signal.SIGSTOP)
    time.sleep(0.1)
    stopped = watch.step(logged.append, run)
    assert stopped['can_serve'] is False
    assert stopped['servers'][0]['verdict'] == 'stopped'
    assert stopped['servers'][0]['kill'] is False
    assert json.loads(open(state_file).read())['can_serve'] is False
    assert process.poll() is None and ran == []

    time.sleep(0.7)
    killed = watch.step(logged.append, run)
    assert killed['servers'][0]['kill'] is True
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert ran == [['systemctl', 'restart', '--no-block', '--', 'gpulab-rpc-server@0.service']]
    assert 'gpulab-rpc-server@0.service (pid %d) hangs for' % process.pid in logged[0]
    head.close()


def test_the_watch_kills_a_server_held_by_a_client_that_is_gone(fake_rpc_server, tmp_path):
    # The head's old connection, idle (its llama-server killed during a fabric cut, the close lost), and
    # the restarted head connecting again from the same address: in the listen backlog, never accepted.
    process, port = fake_rpc_server
    watch = rpc_watch.Watch(['gpulab-rpc-server@0.service'], [('127.0.0.1', port)], 'systemd',
                            state_file=str(tmp_path / 'rpc-watch.json'), probe_timeout_s=1.0, hang_after_s=0.6)
    ran = []
    logged = []

    def run(argv):
        ran.append(argv)
        return 0, '', ''

    old = socket.create_connection(('127.0.0.1', port))
    old.sendall(hello_request())
    assert old.recv(36) == HELLO_REPLY
    time.sleep(0.1)
    assert watch.step(logged.append, run)['servers'][0]['verdict'] == 'busy'
    again = socket.create_connection(('127.0.0.1', port))
    time.sleep(0.1)
    seen = watch.step(logged.append, run)
    assert seen['can_serve'] is False
    assert (seen['servers'][0]['verdict'], seen['servers'][0]['kill']) == ('stale', False)
    assert seen['servers'][0]['why'].startswith('client 127.0.0.1:%d is gone: 127.0.0.1 connects again' % old.getsockname()[1])
    time.sleep(0.7)
    killed = watch.step(logged.append, run)
    assert killed['servers'][0]['kill'] is True
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert ran == [['systemctl', 'restart', '--no-block', '--', 'gpulab-rpc-server@0.service']]
    old.close()
    again.close()


def test_a_hello_unanswered_with_no_client_is_suspect(tmp_path):
    server, port = _listener(_never_answers)
    try:
        watch = rpc_watch.Watch(['u'], [('127.0.0.1', port)], 'supervisor', state_file=str(tmp_path / 's.json'),
                                probe_timeout_s=0.3, hang_after_s=10)
        # the listener is this test's own process: found by its socket inode, state R or S
        state = watch.step(lambda m: None, lambda argv: (0, '', ''))
    finally:
        server.close()
    assert state['servers'][0]['pid'] == os.getpid()
    assert state['servers'][0]['verdict'] in ('suspect', 'busy')


def test_the_guard_runs_the_watch_in_a_thread_of_its_own(fake_rpc_server, tmp_path):
    from ansible_collections.gpulab.inference.plugins.module_utils import rpc_guard
    dummy, port = fake_rpc_server
    state_file = tmp_path / 'rpc-watch.json'
    args = rpc_guard.parse_args(['--table', 'gpulab_rpc', '--ports', str(port), '--units', 'gpulab-rpc-server@0.service',
                                 '--watch-code', rpc_watch.__file__, '--watch-endpoints', '127.0.0.1:%d' % port,
                                 '--watch-state-file', str(state_file), '--watch-interval-s', '0.1'])
    thread = rpc_guard.start_watch(args, lambda message: None)
    deadline = time.monotonic() + 10
    while not state_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert thread.is_alive()
    state = json.loads(state_file.read_text())
    assert state['can_serve'] is True
    assert (state['servers'][0]['address'], state['servers'][0]['port']) == ('127.0.0.1', port)
    assert state['servers'][0]['verdict'] == 'serving'


def test_the_main_pid_from_the_service_manager():
    assert pid_command('systemd', 'gpulab-rpc-server@0.service') == [
        'systemctl', 'show', '--property=MainPID', '--value', '--', 'gpulab-rpc-server@0.service']
    assert pid_command('supervisor', 'gpulab-rpc-server-0', '/etc/gpulab/supervisord.conf') == [
        'supervisorctl', '-c', '/etc/gpulab/supervisord.conf', 'pid', 'gpulab-rpc-server-0']
    assert parse_pid('1234\n') == 1234
    assert parse_pid('0\n') is None
    assert parse_pid('ERROR (no such process)') is None


def test_without_proc_fd_the_watch_asks_the_service_manager(fake_rpc_server, tmp_path):
    process, port = fake_rpc_server
    watch = rpc_watch.Watch(['gpulab-rpc-server@0.service'], [('127.0.0.1', port)], 'systemd',
                            state_file=str(tmp_path / 's.json'), proc=str(tmp_path / 'no-fd'))
    # a /proc whose fd links cannot be read: net/tcp and the stat file only
    (tmp_path / 'no-fd' / 'net').mkdir(parents=True)
    (tmp_path / 'no-fd' / 'net' / 'tcp').write_text(open('/proc/net/tcp').read())
    (tmp_path / 'no-fd' / str(process.pid)).mkdir()
    (tmp_path / 'no-fd' / str(process.pid) / 'stat').write_text('%d (python3) S 1' % process.pid)
    asked = []

    def run(argv):
        asked.append(argv)
        return 0, '%d\n' % process.pid, ''
    state = watch.step(lambda m: None, run)
    assert asked == [pid_command('systemd', 'gpulab-rpc-server@0.service')]
    assert state['servers'][0]['pid'] == process.pid
    assert state['servers'][0]['verdict'] == 'serving'
