# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names and values role gpulab.inference.service hands to systemd, supervisord and the account.

Pure functions: the service role's tasks (through the filters of the same names) only render
and run what these return, so the rules are tested here and written once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MANAGERS = ("systemd", "supervisor")

# A unit or program name as the collection writes them; also what a program file is named after.
_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# A group name as /etc/group holds it: no separator of its fields or of the user module's list.
_GROUP = re.compile(r"\A[^\s:,]+\Z")


class ServiceManagerError(ValueError):
    """A value the service manager cannot take; the message names it."""


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
