# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind roce_facts, roce_fabric_plan and the fabric checks.

Reads the kernel's RDMA sysfs tree (given its root, so tests point it at fixture trees),
parses GIDs, picks the RoCE v2 IPv4 GID of the fabric interface, suggests the NCCL/Gloo and
llama.cpp RPC environment, validates the fabric settings, and reads the transport that
llama.cpp's RPC connections negotiated from their logs. No AnsibleModule in here: every
function takes data and returns data, or raises RoceError naming the value at fault.

The sysfs layout and formats come from the kernel:
Documentation/ABI/stable/sysfs-class-infiniband and drivers/infiniband/core/sysfs.c
(state "4: ACTIVE", phys_state "5: LinkUp", rate "200 Gb/sec (4X HDR)", gids/<i> in %pI6 form,
gid_attrs/types/<i> "IB/RoCE v1" or "RoCE v2", gid_attrs/ndevs/<i> the netdev name).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import port_number

SYSFS_INFINIBAND = os.path.join('class', 'infiniband')
SYSFS_NET = os.path.join('class', 'net')

ROCE_V1 = 'RoCE v1'
ROCE_V2 = 'RoCE v2'
IB = 'IB'

# The kernel prints "IB/RoCE v1" for both an InfiniBand GID and a RoCE v1 GID; the port's
# link layer tells them apart.
_SYSFS_TYPE_V1 = 'IB/RoCE v1'
_SYSFS_TYPE_V2 = 'RoCE v2'

_STATE_RE = re.compile(r'^(\d+):\s*(\S.*?)\s*\Z')
_RATE_RE = re.compile(r'^(\d+(?:\.\d+)?) Gb/sec(?: \((\d+)X ?([A-Za-z0-9]*)\))?\s*\Z')
_GID_RE = re.compile(r'^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){7}\Z')
_ZERO_GID = '0000:0000:0000:0000:0000:0000:0000:0000'
_IFNAME_RE = re.compile(r'^[A-Za-z0-9_.:@-]{1,15}\Z')

# include/rdma/ib_addr.h iboe_get_mtu(): the RDMA path MTU of a RoCE port is the largest IB
# MTU that fits in the netdev MTU less the RoCE v2 headers (GRH 40 + UDP 8 + BTH 12 + XRC 4 +
# AtomicETH 28 + ICRC 4 = 96 bytes).
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)

# llama.cpp ggml/src/ggml-rpc/transport.cpp: rdma_probe() always uses verbs port 1, takes the
# device from GGML_RDMA_DEV and the GID index from GGML_RDMA_GID (otherwise the GID whose
# bytes equal the TCP socket's local address, RoCE v2 preferred); GGML_RPC_NO_RDMA turns it off.
LLAMA_RDMA_PORT = 1

# ping -M do -s SIZE: SIZE is the ICMP payload; an IPv4 header (20) and an ICMP header (8)
# make the packet SIZE + 28 bytes.
PING_OVERHEAD_BYTES = 28


class RoceError(ValueError):
    """Input (sysfs text, an option, a log) that cannot be used; the message says what to fix."""


# --- single sysfs values ---------------------------------------------------------------------

def parse_port_state(text, field='state'):
    """"4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp" (the same form for state and phys_state)."""
    match = _STATE_RE.match(text.strip())
    if not match:
        raise RoceError('port %s %r is not "<number>: <name>"' % (field, text.strip()))
    return match.group(2)


def parse_rate(text):
    """"200 Gb/sec (4X HDR)" -> 200.0; "2.5 Gb/sec (1X SDR)" -> 2.5 (Gbit/s)."""
    match = _RATE_RE.match(text.strip())
    if not match:
        raise RoceError('port rate %r is not "<number> Gb/sec (<width>X <speed>)"' % (text.strip(),))
    return float(match.group(1))


def parse_gid(text):
    """A GID as sysfs prints it (%pI6: eight groups of four hex digits), lower-cased."""
    gid = text.strip().lower()
    if not _GID_RE.match(gid):
        raise RoceError('GID %r is not eight colon-separated groups of four hex digits' % (text.strip(),))
    return gid


def gid_is_zero(gid):
    return gid == _ZERO_GID


def gid_ipv4(gid):
    """The IPv4 address an IPv4-mapped GID (::ffff:a.b.c.d) encodes, or None for any other GID."""
    address = ipaddress.IPv6Address(parse_gid(gid))
    mapped = address.ipv4_mapped
    return None if mapped is None else str(mapped)


def gid_ipv6(gid):
    """The GID in compressed IPv6 notation (fe80::..., ::ffff:10.0.0.1 on every Python version)."""
    address = ipaddress.IPv6Address(parse_gid(gid))
    if address.ipv4_mapped is not None:
        return '::ffff:%s' % address.ipv4_mapped
    return str(address)


