#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_rpc_transport
short_description: Tell from llama.cpp RPC logs whether each connection runs over RDMA or TCP
version_added: 0.2.0
description:
  - Reads the log of a C(ggml-rpc-server) (or of llama-server, the client side) and reports, per
    connection, the transport it negotiated, V(RDMA) after C(RDMA activated), V(TCP) otherwise
    (llama.cpp falls back to TCP silently when no GID matches or the peer has no RDMA).
  - With O(rdma_expected), warns when the build has no RDMA transport or a connection stayed on TCP.
  - Reads only; never changes the host.
author:
  - gpulab.inference contributors (@gpulab)
options:
  log:
    description: The log text, such as C(journalctl -u gpulab-rpc-server@0 -o cat) since the last start.
    type: str
    required: true
  host:
    description: The host the log comes from, used in the warning.
    type: str
    default: ""
  rdma_expected:
    description: Whether RDMA was expected (the fabric has a RoCE v2 GID, C(gpulab_roce_fabric.found)).
    type: bool
    default: false
extends_documentation_fragment:
  - gpulab.inference.read_only
notes:
  - The log lines come from llama.cpp C(ggml/src/ggml-rpc/transport.cpp) and C(tools/rpc/rpc-server.cpp).
seealso:
  - module: gpulab.inference.roce_facts
"""

EXAMPLES = r"""
- name: Read the RPC server's log since its start
  ansible.builtin.command:
    argv: [journalctl, -u, gpulab-rpc-server@0.service, -o, cat, --since, "-10min"]
  register: rpc_log
  changed_when: false

- name: Report the negotiated transport
  gpulab.inference.roce_rpc_transport:
    log: "{{ rpc_log.stdout }}"
    host: "{{ inventory_hostname }}"
    rdma_expected: "{{ ansible_facts.gpulab_roce_fabric.found }}"
  register: rpc_transport
"""

RETURN = r"""
rdma_capable:
  description: V(true) when the server banner says the build negotiates RDMA, V(false) for a TCP-only build, V(null) without a banner.
  returned: success
  type: bool
  sample: true
connections:
  description: One entry per connection with C(transport) (V(RDMA) or V(TCP)), C(device), C(gid_index), C(roce) and C(mtu).
  returned: success
  type: list
  elements: dict
  sample: [{transport: RDMA, device: mlx5_0, gid_index: 3, roce: RoCE v2, mtu: 4096}]
rdma:
  description: Connections over RDMA.
  returned: success
  type: int
  sample: 1
tcp:
  description: Connections over TCP.
  returned: success
  type: int
  sample: 0
warning:
  description: The warning issued, or an empty string.
  returned: success
  type: str
  sample: ""
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    parse_rpc_transport_log,
    transport_warning,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            log=dict(type='str', required=True),
            host=dict(type='str', default=''),
            rdma_expected=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    parsed = parse_rpc_transport_log(module.params['log'])
    warning = transport_warning(module.params['host'] or 'RPC', parsed, module.params['rdma_expected'])
    if warning:
        module.warn(warning)
    module.exit_json(changed=False, warning=warning, **parsed)


if __name__ == '__main__':
    main()
