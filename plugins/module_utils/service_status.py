# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers of what systemd and supervisord say about the collection's services.

Each takes the text a command printed (systemctl list-units / show, supervisorctl status) and
returns plain data, so tests feed captured output and the module only runs the commands.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re

from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import format_endpoint


# What `systemctl show` is asked for, per unit.
SHOW_PROPERTIES = ("Id", "ActiveState", "SubState", "Result", "NRestarts", "MainPID",
                   "ActiveEnterTimestamp", "ExecMainStartTimestamp", "InvocationID", "UnitFileState")

# supervisorctl status: name, state, then a description ("pid 42, uptime 1 day, 2:03:04").
_SUPERVISOR_LINE = re.compile(r"^(?P<name>\S+)\s+(?P<state>[A-Z]+)(?:\s+(?P<description>.*))?$")
_UPTIME = re.compile(r"uptime (?:(?P<days>[0-9]+) days?, )?(?P<h>[0-9]+):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})")
_PID = re.compile(r"\bpid (?P<pid>[0-9]+)")


class ServiceStatusError(ValueError):
    """Output that does not read as the command's; the message names the line."""


def matches(name, patterns):
    """True when a unit or program name matches one of the shell patterns."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def list_units_args(patterns):
    """systemctl's arguments whose output parse_list_units reads: every service unit the patterns
    match, loaded or not."""
    return ["list-units", "--all", "--plain", "--no-legend", "--type=service", "--"] + list(patterns)


def parse_list_units(text, patterns=("*",)):
    """Unit names from `systemctl list-units --all --plain --no-legend --type=service`, in order,
    keeping those that match the patterns. A failed unit's line may start with a bullet."""
    units = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        while fields and fields[0] in ("\u25cf", "*", "\u00d7"):
            fields = fields[1:]
        if not fields:
            continue
        name = fields[0]
        if "." not in name:
            raise ServiceStatusError("list-units line %d does not start with a unit name: %r" % (number, line))
        if matches(name, patterns) and name not in units:
            units.append(name)
    return units


# The node's units as a plan module needs them, asked through these rules (role service's): the
# instances of a unit and which of some services run. `run(args)` runs the manager's control
# command with args and answers (rc, stdout), or None on a host without it (unit_query).
ACTIVE_STATES = ("active", "activating", "reloading")


def unit_query(module, runner):
    """run() for node_units and active_units: systemctl under runner's limit (bounded_command.BoundedRunner)."""
    systemctl = module.get_bin_path("systemctl")

    def run(args):
        if not systemctl:
            return None
        rc, out, unused = runner.run([systemctl] + list(args))
        return rc, out
    return run


def node_units(run, patterns, booted):
    """The service units the patterns match, where systemd is the init system (booted); else none."""
    if not booted:
        return []
    answer = run(list_units_args(patterns))
    if answer is None:
        return []
    if answer[0] != 0:
        raise ServiceStatusError("systemctl list-units failed (rc %d): check `systemctl is-system-running`" % answer[0])
    return parse_list_units(answer[1], patterns)


def active_units(run, names):
    """The units of names that systemd reports running (one `is-active` line each); none without systemctl."""
    if not names:
        return []
    answer = run(["is-active"] + list(names))
    if not answer:
        return []
    states = answer[1].splitlines()
    return [name for name, state in zip(names, states) if state.strip() in ACTIVE_STATES]


def _int_or_none(value):
    return int(value) if value is not None and re.match(r"^[0-9]+$", value) else None


def show_blocks(text):
    """The property blocks of `systemctl show --property=...` of several units, in the units' order,
    each {property: value}; the blocks are separated by an empty line."""
    blocks = []
    current = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        if "=" not in line:
            raise ServiceStatusError("systemctl show line %d is not a property: %r" % (number, line))
        key, value = line.split("=", 1)
        current[key] = value
    if current:
        blocks.append(current)
    return blocks


def show_properties(text):
    """{property: value} of `systemctl show --property=...` of one unit, values stripped; a line
    that is no property (none in systemctl's answer) is skipped. For the readers of one unit (the
    drain, the health wait): the only parser of that answer beside show_blocks."""
    properties = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            properties[key.strip()] = value.strip()
    return properties


def unit_failure(props, restarts_before=0):
    """Why a unit that should be loading a model is not, or None while it may still come up.

    props: show_properties of ActiveState, SubState, NRestarts, Result, ExecMainStatus.
    A unit that failed, sits in auto-restart, or restarted since the wait began has failed.
    """
    state = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    try:
        restarts = int(props.get("NRestarts") or 0)
    except ValueError:
        restarts = 0
    detail = "result %s, exit status %s" % (props.get("Result", "?"), props.get("ExecMainStatus", "?"))
    if state == "failed":
        return "the unit failed (%s)" % detail
    if sub == "auto-restart":
        return "the service exited and waits to be restarted (%s)" % detail
    if restarts > restarts_before:
        return "the service was restarted %d time(s) while loading (%s)" % (restarts - restarts_before, detail)
    if state in ("inactive", "deactivating"):
        return "the unit is %s (%s)" % (state, detail)
    return None


def parse_systemctl_show(text):
    """{unit: status} from `systemctl show --property=...` of several units (blocks separated by an
    empty line, each with Id=). Start time: when the unit last became active (empty: never)."""
    status = {}
    for block in show_blocks(text):
        if not block.get("Id"):
            raise ServiceStatusError("systemctl show block without Id: %r" % (block,))
        main_pid = _int_or_none(block.get("MainPID"))
        status[block["Id"]] = {
            "name": block["Id"],
            "state": block.get("ActiveState"),
            "sub_state": block.get("SubState"),
            "result": block.get("Result"),
            "restarts": _int_or_none(block.get("NRestarts")),
            "main_pid": main_pid or None,
            "started": block.get("ActiveEnterTimestamp") or None,
            "invocation_id": block.get("InvocationID") or None,
            # enabled, disabled, static (started by another unit), masked, ...; null when unknown
            "enabled": block.get("UnitFileState") or None,
        }
    return status


