"""roce_facts on the fixture sysfs trees, roce_fabric_plan on captured `ip -j` answers, roce_fabric_check,
roce_ib_write_bw with ping and ib_write_bw answered from a table, roce_rpc_transport on RPC logs."""

import shutil
from pathlib import Path

from ansible_collections.gpulab.inference.plugins.modules import (
    roce_fabric_check,
    roce_fabric_plan,
    roce_facts,
    roce_ib_write_bw,
    roce_rpc_transport,
)
import module_harness
from module_harness import ExitJson, FailJson

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'roce'
IP = '/usr/sbin/ip'
LINK = (IP, '-j', '-d', 'link', 'show')
ADDR = (IP, '-j', 'addr', 'show')


def run_facts(args):
    return module_harness.run_module(roce_facts.main, args, {}, None)


def test_connectx_fabric_interface():
    run = run_facts({'sysfs_root': str(FIXTURES / 'connectx-roce'), 'fabric_interface': 'ens1f0np0',
                     'fabric_address': '10.231.77.10'})
    assert run.kind is ExitJson
    assert run.commands == []
    facts = run.result['ansible_facts']
    assert run.result['changed'] is False
    assert [device['name'] for device in facts['gpulab_roce']] == ['mlx5_0', 'mlx5_1']
    fabric = facts['gpulab_roce_fabric']
    assert fabric['found'] is True
    assert fabric['selection']['gid_index'] == 3
    assert fabric['selection']['device'] == 'mlx5_0'
    assert fabric['env'] == {
        'NCCL_IB_HCA': '=mlx5_0:1', 'NCCL_IB_GID_INDEX': '3', 'NCCL_SOCKET_IFNAME': '=ens1f0np0',
        'GLOO_SOCKET_IFNAME': 'ens1f0np0', 'GGML_RDMA_DEV': 'mlx5_0', 'GGML_RDMA_GID': '3'}


def test_connectx_down_port_interface():
    run = run_facts({'sysfs_root': str(FIXTURES / 'connectx-roce'), 'fabric_interface': 'ens1f1np1'})
    fabric = run.result['ansible_facts']['gpulab_roce_fabric']
    assert run.kind is ExitJson
    assert fabric['found'] is False and fabric['env'] == {}
    assert 'no RoCE v2 GID with an IPv4 address on ens1f1np1' in fabric['message']


def test_infiniband_tree():
    run = run_facts({'sysfs_root': str(FIXTURES / 'infiniband')})
    devices = run.result['ansible_facts']['gpulab_roce']
    assert run.kind is ExitJson
    assert devices[0]['ports'][0]['link_layer'] == 'InfiniBand'
    assert devices[0]['ports'][0]['gids'][0]['type'] == 'IB'
    assert run.result['ansible_facts']['gpulab_roce_fabric']['found'] is False


def test_no_devices_is_an_empty_list():
    run = run_facts({'sysfs_root': str(FIXTURES / 'no-devices'), 'fabric_interface': 'eno1'})
    assert run.kind is ExitJson
    assert run.result['ansible_facts']['gpulab_roce'] == []
    assert 'no RDMA devices' in run.result['ansible_facts']['gpulab_roce_fabric']['message']


def test_malformed_tree_fails_with_the_place(tmp_path):
    shutil.copytree(FIXTURES / 'connectx-roce', tmp_path / 'sys')
    (tmp_path / 'sys' / 'class' / 'infiniband' / 'mlx5_0' / 'ports' / '1' / 'state').write_text('ACTIVE\n')
    run = run_facts({'sysfs_root': str(tmp_path / 'sys')})
    assert run.kind is FailJson
    assert run.result['msg'] == ("mlx5_0 port 1: port state 'ACTIVE' is not \"<number>: <name>\" (under %s)"
                                 % (tmp_path / 'sys'))


# --- roce_fabric_plan ------------------------------------------------------------------------

def ip_answers():
    return {
        LINK: (0, (FIXTURES / 'ip' / 'veth-link.json').read_text(), ''),
        ADDR: (0, (FIXTURES / 'ip' / 'veth-addr.json').read_text(), ''),
    }


def run_plan(**args):
    params = {'interface': 'fabric0', 'address': '192.0.2.10', 'subnet': '192.0.2.0/24', 'mtu': 9000,
              'peers': {'node-a': '192.0.2.10', 'node-b': '192.0.2.11'},
              'network_managers_present': {'networkd_installed': True}}
    params.update(args)
    return module_harness.run_module(roce_fabric_plan.main, params, ip_answers(), IP)


