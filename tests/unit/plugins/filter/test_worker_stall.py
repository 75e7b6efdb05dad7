"""worker_stall: the head's wrapper's view of its worker connections, endpoints and bound checked."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.worker_stall import FilterModule, worker_stall

ENDPOINTS = [{'address': '10.231.83.11', 'port': 50052}, {'address': 'fd00::12', 'port': 50053}]


def test_the_peers_and_the_count_for_20_s():
    assert worker_stall(ENDPOINTS, 20) == {
        'peers': ['0B53E70A:C384', '000000FD000000000000000012000000:C385'],
        'retransmits': 7, 'at_least_s': 25.4}


def test_0_turns_it_off():
    assert worker_stall(ENDPOINTS[:1], 0) == {'peers': ['0B53E70A:C384'], 'retransmits': 0, 'at_least_s': 0.0}


@pytest.mark.parametrize('endpoints, after_s, message', [
    ([{'address': 'node-b', 'port': 50052}], 20, 'give endpoints with an IP address'),
    ([{'port': 50052}], 20, 'give endpoints with an IP address'),
    (ENDPOINTS, 'soon', 'after_s in seconds'),
    (ENDPOINTS, -1, 'after_s is -1.0; give 0'),
])
def test_bad_input_is_named(endpoints, after_s, message):
    with pytest.raises(AnsibleFilterError, match='gpulab.inference.worker_stall: .*' + message):
        worker_stall(endpoints, after_s)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'worker_stall': worker_stall}
