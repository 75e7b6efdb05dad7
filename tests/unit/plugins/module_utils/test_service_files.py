# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of the wrappers and units the serving roles render (module_utils/service_files.py)."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import service_files as sf


class Refused(ValueError):
    pass


def test_argument_lines_start_a_line_at_each_option():
    assert sf.argument_lines(["serve", "/m", "--host", "::", "--enable-expert-parallel", "--port", "8000"]) == [
        ["serve", "/m"], ["--host", "::"], ["--enable-expert-parallel"], ["--port", "8000"]]
    assert sf.argument_lines([]) == []


def test_wrapper_keeps_the_lines_and_flattens_the_command():
    wrapper = sf.wrapper(["a comment"], [sf.env("A", 1, "x", Refused, "why")], [["/bin/x"], ["--y", "z"]], Refused,
                         preludes=[[["/bin/p", "start"]]], file_environment=[{"name": "K", "path": "/k", "why": ""}])
    assert wrapper == {"comments": ["a comment"], "environment": [{"name": "A", "value": "1", "why": "why"}],
                       "file_environment": [{"name": "K", "path": "/k", "why": ""}],
                       "preludes": [[["/bin/p", "start"]]], "argv_lines": [["/bin/x"], ["--y", "z"]],
                       "argv": ["/bin/x", "--y", "z"]}


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\x7fb"])
def test_control_characters_are_refused_naming_the_variable(value):
    with pytest.raises(Refused) as raised:
        sf.checked(value, "my_variable", Refused)
    assert str(raised.value).startswith("my_variable %r holds a newline" % value)
    assert str(raised.value).endswith("set my_variable without it")


def test_plain_values_pass_as_strings():
    assert sf.checked("a b\tc $x 'q'", "v", Refused) == "a b\tc $x 'q'"
    assert sf.checked(None, "v", Refused) == "" and sf.checked(5, "v", Refused) == "5"


def test_environment_names_must_be_shell_names():
    with pytest.raises(Refused, match="my_env names the environment variable 'A-B', which is not a shell name"):
        sf.env("A-B", "1", "my_env", Refused)


def test_hardening_leaves_none_out_and_keeps_empty_values():
    assert sf.hardening({"NoNewPrivileges": "yes", "PrivateTmp": None, "CapabilityBoundingSet": ""}, "h", Refused) == [
        "NoNewPrivileges=yes", "CapabilityBoundingSet="]
    with pytest.raises(Refused, match="h is 'yes', not a mapping"):
        sf.hardening("yes", "h", Refused)
    with pytest.raises(Refused, match="h names the systemd directive 'a=b'"):
        sf.hardening({"a=b": "c"}, "h", Refused)


def test_device_allow_and_directives():
    assert sf.device_allow(["char-nvidia", "/dev/nvidia0"], "d", Refused) == [
        "DeviceAllow=char-nvidia rw", "DeviceAllow=/dev/nvidia0 rw"]
    assert sf.device_allow([], "d", Refused) == []
    assert sf.directives([["Restart", "always"]], "r", Refused) == ["Restart=always"]


def test_a_wrapper_needs_a_command():
    with pytest.raises(Refused, match="the wrapper's command gives no command to run"):
        sf.wrapper([], [], [[]], Refused)


def test_unit_file_checks_every_line():
    assert sf.unit_file(["c"], ["A=1"], ["B=2"], ["C=3"], Refused) == {
        "comments": ["c"], "unit": ["A=1"], "service": ["B=2"], "install": ["C=3"]}
    with pytest.raises(Refused, match="a line of the unit"):
        sf.unit_file([], ["A=1\nB=2"], [], [], Refused)
