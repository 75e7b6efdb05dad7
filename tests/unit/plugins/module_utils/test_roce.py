"""roce: sysfs trees in the kernel's layout, GID decoding, GID selection, environment, validation,
ib_write_bw reports and the transport llama.cpp RPC connections negotiated."""

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    RoceError,
    check_bandwidth,
    check_fabric_address,
    check_interface,
    check_mtu,
    check_unique_addresses,
    choose_network_manager,
    duplicate_addresses,
    fabric_facts,
    fabric_plan,
    gid_ipv4,
    gid_ipv6,
    gid_type,
    parse_gid,
    parse_ib_write_bw,
    parse_ip_addr_json,
    parse_ip_link_json,
    parse_port_state,
    parse_rate,
    parse_rpc_transport_log,
    ib_write_bw_command,
    pfc_vector,
    rdma_problems,
    ping_command,
    ping_verdict,
    read_devices,
    roce_active_mtu,
    rpc_rdma_settings,
    select_fabric_gid,
    suggested_env,
    transport_warning,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
FIXTURES = REPO_ROOT / 'tests' / 'unit' / 'fixtures' / 'roce'
SHARED_RPC_LOG = FIXTURES / 'llama-rpc' / 'rpc-server-h200-tcp.log'
MAPPED_10_231_77_10 = '0000:0000:0000:0000:0000:ffff:0ae7:4d0a'


# --- single values ---------------------------------------------------------------------------

@pytest.mark.parametrize('text, expected', [
    ('4: ACTIVE\n', 'ACTIVE'), ('1: DOWN', 'DOWN'), ('5: LinkUp', 'LinkUp'),
    ('3: Disabled', 'Disabled'), ('7: Phy Test', 'Phy Test'), ('0: <unknown>', '<unknown>'),
])
def test_port_state(text, expected):
    assert parse_port_state(text) == expected


@pytest.mark.parametrize('text', ['ACTIVE', '', 'x: ACTIVE', '4:'])
def test_port_state_malformed(text):
    with pytest.raises(RoceError, match='phys_state'):
        parse_port_state(text, 'phys_state')


@pytest.mark.parametrize('text, expected', [
    ('200 Gb/sec (4X HDR)\n', 200.0), ('400 Gb/sec (4X NDR)', 400.0), ('2.5 Gb/sec (1X SDR)', 2.5),
    ('100 Gb/sec (2X HDR)', 100.0), ('10 Gb/sec (1X QDR)', 10.0),
])
def test_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize('text', ['fast', '200 Gbps', ''])
def test_rate_malformed(text):
    with pytest.raises(RoceError, match='port rate'):
        parse_rate(text)


def test_gid_ipv4_mapped():
    assert gid_ipv4(MAPPED_10_231_77_10) == '10.231.77.10'
    assert gid_ipv6(MAPPED_10_231_77_10) == '::ffff:10.231.77.10'


def test_gid_ipv6_forms():
    assert gid_ipv4('fe80:0000:0000:0000:0a5c:2bff:fe4e:1a2b') is None
    assert gid_ipv6('fe80:0000:0000:0000:0a5c:2bff:fe4e:1a2b') == 'fe80::a5c:2bff:fe4e:1a2b'
    assert gid_ipv4('fd00:0000:0000:004d:0000:0000:0000:000a') is None
    # an IPv4-compatible (not mapped) GID encodes no IPv4 address
    assert gid_ipv4('0000:0000:0000:0000:0000:0000:0ae7:4d0a') is None


def test_gid_upper_case_is_normalised():
    assert parse_gid('FE80:0000:0000:0000:0A5C:2BFF:FE4E:1A2B') == 'fe80:0000:0000:0000:0a5c:2bff:fe4e:1a2b'


@pytest.mark.parametrize('text', ['fe80::1', '0000:0000:0000:0000:0000:ffff:0ae7', 'zzzz:0000:0000:0000:0000:ffff:0ae7:4d0a'])
def test_gid_malformed(text):
    with pytest.raises(RoceError, match='GID'):
        parse_gid(text)


