#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: service_status
short_description: State, start time and restarts of the collection's services, under systemd or supervisord
version_added: 0.1.0
description:
  - Lists the services whose names match O(patterns) and reports for each its state, when it
    last started, how often the service manager restarted it and its main process, and on
    request the last lines of its log.
  - Under systemd it reads C(systemctl list-units) and C(systemctl show) (C(NRestarts)) and the
    journal; under supervisord (role gpulab.inference.supervisor) C(supervisorctl status) and the
    programs' log files. supervisord counts no restarts, so RV(services[].restarts) is V(null)
    there.
  - Also reads the files the roles publish on the node (docs/CONTRACTS.md), the deployed
    build's C(BUILD_INFO.json), the head's model manifest, the RPC servers' C(servers.json) and
    the vLLM plan, for the build id, the model and the endpoints; a missing file gives V(null).
  - Reads only; changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
options:
  manager:
    description:
      - The service manager to ask, role C(common)'s C(gpulab_service_manager_active) (module
        M(gpulab.inference.service_manager) resolves V(auto); this module does not).
      - V(init) asks systemd where it runs as the init system and reports no services elsewhere,
        without asking supervisord. That is what a stop of units must know, in one C(systemctl)
        call (M(ansible.builtin.service_facts) also runs the status of every SysV script).
    type: str
    choices: [init, systemd, supervisor]
    required: true
  patterns:
    description: Shell patterns of the unit (systemd, with C(.service)) or program (supervisord) names to report.
    type: list
    elements: str
    default: ["gpulab-*"]
  log_lines:
    description: Lines of each service's log to return (its journal, or its supervisord log file); 0 returns none.
    type: int
    default: 0
  log_since_start:
    description:
      - Return each service's log since its current start (under systemd its journal of the
        current invocation; under supervisord its log file from the last line matching
        O(log_start_pattern)), the last O(log_lines) of it when O(log_lines) is above 0.
    type: bool
    default: false
  log_start_pattern:
    description: The regular expression of a program's first log line, for O(log_since_start) under supervisord.
    type: str
    default: "^Starting "
  supervisor_config:
    description: supervisord's configuration, passed to C(supervisorctl -c).
    type: path
    default: /etc/gpulab/supervisord.conf
  supervisorctl_path:
    description: The C(supervisorctl) to run.
    type: path
    default: /opt/gpulab/supervisor/bin/supervisorctl
  supervisor_log_dir:
    description: Where the programs log, one C(<program>.log) each.
    type: path
    default: /var/log/gpulab
  supervisor_programs_dir:
    description: Where the program files are, one C(<program>.conf) each, for RV(services[].enabled).
    type: path
    default: /etc/gpulab/supervisor.d
  build_info:
    description: The deployed llama.cpp build's record.
    type: path
    default: /opt/gpulab/llama.cpp/current/BUILD_INFO.json
  model_manifest:
    description: The model manifest the model role writes on the head.
    type: path
    default: /etc/gpulab/model.json
  rpc_manifest:
    description: What the RPC servers of a worker serve (role llama_rpc_server).
    type: path
    default: /etc/gpulab/rpc-server/servers.json
  vllm_plan:
    description: The vLLM layout (role vllm_server), for its URL.
    type: path
    default: /etc/gpulab/vllm/plan.json
  rpc_watch:
    description:
      - What the RPC guard's watch saw last (module_utils/rpc_watch.py); an RPC endpoint it finds hung or down says
        so in RV(endpoints), and RV(rpc_watch) holds its verdict.
    type: path
    default: /run/gpulab/rpc-watch.json
extends_documentation_fragment:
  - gpulab.inference.read_only
seealso:
  - module: gpulab.inference.gpu_residency
"""

EXAMPLES = r"""
- name: Read the collection's services
  gpulab.inference.service_status:
    manager: "{{ gpulab_service_manager_active }}"
  register: status_services

- name: Read them with the last 20 lines of each log
  gpulab.inference.service_status:
    manager: systemd
    log_lines: 20

- name: Ask supervisord for the RPC servers only
  gpulab.inference.service_status:
    manager: supervisor
    patterns: ["gpulab-rpc-server-*"]
"""

RETURN = r"""
program_files:
  description:
    - Names of the supervisord program files (C(<name>.conf)) in O(supervisor_programs_dir), whichever manager was
      asked, sorted; empty when the directory is absent. A node that changed manager still has them.
  returned: success
  type: list
  elements: str
  sample: [gpulab-rpc-server-0]
manager:
  description:
    - The service manager asked (V(systemd), V(supervisor)), or V(none) when neither runs
      (with O(manager=init), when systemd is not the init system).
  returned: success
  type: str
  sample: systemd
