# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of the wrapper scripts and systemd units the serving roles render.

The plans (rpc_worker.py and llama_service.py for llama.cpp, vllm_service.py for vLLM,
monitoring_service.py for role monitoring's units) decide every line; the templates only loop over
what these functions return (every unit: role service's unit.service.j2):

- a wrapper: comment lines, exports (name, value, why: the comment above it, may be empty),
  variables read from a file at start (a secret never on a command line), commands run before the
  last one, and the last command, exec'd with "$@". Commands are lists of lines, each line a list
  of arguments that the template quotes (filter quote) and joins;
- a unit: comment lines and the [Unit], [Service] and [Install] lines, each "Key=value" or a
  "# comment".

Every value is checked for characters that would end a shell line or a unit file line (a newline,
a carriage return, any other control character), with the caller's error class and a message
naming the variable: nothing read from another host reaches a script or a unit unchecked.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
DIRECTIVE = re.compile(r"\A[A-Z][A-Za-z0-9]*\Z")


def checked(value, variable, error):
    """value as a string, refused (error) when it holds a newline or another control character."""
    text = "" if value is None else str(value)
    if CONTROL.search(text):
        raise error("%s %r holds a newline or another control character, which would break the service's unit "
                    "or wrapper script; set %s without it" % (variable, text, variable))
    return text


def env(name, value, variable, error, why=""):
    """One export of a wrapper or line of an environment file: {name, value, why}."""
    if not ENV_NAME.match(str(name)):
        raise error("%s names the environment variable %r, which is not a shell name (letters, digits and _); "
                    "fix %s" % (variable, name, variable))
    return {"name": str(name), "value": checked(value, variable, error), "why": checked(why, variable, error)}


def command(lines, variable, error):
    """A command as lines of arguments (each line a non-empty list), every argument checked."""
    lines = [[checked(arg, variable, error) for arg in line] for line in lines if line]
    if not lines:
        raise error("%s gives no command to run" % variable)
    return lines


def argument_lines(args):
    """args broken into lines for a readable script: a new line at each option (an argument starting with -)."""
    lines = []
    for arg in args:
        if not lines or str(arg).startswith("-"):
            lines.append([])
        lines[-1].append(arg)
    return lines


def flat(lines):
    """The arguments of a command given as lines."""
    return [arg for line in lines for arg in line]


def wrapper(comments, environment, argv_lines, error, preludes=(), file_environment=()):
    """What a wrapper template renders.

    comments: lines after the managed-by header; environment: env() entries, exported;
    file_environment: {name, path, why} read from the file when the script starts (a secret that
    stays off every command line); preludes: commands run first (lines of arguments each);
    argv_lines: the last command, exec'd with "$@".
    """
    return {
        "comments": [checked(line, "a comment of the wrapper", error) for line in comments],
        "environment": list(environment),
        "file_environment": list(file_environment),
        "preludes": [command(p, "a command of the wrapper", error) for p in preludes],
        "argv_lines": command(argv_lines, "the wrapper's command", error),
        "argv": flat(argv_lines),
    }


def directive(key, value, variable, error):
    """'Key=value' of a unit, the value checked."""
    if not DIRECTIVE.match(str(key)):
        raise error("%s names the systemd directive %r, which is not a directive name; fix %s" % (variable, key, variable))
    return "%s=%s" % (key, checked(value, variable, error))


def directives(pairs, variable, error):
    """'Key=value' lines of [key, value] pairs."""
    return [directive(key, value, variable, error) for key, value in pairs]


def hardening(settings, variable, error):
    """The hardening directives, in their order; a value of None leaves the directive out."""
    if not isinstance(settings, dict):
        raise error("%s is %r, not a mapping of systemd directives to values" % (variable, settings))
    return [directive(key, value, variable, error) for key, value in settings.items() if value is not None]


def device_allow(devices, variable, error):
    """DeviceAllow= lines giving read and write access to each device (group)."""
    return [directive("DeviceAllow", "%s rw" % checked(device, variable, error), variable, error)
            for device in devices or []]


def unit_file(comments, unit, service, install, error):
    """What a unit template renders: comment lines and the three sections' lines."""
    def lines(section):
        return [checked(line, "a line of the unit", error) for line in section]
    return {"comments": lines(comments), "unit": lines(unit), "service": lines(service), "install": lines(install)}