def test_gid_types():
    assert gid_type('RoCE v2\n', 'Ethernet') == 'RoCE v2'
    assert gid_type('IB/RoCE v1', 'Ethernet') == 'RoCE v1'
    assert gid_type('IB/RoCE v1', 'InfiniBand') == 'IB'
    with pytest.raises(RoceError, match='RoCE v3'):
        gid_type('RoCE v3', 'Ethernet')


@pytest.mark.parametrize('netdev_mtu, expected', [
    (9000, 4096), (4192, 4096), (4191, 2048), (1500, 1024), (1120, 1024), (1119, 512), (100, 0), (None, None),
])
def test_roce_active_mtu(netdev_mtu, expected):
    assert roce_active_mtu(netdev_mtu) == expected


# --- sysfs trees -----------------------------------------------------------------------------

def test_connectx_tree():
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    assert [device['name'] for device in devices] == ['mlx5_0', 'mlx5_1']
    mlx5_0 = devices[0]
    assert mlx5_0['node_type'] == '1: CA'
    assert mlx5_0['fw_ver'] == '22.39.2048'
    port = mlx5_0['ports'][0]
    assert {k: port[k] for k in ('port', 'state', 'phys_state', 'link_layer', 'rate_gbps', 'netdevs',
                                 'netdev_mtu', 'active_mtu')} == {
        'port': 1, 'state': 'ACTIVE', 'phys_state': 'LinkUp', 'link_layer': 'Ethernet', 'rate_gbps': 200.0,
        'netdevs': ['ens1f0np0'], 'netdev_mtu': 9000, 'active_mtu': 4096}
    # the zero entries 6 and 7 of the GID table are left out
    assert [(g['index'], g['type'], g['ipv4']) for g in port['gids']] == [
        (0, 'RoCE v1', None), (1, 'RoCE v2', None),
        (2, 'RoCE v1', '10.231.77.10'), (3, 'RoCE v2', '10.231.77.10'),
        (4, 'RoCE v1', None), (5, 'RoCE v2', None)]
    assert all(g['netdev'] == 'ens1f0np0' for g in port['gids'])
    assert port['gids'][3]['gid'] == MAPPED_10_231_77_10


def test_down_port():
    port = read_devices(str(FIXTURES / 'connectx-roce'))[1]['ports'][0]
    assert (port['state'], port['phys_state'], port['netdevs'], port['netdev_mtu'], port['active_mtu']) == (
        'DOWN', 'Disabled', ['ens1f1np1'], 1500, 1024)
    assert [g['ipv4'] for g in port['gids']] == [None, None]


def test_infiniband_tree():
    devices = read_devices(str(FIXTURES / 'infiniband'))
    port = devices[0]['ports'][0]
    assert (devices[0]['name'], port['link_layer'], port['state'], port['rate_gbps']) == (
        'mlx5_2', 'InfiniBand', 'ACTIVE', 400.0)
    assert port['gids'] == [{'index': 0, 'gid': 'fe80:0000:0000:0000:a088:c203:0045:6e10', 'type': 'IB',
                             'netdev': None, 'ipv4': None}]
    assert port['active_mtu'] is None and port['netdevs'] == []


def test_no_devices_tree_and_missing_root(tmp_path):
    assert read_devices(str(FIXTURES / 'no-devices')) == []
    assert read_devices(str(tmp_path / 'absent')) == []
    (tmp_path / 'class' / 'infiniband').mkdir(parents=True)
    assert read_devices(str(tmp_path)) == []


def test_malformed_attribute_names_device_and_port(tmp_path):
    shutil.copytree(FIXTURES / 'connectx-roce', tmp_path / 'sys')
    (tmp_path / 'sys' / 'class' / 'infiniband' / 'mlx5_0' / 'ports' / '1' / 'rate').write_text('fast\n')
    with pytest.raises(RoceError, match="mlx5_0 port 1: port rate 'fast'"):
        read_devices(str(tmp_path / 'sys'))