services:
  description: The matching services, in the service manager's order.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Unit or program name.
      type: str
      sample: gpulab-llama-server.service
    state:
      description:
        - systemd's C(ActiveState) (active, inactive, failed, activating, ...), or supervisord's state in lower case
          (running, stopped, fatal, backoff, ...).
      type: str
      sample: active
    sub_state:
      description: systemd's C(SubState), or supervisord's description.
      type: str
      sample: running
    result:
      description: systemd's C(Result) of the last run (success, exit-code, timeout, ...); V(null) under supervisord.
      type: str
      sample: success
    restarts:
      description: Restarts by the service manager since the unit was loaded (C(NRestarts)); V(null) under supervisord.
      type: int
      sample: 0
    main_pid:
      description: The main process, or V(null) when none runs.
      type: int
      sample: 4242
    started:
      description: When it last started (systemd's C(ActiveEnterTimestamp); under supervisord computed from its uptime, in UTC); V(null) when never.
      type: str
      sample: Tue 2026-12-01 08:00:00 UTC
    invocation_id:
      description: systemd's C(InvocationID) of the current run; not returned under supervisord.
      type: str
    enabled:
      description:
        - Whether it starts at boot - systemd's C(UnitFileState) (enabled, disabled, static, masked, ...), or under
          supervisord V(enabled) or V(disabled) from the C(autostart) of its program file; V(null) when unknown.
      type: str
      sample: enabled
    log:
      description: The last O(log_lines) lines of its log, or its log since its start with O(log_since_start).
      type: list
      elements: str
build_id:
  description: The build id of O(build_info), or V(null) without one.
  returned: success
  type: str
  sample: b8070-4f5c2a1e9b3d
model:
  description: The file the head serves (C(path) of O(model_manifest)), or V(null).
  returned: success
  type: str
  sample: /var/lib/gpulab/models/synthetic-minimax-m2-00001-of-00002.gguf
endpoints:
  description: The RPC endpoints of O(rpc_manifest) and the vLLM URL of O(vllm_plan).
  returned: success
  type: list
  elements: str
  sample: ["10.231.77.11:50052 (RPC, CPU)", "10.231.77.12:50052 (RPC, CPU): cannot serve: hangs (the process is stopped)"]
rpc_watch:
  description:
    - On an RPC worker, what the guard's watch saw last (O(rpc_watch)) - C(can_serve) (false while a server hangs or is
      down), C(problems) (one line each) and C(looked_at) (epoch seconds); V(null) where the file is absent.
  returned: success
  type: dict
  sample: {"can_serve": false, "problems": ["gpulab-rpc-server@0.service: suspect (the process is stopped)"], "looked_at": 1765080000.0}
unreadable:
  description: Files that exist but do not read as JSON, each with the reason.
  returned: success
  type: list
  elements: str
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import systemd_booted
from ansible_collections.gpulab.inference.plugins.module_utils.service_status import (
    SHOW_PROPERTIES,
    ServiceStatusError,
    list_units_args,
    node_summary,
    parse_list_units,
    parse_supervisorctl_status,
    parse_systemctl_show,
    program_enablement,
    since_last,
    tail,
)

# A log file's tail is read from its end only: supervisord keeps up to 100 MB per program.
TAIL_BYTES = 1 << 20


