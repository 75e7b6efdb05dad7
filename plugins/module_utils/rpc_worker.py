# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ggml RPC worker: the devices it exposes, the address it binds, its firewall, the wrapper and
template unit of its servers, the guard that stops them without their firewall table, and its stale units.

Pure functions behind llama_rpc_server_plan; errors are LlamaServerError naming the variable to fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpulab.inference.plugins.module_utils import service_files
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import endpoint, refuse_unbindable, whole_number
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import CUDA_ORDER_WHY, LlamaServerError, rdma_exports
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import ServiceManagerError, service_names


# --- Devices and address -------------------------------------------------------

def _gpu_index(gpu, position):
    """A gpulab_gpus entry's nvidia-smi index, or an error naming the entry."""
    if not isinstance(gpu, dict) or "index" not in gpu:
        raise LlamaServerError(
            "gpus entry %d (%r) has no index; pass the gpulab_gpus facts of gpu_preflight" % (position, gpu))
    return whole_number(gpu["index"], "gpus entry %d index" % position, LlamaServerError)


def rpc_devices(cuda, gpus, gpu_indices=None):
    """Devices a worker exposes, one RPC server each.

    cuda: whether the build has CUDA. gpus: gpulab_gpus facts (dicts with index and
    memory_total_mib). gpu_indices: optional subset of nvidia-smi indices to expose.
    A CUDA build exposes one server per GPU (CUDA_VISIBLE_DEVICES=<index>, the
    server then sees it as CUDA0); a CPU build exposes the CPU device once.
    Returns a list of dicts: instance (0..n-1, the port offset), device (the
    rpc-server --device name), gpu_index (or None), memory_mib (or None).
    """
    if not cuda:
        return [{"instance": 0, "device": "CPU", "gpu_index": None, "memory_mib": None}]
    by_index = {}
    for position, gpu in enumerate(gpus or []):
        index = _gpu_index(gpu, position)
        if index in by_index:
            raise LlamaServerError("gpus entries list GPU index %d twice; pass the gpulab_gpus facts unchanged" % index)
        by_index[index] = gpu
    if not by_index:
        raise LlamaServerError(
            "the llama.cpp build has CUDA but no GPU was found on this node (gpulab_gpus is empty); "
            "run gpu_preflight first or deploy a CPU build here")
    if gpu_indices:
        selected = [whole_number(i, "llama_rpc_server_gpu_indices entry", LlamaServerError) for i in gpu_indices]
        twice = sorted(set(i for i in selected if selected.count(i) > 1))
        if twice:
            raise LlamaServerError(
                "llama_rpc_server_gpu_indices names GPU %s more than once; list each GPU once"
                % ", ".join(str(i) for i in twice))
        missing = [i for i in selected if i not in by_index]
        if missing:
            raise LlamaServerError(
                "GPU indices %s are not present on this node (found %s); fix llama_rpc_server_gpu_indices"
                % (missing, sorted(by_index)))
    else:
        selected = sorted(by_index)
    devices = []
    for instance, index in enumerate(selected):
        devices.append({
            "instance": instance,
            "device": "CUDA0",
            "gpu_index": index,
            "memory_mib": memory_mib(by_index[index].get("memory_total_mib"), "gpus entry for GPU %d memory_total_mib" % index),
        })
    return devices


def memory_mib(value, what):
    """A memory figure in MiB: None (unknown) or a whole number >= 0; a negative or odd one is refused."""
    if value is None:
        return None
    return whole_number(value, what, LlamaServerError)