def gid_type(sysfs_type, link_layer):
    """gid_attrs/types text -> "RoCE v2", "RoCE v1" (Ethernet port) or "IB" (InfiniBand port)."""
    text = sysfs_type.strip()
    if text == _SYSFS_TYPE_V2:
        return ROCE_V2
    if text == _SYSFS_TYPE_V1:
        return ROCE_V1 if link_layer == 'Ethernet' else IB
    raise RoceError('GID type %r is neither %r nor %r' % (text, _SYSFS_TYPE_V1, _SYSFS_TYPE_V2))


def roce_active_mtu(netdev_mtu):
    """The RDMA path MTU the kernel gives a RoCE port whose netdev has this MTU (0 when too small)."""
    if netdev_mtu is None:
        return None
    usable = int(netdev_mtu) - ROCE_HEADER_BYTES
    for ib_mtu in IB_MTUS:
        if usable >= ib_mtu:
            return ib_mtu
    return 0


# --- the sysfs tree --------------------------------------------------------------------------

# What drivers/infiniband/core/sysfs.c show_port_link_layer() prints.
LINK_LAYERS = ('InfiniBand', 'Ethernet', 'Unknown')


def _read(path):
    """A sysfs attribute's text, or None where it is missing or unreadable (the kernel answers
    EINVAL for the attributes of an unused GID table entry, and IB ports have no ndevs)."""
    try:
        with open(path, 'rb') as handle:
            data = handle.read()
    except (IOError, OSError):
        return None
    try:
        return data.decode('ascii').strip()
    except UnicodeDecodeError as exc:
        # Every attribute read here is ASCII in the kernel; anything else is not sysfs (a fixture
        # tree, a bind mount) and is not guessed at.
        raise RoceError('%s holds a non-ASCII byte %r at offset %d; sysfs_root must point at a sysfs tree'
                        % (path, data[exc.start:exc.start + 1], exc.start)) from None


def _numeric_entries(directory):
    try:
        names = os.listdir(directory)
    except (IOError, OSError):
        return []
    return sorted(int(name) for name in names if name.isdigit())


def _netdev_mtu(sysfs_root, netdev):
    if not netdev:
        return None
    text = _read(os.path.join(sysfs_root, SYSFS_NET, netdev, 'mtu'))
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise RoceError('%s/%s/mtu is %r, not a number' % (SYSFS_NET, netdev, text)) from None


def read_port(sysfs_root, device, port):
    """One port of an RDMA device, read from <sysfs_root>/class/infiniband/<device>/ports/<port>."""
    port_dir = os.path.join(sysfs_root, SYSFS_INFINIBAND, device, 'ports', str(port))
    where = '%s port %d' % (device, port)
    link_layer = _read(os.path.join(port_dir, 'link_layer')) or 'InfiniBand'
    if link_layer not in LINK_LAYERS:
        raise RoceError('%s: link_layer %r is not one of %s' % (where, link_layer, ', '.join(LINK_LAYERS)))
    try:
        state_text = _read(os.path.join(port_dir, 'state'))
        phys_text = _read(os.path.join(port_dir, 'phys_state'))
        rate_text = _read(os.path.join(port_dir, 'rate'))
        state = parse_port_state(state_text, 'state') if state_text else None
        phys_state = parse_port_state(phys_text, 'phys_state') if phys_text else None
        rate_gbps = parse_rate(rate_text) if rate_text else None
    except RoceError as exc:
        raise RoceError('%s: %s' % (where, exc)) from None

    gids = []
    for index in _numeric_entries(os.path.join(port_dir, 'gids')):
        text = _read(os.path.join(port_dir, 'gids', str(index)))
        if text is None:
            continue
        try:
            gid = parse_gid(text)
        except RoceError as exc:
            raise RoceError('%s GID index %d: %s' % (where, index, exc)) from None
        if gid_is_zero(gid):
            continue
        type_text = _read(os.path.join(port_dir, 'gid_attrs', 'types', str(index)))
        try:
            kind = gid_type(type_text, link_layer) if type_text else None
        except RoceError as exc:
            raise RoceError('%s GID index %d: %s' % (where, index, exc)) from None
        netdev = _read(os.path.join(port_dir, 'gid_attrs', 'ndevs', str(index))) or None
        if netdev is not None and not _IFNAME_RE.match(netdev):
            raise RoceError('%s GID index %d: gid_attrs/ndevs %r is not a network interface name' % (where, index, netdev))
        gids.append({
            'index': index,
            'gid': gid,
            'type': kind,
            'netdev': netdev,
            'ipv4': gid_ipv4(gid),
        })

    netdevs = sorted({gid['netdev'] for gid in gids if gid['netdev']})
    netdev_mtu = _netdev_mtu(sysfs_root, netdevs[0]) if len(netdevs) == 1 else None
    return {
        'port': port,
        'state': state,
        'phys_state': phys_state,
        'link_layer': link_layer,
        'rate': rate_text,
        'rate_gbps': rate_gbps,
        'netdevs': netdevs,
        'netdev_mtu': netdev_mtu,
        # No sysfs attribute holds the active MTU; for a RoCE port it follows from the netdev
        # MTU (iboe_get_mtu); for an InfiniBand port only ibv_query_port knows it.
        'active_mtu': roce_active_mtu(netdev_mtu) if link_layer == 'Ethernet' else None,
        'gids': gids,
    }


