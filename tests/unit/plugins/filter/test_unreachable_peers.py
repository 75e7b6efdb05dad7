"""unreachable_peers: what status.yml says of the head's connections, on /proc/net/tcp captured during a cut."""

from pathlib import Path

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.unreachable_peers import FilterModule, unreachable_peers

HEAD_CUT = (Path(__file__).resolve().parents[2] / 'fixtures' / 'tcp_stall' / 'proc-net-tcp-head-cut.txt').read_text()
TCP6 = '  sl  local_address                         remote_address                        st\n'
LINE = '10.231.83.11:50052 unreachable: no acknowledgement for at least 6.2 s (5 retransmissions, 321 bytes waiting)'


def test_the_cut_off_worker_is_named():
    assert unreachable_peers(HEAD_CUT, ['10.231.83.11', '10.231.83.12']) == [LINE]
    # tcp6 after tcp, as `cat /proc/net/tcp /proc/net/tcp6` gives them
    assert unreachable_peers(HEAD_CUT + TCP6, ['10.231.83.11']) == [LINE]


def test_nothing_when_every_worker_answers_or_nothing_was_read():
    assert unreachable_peers(HEAD_CUT, ['10.231.83.12']) == []
    assert unreachable_peers(HEAD_CUT, ['10.231.83.11'], retransmits=6) == []
    assert unreachable_peers('', ['10.231.83.11']) == []


@pytest.mark.parametrize('text, addresses, message', [
    (HEAD_CUT, '10.231.83.11', 'give a list of IP addresses'),
    ('  sl  header\n   0: zz:zz zz:zz 01 0:0 0:0 0 0 0 0 1\n', ['10.0.0.1'], 'not /proc/net/tcp text'),
])
def test_bad_input_is_named(text, addresses, message):
    with pytest.raises(AnsibleFilterError, match='gpulab.inference.unreachable_peers: .*' + message):
        unreachable_peers(text, addresses)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'unreachable_peers': unreachable_peers}
