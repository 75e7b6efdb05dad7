#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_ib_write_bw
short_description: Measure RDMA write bandwidth to a peer with ib_write_bw and compare it with the port rate
version_added: 0.2.0
description:
  - Runs perftest's C(ib_write_bw) as the client of an C(ib_write_bw) server already started on
    O(server) (the playbook starts it), with Gbit/s reports, and compares the average bandwidth
    with O(min_fraction) of O(rate_gbps).
  - Retries the connection while the server is still starting. Each run is stopped after
    O(duration_s) plus 30 seconds (a server that never answers, a wedged device), which fails the
    task naming the server.
  - Does not fail on a low bandwidth; returns C(ok) and a C(message) for the playbook.
  - Sends RDMA traffic; changes nothing on the host.
author:
  - gpulab.inference contributors (@gpulab)
options:
  server:
    description: The server's fabric address.
    type: str
    required: true
  device:
    description: The local RDMA device.
    type: str
    required: true
  gid_index:
    description: The local RoCE v2 GID index.
    type: int
    required: true
  tcp_port:
    description: The TCP port perftest exchanges the connection data on.
    type: int
    default: 18515
  duration_s:
    description: How long to send.
    type: int
    default: 5
  rate_gbps:
    description: The port rate in Gbit/s.
    type: float
    required: true
  min_fraction:
    description: The fraction of O(rate_gbps) the average must reach.
    type: float
    default: 0.8
  connect_attempts:
    description: Attempts to reach the server, one second apart.
    type: int
    default: 10
attributes:
  check_mode:
    support: none
    description: Measuring is the point; nothing runs in check mode.
  diff_mode:
    support: none
    description: Nothing is changed.
seealso:
  - module: gpulab.inference.roce_fabric_check
"""

EXAMPLES = r"""
- name: Measure node-b to the head
  gpulab.inference.roce_ib_write_bw:
    server: 10.231.77.10
    device: mlx5_0
    gid_index: 3
    rate_gbps: 200
    min_fraction: 0.8
  register: bandwidth
"""

RETURN = r"""
gbps:
  description: The average bandwidth in Gbit/s.
  returned: success
  type: float
  sample: 183.96
ok:
  description: Whether O(min_fraction) of the port rate was reached.
  returned: success
  type: bool
  sample: true
message:
  description: Measured and wanted bandwidth.
  returned: success
  type: str
  sample: 184.0 Gbit/s measured, 160.0 Gbit/s wanted (80% of the 200 Gbit/s port rate)
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import bounded_argv, timed_out
from ansible_collections.gpulab.inference.plugins.module_utils.roce import (
    RoceError,
    check_bandwidth,
    check_ib_write_bw_options,
    ib_write_bw_command,
    ib_write_bw_timeout_s,
    parse_ib_write_bw,
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            server=dict(type='str', required=True),
            device=dict(type='str', required=True),
            gid_index=dict(type='int', required=True),
            tcp_port=dict(type='int', default=18515),
            duration_s=dict(type='int', default=5),
            rate_gbps=dict(type='float', required=True),
            min_fraction=dict(type='float', default=0.8),
            connect_attempts=dict(type='int', default=10),
        ),
        supports_check_mode=False,
    )


def main():
    module = build_module()
    params = module.params
    try:
        check_ib_write_bw_options(params['device'], params['gid_index'], params['tcp_port'], params['duration_s'],
                                  params['rate_gbps'], params['min_fraction'])
    except RoceError as exc:
        module.fail_json(msg=str(exc))
    binary = module.get_bin_path('ib_write_bw', required=True)
    timeout = module.get_bin_path('timeout', required=True)
    try:
        command = ib_write_bw_command(params['device'], params['gid_index'], params['tcp_port'],
                                      params['duration_s'], server=params['server'])
    except ValueError:
        module.fail_json(msg='server %r is not an IPv4 address' % (params['server'],))
    command[0] = binary
    limit_s = ib_write_bw_timeout_s(params['duration_s'])
    bounded = bounded_argv(timeout, limit_s, command)
    rc, stdout, stderr = 1, '', ''
    for attempt in range(max(1, params['connect_attempts'])):
        rc, stdout, stderr = module.run_command(bounded)
        if rc == 0 or "Couldn't connect" not in stdout + stderr:
            break
        if attempt + 1 < params['connect_attempts']:
            time.sleep(1)
    if timed_out(rc):
        module.fail_json(msg='%s did not finish within %d s (duration_s + %d s): the server at %s does not answer the '
                             'exchange or the device hangs; check that ib_write_bw runs there and the fabric passes '
                             'TCP port %d' % (' '.join(command), limit_s, limit_s - params['duration_s'],
                                              params['server'], params['tcp_port']),
                         rc=rc, stdout=stdout, stderr=stderr, cmd=bounded)
    if rc != 0:
        module.fail_json(msg='%s failed (rc=%d): %s' % (' '.join(command), rc, (stdout + stderr).strip()[-2000:]),
                         rc=rc, stdout=stdout, stderr=stderr, cmd=bounded)
    try:
        gbps = parse_ib_write_bw(stdout)
    except RoceError as exc:
        module.fail_json(msg=str(exc), stdout=stdout)
    ok, message = check_bandwidth(gbps, params['rate_gbps'], params['min_fraction'])
    module.exit_json(changed=False, gbps=gbps, ok=ok, message=message)


if __name__ == '__main__':
    main()