def read_devices(sysfs_root):
    """Every RDMA device and port under <sysfs_root>/class/infiniband; [] when there are none."""
    base = os.path.join(sysfs_root, SYSFS_INFINIBAND)
    try:
        names = sorted(os.listdir(base))
    except (IOError, OSError):
        return []
    devices = []
    for name in names:
        device_dir = os.path.join(base, name)
        ports = [read_port(sysfs_root, name, port)
                 for port in _numeric_entries(os.path.join(device_dir, 'ports'))]
        devices.append({
            'name': name,
            'node_type': _read(os.path.join(device_dir, 'node_type')),
            'fw_ver': _read(os.path.join(device_dir, 'fw_ver')),
            'ports': ports,
        })
    return devices


# --- selection and suggested environment -----------------------------------------------------

def select_fabric_gid(devices, interface, address=None):
    """The RoCE v2 IPv4 GID of the fabric interface: {device, port, index, gid, ipv4, ...}.

    Only GIDs whose netdev is `interface`. With `address`, only the GID that encodes it.
    The lowest index wins (the kernel adds the RoCE v1 and v2 GIDs of an address together).
    None when there is none.
    """
    candidates = []
    for device in devices:
        for port in device['ports']:
            for gid in port['gids']:
                if gid['netdev'] != interface or gid['type'] != ROCE_V2 or gid['ipv4'] is None:
                    continue
                if address is not None and gid['ipv4'] != address:
                    continue
                candidates.append((device['name'], port['port'], gid['index'], port, gid))
    if not candidates:
        return None
    name, port_number, index, port, gid = sorted(candidates, key=lambda c: c[:3])[0]
    return {
        'device': name,
        'port': port_number,
        'gid_index': index,
        'gid': gid['gid'],
        'ipv4': gid['ipv4'],
        'state': port['state'],
        'phys_state': port['phys_state'],
        'rate_gbps': port['rate_gbps'],
        'active_mtu': port['active_mtu'],
        'netdev_mtu': port['netdev_mtu'],
    }


def interface_gid_types(devices, interface):
    """Every GID type found on `interface` (to say what is there when no RoCE v2 IPv4 GID is)."""
    found = []
    for device in devices:
        for port in device['ports']:
            for gid in port['gids']:
                if gid['netdev'] == interface:
                    found.append('%s %s index %d %s' % (device['name'], gid['type'], gid['index'],
                                                        gid['ipv4'] or gid_ipv6(gid['gid'])))
    return found


def suggested_env(selection, interface):
    """NCCL/Gloo and llama.cpp RPC environment for the selected GID; {} without a selection.

    NCCL_IB_HCA "=dev:port" and NCCL_SOCKET_IFNAME "=name" match exactly (a bare "mlx5_1" would
    also match mlx5_10..); Gloo takes a plain interface name.
    """
    if not selection:
        return {}
    env = {
        'NCCL_IB_HCA': '=%s:%d' % (selection['device'], selection['port']),
        'NCCL_IB_GID_INDEX': str(selection['gid_index']),
        'NCCL_SOCKET_IFNAME': '=' + interface,
        'GLOO_SOCKET_IFNAME': interface,
    }
    if selection['port'] == LLAMA_RDMA_PORT:
        env['GGML_RDMA_DEV'] = selection['device']
        env['GGML_RDMA_GID'] = str(selection['gid_index'])
    return env


# What a hardened systemd service needs to use verbs (gpulab_service_hardening closes devices and
# address families): the uverbs character devices (/proc/devices: "infiniband_verbs"), netlink
# (rdma-core finds devices over NETLINK_RDMA), and locked memory for the registered buffers
# (llama.cpp: 6 MiB receive ring + 256 KiB send buffer per connection, transport.cpp
# RDMA_RX_DEPTH x RDMA_CHUNK; more than the 8 MiB default once a second connection opens).
RDMA_SERVICE_DIRECTIVES = (
    ('DeviceAllow', 'char-infiniband_verbs rw'),
    ('RestrictAddressFamilies', 'AF_NETLINK'),
    ('LimitMEMLOCK', 'infinity'),
)


