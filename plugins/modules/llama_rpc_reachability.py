#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_rpc_reachability
short_description: Check that the head reaches every ggml RPC endpoint, without disturbing attached ones
description:
  - Runs on the inference head. An endpoint the head already holds an established TCP connection to (C(ss -Htn state
    established)) is proven reachable; every other endpoint gets one TCP connection.
  - Attached endpoints are not probed, because an RPC server serves one client at a time with a listen backlog of one
    (ggml/src/ggml-rpc/transport.cpp C(listen(sockfd, 1))). A probe while the head is attached would wait in the accept
    queue and, once two wait, connections time out.
  - Fails naming every endpoint that does not answer, so the workers' firewalls and the fabric are checked too.
  - Reads only; never changes the host.
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  endpoints:
    description:
      - The C(endpoints) that M(gpulab.inference.llama_server_plan) returns, each with C(host), C(address), C(port)
        and C(endpoint).
    type: list
    elements: dict
    required: true
  timeout_s:
    description: Seconds to wait for each connection.
    type: int
    default: 5
"""

EXAMPLES = r"""
- name: Check that the head reaches every worker endpoint
  gpulab.inference.llama_rpc_reachability:
    endpoints: "{{ llama_server_plan.endpoints }}"
    timeout_s: 5
"""

RETURN = r"""
attached:
  description: Endpoints the head already holds an established connection to.
  returned: success
  type: list
  elements: str
  sample: [10.231.77.11:50052]
probed:
  description: Endpoints that accepted a new connection.
  returned: success
  type: list
  elements: str
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import (
    EndpointError,
    format_endpoint,
    listen_address,
    port_number,
)
from ansible_collections.gpulab.inference.plugins.module_utils.exposure import ExposureError, established_peers


def connects(address, port, timeout_s):
    """Whether a TCP connection to address:port is accepted within timeout_s."""
    try:
        sock = socket.create_connection((address, port), timeout=timeout_s)
    except (socket.error, socket.timeout, OSError):
        return False
    sock.close()
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            endpoints=dict(type="list", elements="dict", required=True),
            timeout_s=dict(type="int", default=5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout_s"] <= 0:
        module.fail_json(msg="timeout_s is %d; give a number of seconds > 0 (llama_server_worker_connect_timeout_s)"
                         % params["timeout_s"])
    ss = module.get_bin_path("ss", required=True)
    rc, out, err = BoundedRunner(module).run([ss, "-Htn", "state", "established"])
    if rc != 0:
        module.fail_json(msg="ss failed with rc %d: %s" % (rc, err.strip()), rc=rc, stdout=out, stderr=err)
    try:
        attached_now = established_peers(out)
        targets = []
        for position, item in enumerate(params["endpoints"]):
            port = port_number(item.get("port"), "endpoints entry %d port" % position)
            address = listen_address(item.get("address"), "endpoints entry %d address" % position)
            targets.append((str(item.get("host") or address), address, port, format_endpoint(address, port)))
    except (ExposureError, EndpointError) as exc:
        module.fail_json(msg=str(exc))
    attached, probed, unreachable = [], [], []
    for host, address, port, endpoint in targets:
        if endpoint in attached_now:
            attached.append(endpoint)
        elif connects(address, port, params["timeout_s"]):
            probed.append(endpoint)
        else:
            unreachable.append("%s (%s)" % (endpoint, host))
    if unreachable:
        module.fail_json(
            msg="the head cannot connect to RPC endpoint(s) %s within %d s: check that the worker's gpulab-rpc-server "
                "units are active and that its firewall admits the head's fabric address"
                % (", ".join(unreachable), params["timeout_s"]),
            attached=attached, probed=probed)
    module.exit_json(changed=False, attached=attached, probed=probed)


if __name__ == "__main__":
    main()
