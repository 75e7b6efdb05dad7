#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_serve
short_description: Serve a model's files read-only over HTTP for the other nodes, for a bounded time
description:
  - O(state=started) serves the files named in O(files) from O(path) on O(address) port O(port)
    (GET and HEAD with byte ranges, a thread per client; no listing, no other file) until
    O(duration_s) have passed or it is stopped. It blocks - run it with C(async) and C(poll 0).
    Its process id goes to O(pid_file).
  - O(state=stopped) ends the server named by O(pid_file) (only a process of this module) and
    waits until it is gone; nothing to stop is no change.
  - Meant for the duration of one transfer - the model role starts it on the node that has the
    model, bound to its fabric address, and stops it after the copy, failed or not; role
    llama_cpp_distribute does the same on the build host for the build's tarball.
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Serves and stops nothing.
  diff_mode:
    support: none
    description: Nothing is written but the pid file.
options:
  state:
    description: V(started) serves (blocking), V(stopped) ends it.
    type: str
    choices: [started, stopped]
    default: started
  path:
    description: The model directory.
    type: path
  files:
    description: The names (relative to O(path)) that may be fetched.
    type: list
    elements: str
    default: []
  address:
    description: The address to bind, this node's fabric address.
    type: str
  port:
    description: The TCP port.
    type: int
    default: 18090
  duration_s:
    description: The longest the server runs, so a play that dies cannot leave it serving.
    type: int
    default: 3600
  pid_file:
    description: The server's process id.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Serve the model to the other nodes while they copy
  gpulab.inference.model_serve:
    path: /var/lib/gpulab/models/m
    files: [config.json, model.safetensors]
    address: "{{ gpulab_fabric_address }}"
    pid_file: /run/gpulab-model-serve.pid
  async: 7200
  poll: 0

- name: Stop it
  gpulab.inference.model_serve:
    state: stopped
    pid_file: /run/gpulab-model-serve.pid
"""

RETURN = r"""
served_s:
  description: Seconds it served (state=started).
  returned: state=started
  type: float
stopped_pid:
  description: The process ended (state=stopped), null when none ran.
  returned: state=stopped
  type: int
"""

import os
import signal
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write

MARKER = "model_serve"


def ours(pid):
    """The pid runs this module (its cmdline names it), so a reused pid is never killed."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as stream:
            return MARKER.encode() in stream.read()
    except OSError:
        return False


def stop(module):
    pid_file = module.params["pid_file"]
    try:
        with open(pid_file, encoding="ascii") as stream:
            pid = int(stream.read().strip())
    except (OSError, ValueError):
        module.exit_json(changed=False, stopped_pid=None)
    if not ours(pid):
        if not module.check_mode:
            os.unlink(pid_file)
        module.exit_json(changed=False, stopped_pid=None)
    if module.check_mode:
        module.exit_json(changed=True, stopped_pid=pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while ours(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if ours(pid):
        os.kill(pid, signal.SIGKILL)
    if os.path.exists(pid_file):
        os.unlink(pid_file)
    module.exit_json(changed=True, stopped_pid=pid)


def serve(module):
    params = module.params
    if not params["path"] or not params["address"]:
        module.fail_json(msg="model_serve: state=started needs path and address")
    if module.check_mode:
        module.exit_json(changed=False, served_s=0.0)
    try:
        for name in params["files"]:
            mt.check_name(name)
        server = model_io.ModelServer(params["address"], params["port"], params["path"], params["files"])
    except mt.ModelTransferError as error:
        module.fail_json(msg="model_serve: %s" % error)
    atomic_write(params["pid_file"], "%d\n" % os.getpid(), 0o644)
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())
    timer = threading.Timer(params["duration_s"], server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        timer.cancel()
        server.server_close()
    module.exit_json(changed=False, served_s=round(time.monotonic() - started, 1))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["started", "stopped"], default="started"),
            path=dict(type="path"),
            files=dict(type="list", elements="str", default=[]),
            address=dict(type="str"),
            port=dict(type="int", default=18090),
            duration_s=dict(type="int", default=3600),
            pid_file=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    if module.params["state"] == "stopped":
        stop(module)
    serve(module)


if __name__ == "__main__":
    main()