_GGML_RDMA_NAME_RE = re.compile(r'^GGML_RDMA_[A-Z_]+\Z')
_GGML_RDMA_VALUE_RE = re.compile(r'^[A-Za-z0-9_.:-]{1,64}\Z')


def rpc_rdma_settings(fabric):
    """What a llama.cpp RPC process (server or head) takes from the node's fabric.json (role roce).

    fabric: the document, or None where the role did not run. Returns {'expected': whether the
    fabric has a RoCE v2 GID for llama.cpp, 'environment': its GGML_RDMA_* variables,
    'service_directives': what a hardened systemd service needs to reach the verbs device}.
    The values reach a wrapper script, so each is checked against what roce_facts writes.
    """
    rdma = (fabric or {}).get('rdma') or {}
    if not isinstance(rdma, dict) or not rdma.get('found'):
        return {'expected': False, 'environment': {}, 'service_directives': []}
    environment = {}
    for name, value in sorted((rdma.get('env') or {}).items()):
        if not name.startswith('GGML_RDMA_'):
            continue
        if not _GGML_RDMA_NAME_RE.match(name) or not _GGML_RDMA_VALUE_RE.match(str(value)):
            raise RoceError('fabric.json names %s=%r for llama.cpp RPC, which is not a device name or GID '
                            'index: run the roce role again, or remove %s' % (name, value, name))
        environment[name] = str(value)
    directives = [list(pair) for pair in rdma.get('service_directives') or []]
    if directives != [list(pair) for pair in RDMA_SERVICE_DIRECTIVES]:
        raise RoceError('fabric.json lists service directives %r, not the ones role roce writes: '
                        'run the roce role again' % (directives,))
    return {'expected': bool(environment), 'environment': environment, 'service_directives': directives}


def rdma_service_directives(selection):
    """[directive, value] pairs a systemd service adds to reach the selected RDMA device; [] without one."""
    if not selection:
        return []
    return [list(pair) for pair in RDMA_SERVICE_DIRECTIVES]


def fabric_facts(devices, interface, address=None):
    """The derived part of gpulab_roce_fabric: selection, environment and why it is missing."""
    if not interface:
        return {'interface': None, 'found': False, 'selection': None, 'env': {}, 'service_directives': [],
                'message': ''}
    selection = select_fabric_gid(devices, interface, address)
    if selection:
        message = ''
        if selection['port'] != LLAMA_RDMA_PORT:
            message = ('the RoCE v2 GID of %s is on %s port %d; llama.cpp RPC uses port %d only, so '
                       'it gets no GGML_RDMA_* settings' % (interface, selection['device'],
                                                            selection['port'], LLAMA_RDMA_PORT))
    elif not devices:
        message = 'no RDMA devices under class/infiniband: load the NIC driver (mlx5_ib) and rdma-core'
    else:
        present = interface_gid_types(devices, interface)
        message = ('no RoCE v2 GID with an IPv4 address%s on %s (found: %s): give %s its fabric '
                   'address and check that the RDMA device belongs to it'
                   % (' ' + address if address else '', interface, ', '.join(present) or 'none',
                      interface))
    return {
        'interface': interface,
        'found': selection is not None,
        'selection': selection,
        'env': suggested_env(selection, interface),
        'service_directives': rdma_service_directives(selection),
        'message': message,
    }


# --- validation of the fabric settings -------------------------------------------------------

def parse_ip_link_json(text):
    """`ip -j -d link show` -> {ifname: {mtu, min_mtu, max_mtu, operstate, kind}}."""
    try:
        links = json.loads(text) if text.strip() else []
    except ValueError as exc:
        raise RoceError('ip -j link show answered no JSON: %s' % exc) from None
    if not isinstance(links, list):
        raise RoceError('ip -j link show answered %s, expected a list' % type(links).__name__)
    result = {}
    for link in links:
        if not isinstance(link, dict) or 'ifname' not in link:
            raise RoceError('ip -j link show entry without ifname: %r' % (link,))
        result[link['ifname']] = {
            'mtu': link.get('mtu'),
            'min_mtu': link.get('min_mtu'),
            'max_mtu': link.get('max_mtu'),
            'operstate': link.get('operstate'),
            'kind': (link.get('linkinfo') or {}).get('info_kind'),
        }
    return result


def parse_ip_addr_json(text):
    """`ip -j addr show` -> {ifname: ["10.0.0.1/24", ...]} (IPv4 addresses with their prefix)."""
    try:
        links = json.loads(text) if text.strip() else []
    except ValueError as exc:
        raise RoceError('ip -j addr show answered no JSON: %s' % exc) from None
    result = {}
    for link in links:
        result[link.get('ifname')] = ['%s/%d' % (info['local'], info['prefixlen'])
                                      for info in link.get('addr_info', [])
                                      if info.get('family') == 'inet']
    return result


