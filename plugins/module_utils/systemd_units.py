# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several systemd units brought to one state in one module run (module `systemd_units`).

One `systemctl show` says, for every unit, whether it is loaded, running, enabled and whether
its files changed since systemd read them (NeedDaemonReload, which covers drop-ins). systemd is
reloaded only then, so a unit a failed run wrote is still picked up, and a run that changed no
unit does not reload. These functions read that answer and say which systemctl commands follow.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpulab.inference.plugins.module_utils.service_status import ServiceStatusError, show_blocks

SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload")
STATES = ("started", "stopped", "restarted", "reloaded")
# ActiveState of a unit that runs or is on its way there.
RUNNING = ("active", "activating", "reloading")
# UnitFileState that `systemctl is-enabled` answers with exit status 0: nothing to enable.
ENABLED = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient")


class SystemdUnitsError(ValueError):
    """systemctl's answer cannot be read, or a unit does not exist; the message names it."""


def parse_show(text, names):
    """[{name, load_state, active_state, unit_file_state, need_daemon_reload}] from `systemctl
    show --property=<SHOW_PROPERTIES> -- <names>`, whose blocks follow the names' order (an alias
    answers with its unit's Id)."""
    try:
        blocks = show_blocks(text)
    except ServiceStatusError as exc:
        raise SystemdUnitsError(str(exc))
    if len(blocks) != len(names):
        raise SystemdUnitsError("systemctl show answered %d blocks for %d units (%s)"
                                % (len(blocks), len(names), ", ".join(names)))
    return [{"name": name,
             "load_state": block.get("LoadState") or None,
             "active_state": block.get("ActiveState") or None,
             "unit_file_state": block.get("UnitFileState") or None,
             "need_daemon_reload": block.get("NeedDaemonReload") == "yes"}
            for name, block in zip(names, blocks)]


def needs_daemon_reload(units):
    """True when a unit's files changed since systemd read them, or a unit is not loaded (a unit
    file written since systemd last looked)."""
    return any(unit["need_daemon_reload"] or unit["load_state"] != "loaded" for unit in units)


def missing_units(units):
    """Names of the units systemd cannot load (after a reload, they do not exist)."""
    return [unit["name"] for unit in units if unit["load_state"] != "loaded"]


def actions(units, state, enabled, reenable=False):
    """The systemctl verbs to run, in order, each with the units it applies to: [(verb, [names])].

    state: started, stopped, restarted or reloaded (a unit not running is started instead);
    enabled: True, False or None (left as it is); reenable: link every unit again from its
    current [Install] section (a changed WantedBy=), which also enables it."""
    if state not in STATES:
        raise SystemdUnitsError("state %r is not one of %s" % (state, ", ".join(STATES)))
    steps = []
    if reenable:
        steps.append(("reenable", [unit["name"] for unit in units]))
    elif enabled is True:
        steps.append(("enable", [unit["name"] for unit in units if unit["unit_file_state"] not in ENABLED]))
    elif enabled is False:
        steps.append(("disable", [unit["name"] for unit in units if unit["unit_file_state"] in ("enabled", "enabled-runtime")]))
    running = [unit["name"] for unit in units if unit["active_state"] in RUNNING]
    stopped = [unit["name"] for unit in units if unit["active_state"] not in RUNNING]
    if state == "started":
        steps.append(("start", stopped))
    elif state == "stopped":
        steps.append(("stop", running))
    elif state == "restarted":
        steps.append(("restart", [unit["name"] for unit in units]))
    else:
        steps += [("reload", running), ("start", stopped)]
    return [(verb, names) for verb, names in steps if names]
