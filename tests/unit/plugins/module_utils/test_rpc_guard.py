"""rpc_guard: what the RPC table must contain (captured `nft list table` output), which servers
stop while it is gone and which start when it is back, and one step of the guard against fake
nft and systemctl programs (one of them hanging)."""

import json
import time
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import rpc_guard
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_guard import (
    GuardError,
    change_command,
    check_message,
    decide,
    load_stopped,
    parse_is_active,
    parse_ports,
    parse_supervisor_status,
    save_stopped,
    table_protects,
)

# `nft list table inet gpulab_rpc` (nftables 1.0.6) after loading the role's rules, and after
# `nft flush chain inet gpulab_rpc input`
FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'rpc_guard'
ONE_PORT = (FIXTURES / 'table-one-port.txt').read_text()
TWO_PORTS = (FIXTURES / 'table-two-ports.txt').read_text()
FLUSHED_CHAIN = (FIXTURES / 'table-flushed-chain.txt').read_text()
UNITS = ['gpulab-rpc-server@0.service', 'gpulab-rpc-server@1.service']


@pytest.mark.parametrize('text, ports', [(ONE_PORT, [50052]), (TWO_PORTS, [50052, 50053]), (TWO_PORTS, [50053])])
def test_the_role_s_table_protects_its_ports(text, ports):
    assert table_protects(text, ports) == (True, '')


@pytest.mark.parametrize('text, ports, why', [
    ('', [50052], 'the table is not loaded'),
    (FLUSHED_CHAIN, [50052], 'the table has no rule that drops the RPC ports'),
    (ONE_PORT, [50052, 50053], 'the table does not drop port(s) 50053'),
    (ONE_PORT.replace('drop', 'accept'), [50052], 'the table has no rule that drops the RPC ports'),
    (ONE_PORT.replace('hook input', 'hook output'), [50052], 'the table has no input-hook chain'),
    ('table inet gpulab_rpc {\n}\n', [50052], 'the table has no input-hook chain'),
])
def test_anything_else_counts_as_missing(text, ports, why):
    assert table_protects(text, ports) == (False, why)


def test_without_the_table_every_running_server_stops_and_is_recorded():
    states = {UNITS[0]: 'active', UNITS[1]: 'activating'}
    assert decide(False, states, []) == {'stop': UNITS, 'start': [], 'stopped': UNITS}


def test_without_the_table_a_server_stopped_by_someone_else_is_not_recorded():
    states = {UNITS[0]: 'active', UNITS[1]: 'inactive'}
    assert decide(False, states, []) == {'stop': [UNITS[0]], 'start': [], 'stopped': [UNITS[0]]}


def test_still_without_the_table_nothing_more_is_done_and_the_record_is_kept():
    states = {UNITS[0]: 'inactive', UNITS[1]: 'inactive'}
    assert decide(False, states, UNITS) == {'stop': [], 'start': [], 'stopped': UNITS}


def test_with_the_table_back_only_the_servers_the_guard_stopped_start():
    states = {UNITS[0]: 'inactive', UNITS[1]: 'inactive'}
    assert decide(True, states, [UNITS[0]]) == {'stop': [], 'start': [UNITS[0]], 'stopped': []}


def test_with_the_table_a_server_already_back_is_not_started_again():
    assert decide(True, {UNITS[0]: 'active'}, [UNITS[0]]) == {'stop': [], 'start': [], 'stopped': []}


def test_a_recorded_unit_that_is_no_longer_guarded_is_not_started():
    assert decide(True, {UNITS[0]: 'inactive'}, ['gpulab-rpc-server@7.service'])['start'] == []


def test_supervisord_states_count_as_running():
    states = parse_supervisor_status(['gpulab-rpc-server-0', 'gpulab-rpc-server-1'],
                                     'gpulab-rpc-server-0   RUNNING   pid 42, uptime 0:01:00\n'
                                     'gpulab-rpc-server-1   STOPPED   Dec 01 10:00 AM\n')
    assert states == {'gpulab-rpc-server-0': 'RUNNING', 'gpulab-rpc-server-1': 'STOPPED'}
    assert decide(False, states, [])['stop'] == ['gpulab-rpc-server-0']


def test_is_active_is_read_in_unit_order():
    assert parse_is_active(UNITS, 'active\ninactive\n') == {UNITS[0]: 'active', UNITS[1]: 'inactive'}


def test_is_active_with_a_line_missing_is_an_error():
    with pytest.raises(GuardError, match='answered 1 line'):
        parse_is_active(UNITS, 'active\n')


@pytest.mark.parametrize('text', ['', '0', '65536', '50052,x', '50052;50053', '-1', '50052,', '1e3'])
def test_bad_ports_are_refused(text):
    with pytest.raises(GuardError, match='give TCP ports 1-65535'):
        parse_ports(text)


def test_ports_are_read():
    assert parse_ports('50052,50053') == [50052, 50053]


def test_changes_do_not_wait_for_the_server():
    assert change_command('systemd', 'stop', UNITS) == ['systemctl', 'stop', '--no-block', '--'] + UNITS
    assert change_command('supervisor', 'start', ['p0']) == ['supervisorctl', 'start', 'p0']
    assert change_command('supervisor', 'stop', ['p0'], '/etc/supervisor/supervisord.conf') == [
        'supervisorctl', '-c', '/etc/supervisor/supervisord.conf', 'stop', 'p0']