def check_interface_name(interface):
    if not isinstance(interface, str) or not _IFNAME_RE.match(interface):
        raise RoceError('gpulab_fabric_interface %r is not an interface name (1-15 characters, '
                        'letters, digits, "_.:@-")' % (interface,))
    return interface


def check_interface(interface, links):
    """The interface's entry of parse_ip_link_json, or an error that lists what exists."""
    check_interface_name(interface)
    if interface not in links:
        names = ', '.join(sorted(name for name in links if name != 'lo')) or 'none'
        raise RoceError('gpulab_fabric_interface %s does not exist on this host (interfaces: %s); '
                        'set it to the RoCE NIC\'s netdev (ip link, or ibdev2netdev)' % (interface, names))
    return links[interface]


def check_mtu(mtu, interface, link):
    """The MTU, or an error when it is outside what the NIC takes (max_mtu 0 means no limit given)."""
    if not isinstance(mtu, int) or isinstance(mtu, bool):
        raise RoceError('roce_mtu %r is not an integer' % (mtu,))
    min_mtu = link.get('min_mtu') or 68
    max_mtu = link.get('max_mtu') or 0
    if mtu < min_mtu:
        raise RoceError('roce_mtu %d is below the minimum %d of %s' % (mtu, min_mtu, interface))
    if max_mtu and mtu > max_mtu:
        raise RoceError('roce_mtu %d is above the maximum MTU %d of %s (ip -d link show %s: maxmtu); '
                        'set roce_mtu to %d or less' % (mtu, max_mtu, interface, interface, max_mtu))
    return mtu


def check_fabric_address(address, subnet):
    """(address, prefix length, network) for an address inside the fabric subnet, else an error."""
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except (ValueError, TypeError) as exc:
        raise RoceError('roce_fabric_subnet %r is not a network in CIDR form (such as 10.231.77.0/24): %s'
                        % (subnet, exc)) from None
    if network.version != 4:
        raise RoceError('roce_fabric_subnet %s is not IPv4; RoCE v2 GIDs here are IPv4-mapped' % subnet)
    try:
        ip = ipaddress.IPv4Address(str(address).split('/', maxsplit=1)[0])
    except (ValueError, TypeError):
        raise RoceError('gpulab_fabric_address %r is not an IPv4 address' % (address,)) from None
    if ip not in network:
        raise RoceError('gpulab_fabric_address %s is outside the fabric subnet %s: fix the address or '
                        'roce_fabric_subnet' % (ip, network))
    if network.prefixlen < 31 and ip in (network.network_address, network.broadcast_address):
        raise RoceError('gpulab_fabric_address %s is the %s address of %s' % (
            ip, 'network' if ip == network.network_address else 'broadcast', network))
    return str(ip), network.prefixlen, str(network)


def duplicate_addresses(addresses):
    """{address: [hosts]} for every address given to more than one host; {} when all differ."""
    by_address = {}
    for host, address in sorted(addresses.items()):
        if address in (None, ''):
            continue
        by_address.setdefault(str(address).split('/', maxsplit=1)[0], []).append(host)
    return dict((address, hosts) for address, hosts in by_address.items() if len(hosts) > 1)


def check_unique_addresses(addresses):
    duplicates = duplicate_addresses(addresses)
    if duplicates:
        raise RoceError('fabric addresses must differ between hosts: %s' % '; '.join(
            '%s is set on %s' % (address, ', '.join(hosts)) for address, hosts in sorted(duplicates.items())))


def fabric_plan(interface, address, subnet, mtu, links, addresses, peers, network_manager=None):
    """Validate everything before any change; returns what the role applies and checks live.

    links: parse_ip_link_json; addresses: parse_ip_addr_json; peers: {host: fabric address}
    of every host in the play (this host included).
    """
    link = check_interface(interface, links)
    check_mtu(mtu, interface, link)
    ip, prefix, network = check_fabric_address(address, subnet)
    check_unique_addresses(peers)
    cidr = '%s/%d' % (ip, prefix)
    live_addresses = addresses.get(interface, [])
    return {
        'interface': interface,
        'address': ip,
        'prefix': prefix,
        'cidr': cidr,
        'subnet': network,
        'mtu': mtu,
        'max_mtu': link.get('max_mtu') or None,
        'live': {'mtu': link.get('mtu'), 'addresses': live_addresses, 'operstate': link.get('operstate')},
        'live_ok': link.get('mtu') == mtu and cidr in live_addresses,
        'ping_payload_bytes': mtu - PING_OVERHEAD_BYTES,
        'network_manager': network_manager,
    }


