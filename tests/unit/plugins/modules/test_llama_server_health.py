"""llama_server_health with systemctl and journalctl answered from a table, /health and sleep patched."""

import time
from unittest import mock

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import bounded_command
from ansible_collections.gpulab.inference.plugins.modules import llama_server_health
import module_harness
from module_harness import ExitJson, FailJson

SYSTEMCTL = "/usr/bin/systemctl"
JOURNALCTL = "/usr/bin/journalctl"
UNIT = "gpulab-llama-server.service"
SHOW = (SYSTEMCTL, "show", "--property=ActiveState", "--property=SubState", "--property=NRestarts",
        "--property=Result", "--property=ExecMainStatus", UNIT)
JOURNAL = (JOURNALCTL, "--no-pager", "--output=cat", "-n", "30", "-u", UNIT)
RUNNING = "ActiveState=active\nSubState=running\nNRestarts=0\nResult=success\nExecMainStatus=0\n"
RESTARTING = "ActiveState=activating\nSubState=auto-restart\nNRestarts=0\nResult=exit-code\nExecMainStatus=69\n"
ARGS = {"url": "http://127.0.0.1:8080", "unit": UNIT, "timeout_s": 600, "poll_s": 5}


def run(show, statuses):
    answers = {SHOW: (0, show, ""),
               JOURNAL: (0, "waiting for RPC worker(s) 10.231.77.11:50052 (at most 300 s)\nRPC worker(s) 10.231.77.11:50052 "
                            "did not accept a connection within 300 s; exiting\n", "")}
    statuses = iter(statuses)
    with mock.patch.object(llama_server_health.HealthWait, "health", lambda self: next(statuses)), \
            mock.patch.object(llama_server_health.time, "sleep"):
        return module_harness.run_module(llama_server_health.main, ARGS, answers,
                                         {"systemctl": SYSTEMCTL, "journalctl": JOURNALCTL})


def test_waits_through_503_until_200():
    result = run(RUNNING, [None, 503, 503, 200])
    assert result.kind is ExitJson
    assert result.commands.count(list(SHOW)) == 4


def test_stops_at_once_when_the_service_exited_and_shows_the_journal():
    result = run(RESTARTING, [None, None])
    assert result.kind is FailJson
    assert result.result["msg"].startswith(
        "gpulab-llama-server.service: the service exited and waits to be restarted (result exit-code, exit status 69)")
    assert "did not accept a connection within 300 s" in result.result["msg"]
    assert len(result.result["journal"]) == 2
    # One show for the baseline, one after the first poll: no waiting out the timeout.
    assert result.commands.count(list(SHOW)) == 2


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:99999", "url 'http://127.0.0.1:99999' has a port that is not a number in 1-65535"),
    ("http://127.0.0.1:80a", "has a port that is not a number in 1-65535"),
    ("127.0.0.1:8080", "url must look like http://HOST:PORT"),
    ("http://127.0.0.1:8080\n", "has spaces, control characters"),
    ("http://fd00::10:8080", "has a port that is not a number"),
])
def test_a_url_that_cannot_be_opened_is_refused_at_once(url, message):
    result = module_harness.run_module(llama_server_health.main, dict(ARGS, url=url), {},
                                       {"systemctl": SYSTEMCTL, "journalctl": JOURNALCTL})
    assert result.kind is FailJson, result.result
    assert message in result.result["msg"]
    assert result.commands == []


def test_a_hanging_systemctl_fails_within_its_limit_naming_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_command, "DEFAULT_LIMIT_S", 1)
    systemctl = module_harness.hanging_program(tmp_path, "systemctl")
    started = time.monotonic()
    result = module_harness.run_module_live(llama_server_health.main, ARGS, {"systemctl": systemctl})
    assert time.monotonic() - started < 10
    assert result.kind is FailJson
    assert result.result["msg"].startswith("`%s show --property=ActiveState" % systemctl)
    assert "did not finish within 1 s and was stopped: systemd does not answer" in result.result["msg"]


def test_a_hanging_journalctl_still_reports_why_the_service_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_command, "DEFAULT_LIMIT_S", 1)
    journalctl = module_harness.hanging_program(tmp_path, "journalctl")
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\nprintf '%s'\n" % RESTARTING.replace("\n", "\\n"))
    systemctl.chmod(0o755)
    with mock.patch.object(llama_server_health.HealthWait, "health", lambda self: None), \
            mock.patch.object(llama_server_health.time, "sleep"):
        result = module_harness.run_module_live(llama_server_health.main, ARGS,
                                                {"systemctl": str(systemctl), "journalctl": journalctl})
    assert result.kind is FailJson
    assert result.result["msg"].startswith("gpulab-llama-server.service: the service exited and waits to be restarted")
    assert result.result["journal"] == ["`%s --no-pager --output=cat -n 30 -u %s` did not finish within 1 s and was "
                                        "stopped: the journal does not answer: check systemd-journald "
                                        "(`systemctl status systemd-journald`)" % (journalctl, UNIT)]