def test_malformed_gid_names_index(tmp_path):
    shutil.copytree(FIXTURES / 'connectx-roce', tmp_path / 'sys')
    (tmp_path / 'sys' / 'class' / 'infiniband' / 'mlx5_1' / 'ports' / '1' / 'gids' / '1').write_text('fe80::1\n')
    with pytest.raises(RoceError, match='mlx5_1 port 1 GID index 1'):
        read_devices(str(tmp_path / 'sys'))


@pytest.mark.parametrize('attribute, content, message', [
    ('state', b'4: ACTIVE\xff\n', r"ports/1/state holds a non-ASCII byte b'\\xff' at offset 9"),
    ('rate', b'\xc3\xa9', 'ports/1/rate holds a non-ASCII byte'),
    ('link_layer', b'Ethern\xe9t\n', 'ports/1/link_layer holds a non-ASCII byte'),
    ('link_layer', b'Token Ring\n', "mlx5_0 port 1: link_layer 'Token Ring' is not one of"),
    ('gids/1', b'fe80:0000:0000:0000:0000:0000:0000:0001\nx\n', 'mlx5_0 port 1 GID index 1'),
    ('gid_attrs/ndevs/1', b'eth0; rm -rf /\n', "gid_attrs/ndevs 'eth0; rm -rf /' is not a network interface name"),
    ('gid_attrs/ndevs/1', b'ens1f0np0\nx\n', 'is not a network interface name'),
    ('gid_attrs/ndevs/1', b'\xffeth0\n', 'ndevs/1 holds a non-ASCII byte'),
])
def test_sysfs_attribute_that_cannot_be_read_names_the_file(tmp_path, attribute, content, message):
    shutil.copytree(FIXTURES / 'connectx-roce', tmp_path / 'sys')
    (tmp_path / 'sys' / 'class' / 'infiniband' / 'mlx5_0' / 'ports' / '1' / attribute).write_bytes(content)
    with pytest.raises(RoceError, match=message):
        read_devices(str(tmp_path / 'sys'))


# --- selection and environment ---------------------------------------------------------------

def test_select_fabric_gid_picks_roce_v2_ipv4():
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    selection = select_fabric_gid(devices, 'ens1f0np0')
    assert selection == {
        'device': 'mlx5_0', 'port': 1, 'gid_index': 3, 'gid': MAPPED_10_231_77_10, 'ipv4': '10.231.77.10',
        'state': 'ACTIVE', 'phys_state': 'LinkUp', 'rate_gbps': 200.0, 'active_mtu': 4096, 'netdev_mtu': 9000}
    assert select_fabric_gid(devices, 'ens1f0np0', '10.231.77.10')['gid_index'] == 3
    assert select_fabric_gid(devices, 'ens1f0np0', '10.231.77.11') is None
    assert select_fabric_gid(devices, 'ens1f1np1') is None
    assert select_fabric_gid(devices, 'eno1') is None


def test_suggested_env():
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    env = suggested_env(select_fabric_gid(devices, 'ens1f0np0'), 'ens1f0np0')
    assert env == {
        'NCCL_IB_HCA': '=mlx5_0:1', 'NCCL_IB_GID_INDEX': '3', 'NCCL_SOCKET_IFNAME': '=ens1f0np0',
        'GLOO_SOCKET_IFNAME': 'ens1f0np0', 'GGML_RDMA_DEV': 'mlx5_0', 'GGML_RDMA_GID': '3'}
    assert suggested_env(None, 'ens1f0np0') == {}


def test_env_on_port_2_has_no_llama_settings():
    selection = {'device': 'mlx5_0', 'port': 2, 'gid_index': 3}
    env = suggested_env(selection, 'ens1f1np1')
    assert env['NCCL_IB_HCA'] == '=mlx5_0:2'
    assert 'GGML_RDMA_DEV' not in env and 'GGML_RDMA_GID' not in env