def pfc_vector(priority):
    """mlnx_qos --pfc argument enabling PFC on one priority: 3 -> "0,0,0,1,0,0,0,0"."""
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7:
        raise RoceError('roce_pfc_priority %r is not a priority from 0 to 7' % (priority,))
    return ','.join('1' if p == priority else '0' for p in range(8))


QOS_TRUST_MODES = ('dscp', 'pcp')


def qos_script(interface, tool_path, trust, priority, ecn):
    """The lines (after the shebang) of the boot script that makes the fabric lossless for RoCE:
    the NIC trusts DSCP (or PCP), PFC on `priority` only, and with `ecn` ECN's notification and
    reaction points enabled on that priority, where the NIC exposes them in sysfs."""
    check_interface_name(interface)
    if trust not in QOS_TRUST_MODES:
        raise RoceError('roce_qos_trust %r is not one of %s' % (trust, ', '.join(QOS_TRUST_MODES)))
    pfc = pfc_vector(priority)
    if not isinstance(tool_path, str) or not tool_path.startswith('/') or re.search(r'[\x00-\x1f\x7f]', tool_path):
        raise RoceError('the QoS tool was found at %r, not an absolute path: check roce_qos_tool' % (tool_path,))
    if not isinstance(ecn, bool):
        raise RoceError('roce_ecn_enabled %r is not a boolean' % (ecn,))
    lines = [
        '# Lossless RoCE on %s: trust %s, PFC on priority %d only%s.'
        % (interface, trust, priority, ', ECN (notification and reaction points) on it' if ecn else ''),
        'set -eu',
        'interface=%s' % shlex.quote(interface),
        'priority=%d' % priority,
        '%s -i "$interface" --trust %s --pfc %s' % (shlex.quote(tool_path), trust, pfc),
    ]
    if ecn:
        lines += [
            'for point in roce_np roce_rp; do',
            '  file="/sys/class/net/$interface/ecn/$point/enable/$priority"',
            '  if [ -w "$file" ]; then',
            '    echo 1 > "$file"',
            '  else',
            '    echo "gpulab-roce-qos: $file is missing: ECN left as it is" >&2',
            '  fi',
            'done',
        ]
    return lines


NETWORK_MANAGERS = ('netplan', 'networkmanager', 'networkd')


def choose_network_manager(requested, netplan, networkmanager_active, networkd_active, networkd_installed):
    """Which network manager persists the fabric interface: the requested one, or, for "auto",
    netplan where it is installed (Ubuntu: it renders for networkd or NetworkManager), else an
    active NetworkManager, else systemd-networkd (active, or installed and enabled by the role)."""
    present = {
        'netplan': bool(netplan),
        'networkmanager': bool(networkmanager_active),
        'networkd': bool(networkd_active or networkd_installed),
    }
    if requested != 'auto':
        if requested not in NETWORK_MANAGERS:
            raise RoceError('roce_network_manager %r is not one of auto, %s' % (requested, ', '.join(NETWORK_MANAGERS)))
        if not present[requested]:
            raise RoceError('roce_network_manager is %s, but %s is not %s on this host; install it or set '
                            'roce_network_manager: auto' % (requested, requested,
                                                            'running' if requested == 'networkmanager' else 'installed'))
        return requested
    for name in NETWORK_MANAGERS:
        if present[name]:
            return name
    raise RoceError('no supported network manager on this host (netplan, NetworkManager, systemd-networkd): '
                    'install one, or persist the fabric interface yourself and leave gpulab_fabric_interface unset')


# --- reachability at full MTU ----------------------------------------------------------------

# IPv4's smallest MTU (RFC 791) and the largest an interface can have.
PING_MTU_RANGE = (68, 65535)


def ping_mtu_problem(mtu):
    """Why a full-MTU ping cannot be built for mtu (None when it can)."""
    low, high = PING_MTU_RANGE
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not low <= mtu <= high:
        return 'mtu %r is not an MTU in %d-%d bytes; give the fabric MTU (roce_mtu, e.g. 9000)' % (mtu, low, high)
    return None


def ping_command(address, mtu, count=3, timeout_s=2):
    """ping that sends full-MTU packets with Don't Fragment set (-M do): payload = MTU - 28."""
    ip = str(ipaddress.IPv4Address(address))
    return ['ping', '-n', '-M', 'do', '-s', str(mtu - PING_OVERHEAD_BYTES), '-c', str(count),
            '-W', str(timeout_s), ip]


