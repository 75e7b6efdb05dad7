#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_server_health
short_description: Wait for llama-server's /health, and stop waiting as soon as its unit has failed
description:
  - Polls C(<url>/health) until it answers 200 (llama-server answers 503 while it loads the model).
  - Between two polls it reads the unit's state (C(systemctl show)). When the unit failed, waits in C(auto-restart)
    or was restarted since the wait began, it fails at once with the last lines of the unit's journal, instead of
    waiting out the whole timeout.
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
  unit:
    description: The systemd unit running it (C(gpulab-llama-server.service)).
    type: str
    required: true
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
  description: The last lines of the unit's journal, when it failed or the wait timed out.
  returned: failure
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import BenchInputError, parse_base_url
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner, timed_out
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    parse_unit_properties,
    unit_failure,
)

PROPERTIES = ["ActiveState", "SubState", "NRestarts", "Result", "ExecMainStatus"]


class HealthWait:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.journalctl = module.get_bin_path("journalctl")
        self.runner = BoundedRunner(module)

    def unit_properties(self):
        command = [self.systemctl, "show"] + ["--property=%s" % p for p in PROPERTIES] + [self.params["unit"]]
        rc, out, err = self.runner.run(command)
        if rc != 0:
            self.module.fail_json(msg="systemctl show %s failed: %s" % (self.params["unit"], err.strip()), rc=rc)
        return parse_unit_properties(out)

    def health(self):
        """The HTTP status of /health, or None when nothing answers."""
        try:
            response = open_url(self.params["url"].rstrip("/") + "/health", timeout=self.params["poll_s"])
            return response.getcode()
        except Exception as exc:  # pylint: disable=broad-except
            return getattr(exc, "code", None)

    def journal(self):
        if not self.journalctl:
            return []
        rc, out, err = self.runner.run(
            [self.journalctl, "--no-pager", "--output=cat", "-n", str(self.params["journal_lines"]), "-u", self.params["unit"]],
            fail=False)
        if timed_out(rc):
            return [err]  # the failure being reported matters more than the journal
        return out.splitlines() if rc == 0 else []

    def fail(self, reason):
        lines = self.journal()
        self.module.fail_json(
            msg="%s: %s; its journal ends with:\n%s" % (self.params["unit"], reason, "\n".join(lines)), journal=lines)

    def run(self):
        before = self.unit_properties()
        try:
            restarts_before = int(before.get("NRestarts") or 0)
        except ValueError:
            restarts_before = 0
        start = time.time()
        while True:
            if self.health() == 200:
                return int(time.time() - start)
            reason = unit_failure(self.unit_properties(), restarts_before)
            if reason:
                self.fail(reason)
            if time.time() - start >= self.params["timeout_s"]:
                self.fail("/health did not answer 200 within %d s (the model may still be loading: raise "
                          "llama_server_health_timeout_s)" % self.params["timeout_s"])
            time.sleep(self.params["poll_s"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            unit=dict(type="str", required=True),
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
        parse_base_url(module.params["url"])
    except BenchInputError as exc:
        module.fail_json(msg=str(exc).replace("base_url", "url", 1))
    if module.check_mode:
        module.exit_json(changed=False, waited_s=0)
    waited = HealthWait(module).run()
    module.exit_json(changed=False, waited_s=waited)


if __name__ == "__main__":
    main()