def test_fabric_facts_found_and_messages():
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    facts = fabric_facts(devices, 'ens1f0np0', '10.231.77.10')
    assert facts['found'] is True and facts['message'] == '' and facts['env']['GGML_RDMA_GID'] == '3'
    assert facts['service_directives'] == [['DeviceAllow', 'char-infiniband_verbs rw'],
                                           ['RestrictAddressFamilies', 'AF_NETLINK'], ['LimitMEMLOCK', 'infinity']]

    facts = fabric_facts(devices, 'ens1f1np1')
    assert facts['found'] is False and facts['env'] == {} and facts['service_directives'] == []
    assert 'no RoCE v2 GID with an IPv4 address on ens1f1np1' in facts['message']
    assert 'mlx5_1 RoCE v2 index 1 fe80::a5c:2bff:fe4e:1a2c' in facts['message']

    facts = fabric_facts([], 'ens1f0np0')
    assert facts['found'] is False and 'no RDMA devices' in facts['message']
    assert fabric_facts(devices, None) == {'interface': None, 'found': False, 'selection': None, 'env': {},
                                           'service_directives': [], 'message': ''}


def test_rpc_rdma_settings_from_fabric_json():
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    fabric = {'interface': 'ens1f0np0', 'rdma': fabric_facts(devices, 'ens1f0np0', '10.231.77.10')}
    settings = rpc_rdma_settings(json.loads(json.dumps(fabric)))
    assert settings == {'expected': True, 'environment': {'GGML_RDMA_DEV': 'mlx5_0', 'GGML_RDMA_GID': '3'},
                        'service_directives': [['DeviceAllow', 'char-infiniband_verbs rw'],
                                               ['RestrictAddressFamilies', 'AF_NETLINK'], ['LimitMEMLOCK', 'infinity']]}
    nothing = {'expected': False, 'environment': {}, 'service_directives': []}
    assert rpc_rdma_settings(None) == nothing
    assert rpc_rdma_settings({'rdma': fabric_facts(devices, 'ens1f1np1')}) == nothing
    # a GID on port 2: NCCL gets it, llama.cpp RPC does not, so RDMA is not expected there
    port2 = dict(fabric['rdma'], env={'NCCL_IB_HCA': '=mlx5_0:2', 'NCCL_IB_GID_INDEX': '3'})
    assert rpc_rdma_settings({'rdma': port2})['expected'] is False


@pytest.mark.parametrize('env, directives, fragment', [
    ({'GGML_RDMA_DEV': 'mlx5_0; rm -rf /'}, None, "GGML_RDMA_DEV='mlx5_0; rm -rf /'"),
    ({'GGML_RDMA_dev': 'mlx5_0'}, None, 'GGML_RDMA_dev'),
    ({'GGML_RDMA_DEV': 'mlx5_0'}, [['ExecStartPre', '/bin/sh']], 'not the ones role roce writes'),
])
def test_rpc_rdma_settings_refuse_what_roce_does_not_write(env, directives, fragment):
    written = [['DeviceAllow', 'char-infiniband_verbs rw'], ['RestrictAddressFamilies', 'AF_NETLINK'],
               ['LimitMEMLOCK', 'infinity']]
    rdma = {'found': True, 'env': env, 'service_directives': directives if directives is not None else written}
    with pytest.raises(RoceError, match='fabric.json') as raised:
        rpc_rdma_settings({'rdma': rdma})
    assert fragment in str(raised.value)


def test_fabric_facts_on_infiniband_tree():
    facts = fabric_facts(read_devices(str(FIXTURES / 'infiniband')), 'ib0')
    assert facts['found'] is False and '(found: none)' in facts['message']


# --- validation ------------------------------------------------------------------------------

def veth_links():
    return parse_ip_link_json((FIXTURES / 'ip' / 'veth-link.json').read_text())


def veth_addresses():
    return parse_ip_addr_json((FIXTURES / 'ip' / 'veth-addr.json').read_text())