def test_the_check_message_says_how_to_load_the_rules():
    assert check_message('table inet gpulab_rpc is not loaded', 'gpulab-rpc-server-firewall.service') == (
        'table inet gpulab_rpc is not loaded: the RPC server does not start without its rules; load them with '
        '`systemctl reload gpulab-rpc-server-firewall.service` (or `nft -f` its rules file)')


def test_the_state_file_round_trips_and_a_torn_one_starts_nothing(tmp_path):
    path = str(tmp_path / 'run' / 'stopped.json')
    assert load_stopped(path) == []
    save_stopped(path, [UNITS[1], UNITS[0]])
    assert load_stopped(path) == UNITS
    assert sorted(p.name for p in (tmp_path / 'run').iterdir()) == ['stopped.json']
    Path(path).write_text('["gpulab-rpc')
    assert load_stopped(path) == []
    Path(path).write_text('{"a": 1}')
    assert load_stopped(path) == []


# --- the guard itself, against fake programs on PATH ---------------------------------------------

def fake_tools(tmp_path, nft_body, states='active\nactive\n'):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    log = tmp_path / 'calls'
    (bin_dir / 'nft').write_text('#!/bin/sh\n' + nft_body)
    (bin_dir / 'systemctl').write_text('#!/bin/sh\necho "$*" >> %s\ncase "$1" in is-active) printf %s;; esac\n'
                                       % (log, json.dumps(states)))
    for tool in ('nft', 'systemctl'):
        (bin_dir / tool).chmod(0o755)
    return bin_dir, log


def guard_args(tmp_path, *extra):
    return ['--table', 'gpulab_rpc', '--ports', '50052,50053', '--units'] + UNITS + [
        '--state-file', str(tmp_path / 'stopped.json'), '--once'] + list(extra)


def test_a_flushed_ruleset_stops_the_running_servers(tmp_path, monkeypatch):
    bin_dir, log = fake_tools(tmp_path, 'echo "Error: No such file or directory" >&2; exit 1\n')
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    assert rpc_guard.main(guard_args(tmp_path)) == 0
    assert log.read_text().splitlines() == ['is-active -- ' + ' '.join(UNITS), 'stop --no-block -- ' + ' '.join(UNITS)]
    assert json.loads((tmp_path / 'stopped.json').read_text()) == UNITS


def test_the_table_back_starts_what_the_guard_stopped(tmp_path, monkeypatch):
    bin_dir, log = fake_tools(tmp_path, 'cat %s\n' % (FIXTURES / 'table-two-ports.txt'), 'inactive\nactive\n')
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    save_stopped(str(tmp_path / 'stopped.json'), [UNITS[0]])
    assert rpc_guard.main(guard_args(tmp_path)) == 0
    assert log.read_text().splitlines()[1:] == ['start --no-block -- ' + UNITS[0]]
    assert json.loads((tmp_path / 'stopped.json').read_text()) == []


def test_check_passes_with_the_table_and_fails_without(tmp_path, monkeypatch, capsys):
    bin_dir, unused_log = fake_tools(tmp_path, 'cat %s\n' % (FIXTURES / 'table-one-port.txt'))
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    assert rpc_guard.main(guard_args(tmp_path, '--check')) == 1  # port 50053 is not dropped
    assert 'table inet gpulab_rpc: the table does not drop port(s) 50053: the RPC server does not start' in (
        capsys.readouterr().err)
    assert rpc_guard.main(['--table', 'gpulab_rpc', '--ports', '50052', '--units', UNITS[0], '--check']) == 0


def test_a_hanging_nft_counts_as_no_table_within_the_limit(tmp_path, monkeypatch, capsys):
    bin_dir, log = fake_tools(tmp_path, 'exec sleep 60\n')
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    monkeypatch.setattr(rpc_guard, 'COMMAND_LIMIT_S', 1)
    started = time.monotonic()
    assert rpc_guard.main(guard_args(tmp_path, '--check')) == 1
    assert time.monotonic() - started < 5
    assert 'nft list table inet gpulab_rpc did not finish within 1 s' in capsys.readouterr().err


def test_a_hanging_systemctl_leaves_the_servers_alone_this_time(tmp_path, monkeypatch, capsys):
    bin_dir, log = fake_tools(tmp_path, 'exit 1\n')
    (bin_dir / 'systemctl').write_text('#!/bin/sh\nexec sleep 60\n')
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    monkeypatch.setattr(rpc_guard, 'COMMAND_LIMIT_S', 1)
    started = time.monotonic()
    assert rpc_guard.main(guard_args(tmp_path)) == 0
    assert time.monotonic() - started < 5
    assert 'systemctl is-active -- %s did not finish within 1 s; the servers are not touched' % ' '.join(UNITS) in (
        capsys.readouterr().err)


def test_bad_ports_on_the_command_line_exit_2_with_the_reason(capsys):
    assert rpc_guard.main(['--table', 'gpulab_rpc', '--ports', '99999', '--units', UNITS[0]]) == 2
    assert "--ports '99999': give TCP ports 1-65535" in capsys.readouterr().err
