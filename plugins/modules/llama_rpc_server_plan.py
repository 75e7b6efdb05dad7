#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_rpc_server_plan
short_description: Decide which ggml RPC servers a worker runs, on which address and ports
description:
  - Runs on an RPC worker before anything is changed. A CUDA build gets one RPC server per GPU
    (llama.cpp's advice), each seeing only its GPU through C(CUDA_VISIBLE_DEVICES); a CPU build
    gets one server for the CPU device.
  - Refuses a wildcard bind address (V(0.0.0.0), V(::)) unless O(allow_any_address=true), because the
    ggml RPC protocol has no authentication.
  - Reads the deployed build (O(build_link)), checks the firewall's allowed sources, refuses to go on
    while firewalld or ufw runs unless the ports were opened there, picks the restart directives the
    node's systemd knows (O(manager_version)), and names the server instances that are no longer planned.
  - Reads only; never changes the host.
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
  - gpulab.inference.rpc_fabric
  - gpulab.inference.gpu_inventory
options:
  build_link:
    description:
      - The deployed build (C(/opt/gpulab/llama.cpp/current)). Its C(BUILD_INFO.json) gives the build id,
        whether it has CUDA and the RPC server binary, which must be executable.
      - Without it, O(cuda) says whether the build has CUDA.
    type: path
  cuda:
    description: Whether the build has CUDA, when O(build_link) is not given.
    type: bool
    default: false
  gpus:
    description: The node's C(gpulab_gpus) facts (C(index), C(memory_mib)).
    type: list
    elements: dict
    default: []
  gpu_indices:
    description: nvidia-smi indices of the GPUs to expose; empty exposes every GPU.
    type: list
    elements: int
    default: []
  address:
    description: Address to bind to, normally the node's C(gpulab_fabric_address).
    type: str
    required: true
  allow_any_address:
    description: Allow a wildcard O(address). Only behind a firewall that covers every interface.
    type: bool
    default: false
  port_base:
    description: Port of the first server; server I(i) listens on O(port_base) + I(i).
    type: int
    default: 50052
  memory_mib:
    description:
      - Host memory size in MiB, reported for the CPU device (used by a proportional split).
      - Omitted, it is read from C(/proc/meminfo) on the node.
    type: int
  firewall_enabled:
    description: Whether the nftables table and the systemd IP filter guard the ports; then O(allowed_sources) must not be empty.
    type: bool
    default: true
  allowed_sources:
    description:
      - Addresses or prefixes allowed to reach the RPC ports (the head's fabric address).
      - Required while O(firewall_enabled) is true.
    type: list
    elements: str
  ssh_ports:
    description:
      - The ports SSH uses on this node. The table accepts them before its drop rule, and a server planned on one of
        them is refused.
      - Omitted, they are read on the node as M(gpulab.inference.node_exposure) reads them, O(ansible_port) and every
        port C(sshd) listens on (C(/proc/net/tcp), C(/proc/net/tcp6)).
    type: list
    elements: int
  ansible_port:
    description: The port the controller connects to (C(ansible_port)), with O(ssh_ports) omitted; empty means 22.
    type: raw
  proc_root:
    description: Where procfs is mounted, read for O(ssh_ports) when they are omitted.
    type: path
    default: /proc
  head_is_local:
    description: Whether the head runs on this node; only then is loopback admitted.
    type: bool
    default: false
  other_firewall_services:
    description: Firewall services whose rules the RPC ports must pass too; the module asks systemd which are active.
    type: list
    elements: str
    default: [firewalld.service, ufw.service]
  other_firewall:
    description:
      - V(fail) refuses to go on while a service of O(other_firewall_services) is active, naming the commands that open
        the ports for the head there; V(opened) says they were opened.
    type: str
    choices: [fail, opened]
    default: fail
  unit:
    description: Name of the template unit (instances C(<unit>@<i>.service)).
    type: str
    default: gpulab-rpc-server
  unit_names:
    description:
      - Units known to the node; planned instances are kept, others reported.
      - Omitted, the module asks the node for the instances of O(unit) (C(service_status.node_units)) where systemd is the
        init system, and takes none elsewhere.
    type: list
    elements: str
  restart_sec:
    description: First restart delay in seconds.
    type: int
    default: 5
  restart_max_delay_s:
    description: Largest restart delay in seconds, reached in steps where systemd supports it.
    type: int
    default: 60
  manager_version:
    description:
      - The service manager's major version, role C(common)'s C(gpulab_service_manager_version) (module
        C(service_manager) asks it once per play); 0 where it is unknown, which leaves the restart backoff out.
    type: int
    default: 0
  node_name:
    description: The node's inventory name, named in the wrappers' comments.
    type: str
  user:
    description: The servers' account (C(User=) of the unit, named in the wrappers).
    type: str
    default: gpulab-rpc
  group:
    description: The servers' group (C(Group=) of the unit).
    type: str
    default: gpulab-rpc
  bin_dir:
    description: Directory of the wrapper scripts C(<unit>-<i>) the unit runs.
    type: path
    default: /opt/gpulab/bin
  threads:
    description: CPU threads per server (C(--threads)); V(0) leaves rpc-server's default.
    type: int
    default: 0
  cache_dir:
    description:
      - Weight cache of the servers (C(LLAMA_CACHE), C(--cache), C(ReadWritePaths=)); empty runs them without a cache.
    type: str
    default: ""
  firewall_unit:
    description:
      - The firewall unit the servers require while O(firewall_enabled) is true; C(<unit>-firewall.service) when not given.
    type: str
  hardening:
    description: systemd hardening of the unit, directive to value; a value of V(null) leaves the directive out.
    type: dict
    default: {}
  cuda_devices:
    description: Device groups a server with a GPU may open (C(DeviceAllow=)).
    type: list
    elements: str
    default: []
  fabric_file:
    description:
      - The node's fabric description (C(/etc/gpulab/roce/fabric.json), role C(roce)), read in place of O(fabric);
        absent where the role did not run.
    type: path
  guard:
    description:
      - The RPC guard (module_utils/rpc_guard.py) that stops the servers while the table is gone; given, the module
        returns its wrapper as RV(guard_wrapper).
    type: dict
    suboptions:
      name:
        description: The guard's program name, its wrapper's file name in O(bin_dir).
        type: str
        required: true
      python:
        description: The Python that runs the guard's code.
        type: str
        required: true
      code:
        description: The guard's code on the node.
        type: str
        required: true
      table:
        description: The nftables table (family inet) it watches.
        type: str
        required: true
      service_manager:
        description: What runs the servers; the guard names their units or programs.
        type: str
        choices: [systemd, supervisor]
        required: true
      supervisor_config:
        description: The configuration file of role supervisor's daemon (C(gpulab_supervisor_config)), with O(guard.service_manager=supervisor).
        type: str
      interval_s:
        description: Seconds between two looks at the ruleset.
        type: float
        default: 0.5
      watch_code:
        description:
          - The hung-server watch's code on the node (module_utils/rpc_watch.py); given, the guard also kills
            (SIGKILL) and restarts a server that hangs for O(guard.watch_hang_after_s).
        type: str
      watch_hang_after_s:
        description: Seconds a server must look hung on end before the watch kills it.
        type: float
        default: 5.0
"""

EXAMPLES = r"""
- name: Plan the RPC servers of a GPU worker
  gpulab.inference.llama_rpc_server_plan:
    build_link: /opt/gpulab/llama.cpp/current
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    address: "{{ gpulab_fabric_address }}"
    allowed_sources: [10.231.77.10]
  register: rpc_plan

- name: Plan the RPC server of a CPU worker (container lab)
  gpulab.inference.llama_rpc_server_plan:
    cuda: false
    address: 10.231.77.11
    allowed_sources: [10.231.77.10]

- name: Expose only GPUs 1 and 2, from port 51000
  gpulab.inference.llama_rpc_server_plan:
    cuda: true
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    gpu_indices: [1, 2]
    address: "{{ gpulab_fabric_address }}"
    port_base: 51000
    allowed_sources: ["{{ hostvars[groups['inference_head'][0]].gpulab_fabric_address }}"]
"""

RETURN = r"""
address:
  description: The normalised bind address.
  returned: success
  type: str
  sample: 10.231.77.11
servers:
  description:
    - One entry per RPC server with C(instance) (the systemd instance and port offset),
      C(device) (the C(--device) name), C(gpu_index) (C(CUDA_VISIBLE_DEVICES), or V(null) for the
      CPU), C(port) and C(memory_mib).
  returned: success
  type: list
  elements: dict
  sample: [{instance: 0, device: CPU, gpu_index: null, port: 50052, memory_mib: 20000}]
build:
  description:
    - The deployed build, C(build_id), C(build_dir) (resolved), C(cuda), C(rpc_server_binary) (its path) and C(lockstep)
      (the BUILD_INFO.json fields the head's lockstep check reads, published in servers.json); empty without O(build_link).
  returned: success
  type: dict
firewall:
  description:
    - C(ipv4) and C(ipv6) (checked prefixes for the nftables table), C(admit_loopback) (the head runs here),
      C(ssh_ports) (accepted before the drop rule, so the table never matches the controller's SSH) and
      C(ip_address_allow) (systemd C(IPAddressAllow=) entries).
  returned: success
  type: dict
stale_units:
  description: Instances of O(unit) in O(unit_names) that are no longer planned.
  returned: success
  type: list
  elements: str
unit_directives:
  description: Restart-related directives of the C([Unit]) section, as C([key, value]) pairs.
  returned: success
  type: list
  elements: list
service_directives:
  description: Restart directives of the C([Service]) section, as C([key, value]) pairs.
  returned: success
  type: list
  elements: list
rdma:
  description:
    - C(expected) (the fabric has a RoCE v2 GID for llama.cpp RPC), C(environment) (the C(GGML_RDMA_*) variables for
      the wrapper) and C(service_directives) (already part of RV(service_directives)).
  returned: success
  type: dict
wrappers:
  description:
    - One wrapper script per server, as the template renders it, empty without O(build_link); each with C(instance),
      C(name) (the file name in O(bin_dir)), C(comments), C(environment) (C(name), C(value), C(why), the comment
      above the export, may be empty), C(file_environment) and C(preludes) (empty here), C(argv_lines) (rpc-server's
      command line, one list per script line, exec'd with C("$@")) and C(argv) (the same, flat).
  returned: success
  type: list
  elements: dict
guard_wrapper:
  description:
    - The guard's wrapper, shaped as RV(wrappers) are (C(name), C(comments), C(environment), C(argv_lines), C(argv)),
      passing the table, every server's port and unit or program and the firewall unit to its code; V(null) without
      O(guard).
  returned: success
  type: dict
unit_file:
  description:
    - The servers' template unit, C(comments) and the lines of its C(unit), C(service) and C(install) sections
      (C(Key=value) or a C(#) comment), with the firewall, the cache, the hardening and C(DeviceAllow=) as planned.
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GPU_INVENTORY_OPTION, use_gpu_inventory
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.exposure import (
    ExposureError,
    clear_of_ssh,
    read_node_listeners,
    ssh_ports,
)
from ansible_collections.gpulab.inference.plugins.module_utils.roce import RoceError, rpc_rdma_settings
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    LlamaServerError,
    read_deployed_build,
    restart_directives,
)
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import systemd_booted
from ansible_collections.gpulab.inference.plugins.module_utils.service_status import (
    ServiceStatusError,
    active_units,
    node_units,
    unit_query,
)
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import (
    check_bind_address,
    firewall_sources,
    foreign_firewall_problem,
    meminfo_total_mib,
    memory_mib,
    rpc_devices,
    rpc_guard_wrapper,
    rpc_server_unit,
    rpc_server_wrapper,
    stale_units,
)


def host_memory_mib(path="/proc/meminfo"):
    """The node's memory in MiB from /proc/meminfo, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as meminfo:
            return meminfo_total_mib(meminfo.read())
    except (IOError, OSError):
        return None


def read_fabric(path):
    """The fabric description role roce wrote (docs/CONTRACTS.md), or None where it has not run."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as stream:
            fabric = json.load(stream)
    except (IOError, OSError, ValueError) as exc:
        raise LlamaServerError("%s cannot be read (%s): run role gpulab.inference.roce again, or remove it on a node "
                               "without a RoCE fabric" % (path, exc))
    if not isinstance(fabric, dict):
        raise LlamaServerError("%s is not a JSON object: run role gpulab.inference.roce again" % path)
    return fabric


def read_build(link):
    """The deployed build behind link, its RPC server binary checked."""
    build = read_deployed_build(link)
    binary = os.path.join(build["build_dir"], "bin", build["rpc_server_binary"])
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise LlamaServerError("build %s has no executable %s: rebuild it with GGML_RPC=ON"
                               % (build["build_id"], binary))
    build["rpc_server_binary"] = binary
    return build


class RpcServerPlan:
    """Validates the inputs and computes the plan; `result` is the return value."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.plan = {}
        # the node's manager, asked under a time limit through role service's rules
        self.ask = unit_query(module, BoundedRunner(module))

    def run(self):
        params = self.params
        build = read_build(params["build_link"]) if params["build_link"] else {}
        cuda = build["cuda"] if build else params["cuda"]
        address = check_bind_address(params["address"], params["allow_any_address"])
        servers = rpc_devices(cuda, params["gpus"], params["gpu_indices"])
        last_port = params["port_base"] + len(servers) - 1
        if params["port_base"] < 1 or last_port > 65535:
            raise LlamaServerError("ports %d..%d are out of range; fix llama_rpc_server_port_base"
                                   % (params["port_base"], last_port))
        for server in servers:
            server["port"] = params["port_base"] + server["instance"]
            if server["device"] == "CPU":
                server["memory_mib"] = memory_mib(params["memory_mib"], "memory_mib") \
                    if params["memory_mib"] is not None else host_memory_mib()
        ports = [server["port"] for server in servers]
        node_ssh_ports = params["ssh_ports"] if params["ssh_ports"] is not None \
            else ssh_ports(read_node_listeners(params["proc_root"]), params["ansible_port"])
        firewall = {"ipv4": [], "ipv6": [], "admit_loopback": False, "ip_address_allow": [],
                    "ssh_ports": clear_of_ssh(ports, node_ssh_ports, "llama_rpc_server_port_base")}
        if params["firewall_enabled"]:
            sources = firewall_sources(params["allowed_sources"])
            firewall.update(ipv4=sources["ipv4"], ipv6=sources["ipv6"], admit_loopback=params["head_is_local"],
                            ip_address_allow=sources["all"] + (["localhost"] if params["head_is_local"] else []))
            problem = foreign_firewall_problem(self.active_services(params["other_firewall_services"]), ports, sources["all"])
            if problem and params["other_firewall"] == "fail":
                raise LlamaServerError(problem)
        rdma = rpc_rdma_settings(read_fabric(params["fabric_file"]) if params["fabric_file"] else params["fabric"])
        unit_directives, service_directives = restart_directives(
            params["manager_version"], params["restart_sec"], params["restart_max_delay_s"])
        service_directives = [list(d) for d in service_directives] + rdma["service_directives"]
        settings = dict((key, params[key]) for key in ("user", "group", "bin_dir", "threads", "cache_dir", "hardening",
                                                       "cuda_devices", "unit"))
        settings.update(host=params["node_name"],
                        firewall_unit=(params["firewall_unit"] or "%s-firewall.service" % params["unit"])
                        if params["firewall_enabled"] else "")
        self.plan = {
            "wrappers": [rpc_server_wrapper(server, build, address, settings, rdma["environment"]) for server in servers]
            if build else [],
            "unit_file": rpc_server_unit(settings, servers, firewall, unit_directives, service_directives),
            "guard_wrapper": rpc_guard_wrapper(params["guard"], servers, params["unit"], settings["firewall_unit"], address)
            if params["guard"] else None,
            "address": address,
            "servers": servers,
            "build": build,
            "firewall": firewall,
            "stale_units": stale_units(self.unit_names(), params["unit"], [s["instance"] for s in servers]),
            "unit_directives": [list(d) for d in unit_directives],
            "service_directives": service_directives,
            "rdma": rdma,
        }

    def unit_names(self):
        """unit_names as given, or the node's instances of the unit (role service's node_units)."""
        if self.params["unit_names"] is not None:
            return self.params["unit_names"]
        return node_units(self.ask, ["%s@*.service" % self.params["unit"]], systemd_booted())

    def active_services(self, services):
        """The services of the list that run on the node (role service's active_units)."""
        return active_units(self.ask, services)

    @property
    def warnings(self):
        if self.plan.get("address") in ("0.0.0.0", "::"):
            return ["RPC servers bind to %s: the ggml RPC protocol has no authentication; "
                    "only the firewall keeps other hosts out" % self.plan["address"]]
        return []

    @property
    def result(self):
        result = dict(changed=False)
        result.update(self.plan)
        return result


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            build_link=dict(type="path"),
            cuda=dict(type="bool", default=False),
            gpus=dict(type="list", elements="dict", default=[]),
            gpu_inventory=GPU_INVENTORY_OPTION,
            gpu_indices=dict(type="list", elements="int", default=[]),
            address=dict(type="str", required=True),
            allow_any_address=dict(type="bool", default=False),
            port_base=dict(type="int", default=50052),
            memory_mib=dict(type="int"),
            firewall_enabled=dict(type="bool", default=True),
            allowed_sources=dict(type="list", elements="str"),
            head_is_local=dict(type="bool", default=False),
            ssh_ports=dict(type="list", elements="int"),
            ansible_port=dict(type="raw"),
            proc_root=dict(type="path", default="/proc"),
            other_firewall_services=dict(type="list", elements="str", default=["firewalld.service", "ufw.service"]),
            other_firewall=dict(type="str", choices=["fail", "opened"], default="fail"),
            unit=dict(type="str", default="gpulab-rpc-server"),
            unit_names=dict(type="list", elements="str"),
            restart_sec=dict(type="int", default=5),
            fabric=dict(type="dict"),
            fabric_file=dict(type="path"),
            restart_max_delay_s=dict(type="int", default=60),
            manager_version=dict(type="int", default=0),
            node_name=dict(type="str"),
            user=dict(type="str", default="gpulab-rpc"),
            group=dict(type="str", default="gpulab-rpc"),
            bin_dir=dict(type="path", default="/opt/gpulab/bin"),
            threads=dict(type="int", default=0),
            cache_dir=dict(type="str", default=""),
            firewall_unit=dict(type="str"),
            hardening=dict(type="dict", default={}),
            cuda_devices=dict(type="list", elements="str", default=[]),
            guard=dict(type="dict", options=dict(
                name=dict(type="str", required=True),
                python=dict(type="str", required=True),
                code=dict(type="str", required=True),
                table=dict(type="str", required=True),
                service_manager=dict(type="str", choices=["systemd", "supervisor"], required=True),
                supervisor_config=dict(type="str"),
                interval_s=dict(type="float", default=0.5),
                watch_code=dict(type="str"),
                watch_hang_after_s=dict(type="float", default=5.0),
            )),
        ),
        required_if=[("firewall_enabled", True, ("allowed_sources",))],
        mutually_exclusive=[("fabric", "fabric_file"), ("ssh_ports", "ansible_port")],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    use_gpu_inventory(module, "gpus")
    plan = RpcServerPlan(module)
    try:
        plan.run()
    except (LlamaServerError, RoceError, ExposureError, ServiceStatusError) as exc:
        module.fail_json(msg=str(exc))
    for warning in plan.warnings:
        module.warn(warning)
    module.exit_json(**plan.result)


if __name__ == "__main__":
    main()
