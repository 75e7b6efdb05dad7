# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's view of its RPC workers: a connection whose data no acknowledgement answers.

A fabric cut between the head and a worker is below both programs: the head's /health stays ok and
the worker's watch (rpc_watch.py) sees an idle server. The head's kernel knows: its data to the
worker stays unacknowledged and is sent again with exponential backoff (the retransmit timer, from
TCP_RTO_MIN = 200 ms doubling up to TCP_RTO_MAX = 120 s; include/net/tcp.h), or, where this node
itself drops the packets, as zero-window probes. /proc/net/tcp shows the count of either for the
oldest unacknowledged data (net/ipv4/tcp_ipv4.c get_tcp4_sock: the timer column, icsk_retransmits,
icsk_probes_out); the next ACK clears it. A count therefore proves a time without any ACK, whatever
the round-trip time (a larger one only makes the waits longer).

Readers: module service_status (status.yml: unreachable_peers), filter worker_stall (the head's
wrapper restarts llama-server from a count) and scripts/faults.py. Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import format_endpoint

RTO_MIN_S = 0.2
RTO_MAX_S = 120.0
# Four sends unacknowledged: at least 3 s without an ACK. A lost packet is resent once within
# 200 ms and acknowledged; four in a row is an outage (status.yml and `make faults` say so then).
UNREACHABLE_RETRANSMITS = 4
TCP_ESTABLISHED = '01'
# /proc/net/tcp's timer column: 1 retransmit (or loss probe), 4 zero-window probe
TIMER_RETRANSMIT, TIMER_PROBE0 = 1, 4


def proc_net_address(address, port):
    """('10.0.0.2', 50052) -> '0200000A:C344', the address column of /proc/net/tcp (tcp6: 32 hex digits,
    each 4-byte word in host order, as a little-endian machine writes it)."""
    try:
        raw = socket.inet_pton(socket.AF_INET, address)
    except (OSError, ValueError):
        raw = socket.inet_pton(socket.AF_INET6, address)
    text = ''.join('%02X' % b for i in range(0, len(raw), 4) for b in bytearray(raw[i:i + 4])[::-1])
    return '%s:%04X' % (text, port)


def _address(text):
    address, port = text.split(':')
    raw = bytes(bytearray.fromhex(address))
    words = b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words), int(port, 16)


def connections(text):
    """The rows of /proc/net/tcp or tcp6, or of both one after the other (each with its header line), as
    the sender sees them: remote ((address, port)), state, unacked (tx_queue: bytes sent and not
    acknowledged), timer, retransmits, probes."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[0] == 'sl':
            continue
        rows.append({'remote': _address(fields[2]), 'state': fields[3].upper(),
                     'unacked': int(fields[4].split(':')[0], 16), 'timer': int(fields[5].split(':')[0], 16),
                     'retransmits': int(fields[6], 16), 'probes': int(fields[8])})
    return rows


def unacked_at_least_s(count, rto_min_s=RTO_MIN_S, rto_max_s=RTO_MAX_S):
    """Seconds without an ACK that count retransmissions prove: the timer's waits before each, from
    rto_min doubling up to rto_max."""
    return round(sum(min(rto_min_s * 2 ** step, rto_max_s) for step in range(count)), 1)


def retransmits_for(seconds):
    """The smallest count of retransmissions (1 or more) that proves at least `seconds` without an ACK."""
    count = 1
    while unacked_at_least_s(count) < seconds:
        count += 1
    return count


def stall_count(row):
    """Retransmissions (or zero-window probes) of a connection's unacknowledged data; 0 when none waits."""
    if row['state'] != TCP_ESTABLISHED or row['unacked'] <= 0 or row['timer'] not in (TIMER_RETRANSMIT, TIMER_PROBE0):
        return 0
    return max(row['retransmits'], row['probes'])


def format_peer(remote):
    return format_endpoint(*remote)


def unreachable_peers(rows, addresses, retransmits=UNREACHABLE_RETRANSMITS):
    """Connections to any of `addresses` whose data waits for an ACK through `retransmits` sends or more:
    peer ('address:port'), retransmits, at_least_s, unacked_bytes and a line saying so, by peer."""
    found = []
    wanted = set(addresses)
    for row in rows:
        count = stall_count(row)
        if row['remote'][0] not in wanted or count < retransmits:
            continue
        peer = format_peer(row['remote'])
        found.append({'peer': peer, 'retransmits': count, 'at_least_s': unacked_at_least_s(count),
                      'unacked_bytes': row['unacked'],
                      'line': '%s unreachable: no acknowledgement for at least %.1f s (%d retransmissions, %d bytes '
                              'waiting)' % (peer, unacked_at_least_s(count), count, row['unacked'])})
    return sorted(found, key=lambda item: item['peer'])
