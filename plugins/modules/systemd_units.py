#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: systemd_units
short_description: Bring several systemd units to one state in one module run, reloading systemd only when a unit changed
version_added: 0.4.0
description:
  - Asks systemd once (C(systemctl show)) whether each unit of O(names) is loaded, running and enabled, and whether
    its files changed since systemd read them (C(NeedDaemonReload), which covers drop-ins).
  - Reloads systemd (C(systemctl daemon-reload)) when one did or a unit is not loaded yet, or always with
    O(daemon_reload=always); a unit written by an earlier run that failed before its reload is still picked up.
    A unit systemd cannot load after the reload fails the task, naming it.
  - Then, in this order, clears the units' failed state (O(reset_failed)), links them again (O(reenable)) or
    enables or disables them (O(enabled)), and starts, stops, restarts or reloads them (O(state)), one
    C(systemctl) call per step for every unit it concerns.
  - Where M(ansible.builtin.systemd_service) takes one module run per unit and reloads systemd when told to.
  - The rules are in C(plugins/module_utils/systemd_units.py).
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Asks systemd only; reports what it would change.
  diff_mode:
    support: none
    description: No diff is returned.
options:
  names:
    description: The units, C(.service) implied where a name has no suffix.
    type: list
    elements: str
    required: true
  state:
    description:
      - V(started) starts the units that do not run, V(stopped) stops those that do, V(restarted) restarts every
        unit, V(reloaded) reloads those that run and starts the others.
    type: str
    choices: [started, stopped, restarted, reloaded]
    default: started
  enabled:
    description: Whether the units start at boot; left as it is when not given.
    type: bool
  reenable:
    description:
      - Link every unit again from its current C([Install]) section (C(systemctl reenable)), which a changed
        C(WantedBy=) needs; it also enables them. Counts as a change.
    type: bool
    default: false
  reset_failed:
    description: Clear the units' failed state first (C(systemctl reset-failed)), so a unit that hit its start limit starts.
    type: bool
    default: false
  daemon_reload:
    description: V(auto) reloads systemd only when a unit's files changed or a unit is not loaded; V(always) reloads it.
    type: str
    choices: [auto, always]
    default: auto
"""

EXAMPLES = r"""
- name: Enable and start every RPC server instance
  gpulab.inference.systemd_units:
    names: [gpulab-rpc-server@0.service, gpulab-rpc-server@1.service]
    state: started
    enabled: true

- name: Restart the guard after its unit changed, linked again from its [Install] section
  gpulab.inference.systemd_units:
    names: [gpulab-rpc-guard.service]
    state: restarted
    reenable: true
    reset_failed: true
"""

RETURN = r"""
units:
  description: What systemd said of each unit before any change, C(name), C(load_state), C(active_state),
    C(unit_file_state) and C(need_daemon_reload) (after the reload, where one ran).
  returned: always
  type: list
  elements: dict
daemon_reloaded:
  description: Whether systemd was reloaded (in check mode, would be).
  returned: always
  type: bool
commands:
  description: The C(systemctl) verbs run (in check mode, that would run), each with its units, in order.
  returned: always
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.systemd_units import (
    SHOW_PROPERTIES,
    SystemdUnitsError,
    actions,
    missing_units,
    needs_daemon_reload,
    parse_show,
)


class SystemdUnits:
    def __init__(self, module):
        self.module = module
        self.runner = BoundedRunner(module)
        self.systemctl = module.get_bin_path("systemctl", required=True)

    def run(self, *args):
        argv = [self.systemctl] + list(args)
        rc, out, err = self.runner.run(argv)
        if rc != 0:
            self.module.fail_json(msg="`%s` failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()),
                                  rc=rc, stdout=out, stderr=err)
        return out

    def show(self, names):
        return parse_show(self.run("show", "--property=" + ",".join(SHOW_PROPERTIES), "--", *names), names)

    def apply(self):
        params = self.module.params
        check = self.module.check_mode
        names = params["names"]
        units = self.show(names)
        reload_ = params["daemon_reload"] == "always" or needs_daemon_reload(units)
        if reload_ and not check:
            self.run("daemon-reload")
            units = self.show(names)
        missing = missing_units(units)
        if missing and not check:
            raise SystemdUnitsError("systemd has no unit %s: write its unit file first" % ", ".join(missing))
        steps = actions(units, params["state"], params["enabled"], params["reenable"])
        if params["reset_failed"] and not check:
            # A unit that never failed answers with an error that means nothing here.
            self.runner.run([self.systemctl, "reset-failed", "--"] + names)
        for verb, step_names in steps:
            if not check:
                self.run(verb, "--", *step_names)
        return dict(changed=bool(steps), units=units, daemon_reloaded=reload_,
                    commands=[[verb] + step_names for verb, step_names in steps])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["started", "stopped", "restarted", "reloaded"], default="started"),
            enabled=dict(type="bool"),
            reenable=dict(type="bool", default=False),
            reset_failed=dict(type="bool", default=False),
            daemon_reload=dict(type="str", choices=["auto", "always"], default="auto"),
        ),
        supports_check_mode=True,
    )
    if not module.params["names"]:
        module.exit_json(changed=False, units=[], daemon_reloaded=False, commands=[])
    try:
        result = SystemdUnits(module).apply()
    except SystemdUnitsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