class ServiceStatus:
    """Asks one service manager about the collection's services."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.manager = self.pick_manager(module.params["manager"])
        self.services = []
        self.unreadable = []

    @property
    def result(self):
        summary = node_summary(*[self.read_json(self.params[name])
                                 for name in ("build_info", "model_manifest", "rpc_manifest", "vllm_plan", "rpc_watch")])
        return dict(summary, changed=False, manager=self.manager, services=self.services, unreadable=self.unreadable,
                    program_files=self.program_files())

    def program_files(self):
        """Names of the program files (<name>.conf) in supervisor_programs_dir, whichever manager runs."""
        try:
            names = os.listdir(self.params["supervisor_programs_dir"])
        except (IOError, OSError):
            return []
        return sorted(name[:-len(".conf")] for name in names
                      if name.endswith(".conf") and not name.startswith(".")
                      and os.path.isfile(os.path.join(self.params["supervisor_programs_dir"], name)))

    def read_json(self, path):
        """The parsed file, or None when it is absent (or unreadable, noted in unreadable)."""
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as stream:
                return json.load(stream)
        except (IOError, OSError, ValueError) as exc:
            self.unreadable.append("%s: %s" % (path, exc))
            return None

    @staticmethod
    def pick_manager(manager):
        """init: systemd where it is the init system, else none (supervisord is not asked)."""
        if manager != "init":
            return manager
        return "systemd" if systemd_booted() else "none"

    def run(self, argv, ok_rcs=(0,)):
        rc, stdout, stderr = BoundedRunner(self.module).run(argv)
        if rc not in ok_rcs:
            self.module.fail_json(msg="%s failed (rc %d): %s" % (" ".join(argv), rc, (stderr or stdout).strip()),
                                  rc=rc, stdout=stdout, stderr=stderr)
        return stdout

    def gather(self):
        try:
            if self.manager == "systemd":
                self.gather_systemd()
            elif self.manager == "supervisor":
                self.gather_supervisor()
        except ServiceStatusError as exc:
            self.module.fail_json(msg=str(exc))

    def gather_systemd(self):
        systemctl = self.module.get_bin_path("systemctl", required=True)
        units = parse_list_units(self.run([systemctl] + list_units_args(self.params["patterns"])), self.params["patterns"])
        if not units:
            return
        shown = parse_systemctl_show(self.run([systemctl, "show", "--property=" + ",".join(SHOW_PROPERTIES), "--"] + units))
        lines = self.params["log_lines"]
        since_start = self.params["log_since_start"]
        journalctl = self.module.get_bin_path("journalctl", required=True) if lines > 0 or since_start else None
        for unit in units:
            status = shown.get(unit)
            if status is None:
                self.module.fail_json(msg="systemctl show did not report %s" % unit)
            if since_start:
                text = self.run([journalctl, "--no-pager", "--quiet", "--output=cat",
                                 "_SYSTEMD_INVOCATION_ID=" + status["invocation_id"]]) if status["invocation_id"] else ""
                status["log"] = tail(text, lines) if lines > 0 else text.splitlines()
            elif journalctl:
                status["log"] = tail(self.run([journalctl, "--no-pager", "--quiet", "--output=short-iso",
                                               "--lines=%d" % lines, "--unit=" + unit]), lines)
            self.services.append(status)

    def gather_supervisor(self):
        if not os.path.exists(self.params["supervisor_config"]):
            return
        # supervisorctl status exits 3 when a program is not running
        stdout = self.run([self.params["supervisorctl_path"], "-c", self.params["supervisor_config"], "status"],
                          ok_rcs=(0, 3))
        now = time.time()
        for program in parse_supervisorctl_status(stdout, self.params["patterns"]):
            uptime = program.pop("uptime_s")
            program["started"] = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - uptime))
                                  if uptime is not None else None)
            lines = self.params["log_lines"]
            if lines > 0 or self.params["log_since_start"]:
                text = self.read_tail(os.path.join(self.params["supervisor_log_dir"], program["name"] + ".log"))
                if self.params["log_since_start"]:
                    text = "\n".join(since_last(text.splitlines(), self.params["log_start_pattern"]))
                program["log"] = tail(text, lines) if lines > 0 else text.splitlines()
            program["enabled"] = program_enablement(
                self.read_text(os.path.join(self.params["supervisor_programs_dir"], program["name"] + ".conf")),
                program["name"])
            self.services.append(program)

    @staticmethod
    def read_text(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as stream:
                return stream.read()
        except (IOError, OSError):
            return None

    @staticmethod
    def read_tail(path):
        try:
            with open(path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - TAIL_BYTES))
                return log.read().decode("utf-8", "replace")
        except (IOError, OSError):
            return ""


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            manager=dict(type="str", choices=["init", "systemd", "supervisor"], required=True),
            patterns=dict(type="list", elements="str", default=["gpulab-*"]),
            log_lines=dict(type="int", default=0),
            log_since_start=dict(type="bool", default=False),
            log_start_pattern=dict(type="str", default="^Starting "),
            supervisor_config=dict(type="path", default="/etc/gpulab/supervisord.conf"),
            supervisorctl_path=dict(type="path", default="/opt/gpulab/supervisor/bin/supervisorctl"),
            supervisor_log_dir=dict(type="path", default="/var/log/gpulab"),
            supervisor_programs_dir=dict(type="path", default="/etc/gpulab/supervisor.d"),
            build_info=dict(type="path", default="/opt/gpulab/llama.cpp/current/BUILD_INFO.json"),
            model_manifest=dict(type="path", default="/etc/gpulab/model.json"),
            rpc_manifest=dict(type="path", default="/etc/gpulab/rpc-server/servers.json"),
            vllm_plan=dict(type="path", default="/etc/gpulab/vllm/plan.json"),
            rpc_watch=dict(type="path", default="/run/gpulab/rpc-watch.json"),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    if module.params["log_lines"] < 0:
        module.fail_json(msg="log_lines is %d; give 0 or more lines" % module.params["log_lines"])
    status = ServiceStatus(module)
    status.gather()
    module.exit_json(**status.result)


if __name__ == "__main__":
    main()
