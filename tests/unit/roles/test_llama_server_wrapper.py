# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's wrapper script (roles/llama_server/templates/gpulab-llama-server.sh.j2), rendered
and run with a fake llama-server: a stop ends it in seconds with status 0 and leaves no process
behind (under cgroup v1 systemd waits out TimeoutStopSec for any leftover, then ends the unit
failed), a lost worker connection still exits 75, and so does one whose data the kernel has
retransmitted unacknowledged as often as llama_server_worker_unreachable_s asks (a fabric cut)."""

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule

from ansible_collections.gpulab.inference.plugins.filter.worker_stall import worker_stall
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import head_wrapper_lines

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / 'roles' / 'llama_server' / 'templates' / 'gpulab-llama-server.sh.j2'

# Connects to the worker like llama-server does, keeps the connection, and stops on SIGTERM.
# With FAKE_IGNORE_TERM it notes SIGTERM and goes on, as llama-server blocked in a call to a worker does.
FAKE_LLAMA_SERVER = r'''#!/usr/bin/env bash
echo $$ > "$FAKE_DIR/pid"
if [ -n "${FAKE_CONNECT:-}" ]; then exec 3<>"/dev/tcp/127.0.0.1/$FAKE_CONNECT"; fi
if [ -n "${FAKE_IGNORE_TERM:-}" ]; then trap '' TERM; exec sleep 600; fi
sleep 600 &
trap 'kill $!; wait $!; exit 0' TERM
wait $!
'''


def render(tmp_path, ports, wait_s=30, watch_s=1, unreachable_s=20, proc_net_tcp=None):
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined, keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    endpoints = [{'address': '127.0.0.1', 'port': port, 'endpoint': '127.0.0.1:%d' % port} for port in ports]
    fake = tmp_path / 'llama-server'
    fake.write_text(FAKE_LLAMA_SERVER)
    fake.chmod(0o755)
    # The command line is not what this test is about: the fake runs in its place.
    source, count = re.subn(r'^command=\(\n.*?^\)\n', 'command=(%s)\n' % fake, TEMPLATE.read_text(),
                            flags=re.S | re.M)
    assert count == 1, 'no command=( ... ) block in the wrapper template'
    if proc_net_tcp:
        source, count = re.subn(r'^proc_net_tcp=\(.*\)$', 'proc_net_tcp=(%s)' % proc_net_tcp, source, flags=re.M)
        assert count == 1, 'no proc_net_tcp=( ... ) line in the wrapper template'
    text = env.from_string(source).render(
        inventory_hostname='node-a',
        __llama_server_plan={'build': {'build_id': 'test'}, 'devices': [], 'tensor_split': [], 'endpoints': endpoints,
                             'wrapper': head_wrapper_lines([], [], {}, None)},
        __llama_server_stall=worker_stall(endpoints, unreachable_s),
        llama_server_worker_wait_s=wait_s, llama_server_worker_watch_s=watch_s)
    script = tmp_path / 'gpulab-llama-server'
    script.write_text(text)
    script.chmod(0o755)
    return script


def session_processes(sid):
    """Pids of the live processes of session `sid` (the wrapper's, started with a new session)."""
    pids = []
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command: state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != 'Z':
            pids.append(int(stat.parent.name))
    return pids


def start(script, tmp_path, **env):
    return subprocess.Popen([str(script)], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, FAKE_DIR=str(tmp_path), **env))


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def stop(process):
    """SIGTERM as the service manager sends it; (exit status, seconds to exit, leftover pids)."""
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        output = process.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail('the wrapper did not exit within 10 s of SIGTERM')
    took = time.monotonic() - began
    return process.returncode, took, session_processes(process.pid), output