def test_ip_link_capture():
    links = veth_links()
    assert links['fabric0'] == {'mtu': 9000, 'min_mtu': 68, 'max_mtu': 65535, 'operstate': 'UP', 'kind': 'veth'}
    assert links['lo']['max_mtu'] == 0
    assert veth_addresses() == {'lo': [], 'fabric0p': [], 'fabric0': ['192.0.2.10/24']}


@pytest.mark.parametrize('text', ['not json', '{"ifname": "x"}', '[{"mtu": 1500}]'])
def test_ip_link_malformed(text):
    with pytest.raises(RoceError, match='ip -j link show'):
        parse_ip_link_json(text)


def test_interface_missing_lists_interfaces():
    with pytest.raises(RoceError, match=r'gpulab_fabric_interface ens9 does not exist on this host '
                                        r'\(interfaces: fabric0, fabric0p\)'):
        check_interface('ens9', veth_links())


@pytest.mark.parametrize('name', ['', 'a' * 16, 'eth0; reboot', None])
def test_interface_name_refused(name):
    with pytest.raises(RoceError, match='is not an interface name'):
        check_interface(name, veth_links())


def test_mtu_limits():
    link = {'mtu': 1500, 'min_mtu': 68, 'max_mtu': 9978}
    assert check_mtu(9000, 'ens1f0np0', link) == 9000
    assert check_mtu(9978, 'ens1f0np0', link) == 9978
    with pytest.raises(RoceError, match=r'roce_mtu 9979 is above the maximum MTU 9978 of ens1f0np0.*'
                                        r'set roce_mtu to 9978 or less'):
        check_mtu(9979, 'ens1f0np0', link)
    with pytest.raises(RoceError, match='below the minimum 68'):
        check_mtu(60, 'ens1f0np0', link)
    with pytest.raises(RoceError, match='not an integer'):
        check_mtu('9000', 'ens1f0np0', link)
    # a driver that gives no maximum (max_mtu 0) is not limited here
    assert check_mtu(65000, 'x', {'max_mtu': 0, 'min_mtu': 0}) == 65000


def test_fabric_address_inside_subnet():
    assert check_fabric_address('10.231.77.10', '10.231.77.0/24') == ('10.231.77.10', 24, '10.231.77.0/24')
    assert check_fabric_address('10.231.77.10/24', '10.231.77.0/24')[0] == '10.231.77.10'
    with pytest.raises(RoceError, match='gpulab_fabric_address 10.231.78.10 is outside the fabric subnet '
                                        '10.231.77.0/24'):
        check_fabric_address('10.231.78.10', '10.231.77.0/24')
    with pytest.raises(RoceError, match='is the broadcast address'):
        check_fabric_address('10.231.77.255', '10.231.77.0/24')
    with pytest.raises(RoceError, match='is the network address'):
        check_fabric_address('10.231.77.0', '10.231.77.0/24')
    with pytest.raises(RoceError, match='roce_fabric_subnet .10.231.77.1/24. is not a network'):
        check_fabric_address('10.231.77.10', '10.231.77.1/24')
    with pytest.raises(RoceError, match='is not an IPv4 address'):
        check_fabric_address('999.1.1.1', '10.231.77.0/24')
    with pytest.raises(RoceError, match='is not IPv4'):
        check_fabric_address('10.231.77.10', 'fd00::/64')


def test_duplicate_addresses():
    peers = {'node-a': '10.231.77.10', 'node-b': '10.231.77.11', 'node-c': '10.231.77.11/24', 'node-d': None}
    assert duplicate_addresses(peers) == {'10.231.77.11': ['node-b', 'node-c']}
    with pytest.raises(RoceError, match='10.231.77.11 is set on node-b, node-c'):
        check_unique_addresses(peers)
    check_unique_addresses({'node-a': '10.231.77.10', 'node-b': '10.231.77.11'})