def test_plan_on_the_lab_veth():
    run = run_plan()
    assert run.kind is ExitJson
    assert run.commands == [list(LINK), list(ADDR)]
    assert [c.args[0] for c in run.get_bin_path.call_args_list] == ['ip', 'timeout', 'timeout']
    assert run.bounded == [[module_harness.TIMEOUT, '--kill-after=5s', '30s']] * 2
    assert run.result['cidr'] == '192.0.2.10/24'
    assert run.result['live_ok'] is True
    assert run.result['ping_payload_bytes'] == 8972
    assert run.result['network_manager'] == 'networkd'
    assert run.result['pfc'] == '0,0,0,1,0,0,0,0'


def test_plan_refuses_a_bad_pfc_priority():
    run = run_plan(pfc_priority=9)
    assert run.kind is FailJson
    assert run.result['msg'] == 'roce_pfc_priority 9 is not a priority from 0 to 7'


def test_plan_refuses_a_host_without_network_manager():
    run = run_plan(network_managers_present={})
    assert run.kind is FailJson
    assert run.result['msg'].startswith('no supported network manager on this host')


def test_plan_refuses_a_missing_interface():
    run = run_plan(interface='ens1f0np0')
    assert run.kind is FailJson
    assert run.result['msg'].startswith('gpulab_fabric_interface ens1f0np0 does not exist on this host '
                                        '(interfaces: fabric0, fabric0p)')


def test_plan_refuses_an_mtu_above_the_maximum():
    run = run_plan(mtu=65536)
    assert run.kind is FailJson
    assert 'roce_mtu 65536 is above the maximum MTU 65535 of fabric0' in run.result['msg']


def test_plan_refuses_an_address_outside_the_subnet():
    run = run_plan(address='192.0.3.10')
    assert run.kind is FailJson
    assert run.result['msg'] == ('gpulab_fabric_address 192.0.3.10 is outside the fabric subnet 192.0.2.0/24: '
                                 'fix the address or roce_fabric_subnet')


def test_plan_refuses_duplicate_addresses():
    run = run_plan(peers={'node-a': '192.0.2.10', 'node-b': '192.0.2.10', 'node-c': '192.0.2.12'})
    assert run.kind is FailJson
    assert run.result['msg'] == 'fabric addresses must differ between hosts: 192.0.2.10 is set on node-a, node-b'


def test_plan_reports_ip_failure():
    answers = ip_answers()
    answers[LINK] = (1, '', 'Cannot open netlink socket')
    run = module_harness.run_module(roce_fabric_plan.main, {'interface': 'fabric0', 'address': '192.0.2.10',
                                                            'subnet': '192.0.2.0/24'}, answers, IP)
    assert run.kind is FailJson
    assert run.result['msg'] == '/usr/sbin/ip -j -d link show failed (rc=1): Cannot open netlink socket'


# --- roce_fabric_check -----------------------------------------------------------------------

PING = '/usr/bin/ping'


def ping_of(address):
    return (PING, '-n', '-M', 'do', '-s', '8972', '-c', '3', '-W', '2', address)


def test_fabric_check_all_good():
    answers = {ping_of('10.231.77.11'): (0, '3 packets transmitted, 3 received, 0% packet loss\n', '')}
    run = module_harness.run_module(roce_fabric_check.main, {
        'host': 'node-a', 'interface': 'ens1f0np0', 'address': '10.231.77.10', 'mtu': 9000,
        'peers': {'node-b': '10.231.77.11'}, 'sysfs_root': str(FIXTURES / 'connectx-roce')}, answers, PING)
    assert run.kind is ExitJson
    assert run.commands == [list(ping_of('10.231.77.11'))]
    assert [c.args[0] for c in run.get_bin_path.call_args_list] == ['ping'] + ['timeout'] * len(run.bounded)
    assert run.bounded and all(prefix[2] == '30s' for prefix in run.bounded)
    assert run.result['problems'] == []
    assert run.result['pings'] == [{'peer': 'node-b', 'address': '10.231.77.11', 'rc': 0, 'ok': True}]
    assert run.result['rdma']['selection']['gid_index'] == 3


