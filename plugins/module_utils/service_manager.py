# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names and values role gpulab.inference.service hands to systemd, supervisord and the account.

Pure functions: the service role's tasks (through the filters of the same names) only render
and run what these return, so the rules are tested here and written once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

MANAGERS = ("systemd", "supervisor")

# A unit or program name as the collection writes them; also what a program file is named after.
_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# A group name as /etc/group holds it: no separator of its fields or of the user module's list.
_GROUP = re.compile(r"\A[^\s:,]+\Z")


class ServiceManagerError(ValueError):
    """A value the service manager cannot take; the message names it."""


def runs_it_as(manager, user, unit, env_file, by_hand):
    """The lines a service's files carry for the operator: who runs it under which manager, and how
    to run it by hand instead (the same command the manager starts)."""
    if manager == "supervisor":
        return ["supervisord runs it as %s (program %s) with the environment of %s;" % (user, unit, env_file),
                "to run it by hand, stop the program and: " + by_hand]
    return ["systemd runs it as %s (%s.service) with %s;" % (user, unit, env_file),
            "to run it by hand, stop the unit and: " + by_hand]


def _check_name(name, what):
    if not isinstance(name, str) or not _NAME.match(name):
        raise ServiceManagerError("%s %r is not a unit or program name (letters, digits, '_', '.', '-')" % (what, name))
    return name


def service_names(instances, base, manager):
    """The unit or program name of every instance of a service, in the given order.

    systemd: instances of the template unit, <base>@<i>.service; supervisor: programs <base>-<i>
    (supervisord has no template programs). No instances (None): the one service, <base>.service
    or <base>.
    """
    _check_name(base, "service name")
    if manager not in MANAGERS:
        raise ServiceManagerError("service manager %r is neither systemd nor supervisor" % (manager,))
    if instances is None:
        return ["%s.service" % base] if manager == "systemd" else [base]
    names = []
    for instance in instances:
        if isinstance(instance, bool) or not isinstance(instance, int) or instance < 0:
            raise ServiceManagerError("instance %r of %s is not a whole number >= 0" % (instance, base))
        names.append("%s@%d.service" % (base, instance) if manager == "systemd" else "%s-%d" % (base, instance))
    return names


def device_groups(wanted, present):
    """The wanted device groups that exist on the node (present: getent's group database, or
    any collection of names), in the wanted order, each once.

    A node without a GPU group (no render group on a host without a DRM device) still gets its
    service account; a group missing here is not an error.
    """
    chosen = []
    for group in wanted or []:
        if not isinstance(group, str) or not _GROUP.match(group):
            raise ServiceManagerError("device group %r is not a group name (no spaces, ':' or ',')" % (group,))
        if group in (present or {}) and group not in chosen:
            chosen.append(group)
    return chosen


def stale_programs(program_files, planned):
    """The programs whose files (paths of <program>.conf) exist but which are not planned, sorted."""
    planned = set(_check_name(name, "planned program") for name in planned or [])
    stale = set()
    for path in program_files or []:
        base = str(path).rsplit("/", 1)[-1]
        if not base.endswith(".conf") or base == ".conf":
            raise ServiceManagerError("program file %r is not named <program>.conf" % (path,))
        name = base[:-len(".conf")]
        if name not in planned:
            stale.add(name)
    return sorted(stale)


def supervisor_environment(environment):
    """supervisord's environment= value: NAME="value" pairs sorted by name, comma-separated.

    supervisord expands %(...)s in the value, so a literal % is doubled; a double quote would
    end the value early and is dropped (the wrappers take no value with quotes). An empty
    mapping gives "" (the program gets no environment= line).
    """
    pairs = []
    for name, value in sorted((environment or {}).items()):
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ServiceManagerError("environment variable name %r is not a shell name ([A-Za-z_][A-Za-z0-9_]*)" % (name,))
        if value is None or isinstance(value, (dict, list)):
            raise ServiceManagerError("environment variable %s has no single value (%r)" % (name, value))
        text = str(value)
        if "\n" in text:
            raise ServiceManagerError("environment variable %s holds a newline" % name)
        pairs.append('%s="%s"' % (name, text.replace("%", "%%").replace('"', "")))
    return ",".join(pairs)


# --- which manager runs the collection's services, and which of its services are the collection's

# The one rule for gpulab_service_manager auto. systemd creates this directory early at boot when
# it runs as the init system, and only then (sd_booted(3), what systemctl itself checks). Ansible's
# service_mgr fact is not used: it needs gathered facts, and on a GPU container whose image ships
# systemd without running it as PID 1 it can still answer systemd.
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"


def systemd_booted(isdir=None):
    """True where systemd is the init system of this host (SYSTEMD_RUNTIME_DIR is a directory)."""
    return (isdir or os.path.isdir)(SYSTEMD_RUNTIME_DIR)


# What to check when a manager's control command does not answer (bounded_command.what_to_check),
# by the command's base name.
CONTROL_CHECKS = {
    'systemctl': 'systemd does not answer: check `systemctl is-system-running` and the journal of PID 1 on this host',
    'journalctl': 'the journal does not answer: check systemd-journald (`systemctl status systemd-journald`)',
    'supervisorctl': 'supervisord does not answer on its socket: check that supervisord runs and its log',
}


# The manager's major version, where what the collection writes for it depends on it: systemd's
# RestartSteps= and RestartMaxDelaySec= from 254 on (llama_service.restart_directives). Module
# service_manager asks it with the manager, once per play, so no plan module asks the node itself.
def version_argv(manager):
    """The command that prints the manager's version, or None where no version matters."""
    return ["systemctl", "--version"] if manager == "systemd" else None