def test_fabric_plan_live_state():
    peers = {'node-a': '192.0.2.10', 'node-b': '192.0.2.11'}
    plan = fabric_plan('fabric0', '192.0.2.10', '192.0.2.0/24', 9000, veth_links(), veth_addresses(), peers)
    assert plan == {
        'interface': 'fabric0', 'address': '192.0.2.10', 'prefix': 24, 'cidr': '192.0.2.10/24',
        'subnet': '192.0.2.0/24', 'mtu': 9000, 'max_mtu': 65535,
        'live': {'mtu': 9000, 'addresses': ['192.0.2.10/24'], 'operstate': 'UP'},
        'live_ok': True, 'ping_payload_bytes': 8972, 'network_manager': None}
    plan = fabric_plan('fabric0p', '192.0.2.10', '192.0.2.0/24', 9000, veth_links(), veth_addresses(), peers)
    assert plan['live_ok'] is False and plan['live']['mtu'] == 1500


def test_fabric_plan_checks_in_order():
    links = veth_links()
    with pytest.raises(RoceError, match='does not exist'):
        fabric_plan('ens9', '192.0.2.10', '192.0.2.0/24', 9000, links, {}, {})
    with pytest.raises(RoceError, match='above the maximum MTU 65535'):
        fabric_plan('fabric0', '192.0.2.10', '192.0.2.0/24', 70000, links, {}, {})
    with pytest.raises(RoceError, match='outside the fabric subnet'):
        fabric_plan('fabric0', '192.0.3.10', '192.0.2.0/24', 9000, links, {}, {})
    with pytest.raises(RoceError, match='192.0.2.10 is set on node-a, node-b'):
        fabric_plan('fabric0', '192.0.2.10', '192.0.2.0/24', 9000, links, {},
                    {'node-a': '192.0.2.10', 'node-b': '192.0.2.10'})


# --- ib_write_bw -----------------------------------------------------------------------------

IB_WRITE_BW_GBITS = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
Conflicting CPU frequency values detected: 1500.000000 != 3300.016000. CPU Frequency is not max.
 65536      5000             184.21             183.96             0.350880
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_gbits():
    assert parse_ib_write_bw(IB_WRITE_BW_GBITS) == 183.96


def test_ib_write_bw_all_sizes_takes_the_last_row():
    text = (' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
            ' 2          5000           0.142947            0.012281            0.767588\n'
            ' 8388608    5000           394.72             394.61             0.005880\n')
    assert parse_ib_write_bw(text) == 394.61


def test_ib_write_bw_mbytes():
    text = (' #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n'
            ' 65536      5000             11000.00            10000.00             0.160000\n')
    assert parse_ib_write_bw(text) == pytest.approx(83.886, abs=0.001)


def test_ib_write_bw_without_rows():
    with pytest.raises(RoceError, match='no bandwidth row'):
        parse_ib_write_bw('Couldn\'t connect to 10.231.77.10:18515\n')


def test_check_bandwidth():
    assert check_bandwidth(183.96, 200.0, 0.8) == (
        True, '184.0 Gbit/s measured, 160.0 Gbit/s wanted (80% of the 200 Gbit/s port rate)')
    assert check_bandwidth(120.0, 200.0, 0.8)[0] is False
    assert check_bandwidth(120.0, None, 0.8) == (False, 'the port reports no rate')


# --- llama.cpp RPC transport -----------------------------------------------------------------

def test_shared_rpc_log_is_tcp_with_rdma_build():
    # The H200 capture: an RDMA-capable build, loopback connections, none of them upgraded.
    parsed = parse_rpc_transport_log(SHARED_RPC_LOG.read_text())
    assert parsed['rdma_capable'] is True
    assert parsed['rdma'] == 0
    assert parsed['tcp'] == len(parsed['connections']) > 1
    assert parsed['connections'][0] == {'transport': 'TCP', 'device': None, 'gid_index': None, 'roce': None,
                                        'mtu': None}
    assert 'stayed on TCP' in transport_warning('node-b', parsed, True)
    assert transport_warning('node-b', parsed, False) == ''