def uptime_s(description):
    """Seconds of `uptime H:MM:SS` (with `N days, ` before it) in a supervisorctl description, or None."""
    match = _UPTIME.search(description or "")
    if not match:
        return None
    return (int(match.group("days") or 0) * 86400 + int(match.group("h")) * 3600
            + int(match.group("m")) * 60 + int(match.group("s")))


def parse_supervisorctl_status(text, patterns=("*",)):
    """[status] from `supervisorctl status`, for programs matching the patterns, in order.

    supervisord counts no restarts (restarts is None); uptime_s is how long a running program has
    run, from which the caller computes its start time.
    """
    programs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _SUPERVISOR_LINE.match(line.strip())
        if not match:
            raise ServiceStatusError("supervisorctl status line %d is not 'name STATE ...': %r" % (number, line))
        name = match.group("name")
        if not matches(name, patterns):
            continue
        description = (match.group("description") or "").strip()
        pid = _PID.search(description) if match.group("state") == "RUNNING" else None
        programs.append({
            "name": name,
            "state": match.group("state").lower(),
            "sub_state": description or None,
            "result": None,
            "restarts": None,
            "main_pid": int(pid.group("pid")) if pid else None,
            "uptime_s": uptime_s(description) if match.group("state") == "RUNNING" else None,
        })
    return programs


# supervisord's booleans (supervisor.datatypes.boolean), lower case.
_SUPERVISOR_TRUE = ("true", "yes", "on", "1")
_SUPERVISOR_FALSE = ("false", "no", "off", "0")


def program_enablement(text, program):
    """Whether supervisord starts a program when it starts (a reboot): "enabled" or "disabled"
    from the autostart= line of its [program:<name>] section in the program file's text (absent:
    supervisord's default, true), None without the file's text or that section."""
    if text is None:
        return None
    section = None
    found = False
    autostart = "true"
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if stripped.startswith("["):
            section = stripped.strip("[]").strip()
            found = found or section == "program:" + program
            continue
        if section == "program:" + program and "=" in stripped:
            key, value = [part.strip() for part in stripped.split("=", 1)]
            if key.lower() == "autostart":  # ConfigParser reads option names in lower case
                autostart = value.split(";", 1)[0].strip().lower()
                if autostart not in _SUPERVISOR_TRUE + _SUPERVISOR_FALSE:
                    raise ServiceStatusError("program file of %s line %d: autostart=%s is not a boolean"
                                             % (program, number, value))
    if not found:
        return None
    return "enabled" if autostart in _SUPERVISOR_TRUE else "disabled"


def since_last(lines, pattern):
    """The lines from the last one matching the regular expression on (a program's log file holds
    every start; its start line marks the current one); all lines when none matches."""
    marker = re.compile(pattern)
    starts = [index for index, line in enumerate(lines) if marker.search(line)]
    return lines[starts[-1]:] if starts else lines


def tail(text, count):
    """The last `count` lines of a log text (none for count 0)."""
    if count <= 0:
        return []
    return text.splitlines()[-count:]


def watch_verdicts(rpc_watch):
    """{port: 'cannot serve: <verdict> (<why>)'} of the RPC servers the guard's watch
    (module_utils/rpc_watch.py, /run/gpulab/rpc-watch.json) finds hung or down."""
    found = {}
    for server in (rpc_watch.get("servers") or []) if isinstance(rpc_watch, dict) else []:
        if isinstance(server, dict) and server.get("verdict") in ("stopped", "suspect", "stale", "down"):
            found[server.get("port")] = "cannot serve: %s (%s)" % ({"down": "down", "stale": "held by a client that is gone"}.get(
                server["verdict"], "hangs"), server.get("why") or "?")
    return found


def node_summary(build_info=None, model=None, rpc_manifest=None, vllm_plan=None, rpc_watch=None):
    """Build id, model file and endpoints of a node from the files the roles publish
    (docs/CONTRACTS.md), each None where the node has none: BUILD_INFO.json, model.json (head),
    servers.json (workers), the vLLM plan.json; an RPC endpoint the guard's watch (rpc-watch.json)
    finds hung or down says so, and rpc_watch is that file's can_serve and problems."""
    endpoints = []
    verdicts = watch_verdicts(rpc_watch)
    if isinstance(rpc_manifest, dict):
        address = rpc_manifest.get("address")
        for endpoint in rpc_manifest.get("endpoints") or []:
            if isinstance(endpoint, dict) and endpoint.get("port") is not None:
                line = "%s (RPC, %s)" % (format_endpoint(address, endpoint["port"]), endpoint.get("device") or "?")
                if endpoint["port"] in verdicts:
                    line += ": " + verdicts[endpoint["port"]]
                endpoints.append(line)
    if isinstance(vllm_plan, dict) and vllm_plan.get("url"):
        endpoints.append("%s (vLLM)" % vllm_plan["url"])
    return {
        "build_id": build_info.get("build_id") if isinstance(build_info, dict) else None,
        "model": model.get("path") if isinstance(model, dict) else None,
        "endpoints": endpoints,
        "rpc_watch": {"can_serve": rpc_watch.get("can_serve") is not False, "problems": rpc_watch.get("problems") or [],
                      "looked_at": rpc_watch.get("looked_at")} if isinstance(rpc_watch, dict) else None,
    }