def ping_verdict(host, peer, address, mtu, rc, output):
    """'' when the full-MTU ping went through, else what failed and what to fix."""
    if rc == 0:
        return ''
    text = output.lower()
    # A hop's "Frag needed" first: after one, Linux lowers the path MTU and reports the packets that
    # follow as a local "message too long", which would blame the wrong end.
    if 'frag needed' in text:
        return ('%s -> %s (%s): a hop on the path has an MTU below %d ("frag needed"); set MTU %d (or '
                'more, 9216 on most switches) on every switch port of the fabric' % (host, peer, address, mtu, mtu))
    if 'message too long' in text or 'local error' in text:
        return ('%s -> %s (%s): the local MTU is below %d (ping -M do: "message too long"); give the '
                'fabric interface MTU %d (roce_mtu) and run the roce role' % (host, peer, address, mtu, mtu))
    return ('%s -> %s (%s): no answer to %d-byte packets with Don\'t Fragment set; if a plain ping '
            'works, a switch port or the peer drops jumbo frames (set MTU %d or more on every hop); '
            'otherwise check the link, the address and the firewall' % (host, peer, address, mtu, mtu))


def rdma_problems(host, fabric):
    """What is wrong with the RDMA side of the fabric interface (fabric_facts), as messages; [] when fine."""
    interface = fabric['interface']
    if not fabric['found']:
        return ['%s: %s' % (host, fabric['message'])]
    selection = fabric['selection']
    where = '%s: %s port %d (%s)' % (host, selection['device'], selection['port'], interface)
    problems = []
    if selection['state'] != 'ACTIVE':
        problems.append('%s is %s (physical state %s), not ACTIVE: check the cable, the switch port and '
                        '`ip link show %s`' % (where, selection['state'], selection['phys_state'], interface))
    if selection['active_mtu'] is not None and selection['active_mtu'] < 4096:
        problems.append('%s runs an RDMA MTU of %d, as its netdev MTU is %s: give %s MTU 4192 or more '
                        '(roce_mtu 9000) for 4096' % (where, selection['active_mtu'], selection['netdev_mtu'],
                                                      interface))
    return problems


# Connection setup and the report take seconds beyond -D; a client whose server never answers the
# exchange, or a wedged device, would otherwise wait for ever.
IB_WRITE_BW_GRACE_S = 30
_RDMA_DEVICE_RE = re.compile(r'\A[A-Za-z0-9_.-]{1,64}\Z')


def check_ib_write_bw_options(device, gid_index, tcp_port, duration_s, rate_gbps, min_fraction):
    """Refuse options ib_write_bw cannot run with, or a verdict cannot use, naming the option."""
    if not _RDMA_DEVICE_RE.match(str(device)):
        raise RoceError('device %r is not an RDMA device name (e.g. mlx5_0)' % (device,))
    if gid_index < 0:
        raise RoceError('gid_index %d is negative; give the GID index roce_facts selected' % gid_index)
    port_number(tcp_port, 'tcp_port', RoceError)
    if duration_s < 1:
        raise RoceError('duration_s %d must be 1 or more' % duration_s)
    if not rate_gbps >= 0:
        raise RoceError('rate_gbps %r is negative; give the port rate from roce_facts' % (rate_gbps,))
    if not 0 < min_fraction <= 1:
        raise RoceError('min_fraction %r is not a fraction in (0, 1]' % (min_fraction,))


def ib_write_bw_timeout_s(duration_s):
    """How long one ib_write_bw run may take before it is stopped."""
    return duration_s + IB_WRITE_BW_GRACE_S


def ib_write_bw_command(device, gid_index, tcp_port, duration_s, server=None, ib_port=1):
    """perftest's ib_write_bw as server (server=None) or as client of `server`; Gbit/s reports."""
    command = ['ib_write_bw', '-d', device, '-i', str(ib_port), '-x', str(gid_index), '-F', '--report_gbits',
               '-D', str(duration_s), '-p', str(tcp_port)]
    if server is not None:
        command.append(str(ipaddress.IPv4Address(server)))
    return command


# --- bandwidth check -------------------------------------------------------------------------

_BW_HEADER_RE = re.compile(r'^\s*#bytes\s+#iterations\s+BW peak\[(\S+)\]\s+BW average\[(\S+)\]')


def parse_ib_write_bw(text):
    """The average bandwidth of a perftest report in Gbit/s (the last row: the largest message).

    perftest prints a "#bytes #iterations BW peak[..] BW average[..] MsgRate[Mpps]" header,
    then one row per message size; warnings ("Conflicting CPU frequency ...") may come between.
    """
    unit = None
    values = []
    for line in text.splitlines():
        header = _BW_HEADER_RE.match(line)
        if header:
            unit = header.group(2)
            continue
        fields = line.split()
        if unit is None or len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        try:
            values.append(float(fields[3]))
        except ValueError:
            raise RoceError('ib_write_bw row %r has no number in the BW average column' % line.strip()) from None
    if not values:
        raise RoceError('no bandwidth row in the ib_write_bw output (#bytes #iterations BW peak BW average ...)')
    if unit == 'Gb/sec':
        return values[-1]
    if unit == 'MB/sec':
        # perftest's MB is 2**20 bytes
        return values[-1] * 8 * 1048576 / 1e9
    raise RoceError('ib_write_bw reports bandwidth in %s, expected Gb/sec (--report_gbits) or MB/sec' % unit)


