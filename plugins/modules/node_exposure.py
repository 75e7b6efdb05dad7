#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_exposure
short_description: Check the ports and the API a deployment would expose on a node, before any change
version_added: 0.1.0
description:
  - Reads the node's listening TCP sockets from the kernel (C(/proc/net/tcp), C(/proc/net/tcp6)) and who
    holds each (C(/proc/<pid>/fd)), and the ports SSH uses (O(ansible_port) and C(sshd)'s listeners).
  - Returns one sentence per port the collection would take on this node that is not free for it (an SSH
    port, another service's listener, another of the collection's ports), naming the variable, and one per
    head bound off loopback without an API key unless the operator opted in (then a warning instead).
  - Reads only; changes nothing. The rules are in C(plugins/module_utils/exposure.py).
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: It only reads, in check mode as in a real run.
options:
  engine_ports:
    description:
      - The ports of the engine deployed, from role common's engine table (C(gpulab_engine_spec.ports)) - each a
        C(variable) named in messages with its value C(port) (else the value in O(settings)), C(at) (V(head),
        V(worker), or V(spanning) - the head or a vLLM node of a layout spanning nodes), C(what) it is, C(per_gpu) (one port per RPC server from that base) and
        C(enabled) (false where the engine's settings leave it unused).
    type: list
    elements: dict
    default: []
  api_prefix:
    description: The engine's API variables' prefix (C(gpulab_engine_spec.api.prefix)); only that API of O(apis) is checked.
    type: str
    default: ""
  head:
    description: The node is the inference head (llama-server or vLLM rank 0).
    type: bool
    default: false
  worker:
    description: The node runs RPC servers (group rpc_workers).
    type: bool
    default: false
  vllm_node:
    description: The node is one of a multi-node vLLM deployment's nodes.
    type: bool
    default: false
  vllm_multi_node:
    description: vLLM spans more than one node (its rendezvous ports are opened).
    type: bool
    default: false
  rpc_servers:
    description: The most RPC servers the node may run (one per GPU, at least one).
    type: int
    default: 1
  settings:
    description:
      - The port variables by name, as set or defaulted - C(model_serve_port), and any port of O(engine_ports)
        given without its value.
    type: dict
    required: true
  ansible_port:
    description: The port the controller connects to (C(ansible_port)); empty means 22.
    type: raw
  own_users:
    description: The collection's service accounts; a listener of one of them is an earlier deployment, not a conflict.
    type: list
    elements: str
    default: []
  apis:
    description:
      - The heads' APIs on this node, each with C(prefix) (V(llama_server) or V(vllm_server)), C(bind),
        C(api_key_set) and C(allow_unauthenticated); only the one of O(api_prefix) is checked.
    type: list
    elements: dict
    default: []
  node_name:
    description: The node's name in messages (its inventory name); the host name when empty.
    type: str
    default: ""
  proc_root:
    description: Where procfs is mounted.
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Check the ports and the API this node would expose
  gpulab.inference.node_exposure:
    engine_ports: "{{ gpulab_engine_spec.ports }}"
    api_prefix: "{{ gpulab_engine_spec.api.prefix }}"
    head: true
    settings:
      llama_server_port: 8080
      model_serve_port: 18090
    ansible_port: "{{ ansible_port | default(omit) }}"
    own_users: [gpulab-rpc, gpulab-llama, gpulab-vllm]
  register: exposure
"""

RETURN = r"""
listeners:
  description: Each listening TCP port with its addresses and holder.
  returned: always
  type: list
  elements: dict
  sample: [{"port": 22, "addresses": ["0.0.0.0", "::"], "process": "sshd", "pid": 41, "user": "root"}]
ssh_ports:
  description: The ports SSH uses on this node.
  returned: always
  type: list
  elements: int
  sample: [22]
planned:
  description: The ports the collection would take, per variable.
  returned: always
  type: list
  elements: dict
  sample: [{"variable": "llama_server_port", "ports": [8080], "what": "llama-server's API"}]
problems:
  description: One sentence per problem; empty when everything is free.
  returned: always
  type: list
  elements: str
warnings_found:
  description: APIs served off loopback without a key because the operator allowed it.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.exposure import (
    ExposureError,
    api_exposure,
    engine_apis,
    read_node_listeners,
    planned_ports,
    port_problems,
    ssh_ports,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_ports=dict(type="list", elements="dict", default=[]),
            api_prefix=dict(type="str", default=""),
            head=dict(type="bool", default=False),
            worker=dict(type="bool", default=False),
            vllm_node=dict(type="bool", default=False),
            vllm_multi_node=dict(type="bool", default=False),
            rpc_servers=dict(type="int", default=1),
            settings=dict(type="dict", required=True),
            ansible_port=dict(type="raw"),
            own_users=dict(type="list", elements="str", default=[]),
            apis=dict(type="list", elements="dict", default=[]),
            node_name=dict(type="str", default=""),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    host = params["node_name"] or os.uname()[1]
    try:
        found = read_node_listeners(params["proc_root"])
        ssh = ssh_ports(found, params["ansible_port"])
        node = dict((key, params[key]) for key in ("head", "worker", "vllm_node", "vllm_multi_node", "rpc_servers"))
        planned = planned_ports(node, params["settings"], params["engine_ports"])
        problems = port_problems(host, planned, found, ssh, params["own_users"])
        warnings = []
        for api in engine_apis(params["api_prefix"], params["apis"]):
            problem, warning = api_exposure(host, api.get("prefix"), api.get("bind"), bool(api.get("api_key_set")),
                                            bool(api.get("allow_unauthenticated")))
            problems += [problem] if problem else []
            warnings += [warning] if warning else []
    except ExposureError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, listeners=found, ssh_ports=ssh, planned=planned, problems=problems,
                     warnings_found=warnings)


if __name__ == "__main__":
    main()
