"""Runs a module's main() with AnsibleModule's I/O patched and commands answered from a table."""

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


def _bin_path_answer(bin_path):
    if isinstance(bin_path, dict):
        return {'side_effect': lambda name, *unused_args, **unused_kwargs: bin_path.get(name)}
    return {'return_value': bin_path}


def run_module(main, args, answers, bin_path):
    """Run main(); answers maps a command tuple to (rc, stdout, stderr).

    bin_path is what get_bin_path answers for every name, or a dict name -> path (a name not in
    it is not found). Returns kind (ExitJson or FailJson), result, the commands run, the warnings
    issued and the get_bin_path mock.
    """
    commands = []
    warnings = []

    def run_command(self, command, *unused_args, **unused_kwargs):
        commands.append(list(command))
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
                           warnings=warnings, get_bin_path=get_bin_path)