def check_bandwidth(measured_gbps, rate_gbps, min_fraction):
    """(ok, message) for a measured bandwidth against a fraction of the port rate."""
    if not rate_gbps:
        return False, 'the port reports no rate'
    wanted = rate_gbps * min_fraction
    ok = measured_gbps >= wanted
    return ok, '%.1f Gbit/s measured, %.1f Gbit/s wanted (%d%% of the %g Gbit/s port rate)' % (
        measured_gbps, wanted, round(min_fraction * 100), rate_gbps)


# --- llama.cpp RPC transport, from the logs --------------------------------------------------
# ggml/src/ggml-rpc/transport.cpp and tools/rpc/rpc-server.cpp (llama.cpp):
#   "  transport      : TCP (RDMA auto-negotiate enabled)"  server banner of an RDMA build
#   "  transport      : TCP"                                server banner without RDMA
#   "Accepted client connection"                            server: a new connection
#   "RDMA probed: dev=%s gid=%d%s qpn=%u inline=%u"         local device and GID found
#   "RDMA activated: qpn=%u->%u mtu=%d rx_depth=%d"         the connection runs over RDMA
#   "RDMA activate failed, staying on TCP"                  the connection stays on TCP
# A connection without "RDMA activated" before the next one stays on TCP (no peer RDMA, or no
# local GID matched: both silent).

_BANNER_RE = re.compile(r'^\s*transport\s*:\s*TCP(\s*\(RDMA auto-negotiate enabled\))?\s*\Z')
_ACCEPTED_RE = re.compile(r'Accepted client connection')
_PROBED_RE = re.compile(r'RDMA probed: dev=(\S+) gid=(\d+)(?: (RoCEv[12]))?')
_ACTIVATED_RE = re.compile(r'RDMA activated: qpn=(\d+)->(\d+) mtu=(\d+)')
_ACTIVATE_FAILED_RE = re.compile(r'RDMA activate failed, staying on TCP')


def parse_rpc_transport_log(text):
    """{rdma_capable, connections: [{transport, device, gid_index, roce, mtu}], rdma, tcp}.

    rdma_capable: True/False from the server banner, None when the log has no banner (a
    llama-server log). A connection starts at "Accepted client connection" or, in a client log,
    at an "RDMA probed" line that follows a finished connection.
    """
    rdma_capable = None
    connections = []
    current = None

    def start():
        entry = {'transport': 'TCP', 'device': None, 'gid_index': None, 'roce': None, 'mtu': None}
        connections.append(entry)
        return entry

    for line in text.splitlines():
        banner = _BANNER_RE.match(line)
        if banner:
            rdma_capable = banner.group(1) is not None
            continue
        if _ACCEPTED_RE.search(line):
            current = start()
            continue
        probed = _PROBED_RE.search(line)
        if probed:
            if current is None or current['device'] is not None or current['transport'] == 'RDMA':
                current = start()
            current['device'] = probed.group(1)
            current['gid_index'] = int(probed.group(2))
            current['roce'] = {'RoCEv2': ROCE_V2, 'RoCEv1': ROCE_V1}.get(probed.group(3))
            continue
        activated = _ACTIVATED_RE.search(line)
        if activated:
            if current is None:
                current = start()
            current['transport'] = 'RDMA'
            current['mtu'] = int(activated.group(3))
            continue
        if _ACTIVATE_FAILED_RE.search(line) and current is not None:
            current['transport'] = 'TCP'
    return {
        'rdma_capable': rdma_capable,
        'connections': connections,
        'rdma': sum(1 for c in connections if c['transport'] == 'RDMA'),
        'tcp': sum(1 for c in connections if c['transport'] == 'TCP'),
    }


def transport_warning(host, parsed, rdma_expected):
    """A warning line when RDMA was expected and a connection (or the build) stayed on TCP; '' else."""
    if not rdma_expected:
        return ''
    if parsed['rdma_capable'] is False:
        return ('%s: the RPC server was built without RDMA (banner "transport : TCP"); rebuild llama.cpp '
                'with libibverbs-dev installed (GGML_RPC_RDMA)' % host)
    if parsed['tcp']:
        return ('%s: %d of %d RPC connections stayed on TCP; check GGML_RDMA_DEV/GGML_RDMA_GID and that '
                'the fabric address has a RoCE v2 GID (playbooks/fabric-check.yml)'
                % (host, parsed['tcp'], len(parsed['connections'])))
    return ''