def test_fabric_check_reports_every_problem():
    answers = {
        ping_of('10.231.77.11'): (1, '', 'ping: local error: message too long, mtu=1500\n'),
        ping_of('10.231.77.12'): (1, '3 packets transmitted, 0 received, 100% packet loss\n', ''),
    }
    run = module_harness.run_module(roce_fabric_check.main, {
        'host': 'node-a', 'interface': 'ens1f1np1', 'mtu': 9000,
        'peers': {'node-c': '10.231.77.12', 'node-b': '10.231.77.11'},
        'sysfs_root': str(FIXTURES / 'connectx-roce')}, answers, PING)
    assert run.kind is ExitJson
    problems = run.result['problems']
    assert len(problems) == 3
    assert problems[0].startswith('node-a -> node-b (10.231.77.11): the local MTU is below 9000')
    assert problems[1].startswith('node-a -> node-c (10.231.77.12): no answer to 9000-byte packets')
    assert problems[2].startswith('node-a: no RoCE v2 GID with an IPv4 address on ens1f1np1')


def test_fabric_check_without_rdma_and_bad_peer():
    run = module_harness.run_module(roce_fabric_check.main, {
        'host': 'node-a', 'interface': 'fabric0', 'mtu': 9000, 'check_rdma': False,
        'peers': {'node-b': 'node-b.example'}}, {}, PING)
    assert run.kind is FailJson
    assert run.result['msg'] == "peer node-b has fabric address 'node-b.example', not an IPv4 address"


def test_fabric_check_without_ping():
    run = module_harness.run_module(roce_fabric_check.main, {
        'host': 'node-a', 'interface': 'fabric0', 'mtu': 9000, 'peers': {'node-b': '192.0.2.11'}}, {}, None)
    assert run.kind is FailJson
    assert run.result['msg'] == 'node-a: ping not found; install iputils-ping (the roce role installs it with roce_packages)'


# --- roce_ib_write_bw ------------------------------------------------------------------------

BW = '/usr/bin/ib_write_bw'
TIMEOUT = '/usr/bin/timeout'
BW_CLIENT = (TIMEOUT, '--kill-after=5s', '35s', BW, '-d', 'mlx5_0', '-i', '1', '-x', '3', '-F', '--report_gbits', '-D', '5', '-p', '18515',
             '10.231.77.10')
BW_REPORT = (' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
             ' 65536      5000             184.21             183.96             0.350880\n')


def run_bw(answer, **args):
    params = {'server': '10.231.77.10', 'device': 'mlx5_0', 'gid_index': 3, 'rate_gbps': 200.0,
              'connect_attempts': 1}
    params.update(args)
    return module_harness.run_module(roce_ib_write_bw.main, params, {BW_CLIENT: answer},
                                     {'ib_write_bw': BW, 'timeout': TIMEOUT})


def test_bandwidth_reached():
    run = run_bw((0, BW_REPORT, ''))
    assert run.kind is ExitJson
    assert run.commands == [list(BW_CLIENT)]
    assert (run.result['gbps'], run.result['ok']) == (183.96, True)


def test_bandwidth_too_low_is_reported_not_failed():
    run = run_bw((0, BW_REPORT, ''), min_fraction=0.95)
    assert run.kind is ExitJson
    assert run.result['ok'] is False
    assert run.result['message'] == '184.0 Gbit/s measured, 190.0 Gbit/s wanted (95% of the 200 Gbit/s port rate)'


def test_bandwidth_connection_failure():
    run = run_bw((1, '', "Couldn't connect to 10.231.77.10:18515\n"))
    assert run.kind is FailJson
    assert "failed (rc=1): Couldn't connect to 10.231.77.10:18515" in run.result['msg']


# --- roce_rpc_transport ----------------------------------------------------------------------

SHARED_RPC_LOG = FIXTURES / 'llama-rpc' / 'rpc-server-h200-tcp.log'


def test_rpc_transport_on_the_h200_capture_warns_when_rdma_expected():
    run = module_harness.run_module(roce_rpc_transport.main, {
        'log': SHARED_RPC_LOG.read_text(), 'host': 'node-b', 'rdma_expected': True}, {}, None)
    assert run.kind is ExitJson
    assert run.result['rdma_capable'] is True and run.result['rdma'] == 0 and run.result['tcp'] > 1
    assert run.warnings == [run.result['warning']]
    assert run.warnings[0].startswith('node-b: %d of %d RPC connections stayed on TCP' % (
        run.result['tcp'], run.result['tcp']))


def test_rpc_transport_rdma_is_quiet():
    log = ('  transport      : TCP (RDMA auto-negotiate enabled)\nAccepted client connection\n'
           'RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=692 inline=220\nRDMA activated: qpn=692->144 mtu=4096 rx_depth=24\n')
    run = module_harness.run_module(roce_rpc_transport.main, {'log': log, 'rdma_expected': True}, {}, None)
    assert run.kind is ExitJson
    assert (run.result['rdma'], run.result['tcp'], run.result['warning'], run.warnings) == (1, 0, '', [])
