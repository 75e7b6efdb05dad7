"""gpulab.inference.roce_fabric_check: full-MTU pings answered from a table (iputils ping output),
the RDMA side read from the fixture sysfs trees (and copies of them with one value changed), and
bad input."""

import shutil
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.modules import roce_fabric_check
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'roce'
CONNECTX = FIXTURES / 'connectx-roce'
PING = '/usr/bin/ping'


def ping(address, payload='8972'):
    return (PING, '-n', '-M', 'do', '-s', payload, '-c', '3', '-W', '2', address)


def ping_ok(address, payload=8972):
    return (0, 'PING %s (%s) %d(%d) bytes of data.\n'
               '%d bytes from %s: icmp_seq=1 ttl=64 time=0.121 ms\n'
               '%d bytes from %s: icmp_seq=2 ttl=64 time=0.098 ms\n'
               '%d bytes from %s: icmp_seq=3 ttl=64 time=0.103 ms\n\n'
               '--- %s ping statistics ---\n'
               '3 packets transmitted, 3 received, 0%% packet loss, time 2030ms\n'
               'rtt min/avg/max/mdev = 0.098/0.107/0.121/0.010 ms\n'
            % (address, address, payload, payload + 28, payload + 8, address, payload + 8, address,
               payload + 8, address, address), '')


def ping_lost(address):
    return (1, 'PING %s (%s) 8972(9000) bytes of data.\n\n--- %s ping statistics ---\n'
               '3 packets transmitted, 0 received, 100%% packet loss, time 2052ms\n\n' % (address, address, address), '')


def ping_too_long(address):
    return (1, 'PING %s (%s) 8972(9000) bytes of data.\n\n--- %s ping statistics ---\n'
               '3 packets transmitted, 0 received, +3 errors, 100%% packet loss, time 2047ms\n\n' % (address, address, address),
            'ping: local error: message too long, mtu=1500\n' * 3)


def ping_frag_needed(address):
    return (1, 'PING %s (%s) 8972(9000) bytes of data.\n'
               'From 10.231.77.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n\n'
               '--- %s ping statistics ---\n'
               '1 packets transmitted, 0 received, +1 errors, 100%% packet loss, time 0ms\n\n' % (address, address, address), '')


def run(answers, bin_path=PING, **args):
    params = {'host': 'node-a', 'interface': 'ens1f0np0', 'address': '10.231.77.10', 'mtu': 9000,
              'peers': {'node-b': '10.231.77.11'}, 'sysfs_root': str(CONNECTX)}
    params.update(args)
    return module_harness.run_module(roce_fabric_check.main, params, answers, bin_path)


def sysfs_copy(tmp_path, changes):
    """The ConnectX tree with some attributes rewritten: {relative path: text}."""
    root = tmp_path / 'sys'
    shutil.copytree(str(CONNECTX), str(root))
    for relative, text in changes.items():
        (root / relative).write_text(text)
    return root


PORT = 'class/infiniband/mlx5_0/ports/1/'


def test_a_good_node_has_no_problems_and_the_exact_pings():
    answers = {ping('10.231.77.11'): ping_ok('10.231.77.11'), ping('10.231.77.12'): ping_ok('10.231.77.12')}
    run_ = run(answers, peers={'node-c': '10.231.77.12', 'node-b': '10.231.77.11'})
    assert run_.kind is ExitJson
    assert [c.args[0] for c in run_.get_bin_path.call_args_list][0] == 'ping'
    assert run_.bounded and all(prefix[2] == '30s' for prefix in run_.bounded)
    # peers in name order
    assert run_.commands == [list(ping('10.231.77.11')), list(ping('10.231.77.12'))]
    assert run_.result['changed'] is False
    assert run_.result['problems'] == []
    assert run_.result['pings'] == [{'peer': 'node-b', 'address': '10.231.77.11', 'rc': 0, 'ok': True},
                                    {'peer': 'node-c', 'address': '10.231.77.12', 'rc': 0, 'ok': True}]
    assert run_.result['rdma'] == {
        'interface': 'ens1f0np0', 'found': True, 'message': '',
        'selection': {'device': 'mlx5_0', 'port': 1, 'gid_index': 3, 'gid': '0000:0000:0000:0000:0000:ffff:0ae7:4d0a',
                      'ipv4': '10.231.77.10', 'state': 'ACTIVE', 'phys_state': 'LinkUp', 'rate_gbps': 200.0,
                      'active_mtu': 4096, 'netdev_mtu': 9000},
        'env': {'NCCL_IB_HCA': '=mlx5_0:1', 'NCCL_IB_GID_INDEX': '3', 'NCCL_SOCKET_IFNAME': '=ens1f0np0',
                'GLOO_SOCKET_IFNAME': 'ens1f0np0', 'GGML_RDMA_DEV': 'mlx5_0', 'GGML_RDMA_GID': '3'},
        'service_directives': [['DeviceAllow', 'char-infiniband_verbs rw'], ['RestrictAddressFamilies', 'AF_NETLINK'],
                               ['LimitMEMLOCK', 'infinity']],
    }


