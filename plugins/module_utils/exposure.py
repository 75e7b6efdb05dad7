# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a deployment exposes on a node, checked before any change: the ports it will listen on
or firewall, and an API served off loopback.

Two mistakes an operator can make with one `-e` lock them out or open the lab:
- a port the collection takes that SSH (or another service) already listens on: the RPC
  firewall then drops SSH from every host but the head, and the servers crash-loop on a port
  they cannot bind;
- a head bound to a reachable address without an API key: anyone on that network can use it.

The listeners come from the kernel's socket tables (/proc/net/tcp and tcp6); no `ss` is needed
(GPU containers often lack iproute2). Everything here but `read_node_listeners`, which reads procfs
for the modules `node_exposure` and `llama_rpc_server_plan`, is a pure function on plain data, so
tests feed captured tables. The head's connections to its workers are read the same way from the
`ss` lines module `llama_rpc_reachability` hands in (established_peers).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os
import pwd
import re
import socket

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import format_endpoint, port_number

TCP_LISTEN = "0A"
DEFAULT_SSH_PORT = 22
# The process name sshd gives its listener (/proc/<pid>/comm).
SSHD_NAMES = ("sshd",)


class ExposureError(ValueError):
    """A socket table or a setting cannot be read; the message says which."""


# --- the kernel's socket tables -------------------------------------------------------------------

def _address(hex_address):
    """The address of a /proc/net/tcp{,6} column: 8 hex digits (IPv4) or 32 (IPv6), each 32-bit
    word in the host's byte order (little-endian on x86_64 and aarch64)."""
    raw = bytes.fromhex(hex_address)
    words = [raw[offset:offset + 4][::-1] for offset in range(0, len(raw), 4)]
    packed = b"".join(words)
    if len(packed) == 4:
        return socket.inet_ntop(socket.AF_INET, packed)
    if len(packed) == 16:
        return str(ipaddress.ip_address(packed))
    raise ExposureError("%r is not an IPv4 or IPv6 address of a socket table" % hex_address)


def listening_sockets(table_text, source="/proc/net/tcp"):
    """The listening TCP sockets of one /proc/net/tcp or /proc/net/tcp6 text, in order:
    [{'address', 'port', 'uid', 'inode'}]. Other states (established, time-wait) are left out."""
    sockets = []
    lines = (table_text or "").splitlines()
    for number, line in enumerate(lines[1:], 2):
        fields = line.split()
        if not fields:
            continue
        try:
            local, state, uid, inode = fields[1], fields[3], int(fields[7]), int(fields[9])
            hex_address, hex_port = local.split(":")
            port = int(hex_port, 16)
        except (IndexError, ValueError):
            raise ExposureError("%s line %d is not a socket table line: %r" % (source, number, line.strip()))
        if state != TCP_LISTEN:
            continue
        sockets.append({"address": _address(hex_address), "port": port, "uid": uid, "inode": inode})
    return sockets


def socket_inode(link_target):
    """The inode of a /proc/<pid>/fd link to a socket ('socket:[12345]'), else None."""
    if link_target.startswith("socket:[") and link_target.endswith("]"):
        try:
            return int(link_target[len("socket:["):-1])
        except ValueError:
            return None
    return None


