"""gpulab.inference.roce_fabric_plan on captured `ip -j -d link show` / `ip -j addr show` answers
(iproute2 6.1, the container lab's veth pair fabric0/fabric0p): the exact commands, the plan, the
network manager choice, and every refusal, each naming the option and what to do."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.modules import roce_fabric_plan
import module_harness
from module_harness import ExitJson, FailJson

IP_FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'roce' / 'ip'
IP = '/usr/sbin/ip'
LINK = (IP, '-j', '-d', 'link', 'show')
ADDR = (IP, '-j', 'addr', 'show')
LINK_JSON = (IP_FIXTURES / 'veth-link.json').read_text()
ADDR_JSON = (IP_FIXTURES / 'veth-addr.json').read_text()


def answers(link=None, addr=None):
    return {LINK: link or (0, LINK_JSON, ''), ADDR: addr or (0, ADDR_JSON, '')}


def run(ip_answers=None, **args):
    params = {'interface': 'fabric0', 'address': '192.0.2.10', 'subnet': '192.0.2.0/24',
              'peers': {'node-a': '192.0.2.10', 'node-b': '192.0.2.11', 'node-c': '192.0.2.12'},
              'network_managers_present': {'networkd_installed': True}}
    params.update(args)
    return module_harness.run_module(roce_fabric_plan.main, params, ip_answers or answers(), IP)


def test_plan_for_the_lab_veth_with_the_defaults():
    run_ = run()
    assert run_.kind is ExitJson
    assert [c.args[0] for c in run_.get_bin_path.call_args_list] == ['ip', 'timeout', 'timeout']
    assert run_.bounded == [[module_harness.TIMEOUT, '--kill-after=5s', '30s']] * 2
    assert run_.commands == [list(LINK), list(ADDR)]
    assert run_.result == {
        'changed': False,
        'interface': 'fabric0',
        'address': '192.0.2.10',
        'prefix': 24,
        'cidr': '192.0.2.10/24',
        'subnet': '192.0.2.0/24',
        'mtu': 9000,
        'max_mtu': 65535,
        'live': {'mtu': 9000, 'addresses': ['192.0.2.10/24'], 'operstate': 'UP'},
        'live_ok': True,
        'ping_payload_bytes': 8972,
        'network_manager': 'networkd',
        'pfc': '0,0,0,1,0,0,0,0',
    }


def test_the_peer_interface_needs_its_address_and_mtu():
    # fabric0p: MTU 1500, no IPv4 address yet
    run_ = run(interface='fabric0p', address='192.0.2.11')
    assert run_.kind is ExitJson
    assert run_.result['live'] == {'mtu': 1500, 'addresses': [], 'operstate': 'UP'}
    assert run_.result['live_ok'] is False
    assert run_.result['cidr'] == '192.0.2.11/24'


def test_a_different_mtu_is_not_live_yet():
    run_ = run(mtu=4200)
    assert run_.kind is ExitJson
    assert (run_.result['mtu'], run_.result['ping_payload_bytes'], run_.result['live_ok']) == (4200, 4172, False)


def test_a_different_prefix_is_not_live_yet():
    run_ = run(subnet='192.0.2.0/25')
    assert run_.kind is ExitJson
    assert (run_.result['cidr'], run_.result['live_ok']) == ('192.0.2.10/25', False)


def test_pfc_vector_for_another_priority():
    run_ = run(pfc_priority=0)
    assert run_.kind is ExitJson
    assert run_.result['pfc'] == '1,0,0,0,0,0,0,0'


@pytest.mark.parametrize('present,requested,chosen', [
    ({'netplan': True, 'networkmanager_active': True, 'networkd_active': True}, 'auto', 'netplan'),
    ({'networkmanager_active': True, 'networkd_installed': True}, 'auto', 'networkmanager'),
    ({'networkd_active': True}, 'auto', 'networkd'),
    ({'netplan': True, 'networkd_active': True}, 'networkd', 'networkd'),
], ids=['netplan-first', 'networkmanager-before-networkd', 'networkd', 'requested'])
def test_network_manager_choice(present, requested, chosen):
    run_ = run(network_managers_present=present, network_manager=requested)
    assert run_.kind is ExitJson
    assert run_.result['network_manager'] == chosen


def test_a_requested_network_manager_that_is_not_running_is_refused():
    run_ = run(network_manager='networkmanager', network_managers_present={'networkd_active': True})
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('roce_network_manager is networkmanager, but networkmanager is not running on '
                                  'this host; install it or set roce_network_manager: auto')


def test_no_network_manager_is_refused():
    run_ = run(network_managers_present={})
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('no supported network manager on this host (netplan, NetworkManager, '
                                  'systemd-networkd): install one, or persist the fabric interface yourself and '
                                  'leave gpulab_fabric_interface unset')


def test_an_unknown_network_manager_is_refused_by_its_choices():
    run_ = run(network_manager='ifupdown')
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('value of network_manager must be one of: auto, netplan, networkmanager, '
                                  'networkd, got: ifupdown')
    assert run_.commands == []


@pytest.mark.parametrize('args,message', [
    ({'interface': 'ens1f0np0'},
     "gpulab_fabric_interface ens1f0np0 does not exist on this host (interfaces: fabric0, fabric0p); set it to the "
     "RoCE NIC's netdev (ip link, or ibdev2netdev)"),
    ({'interface': 'fabric0; reboot'},
     'gpulab_fabric_interface \'fabric0; reboot\' is not an interface name (1-15 characters, letters, digits, "_.:@-")'),
    ({'mtu': 65536},
     'roce_mtu 65536 is above the maximum MTU 65535 of fabric0 (ip -d link show fabric0: maxmtu); set roce_mtu to '
     '65535 or less'),
    ({'mtu': 60}, 'roce_mtu 60 is below the minimum 68 of fabric0'),
    ({'address': '192.0.3.10'},
     'gpulab_fabric_address 192.0.3.10 is outside the fabric subnet 192.0.2.0/24: fix the address or roce_fabric_subnet'),
    ({'address': 'node-a'}, "gpulab_fabric_address 'node-a' is not an IPv4 address"),
    ({'address': '192.0.2.0'}, 'gpulab_fabric_address 192.0.2.0 is the network address of 192.0.2.0/24'),
    ({'address': '192.0.2.255'}, 'gpulab_fabric_address 192.0.2.255 is the broadcast address of 192.0.2.0/24'),
    ({'subnet': '192.0.2.10/24'},
     "roce_fabric_subnet '192.0.2.10/24' is not a network in CIDR form (such as 10.231.77.0/24): 192.0.2.10/24 has "
     "host bits set"),
    ({'subnet': 'fd00:4d::/64'}, 'roce_fabric_subnet fd00:4d::/64 is not IPv4; RoCE v2 GIDs here are IPv4-mapped'),
    ({'peers': {'node-a': '192.0.2.10', 'node-b': '192.0.2.11', 'node-c': '192.0.2.11/24'}},
     'fabric addresses must differ between hosts: 192.0.2.11 is set on node-b, node-c'),
    ({'pfc_priority': 8}, 'roce_pfc_priority 8 is not a priority from 0 to 7'),
], ids=['missing-interface', 'interface-name', 'mtu-above-max', 'mtu-below-min', 'outside-subnet', 'not-an-address',
        'network-address', 'broadcast-address', 'host-bits', 'ipv6-subnet', 'duplicate-address', 'pfc-priority'])
def test_bad_input_is_refused_with_the_option_and_the_fix(args, message):
    run_ = run(**args)
    assert run_.kind is FailJson
    assert run_.result['msg'] == message
    # reading the links is all that ran; nothing was changed
    assert run_.commands == [list(LINK), list(ADDR)]


def test_missing_options_are_named():
    run_ = module_harness.run_module(roce_fabric_plan.main, {'interface': 'fabric0'}, answers(), IP)
    assert run_.kind is FailJson
    assert run_.result['msg'] == 'missing required arguments: address, subnet'
    assert run_.commands == []


def test_an_mtu_that_is_no_number_is_named():
    run_ = run(mtu='jumbo')
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith("argument 'mtu' is of type str and we were unable to convert to int")
    assert run_.commands == []


def test_a_failing_ip_link_stops_before_ip_addr():
    run_ = run(answers(link=(255, '', 'Cannot open netlink socket: Operation not permitted\n')))
    assert run_.kind is FailJson
    assert run_.result['msg'] == ('/usr/sbin/ip -j -d link show failed (rc=255): Cannot open netlink socket: '
                                  'Operation not permitted')
    assert (run_.result['rc'], run_.result['cmd']) == (255, list(LINK))
    assert run_.commands == [list(LINK)]


def test_a_failing_ip_addr_is_named():
    run_ = run(answers(addr=(1, '', 'Error: argument "show" is wrong\n')))
    assert run_.kind is FailJson
    assert run_.result['msg'] == '/usr/sbin/ip -j addr show failed (rc=1): Error: argument "show" is wrong'
    assert run_.commands == [list(LINK), list(ADDR)]


def test_an_ip_without_json_output_is_named():
    # iproute2 before 4.13 has no -j and prints its text form
    text = '1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\n'
    run_ = run(answers(link=(0, text, '')))
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith('ip -j link show answered no JSON: ')


def test_a_link_entry_without_name_is_named():
    links = json.loads(LINK_JSON)
    del links[2]['ifname']
    run_ = run(answers(link=(0, json.dumps(links), '')))
    assert run_.kind is FailJson
    assert run_.result['msg'].startswith('ip -j link show entry without ifname: {')


def test_check_mode_plans_the_same_way():
    run_ = run(_ansible_check_mode=True)
    assert run_.kind is ExitJson
    assert run_.commands == [list(LINK), list(ADDR)]
    assert run_.result['live_ok'] is True