def test_the_payload_fills_one_packet_of_the_mtu():
    answers = {ping('10.231.77.11', '1472'): ping_ok('10.231.77.11', 1472)}
    run_ = run(answers, mtu=1500, check_rdma=False)
    assert run_.kind is ExitJson
    assert run_.commands == [list(ping('10.231.77.11', '1472'))]
    assert (run_.result['problems'], run_.result['rdma']) == ([], None)


@pytest.mark.parametrize('reply,problem', [
    (ping_too_long, 'node-a -> node-b (10.231.77.11): the local MTU is below 9000 (ping -M do: "message too long"); '
                    'give the fabric interface MTU 9000 (roce_mtu) and run the roce role'),
    (ping_frag_needed, 'node-a -> node-b (10.231.77.11): a hop on the path has an MTU below 9000 ("frag needed"); '
                       'set MTU 9000 (or more, 9216 on most switches) on every switch port of the fabric'),
    (ping_lost, "node-a -> node-b (10.231.77.11): no answer to 9000-byte packets with Don't Fragment set; if a plain "
                'ping works, a switch port or the peer drops jumbo frames (set MTU 9000 or more on every hop); '
                'otherwise check the link, the address and the firewall'),
], ids=['local-mtu', 'frag-needed', 'no-answer'])
def test_each_ping_failure_says_what_to_fix(reply, problem):
    run_ = run({ping('10.231.77.11'): reply('10.231.77.11')}, check_rdma=False)
    assert run_.kind is ExitJson
    assert run_.result['problems'] == [problem]
    assert run_.result['pings'] == [{'peer': 'node-b', 'address': '10.231.77.11', 'rc': 1, 'ok': False}]


def test_a_down_port_is_a_problem(tmp_path):
    root = sysfs_copy(tmp_path, {PORT + 'state': '1: DOWN\n', PORT + 'phys_state': '3: Disabled\n'})
    run_ = run({ping('10.231.77.11'): ping_ok('10.231.77.11')}, sysfs_root=str(root))
    assert run_.kind is ExitJson
    assert run_.result['problems'] == [
        'node-a: mlx5_0 port 1 (ens1f0np0) is DOWN (physical state Disabled), not ACTIVE: check the cable, the '
        'switch port and `ip link show ens1f0np0`']


def test_a_small_netdev_mtu_is_a_problem_for_the_rdma_mtu(tmp_path):
    root = sysfs_copy(tmp_path, {'class/net/ens1f0np0/mtu': '1500\n'})
    run_ = run({}, sysfs_root=str(root), peers={})
    assert run_.kind is ExitJson
    assert run_.commands == []
    assert run_.result['rdma']['selection']['active_mtu'] == 1024
    assert run_.result['problems'] == [
        'node-a: mlx5_0 port 1 (ens1f0np0) runs an RDMA MTU of 1024, as its netdev MTU is 1500: give ens1f0np0 '
        'MTU 4192 or more (roce_mtu 9000) for 4096']


def test_a_fabric_address_without_gid_is_a_problem():
    run_ = run({}, address='10.231.77.99', peers={})
    assert run_.kind is ExitJson
    assert run_.result['rdma']['found'] is False
    assert run_.result['problems'] == [
        'node-a: no RoCE v2 GID with an IPv4 address 10.231.77.99 on ens1f0np0 (found: mlx5_0 RoCE v1 index 0 '
        'fe80::a5c:2bff:fe4e:1a2b, mlx5_0 RoCE v2 index 1 fe80::a5c:2bff:fe4e:1a2b, mlx5_0 RoCE v1 index 2 '
        '10.231.77.10, mlx5_0 RoCE v2 index 3 10.231.77.10, mlx5_0 RoCE v1 index 4 fd00:0:0:4d::a, mlx5_0 RoCE v2 '
        'index 5 fd00:0:0:4d::a): give ens1f0np0 its fabric address and check that the RDMA device belongs to it']


