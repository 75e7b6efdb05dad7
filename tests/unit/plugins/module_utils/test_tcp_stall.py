"""tcp_stall: the head's view of a worker it cannot reach, on /proc/net/tcp captured on the container lab
during a fabric cut, and the time a count of retransmissions proves."""

from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.tcp_stall import (
    connections,
    proc_net_address,
    retransmits_for,
    stall_count,
    unacked_at_least_s,
    unreachable_peers,
)

# The head (10.231.83.10) 8 s into a fabric cut between it and node-b (drop rules on node-b against the
# head's address, both directions), during a chat completion: 321 bytes to node-b's RPC server
# 10.231.83.11:50052 wait for an ACK through 5 retransmissions; node-c (10.231.83.12) is idle.
# Captured on the container lab (kernel 6.18), trailing blanks removed.
HEAD_CUT = (Path(__file__).resolve().parents[2] / 'fixtures' / 'tcp_stall' / 'proc-net-tcp-head-cut.txt').read_text()


def test_the_head_s_connection_to_a_cut_off_worker():
    rows = connections(HEAD_CUT)
    assert len(rows) == 6
    to_b = [r for r in rows if r['remote'] == ('10.231.83.11', 50052)]
    assert to_b == [{'remote': ('10.231.83.11', 50052), 'state': '01', 'unacked': 321, 'timer': 1, 'retransmits': 5,
                     'probes': 0}]
    assert stall_count(to_b[0]) == 5
    assert [stall_count(r) for r in rows if r['remote'] == ('10.231.83.12', 50052)] == [0]


def test_status_says_which_worker_is_unreachable():
    rows = connections(HEAD_CUT)
    assert unreachable_peers(rows, ['10.231.83.11', '10.231.83.12']) == [{
        'peer': '10.231.83.11:50052', 'retransmits': 5, 'at_least_s': 6.2, 'unacked_bytes': 321,
        'line': '10.231.83.11:50052 unreachable: no acknowledgement for at least 6.2 s (5 retransmissions, 321 bytes '
                'waiting)'}]
    # only the addresses asked for, and only from the count asked
    assert unreachable_peers(rows, ['10.231.83.12']) == []
    assert unreachable_peers(rows, ['10.231.83.11'], retransmits=6) == []


def test_zero_window_probes_count_where_this_node_drops_the_packets():
    row = {'remote': ('10.0.0.2', 50052), 'state': '01', 'unacked': 100, 'timer': 4, 'retransmits': 0, 'probes': 5}
    assert stall_count(row) == 5
    assert stall_count(dict(row, unacked=0)) == 0  # nothing waits: an idle connection
    assert stall_count(dict(row, timer=2)) == 0  # the keepalive timer
    assert stall_count(dict(row, state='08')) == 0
    assert unreachable_peers([row], ['10.0.0.2'])[0]['at_least_s'] == 6.2


@pytest.mark.parametrize('count, seconds', [(0, 0.0), (1, 0.2), (4, 3.0), (5, 6.2), (7, 25.4), (9, 102.2),
                                            (10, 204.6), (11, 324.6), (15, 804.6)])
def test_retransmissions_prove_a_time_without_ack(count, seconds):
    # 200 ms doubling, each wait at most 120 s (TCP_RTO_MIN, TCP_RTO_MAX)
    assert unacked_at_least_s(count) == seconds


@pytest.mark.parametrize('seconds, count', [(0.1, 1), (3, 4), (6.2, 5), (10, 6), (20, 7), (25.4, 7), (60, 9),
                                            (300, 11)])
def test_the_count_for_a_time(seconds, count):
    assert retransmits_for(seconds) == count


def test_the_address_as_proc_net_tcp_writes_it():
    assert proc_net_address('10.231.83.11', 50052) == '0B53E70A:C384'
    assert ' 0B53E70A:C384 ' in HEAD_CUT
    assert proc_net_address('fd00::12', 50053) == '000000FD000000000000000012000000:C385'
    tcp6 = 'header\n   0: %s %s 01 00000010:00000000 01:00000010 00000004  999 0 1 1 0 20 4 30 10 -1\n' % (
        proc_net_address('::1', 41000), proc_net_address('fd00::12', 50053))
    assert connections(tcp6)[0]['remote'] == ('fd00::12', 50053)
    assert unreachable_peers(connections(tcp6), ['fd00::12'])[0]['peer'] == '[fd00::12]:50053'