def parse_version(manager, text):
    """The major version in version_argv's answer ('systemd 252 (252.30-1~deb12u2)' -> 252); 0 when unknown."""
    if manager != "systemd":
        return 0
    match = re.search(r"^systemd ([0-9]+)", str(text or "").strip(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def active_manager(requested, booted_with_systemd):
    """The manager that runs the collection's services on a host: systemd or supervisor.

    requested: gpulab_service_manager (auto, systemd or supervisor). auto: systemd where systemd is
    the init system (systemd_booted), else supervisor (a container whose PID 1 is a shell, tini or
    supervisord itself). Module service_manager runs this on the node, once per play, for role
    common's gpulab_service_manager_active; nothing else decides it.
    """
    if requested == "auto":
        return "systemd" if booted_with_systemd else "supervisor"
    if requested not in MANAGERS:
        raise ServiceManagerError(
            "gpulab_service_manager is %r: set auto, systemd or supervisor" % (requested,))
    return requested


def program_units(program):
    """The unit names a supervisord program stands for: a program is named after its unit without
    .service (gpulab-vllm), an instance's after the instance (gpulab-rpc-server-0 for
    gpulab-rpc-server@0.service, service_names), so unit patterns match programs too."""
    names = [program + ".service"]
    instance = re.match(r"\A(.+)-([0-9]+)\Z", program)
    if instance:
        names.append("%s@%s.service" % instance.groups())
    return names


def matching_pattern(patterns, names):
    """The first fnmatch pattern (case-sensitive) that matches one of names, or None: how the drain
    and the GGUF plan match unit patterns (gpulab_own_unit_patterns, keep) against units and programs."""
    for pattern in patterns:
        for name in names:
            if fnmatch.fnmatchcase(name, pattern):
                return pattern
    return None


def _ordered_matches(names, patterns, aliases):
    ordered = []
    for pattern in patterns:
        for name in names:
            if name not in ordered and any(fnmatch.fnmatchcase(alias, pattern) for alias in aliases(name)):
                ordered.append(name)
    return ordered


def units_matching(units, patterns):
    """The units matched by patterns, ordered by the first pattern each matches (so a list
    that names the head before its workers stops the head first)."""
    return _ordered_matches(units, patterns, lambda unit: [unit])


def programs_matching(programs, patterns):
    """The supervisord programs whose units (program_units) patterns match, ordered like
    units_matching."""
    return _ordered_matches(programs, patterns, program_units)


def services_matching(names, patterns, manager):
    """units_matching under systemd, programs_matching under supervisor."""
    if manager == "systemd":
        return units_matching(names, patterns)
    if manager == "supervisor":
        return programs_matching(names, patterns)
    raise ServiceManagerError("service manager %r is neither systemd nor supervisor" % (manager,))


# --- supervisorctl --------------------------------------------------------------------------------

# `supervisorctl status` exits 3 when some program is not running, 4 when supervisord does not
# answer (supervisor 4.x, supervisorctl.LSBStatusExitStatuses): 0 and 3 are complete answers.
SUPERVISORCTL_STATUS_RCS = (0, 3)
# States in which a program holds (or is about to hold) its resources (supervisor.states).
SUPERVISOR_ACTIVE_STATES = ("RUNNING", "STARTING", "BACKOFF", "STOPPING")
_SUPERVISOR_STATUS_RE = re.compile(r"\A(\S+)\s+([A-Z]+)\b\s*(.*)\Z")
_SUPERVISOR_PID_RE = re.compile(r"\Apid (\d+),")


def supervisorctl_argv(supervisorctl, config, *args):
    """supervisorctl's command line: with config (supervisord.conf of the collection's own
    supervisord) -c names it, without it supervisorctl searches its default places."""
    argv = [supervisorctl]
    if config:
        argv += ["-c", config]
    return argv + list(args)


def parse_supervisorctl_states(output):
    """{program: {'state', 'pid', 'description'}} from `supervisorctl status` output, in its order;
    a program of a group is named group:name (what supervisorctl takes back). pid is None unless
    the program runs."""
    programs = {}
    for line in output.splitlines():
        match = _SUPERVISOR_STATUS_RE.match(line.strip())
        if not match:
            continue
        name, state, description = match.groups()
        pid = _SUPERVISOR_PID_RE.match(description)
        programs[name] = {"state": state, "pid": int(pid.group(1)) if pid else None,
                          "description": description.strip()}
    return programs


def active_programs(states):
    """The programs of parse_supervisorctl_states's answer that run or are being started."""
    return [name for name, program in states.items() if program["state"] in SUPERVISOR_ACTIVE_STATES]


def program_failure(state, pid_before=None):
    """Why a supervisord program that should be loading a model is not, or None while it may still
    come up (service_status.unit_failure's counterpart under supervisor).

    state: parse_supervisorctl_states's entry for the program, or None when supervisord does not
    know it. A program that gave up (FATAL), exited, waits to be started again (BACKOFF), is stopped,
    or runs with another pid than when the wait began (restarted) has failed.
    """
    if state is None:
        return "supervisord does not know the program"
    name = state["state"]
    detail = state.get("description") or name
    if name == "FATAL":
        return "the program gave up starting (%s)" % detail
    if name == "BACKOFF":
        return "the program exited and waits to be started again (%s)" % detail
    if name in ("EXITED", "STOPPED", "STOPPING", "UNKNOWN"):
        return "the program is %s (%s)" % (name.lower(), detail)
    if pid_before is not None and state.get("pid") not in (None, pid_before):
        return "the program was restarted while loading (pid %s, was %s)" % (state["pid"], pid_before)
    return None