SERVER_RDMA_LOG = """\
Starting RPC server v7.0.0
  endpoint       : 10.231.77.11:50052
  transport      : TCP (RDMA auto-negotiate enabled)
Accepted client connection
RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=692 inline=220
RDMA activated: qpn=692->144 mtu=4096 rx_depth=24
Client connection closed
Accepted client connection
RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=693 inline=220
RDMA activate failed, staying on TCP
Accepted client connection
"""


def test_server_log_with_rdma_and_fallbacks():
    parsed = parse_rpc_transport_log(SERVER_RDMA_LOG)
    assert parsed['rdma_capable'] is True
    assert parsed['connections'] == [
        {'transport': 'RDMA', 'device': 'mlx5_0', 'gid_index': 3, 'roce': 'RoCE v2', 'mtu': 4096},
        {'transport': 'TCP', 'device': 'mlx5_0', 'gid_index': 3, 'roce': 'RoCE v2', 'mtu': None},
        {'transport': 'TCP', 'device': None, 'gid_index': None, 'roce': None, 'mtu': None},
    ]
    assert (parsed['rdma'], parsed['tcp']) == (1, 2)
    assert transport_warning('node-b', parsed, True).startswith('node-b: 2 of 3 RPC connections stayed on TCP')


def test_client_log_without_accept_lines():
    log = ('RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=144 inline=220\n'
           'RDMA activated: qpn=144->692 mtu=4096 rx_depth=24\n'
           'RDMA probed: dev=mlx5_0 gid=1 qpn=145 inline=220\n'
           'RDMA activated: qpn=145->693 mtu=1024 rx_depth=24\n')
    parsed = parse_rpc_transport_log(log)
    assert parsed['rdma_capable'] is None
    assert [(c['transport'], c['gid_index'], c['roce'], c['mtu']) for c in parsed['connections']] == [
        ('RDMA', 3, 'RoCE v2', 4096), ('RDMA', 1, None, 1024)]
    assert transport_warning('node-a', parsed, True) == ''


def test_build_without_rdma():
    parsed = parse_rpc_transport_log('Starting RPC server v7.0.0\n  transport      : TCP\nAccepted client connection\n')
    assert parsed['rdma_capable'] is False and parsed['tcp'] == 1
    assert 'built without RDMA' in transport_warning('node-c', parsed, True)


def test_ip_link_fixture_is_the_real_capture():
    # The capture comes from `ip -j -d link show` of iproute2 6.1 in a network namespace.
    raw = json.loads((FIXTURES / 'ip' / 'veth-link.json').read_text())
    assert [link['ifname'] for link in raw] == ['lo', 'fabric0p', 'fabric0']


# --- network manager -------------------------------------------------------------------------

@pytest.mark.parametrize('state, expected', [
    ((True, True, False, True), 'netplan'),          # Ubuntu with NetworkManager: netplan renders for it
    ((True, False, True, True), 'netplan'),          # Ubuntu server
    ((False, True, False, True), 'networkmanager'),  # RHEL-like, Debian desktop
    ((False, False, True, True), 'networkd'),
    ((False, False, False, True), 'networkd'),       # Debian with ifupdown gone, networkd installed
])
def test_choose_network_manager_auto(state, expected):
    assert choose_network_manager('auto', *state) == expected


def test_choose_network_manager_none():
    with pytest.raises(RoceError, match='no supported network manager'):
        choose_network_manager('auto', False, False, False, False)


def test_choose_network_manager_requested():
    assert choose_network_manager('networkd', True, True, False, True) == 'networkd'
    with pytest.raises(RoceError, match='roce_network_manager is netplan, but netplan is not installed'):
        choose_network_manager('netplan', False, True, False, True)
    with pytest.raises(RoceError, match='but networkmanager is not running'):
        choose_network_manager('networkmanager', False, False, True, True)
    with pytest.raises(RoceError, match="'ifupdown' is not one of auto, netplan, networkmanager, networkd"):
        choose_network_manager('ifupdown', False, False, True, True)