def meminfo_total_mib(text):
    """MemTotal of /proc/meminfo's text in MiB, or None when the text has no such line."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemTotal:" and fields[1].isdigit():
            return int(fields[1]) // 1024
    return None


def check_bind_address(address, allow_any=False):
    """Refuse a wildcard bind unless explicitly allowed: the RPC protocol has no authentication."""
    if address in (None, ""):
        raise LlamaServerError(
            "no bind address: set gpulab_fabric_address for this host (the node's fabric address)")
    try:
        parsed = ipaddress.ip_address(str(address))
    except ValueError:
        raise LlamaServerError(
            "bind address %r is not an IP address; use the node's fabric address" % (address,))
    if parsed.is_unspecified and not allow_any:
        raise LlamaServerError(
            "refusing to bind the RPC server to %s: the ggml RPC protocol has no authentication and "
            "anyone who reaches the port can run code on the device; bind to the fabric address, or set "
            "llama_rpc_server_allow_any_address: true if a firewall protects every interface"
            % (address,))
    refuse_unbindable(parsed, "bind address %r" % (address,), LlamaServerError)
    return str(parsed)


# --- Firewall ------------------------------------------------------------------

def firewall_sources(sources):
    """Split the allowed sources into IPv4 and IPv6 prefixes, each checked with ipaddress.

    Returns {'ipv4': [...], 'ipv6': [...], 'all': [...]} in the given order, duplicates dropped.
    """
    if not sources:
        raise LlamaServerError(
            "llama_rpc_server_allowed_sources is empty: the firewall would let nobody in; give the head a "
            "gpulab_fabric_address (group inference_head) or list the allowed addresses")
    split = {"ipv4": [], "ipv6": [], "all": []}
    for source in sources:
        try:
            network = ipaddress.ip_network(str(source).strip(), strict=False)
        except ValueError:
            raise LlamaServerError(
                "llama_rpc_server_allowed_sources entry %r is not an IP address or prefix" % (source,))
        text = str(network.network_address) if network.num_addresses == 1 else str(network)
        family = "ipv4" if network.version == 4 else "ipv6"
        if text not in split[family]:
            split[family].append(text)
            split["all"].append(text)
    return split


def foreign_firewall_problem(active_units, ports, sources):
    """A message when firewalld or ufw is active: they drop what our table accepts, or flush it.

    Both keep rules of their own that a packet must pass too (nftables evaluates every base
    chain of a hook), so the RPC ports must be opened there for the head. Returns None when
    neither runs.
    """
    active = [unit for unit in active_units or [] if unit]
    if not active:
        return None
    commands = []
    for source in sources:
        family = "ipv6" if ":" in source else "ipv4"
        for port in ports:
            if any(unit.startswith("firewalld") for unit in active):
                commands.append("firewall-cmd --permanent --add-rich-rule='rule family=\"%s\" source address=\"%s\" "
                                "port port=\"%d\" protocol=\"tcp\" accept'" % (family, source, port))
            if any(unit.startswith("ufw") for unit in active):
                commands.append("ufw allow proto tcp from %s to any port %d" % (source, port))
    if any(unit.startswith("firewalld") for unit in active):
        commands.append("firewall-cmd --reload")
    return ("%s is active on this node and keeps rules of its own that the RPC ports must pass too; open them "
            "for the head only (%s), then set llama_rpc_server_other_firewall: opened"
            % (" and ".join(active), "; ".join(commands)))


# --- The RPC server's wrapper and unit -----------------------------------------------

def rpc_server_wrapper(server, build, address, settings, rdma_environment=None):
    """The wrapper of one RPC server (service_files.wrapper): its comments, environment and rpc-server argv.

    server: a rpc_devices entry with its port; build: read_deployed_build with the binary's path;
    settings: host (inventory name), user, unit, bin_dir, threads (0: rpc-server's default),
    cache_dir (empty: no weight cache); rdma_environment: GGML_RDMA_* of the fabric (empty: TCP).
    """
    error = LlamaServerError
    user = service_files.checked(settings["user"], "llama_rpc_server_user", error)
    unit = service_files.checked(settings["unit"], "llama_rpc_server_unit_name", error)
    bin_dir = service_files.checked(settings["bin_dir"], "llama_rpc_server_bin_dir", error)
    cache_dir = service_files.checked(settings.get("cache_dir"), "llama_rpc_server_cache_dir", error)
    threads = whole_number(settings.get("threads") or 0, "llama_rpc_server_threads", LlamaServerError)
    host = service_files.checked(settings.get("host") or "this node", "inventory_hostname", error)
    instance = server["instance"]
    gpu = "" if server["gpu_index"] is None else " = nvidia-smi GPU %s" % server["gpu_index"]
    comments = [
        "ggml RPC server %s of %s, build %s:" % (instance, host, build["build_id"]),
        "device %s%s, listening on %s." % (server["device"], gpu, endpoint(address, server["port"], LlamaServerError)),
        "The service manager runs it as %s (%s@%s.service under systemd);" % (user, unit, instance),
        "to run it by hand, stop the unit and: sudo -u %s %s/%s-%s" % (user, bin_dir, unit, instance),
    ]
    environment = [service_files.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "CUDA_DEVICE_ORDER", error, CUDA_ORDER_WHY)]
    if server["gpu_index"] is not None:
        environment.append(service_files.env("CUDA_VISIBLE_DEVICES", server["gpu_index"], "gpus", error,
                                             "This server sees only its own GPU, as CUDA0."))
    environment += rdma_exports(rdma_environment, "fabric.json")
    if cache_dir:
        environment.append(service_files.env("LLAMA_CACHE", cache_dir, "llama_rpc_server_cache_dir", error,
                                             "-c keeps received tensors under $LLAMA_CACHE/rpc."))
    argv = [[build["rpc_server_binary"]], ["--host", address], ["--port", str(server["port"])],
            ["--device", server["device"]]]
    if threads > 0:
        argv.append(["--threads", str(threads)])
    if cache_dir:
        argv.append(["--cache"])
    result = service_files.wrapper(comments, environment, argv, error)
    result.update(instance=instance, name="%s-%s" % (unit, instance))
    return result


def rpc_server_unit(settings, servers, firewall, unit_directives, service_directives):
    """The template unit <unit>@.service of the RPC servers (service_files.unit_file).

    settings: user, group, unit, bin_dir, cache_dir (empty: none), firewall_unit (empty: no
    firewall), hardening (directive: value, None leaves it out), cuda_devices (opened only when a
    server has a GPU); firewall: the plan's (ip_address_allow); *_directives: [key, value] pairs.
    """
    error = LlamaServerError
    user = service_files.checked(settings["user"], "llama_rpc_server_user", error)
    group = service_files.checked(settings["group"], "llama_rpc_server_group", error)
    unit = service_files.checked(settings["unit"], "llama_rpc_server_unit_name", error)
    bin_dir = service_files.checked(settings["bin_dir"], "llama_rpc_server_bin_dir", error)
    cache_dir = service_files.checked(settings.get("cache_dir"), "llama_rpc_server_cache_dir", error)
    firewall_unit = service_files.checked(settings.get("firewall_unit"), "llama_rpc_server_unit_name", error)
    section_unit = ["Description=ggml RPC server %i for the llama-server head (gpulab.inference)",
                    "Wants=network-online.target", "After=network-online.target"]
    if firewall_unit:
        section_unit += ["# No rules, no server: the instance does not start unless the firewall unit loaded its table.",
                         "Requires=%s" % firewall_unit, "After=%s" % firewall_unit]
    section_unit += service_files.directives(unit_directives, "the restart directives", error)
    section_service = ["Type=simple", "User=%s" % user, "Group=%s" % group,
                       "ExecStart=%s/%s-%%i" % (bin_dir, unit)]
    section_service += service_files.directives(service_directives, "the restart and fabric directives", error)
    if cache_dir:
        section_service.append("ReadWritePaths=%s" % cache_dir)
    if firewall_unit:
        section_service += [
            "# Second layer, independent of nftables: the kernel drops the servers' packets to and from any",
            "# other address (cgroup BPF; systemd.resource-control(5)).",
            "IPAddressDeny=any",
            service_files.directive("IPAddressAllow", " ".join(firewall["ip_address_allow"]),
                                    "llama_rpc_server_allowed_sources", error)]
    section_service.append("# Hardening: gpulab_service_hardening, with llama_rpc_server_hardening_overrides applied.")
    section_service += service_files.hardening(settings.get("hardening") or {}, "llama_rpc_server_hardening_overrides", error)
    if any(server["gpu_index"] is not None for server in servers):
        section_service += service_files.device_allow(settings.get("cuda_devices"), "llama_rpc_server_cuda_devices", error)
    if firewall_unit:
        section_install = ["# Started again with the firewall unit when nftables.service comes back after a stop.",
                           "WantedBy=multi-user.target %s" % firewall_unit]
    else:
        section_install = ["WantedBy=multi-user.target"]
    comments = ["ggml RPC server %%i: runs %s/%s-%%i (one instance per exposed device)." % (bin_dir, unit)]
    return service_files.unit_file(comments, section_unit, section_service, section_install, error)


def rpc_guard_wrapper(guard, servers, unit, firewall_unit, address=None):
    """The RPC guard's wrapper (service_files.wrapper): module_utils/rpc_guard.py run with the table, every
    server's port and name (as role service names it to the manager in use, service_names) and the firewall unit.

    guard: name (the program in bin_dir), python, code (the guard's copied code), table, service_manager,
    supervisor_config, interval_s, and optionally watch_code (module_utils/rpc_watch.py on the node: the
    guard then also kills and restarts a hung server) and watch_hang_after_s; servers: the plan's;
    unit: the servers' unit name; address: the servers' bind address, which the watch probes.
    """
    error = LlamaServerError
    table = service_files.checked(guard["table"], "llama_rpc_server_nft_table", error)
    manager = guard["service_manager"]
    if manager not in ("systemd", "supervisor"):
        raise LlamaServerError("llama_rpc_server_service_manager is %r; use systemd or supervisor" % (manager,))
    try:
        # The servers' names as role service gives them to the service manager.
        units = service_names([s["instance"] for s in servers], unit, manager)
    except ServiceManagerError as exc:
        raise LlamaServerError("llama_rpc_server_unit_name: %s" % exc)
    comments = [
        "Stops this node's ggml RPC servers while table %s no longer drops their ports from" % table,
        "other hosts (`nft flush ruleset`, the table deleted), and starts the ones it stopped when the table is back.",
        "By hand: `--once` looks once and acts; `--check` exits 1 without the table (the servers' pre-start check).",
    ]
    environment = [service_files.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", "PATH", error)]
    argv = [[guard["python"], guard["code"]], ["--table", table],
            ["--ports", ",".join(str(s["port"]) for s in servers)], ["--manager", manager]]
    if manager == "supervisor":
        config = service_files.checked(guard.get("supervisor_config"), "gpulab_supervisor_config", error)
        if not config:
            raise LlamaServerError("gpulab_supervisor_config is empty: the guard needs the configuration file of the "
                                   "daemon that runs the servers")
        argv.append(["--supervisor-config", config])
    argv += [["--firewall-unit", firewall_unit], ["--interval-s", str(guard["interval_s"])], ["--units"] + units]
    if guard.get("watch_code") and address:
        comments.append("With --watch-code it also kills (SIGKILL) and restarts a server that hangs for --watch-hang-after-s "
                        "(module_utils/rpc_watch.py); what it sees is in --watch-state-file.")
        argv += [["--watch-code", service_files.checked(guard["watch_code"], "llama_rpc_server_bin_dir", error)],
                 ["--watch-endpoints", ",".join(endpoint(address, s["port"], LlamaServerError) for s in servers)],
                 ["--watch-hang-after-s", str(float(guard.get("watch_hang_after_s") or 5.0))]]
    result = service_files.wrapper(comments, environment, argv, error)
    result["name"] = service_files.checked(guard["name"], "llama_rpc_server_unit_name", error)
    return result


def stale_units(unit_names, unit, planned_instances):
    """Instances of the template unit <unit>@<i>.service that exist but are no longer planned, sorted."""
    pattern = re.compile(r"\A%s@([0-9]+)\.service\Z" % re.escape(unit))
    planned = set(int(i) for i in planned_instances)
    stale = []
    for name in unit_names or []:
        match = pattern.match(str(name))
        if match and int(match.group(1)) not in planned:
            stale.append(str(name))
    return sorted(stale, key=lambda n: int(pattern.match(n).group(1)))