@pytest.fixture()
def worker():
    """A listening TCP port standing in for an RPC worker (the backlog accepts connections)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(('127.0.0.1', 0))
        listener.listen(8)
        yield listener


def test_stop_while_serving_ends_llama_server_and_the_watch_sleep(tmp_path, worker):
    port = worker.getsockname()[1]
    # A long watch interval: the sleep is running when the stop comes.
    script = render(tmp_path, [port], watch_s=300)
    process = start(script, tmp_path)
    wait_for((tmp_path / 'pid').exists, 15, 'the fake llama-server did not start')
    # wrapper, llama-server (and its own sleep), the watch's sleep
    wait_for(lambda: len(session_processes(process.pid)) >= 4, 15, 'the watch loop did not start its sleep')
    status, took, leftovers, output = stop(process)
    assert status == 0, output
    assert took < 3, took
    assert leftovers == [], output


def test_stop_while_waiting_for_a_worker_ends_at_once(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as unused:
        unused.bind(('127.0.0.1', 0))
        closed_port = unused.getsockname()[1]
    script = render(tmp_path, [closed_port], wait_s=300)
    process = start(script, tmp_path)
    time.sleep(1.5)  # in the wait loop: probes and two-second sleeps
    status, took, leftovers, output = stop(process)
    assert 'waiting for RPC worker(s) 127.0.0.1:%d' % closed_port in output
    assert status == 0, output
    assert took < 3, took
    assert leftovers == [], output
    assert not (tmp_path / 'pid').exists()


def test_a_lost_worker_connection_still_exits_75(tmp_path, worker):
    port = worker.getsockname()[1]
    script = render(tmp_path, [port], watch_s=1)
    process = start(script, tmp_path, FAKE_CONNECT=str(port))
    wait_for((tmp_path / 'pid').exists, 15, 'the fake llama-server did not start')
    time.sleep(2.5)  # armed: the watch saw the connection established
    worker.close()  # the queued connection is reset: llama-server lost its worker
    try:
        output = process.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail('the wrapper did not notice the lost worker within 10 s')
    assert process.returncode == 75, output
    assert 'lost the connection to RPC worker(s) 127.0.0.1:%d' % port in output
    assert session_processes(process.pid) == []


# /proc/net/tcp as the head's kernel writes it during a fabric cut: 256 bytes to 127.0.0.1:PORT wait for
# an ACK, the retransmit timer (1) runs, RETRANSMITS sends so far (hex), no zero-window probe.
PROC_NET_TCP = (
    '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'
    '   0: 0100007F:A1B2 0100007F:{port:04X} 01 00000100:00000000 01:00000F3C {retransmits:08X}   999        0 4242 1 '
    '0000000000000000 3200 4 30 10 -1\n')


def test_an_unacknowledged_worker_connection_exits_75(tmp_path, worker):
    port = worker.getsockname()[1]
    table = tmp_path / 'tcp'
    table.write_text(PROC_NET_TCP.format(port=port, retransmits=6))  # at least 12.6 s: below the 20 s asked
    script = render(tmp_path, [port], watch_s=1, unreachable_s=20, proc_net_tcp=table)
    assert '7 retransmissions in /proc/net/tcp, at least 25.4 s' in script.read_text()
    process = start(script, tmp_path, FAKE_CONNECT=str(port), FAKE_IGNORE_TERM='1')
    wait_for((tmp_path / 'pid').exists, 15, 'the fake llama-server did not start')
    time.sleep(2.5)  # armed, and the six retransmissions were looked at twice
    assert process.poll() is None, process.communicate()[0]
    table.write_text(PROC_NET_TCP.format(port=port, retransmits=7))
    try:
        output = process.communicate(timeout=15)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail('the wrapper did not count the unacknowledged connection as lost and end llama-server within 15 s')
    assert process.returncode == 75, output
    assert 'RPC worker 127.0.0.1:%d unreachable: data unacknowledged through 7 retransmissions' % port in output
    assert 'lost the connection to RPC worker(s) 127.0.0.1:%d' % port in output
    assert session_processes(process.pid) == []


def test_unreachable_s_0_leaves_the_connection_to_tcp(tmp_path, worker):
    port = worker.getsockname()[1]
    table = tmp_path / 'tcp'
    table.write_text(PROC_NET_TCP.format(port=port, retransmits=12))
    script = render(tmp_path, [port], watch_s=1, unreachable_s=0, proc_net_tcp=table)
    process = start(script, tmp_path, FAKE_CONNECT=str(port))
    wait_for((tmp_path / 'pid').exists, 15, 'the fake llama-server did not start')
    time.sleep(3.5)
    assert process.poll() is None
    status, dummy, leftovers, output = stop(process)
    assert status == 0 and leftovers == [] and 'unreachable' not in output, output


def test_rendered_wrapper_passes_shellcheck(tmp_path):
    script = render(tmp_path, [50052])
    result = subprocess.run(['shellcheck', '--shell=bash', '--severity=warning', str(script)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