def listeners(sockets, processes, users):
    """Each listening port once, with who holds it: [{'port', 'addresses', 'process', 'pid', 'user'}],
    sorted by port. processes: {inode: (pid, name)} from /proc/<pid>/fd; users: {uid: name}."""
    by_port = {}
    for sock in sockets:
        entry = by_port.setdefault(sock["port"], {"port": sock["port"], "addresses": [], "process": None,
                                                  "pid": None, "user": None})
        if sock["address"] not in entry["addresses"]:
            entry["addresses"].append(sock["address"])
        pid, name = processes.get(sock["inode"], (None, None))
        if entry["pid"] is None and pid is not None:
            entry.update(pid=pid, process=name)
        if entry["user"] is None:
            entry["user"] = users.get(sock["uid"], str(sock["uid"]))
    return [by_port[port] for port in sorted(by_port)]


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _socket_holders(proc_root):
    """{inode: (pid, process name)} of every process's sockets that can be read."""
    holders = {}
    for pid in sorted((name for name in os.listdir(proc_root) if name.isdigit()), key=int):
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        name = (_read_text(os.path.join(proc_root, pid, "comm")) or "").strip() or None
        for fd in fds:
            try:
                inode = socket_inode(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue
            if inode is not None and inode not in holders:
                holders[inode] = (int(pid), name)
    return holders


def _user_names(uids):
    names = {}
    for uid in uids:
        try:
            names[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            names[uid] = str(uid)
    return names


def read_node_listeners(proc_root="/proc"):
    """The node's listeners as `listeners` gives them, read from procfs under proc_root."""
    sockets = []
    for table in ("tcp", "tcp6"):
        path = os.path.join(proc_root, "net", table)
        text = _read_text(path)
        if text is not None:
            sockets += listening_sockets(text, path)
    return listeners(sockets, _socket_holders(proc_root), _user_names(set(s["uid"] for s in sockets)))


def established_peers(ss_text):
    """Peer endpoints of `ss -Htn state established` (columns Recv-Q Send-Q Local Peer), in order.

    With a state filter ss prints no State column; IPv6 peers come as [addr]:port, the same
    form as format_endpoint. IPv4-mapped IPv6 peers ([::ffff:10.0.0.2]:port) are given as IPv4.
    """
    peers = []
    for number, line in enumerate(str(ss_text or "").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 4:
            raise ExposureError("ss line %d has %d columns, expected Recv-Q Send-Q Local Peer: %r"
                                % (number, len(fields), line))
        peer = fields[3]
        mapped = re.match(r"\A\[::ffff:([0-9.]+)\]:([0-9]+)\Z", peer)
        if mapped:
            peer = format_endpoint(*mapped.groups())
        if peer not in peers:
            peers.append(peer)
    return peers


def ssh_ports(node_listeners, ansible_port=None):
    """The ports the controller may reach this node's SSH on: ansible_port (22 when unset) and
    every port sshd listens on, sorted."""
    ports = set([DEFAULT_SSH_PORT if ansible_port in (None, "") else port_number(ansible_port, "ansible_port", ExposureError)])
    ports.update(entry["port"] for entry in node_listeners if entry.get("process") in SSHD_NAMES)
    return sorted(ports)


# --- the ports the collection takes on a node ------------------------------------------------------

def planned_ports(node, settings, engine_ports=()):
    """What the collection will listen on this node: [{'variable', 'ports', 'what'}].

    node: {'head': bool, 'worker': bool, 'vllm_node': bool, 'vllm_multi_node': bool, 'rpc_servers': how
    many RPC servers the node may run (its GPUs)}.
    settings: the port variables as the operator set them or their defaults (common's), by name.
    engine_ports: the engine's ports from role common's engine table, each {'variable', 'port' (its
    value; settings[variable] where absent), 'what', 'at':
    head | worker | spanning (the head or a vLLM node where the layout spans nodes), 'per_gpu': one
    port per RPC server, 'enabled': false for a port the engine's settings leave unused}.
    """
    planned = []

    def add(variable, count, what, value=None):
        base = port_number(settings.get(variable) if value is None else value, variable, ExposureError)
        last = base + count - 1
        if last > 65535:
            raise ExposureError("%s=%d leaves no room for %d ports (the last would be %d): set it to %d or below"
                                % (variable, base, count, last, 65536 - count))
        planned.append({"variable": variable, "ports": list(range(base, last + 1)), "what": what})

    where = {"head": bool(node.get("head")), "worker": bool(node.get("worker")),
             "spanning": bool(node.get("vllm_multi_node") and (node.get("head") or node.get("vllm_node")))}
    for port in engine_ports:
        if port.get("at") not in where:
            raise ExposureError("gpulab_engines: a port's at is %r; use head, worker or spanning" % (port.get("at"),))
        if where[port["at"]] and str(port.get("enabled", True)).strip().lower() not in ("false", "0", "no", ""):
            count = max(1, int(node.get("rpc_servers") or 1)) if port.get("per_gpu") else 1
            add(port["variable"], count, port["what"], port.get("port"))
    if node.get("head"):
        add("model_serve_port", 1, "the node-to-node copy's file server")
    return planned


def _span(ports):
    return str(ports[0]) if len(ports) == 1 else "%d-%d" % (ports[0], ports[-1])


def _holder(entry):
    if entry.get("process"):
        return "%s (pid %s, user %s)" % (entry["process"], entry["pid"], entry["user"])
    return "a process of user %s" % entry["user"]


def port_problems(host, planned, node_listeners, ssh, own_users):
    """One sentence per port the collection would take on `host` that is not free for it:
    an SSH port (the operator's way in), another service's listener, or another of the
    collection's own ports. A listener of one of the collection's service accounts (own_users)
    is its own earlier deployment and is replaced, not a conflict."""
    problems = []
    by_port = dict((entry["port"], entry) for entry in node_listeners)
    for item in planned:
        ports = item["ports"]
        value = "%s=%d on %s" % (item["variable"], ports[0], host)
        taken_ssh = [port for port in ports if port in ssh]
        if taken_ssh:
            problems.append(
                "%s: %s would listen on %s, and SSH, the controller's way into the node, uses %s "
                "(ansible_port and sshd's listeners); the RPC firewall would then cut SSH from every host but "
                "the head. Set %s to a free port away from %s." % (
                    value, item["what"], _span(ports), ", ".join(str(port) for port in taken_ssh),
                    item["variable"], ", ".join(str(port) for port in ssh)))
            continue
        for port in ports:
            entry = by_port.get(port)
            if entry is None or entry.get("user") in own_users:
                continue
            problems.append(
                "%s: %s would listen on %s, but port %d is taken by %s on %s. Set %s to a free port, "
                "or stop that service." % (value, item["what"], _span(ports), port, _holder(entry),
                                           ", ".join(entry["addresses"]), item["variable"]))
            break
    for position, item in enumerate(planned):
        for other in planned[position + 1:]:
            shared = sorted(set(item["ports"]) & set(other["ports"]))
            if shared:
                problems.append(
                    "%s=%d and %s=%d on %s overlap at %s (%s and %s): give each its own port." % (
                        item["variable"], item["ports"][0], other["variable"], other["ports"][0], host,
                        _span(shared), item["what"], other["what"]))
    return problems


# --- the API off loopback --------------------------------------------------------------------------

def is_loopback(host):
    """True for a bind address only this node reaches (127.0.0.0/8, ::1, localhost)."""
    text = str(host or "").strip().strip("[]")
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def engine_apis(prefix, apis):
    """The API of `apis` the engine serves (its table entry's api.prefix): an unused engine's bind address is not checked."""
    return [api for api in apis if api.get("prefix") == prefix]


def api_exposure(host, engine_prefix, bind, api_key_set, allow_unauthenticated):
    """(problem, warning) for a head's bind address: a problem when it is off loopback with no API key
    and the operator did not opt in; a warning when they did. engine_prefix: llama_server or vllm_server."""
    if is_loopback(bind) or api_key_set:
        return None, None
    if allow_unauthenticated:
        return None, ("%s serves its API without a key on %s (%s_allow_unauthenticated is true): "
                      "every host that reaches that address can use it." % (host, bind, engine_prefix))
    return ("%s_host=%s on %s serves the API to every host that reaches that address, and no %s_api_key is set. "
            "Set %s_api_key (with ansible-vault), bind to 127.0.0.1, or set %s_allow_unauthenticated: true to "
            "accept an open API." % (engine_prefix, bind, host, engine_prefix, engine_prefix, engine_prefix)), None


def api_warnings(host, prefix, apis):
    """The warnings of api_exposure for the APIs the engine serves (each api with prefix, bind,
    api_key_set, allow_unauthenticated): the operator's open APIs, said again where a run ends."""
    warnings = []
    for api in engine_apis(prefix, apis):
        warning = api_exposure(host, api.get("prefix"), api.get("bind"), bool(api.get("api_key_set")),
                               bool(api.get("allow_unauthenticated")))[1]
        warnings += [warning] if warning else []
    return warnings


def clear_of_ssh(ports, ssh, variable):
    """The firewall's second line: ExposureError when a port it would drop is one SSH uses. The
    preflight refuses this first; a plan run on its own (a role included elsewhere) refuses it too."""
    taken = sorted(set(ports) & set(ssh))
    if taken:
        raise ExposureError(
            "%s puts the RPC servers on %s, which SSH uses: the firewall would cut the controller off. "
            "Set %s to a free port away from %s." % (variable, ", ".join(str(port) for port in taken), variable,
                                                     ", ".join(str(port) for port in ssh)))
    return sorted(ssh)
