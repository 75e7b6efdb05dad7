"""Runs a module's main() with AnsibleModule's I/O patched and commands answered from a table."""

import shutil
from types import SimpleNamespace
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def _exit_json(self, **kwargs):
    raise ExitJson(kwargs)


def _fail_json(self, **kwargs):
    raise FailJson(kwargs)


# coreutils timeout as the harness answers it when a table names no timeout of its own: commands
# run under it (module_utils/bounded_command.py) are matched and recorded without its prefix, and
# the prefix is kept in `bounded`.
TIMEOUT = '/harness/bin/timeout'


def _bin_path_answer(bin_path):
    if isinstance(bin_path, dict):
        return {'side_effect': lambda name, *unused_args, **unused_kwargs: bin_path.get(name, TIMEOUT if name == 'timeout' else None)}
    return {'side_effect': lambda name, *unused_args, **unused_kwargs: TIMEOUT if name == 'timeout' else bin_path}


def run_module(main, args, answers, bin_path):
    """Run main(); answers maps a command tuple to (rc, stdout, stderr).

    bin_path is what get_bin_path answers for every name, or a dict name -> path (a name not in
    it is not found); either way `timeout` is TIMEOUT unless the dict names one. Returns kind
    (ExitJson or FailJson), result, the commands run, the warnings issued, the get_bin_path mock
    and the timeout prefixes of the bounded commands.
    """
    commands = []
    warnings = []
    bounded = []

    def run_command(self, command, *unused_args, **unused_kwargs):
        command = list(command)
        if command[0] == TIMEOUT:
            bounded.append(command[:3])
            command = command[3:]
        commands.append(command)
        return answers[tuple(command)]

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg)), \
            mock.patch.object(basic.AnsibleModule, 'run_command', run_command), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', **_bin_path_answer(bin_path)) as get_bin_path:
        with pytest.raises((ExitJson, FailJson)) as raised:
            main()
    return SimpleNamespace(kind=raised.type, result=raised.value.args[0], commands=commands,
                           warnings=warnings, get_bin_path=get_bin_path, bounded=bounded)


def run_module_live(main, args, bin_path):
    """Run main() with its commands really run: bin_path maps a name to a (fake) program, and
    `timeout` is the host's coreutils timeout. For commands that hang."""
    tools = dict(bin_path, timeout=shutil.which('timeout'))
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', side_effect=lambda name, *a, **k: tools.get(name)):
        with pytest.raises((ExitJson, FailJson)) as raised:
            main()
    return SimpleNamespace(kind=raised.type, result=raised.value.args[0])


def hanging_program(directory, name):
    """An executable that never answers (until it is killed)."""
    path = directory / name
    path.write_text('#!/bin/sh\nexec sleep 60\n')
    path.chmod(0o755)
    return str(path)
