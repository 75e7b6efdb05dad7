#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_server_health
short_description: Wait for a server's /health, and stop waiting as soon as its service has failed
description:
  - Polls C(<url>/health) until it answers 200 (llama-server and vLLM answer 503 or nothing while they load).
  - Between two polls it reads the service's state under O(manager) - the unit's (C(systemctl show)) or the
    program's (C(supervisorctl status)). When it failed, waits to be restarted or was restarted since the wait
    began, it fails at once with the last lines of the unit's journal or the program's log file, instead of
    waiting out the whole timeout. With O(watch=false) it only polls, and a timeout shows the log; without
    O(unit) it only polls.
  - Role C(service)'s entry point C(health) runs it under either manager.
  - Reads only; never changes the host.
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  url:
    description: Base URL of llama-server (C(http://127.0.0.1:8080)).
    type: str
    required: true
  manager:
    description: The service manager that runs the server.
    type: str
    choices: [systemd, supervisor]
    default: systemd
  unit:
    description:
      - The unit running it (C(gpulab-llama-server.service)), or the program's name under O(manager=supervisor)
        (C(gpulab-llama-server)). Empty only polls.
    type: str
    default: ""
  watch:
    description: Fail at once when the service fails or restarts; V(false) only polls (a timeout still shows the log).
    type: bool
    default: true
  supervisorctl_path:
    description: The collection's supervisorctl, under O(manager=supervisor).
    type: path
  supervisor_config:
    description: The configuration file O(supervisorctl_path) reads (C(-c)).
    type: path
  log_file:
    description: The program's log file, whose last lines a failure shows under O(manager=supervisor).
    type: path
  timeout_s:
    description: Seconds to wait for 200 at most.
    type: int
    required: true
  poll_s:
    description: Seconds between two polls.
    type: int
    default: 5
  journal_lines:
    description: Lines of the unit's journal shown when it failed or the wait timed out.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Wait until the model is loaded
  gpulab.inference.llama_server_health:
    url: http://127.0.0.1:8080
    unit: gpulab-llama-server.service
    timeout_s: "{{ llama_server_plan.health_timeout_s }}"
"""

RETURN = r"""
waited_s:
  description: Seconds until /health answered 200.
  returned: success
  type: int
journal:
  description: The last lines of the unit's journal (the program's log), when it failed or the wait timed out.
  returned: failure
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner, timed_out
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import EndpointError, parse_url
from ansible_collections.gpulab.inference.plugins.module_utils.service_status import show_properties, unit_failure
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    SUPERVISORCTL_STATUS_RCS,
    parse_supervisorctl_states,
    program_failure,
    supervisorctl_argv,
)

PROPERTIES = ["ActiveState", "SubState", "NRestarts", "Result", "ExecMainStatus"]


class SystemdWatch:
    """The unit's state and journal."""

    def __init__(self, module, runner):
        self.module = module
        self.params = module.params
        self.runner = runner
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.journalctl = module.get_bin_path("journalctl")
        self.restarts_before = 0

    def unit_properties(self):
        command = [self.systemctl, "show"] + ["--property=%s" % p for p in PROPERTIES] + [self.params["unit"]]
        rc, out, err = self.runner.run(command)
        if rc != 0:
            self.module.fail_json(msg="systemctl show %s failed: %s" % (self.params["unit"], err.strip()), rc=rc)
        return show_properties(out)

    def begin(self):
        try:
            self.restarts_before = int(self.unit_properties().get("NRestarts") or 0)
        except ValueError:
            self.restarts_before = 0

    def failure(self):
        return unit_failure(self.unit_properties(), self.restarts_before)

    def log(self):
        if not self.journalctl:
            return []
        rc, out, err = self.runner.run(
            [self.journalctl, "--no-pager", "--output=cat", "-n", str(self.params["journal_lines"]), "-u", self.params["unit"]],
            fail=False)
        if timed_out(rc):
            return [err]  # the failure being reported matters more than the journal
        return out.splitlines() if rc == 0 else []


class SupervisorWatch:
    """The program's state (supervisorctl status) and its log file."""

    def __init__(self, module, runner):
        self.module = module
        self.params = module.params
        self.runner = runner
        self.pid_before = None

    def state(self):
        argv = supervisorctl_argv(self.params["supervisorctl_path"] or "supervisorctl", self.params["supervisor_config"],
                                  "status", self.params["unit"])
        rc, out, err = self.runner.run(argv)
        if rc not in SUPERVISORCTL_STATUS_RCS:
            self.module.fail_json(msg="%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()), rc=rc)
        return parse_supervisorctl_states(out).get(self.params["unit"])

    def begin(self):
        state = self.state()
        self.pid_before = state["pid"] if state else None

    def failure(self):
        return program_failure(self.state(), self.pid_before)

    def log(self):
        if not self.params["log_file"]:
            return []
        try:
            with open(self.params["log_file"], "rb") as stream:
                lines = stream.read().decode("utf-8", "replace").splitlines()
        except (IOError, OSError):
            return []
        return lines[-self.params["journal_lines"]:]


class HealthWait:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        runner = BoundedRunner(module)
        watches = {"systemd": SystemdWatch, "supervisor": SupervisorWatch}
        self.watch = watches[self.params["manager"]](module, runner) if self.params["unit"] else None

    def health(self):
        """The HTTP status of /health, or None when nothing answers."""
        try:
            response = open_url(self.params["url"].rstrip("/") + "/health", timeout=self.params["poll_s"])
            return response.getcode()
        except Exception as exc:  # pylint: disable=broad-except
            return getattr(exc, "code", None)

    def fail(self, reason):
        lines = self.watch.log() if self.watch else []
        name = self.params["unit"] or self.params["url"]
        self.module.fail_json(
            msg="%s: %s; its log ends with:\n%s" % (name, reason, "\n".join(lines)) if self.watch else "%s: %s" % (name, reason),
            journal=lines)

    def run(self):
        if self.watch and self.params["watch"]:
            self.watch.begin()
        start = time.time()
        while True:
            if self.health() == 200:
                return int(time.time() - start)
            reason = self.watch.failure() if self.watch and self.params["watch"] else None
            if reason:
                self.fail(reason)
            if time.time() - start >= self.params["timeout_s"]:
                self.fail("/health did not answer 200 within %d s (the model may still be loading: raise "
                          "the health timeout)" % self.params["timeout_s"])
            time.sleep(self.params["poll_s"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            manager=dict(type="str", default="systemd", choices=["systemd", "supervisor"]),
            unit=dict(type="str", default=""),
            watch=dict(type="bool", default=True),
            supervisorctl_path=dict(type="path"),
            supervisor_config=dict(type="path"),
            log_file=dict(type="path"),
            timeout_s=dict(type="int", required=True),
            poll_s=dict(type="int", default=5),
            journal_lines=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    for name in ("timeout_s", "poll_s", "journal_lines"):
        if module.params[name] <= 0:
            module.fail_json(msg="%s is %d; give a number > 0" % (name, module.params[name]))
    # A URL that cannot be opened would only time out after timeout_s: refuse it at once.
    try:
        parse_url(module.params["url"], "url")
    except EndpointError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=False, waited_s=0)
    waited = HealthWait(module).run()
    module.exit_json(changed=False, waited_s=waited)


if __name__ == "__main__":
    main()