def test_pfc_vector():
    assert pfc_vector(3) == '0,0,0,1,0,0,0,0'
    assert pfc_vector(0) == '1,0,0,0,0,0,0,0'
    for bad in (8, -1, True, '3'):
        with pytest.raises(RoceError, match='roce_pfc_priority'):
            pfc_vector(bad)


# --- full-MTU ping ---------------------------------------------------------------------------

def test_ping_command():
    expected = ['ping', '-n', '-M', 'do', '-s', '8972', '-c', '3', '-W', '2', '192.0.2.11']
    assert ping_command('192.0.2.11', 9000) == expected
    with pytest.raises(ValueError):
        ping_command('192.0.2.11; reboot', 9000)


def test_ping_verdicts():
    assert ping_verdict('node-a', 'node-b', '192.0.2.11', 9000, 0, '3 packets transmitted, 3 received') == ''
    # iputils: a local MTU below the packet size
    local = ping_verdict('node-a', 'node-b', '192.0.2.11', 9000, 1,
                         'ping: local error: message too long, mtu=1500\n')
    assert local.startswith('node-a -> node-b (192.0.2.11): the local MTU is below 9000')
    assert 'roce_mtu' in local
    frag = ping_verdict('node-a', 'node-b', '192.0.2.11', 9000, 1,
                        'From 192.0.2.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n')
    assert 'every switch port' in frag
    # After a hop's "Frag needed", iputils reports the following packets as a local error: the hop is to blame.
    both = ping_verdict('node-a', 'node-b', '192.0.2.11', 9000, 1,
                        'From 192.0.2.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n'
                        'ping: local error: message too long, mtu=1500\n')
    assert 'every switch port' in both
    silent = ping_verdict('node-a', 'node-b', '192.0.2.11', 9000, 1,
                          '3 packets transmitted, 0 received, 100% packet loss\n')
    assert 'drops jumbo frames' in silent


# --- RDMA side of the fabric check -----------------------------------------------------------

def test_rdma_problems_on_fixture_trees(tmp_path):
    devices = read_devices(str(FIXTURES / 'connectx-roce'))
    assert rdma_problems('node-a', fabric_facts(devices, 'ens1f0np0')) == []
    missing = rdma_problems('node-b', fabric_facts(devices, 'ens1f1np1'))
    assert len(missing) == 1 and missing[0].startswith('node-b: no RoCE v2 GID with an IPv4 address on ens1f1np1')
    # the same NIC with its port down and a 1500-byte netdev MTU
    shutil.copytree(FIXTURES / 'connectx-roce', tmp_path / 'sys')
    port = tmp_path / 'sys' / 'class' / 'infiniband' / 'mlx5_0' / 'ports' / '1'
    (port / 'state').write_text('1: DOWN\n')
    (port / 'phys_state').write_text('2: Polling\n')
    (tmp_path / 'sys' / 'class' / 'net' / 'ens1f0np0' / 'mtu').write_text('1500\n')
    problems = rdma_problems('node-a', fabric_facts(read_devices(str(tmp_path / 'sys')), 'ens1f0np0'))
    assert problems[0].startswith('node-a: mlx5_0 port 1 (ens1f0np0) is DOWN (physical state Polling), not ACTIVE')
    assert problems[1].startswith('node-a: mlx5_0 port 1 (ens1f0np0) runs an RDMA MTU of 1024, as its netdev MTU is 1500')


def test_ib_write_bw_command():
    assert ib_write_bw_command('mlx5_0', 3, 18515, 5) == [
        'ib_write_bw', '-d', 'mlx5_0', '-i', '1', '-x', '3', '-F', '--report_gbits', '-D', '5', '-p', '18515']
    assert ib_write_bw_command('mlx5_0', 3, 18515, 5, server='10.231.77.10')[-1] == '10.231.77.10'