def test_a_host_without_rdma_devices_is_a_problem_when_rdma_is_checked():
    run_ = run({}, sysfs_root=str(FIXTURES / 'no-devices'), peers={})
    assert run_.kind is ExitJson
    assert run_.result['problems'] == [
        'node-a: no RDMA devices under class/infiniband: load the NIC driver (mlx5_ib) and rdma-core']


def test_without_the_rdma_check_the_tree_is_not_read():
    run_ = run({}, sysfs_root=str(FIXTURES / 'no-devices'), peers={}, check_rdma=False)
    assert run_.kind is ExitJson
    assert (run_.result['problems'], run_.result['pings'], run_.result['rdma']) == ([], [], None)


def test_every_problem_is_reported_together(tmp_path):
    root = sysfs_copy(tmp_path, {PORT + 'state': '1: DOWN\n', PORT + 'phys_state': '3: Disabled\n'})
    answers = {ping('10.231.77.11'): ping_lost('10.231.77.11'), ping('10.231.77.12'): ping_too_long('10.231.77.12')}
    run_ = run(answers, sysfs_root=str(root), peers={'node-b': '10.231.77.11', 'node-c': '10.231.77.12'})
    assert run_.kind is ExitJson
    assert [problem.split(':')[0] for problem in run_.result['problems']] == [
        'node-a -> node-b (10.231.77.11)', 'node-a -> node-c (10.231.77.12)', 'node-a']


def test_a_malformed_tree_fails_with_the_place(tmp_path):
    root = sysfs_copy(tmp_path, {PORT + 'rate': 'fast\n'})
    run_ = run({}, sysfs_root=str(root), peers={})
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('mlx5_0 port 1: port rate \'fast\' is not "<number> Gb/sec (<width>X <speed>)" '
                                  '(under %s)' % root)


def test_a_peer_name_instead_of_an_address_is_refused_before_any_ping():
    run_ = run({}, peers={'node-b': 'node-b.lab'})
    assert run_.kind is FailJson
    assert run_.result['msg'] == "peer node-b has fabric address 'node-b.lab', not an IPv4 address"
    assert run_.commands == []


def test_without_ping_it_says_what_to_install():
    run_ = run({}, bin_path=None)
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('node-a: ping not found; install iputils-ping (the roce role installs it with '
                                  'roce_packages)')
    assert run_.commands == []


def test_missing_options_are_named():
    run_ = module_harness.run_module(roce_fabric_check.main, {'host': 'node-a'}, {}, PING)
    assert run_.kind is FailJson
    assert run_.result['msg'] == 'missing required arguments: interface, mtu'


def test_peers_must_be_a_mapping():
    run_ = run({}, peers=['10.231.77.11'])
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith("argument 'peers' is of type list and we were unable to convert to dict")
    assert run_.commands == []


def test_check_mode_checks_the_same_way():
    answers = {ping('10.231.77.11'): ping_ok('10.231.77.11')}
    run_ = run(answers, _ansible_check_mode=True)
    assert run_.kind is ExitJson
    assert run_.commands == [list(ping('10.231.77.11'))]
    assert run_.result['problems'] == []


@pytest.mark.parametrize('mtu', [0, 27, 67, -9000, 70000])
def test_an_mtu_no_ping_can_carry_is_refused_before_any_ping(mtu):
    run_ = run({}, mtu=mtu)
    assert run_.kind is FailJson, run_.result
    assert run_.result['msg'] == 'node-a: mtu %d is not an MTU in 68-65535 bytes; give the fabric MTU (roce_mtu, e.g. 9000)' % mtu
    assert run_.commands == []


@pytest.mark.parametrize('address', ['10.231.77.11\n', '10.231.77.11; reboot', '', '999.1.1.1', 'fd00::11'])
def test_a_peer_address_that_is_not_ipv4_is_refused_before_any_ping(address):
    run_ = run({}, peers={'node-b': address})
    assert run_.kind is FailJson, run_.result
    assert run_.result['msg'] == 'peer node-b has fabric address %r, not an IPv4 address' % address
    assert run_.commands == []
