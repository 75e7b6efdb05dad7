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


CTL = "/opt/gpulab/supervisor/bin/supervisorctl"
CONF = "/etc/gpulab/supervisord.conf"
PROGRAM_STATUS = (CTL, "-c", CONF, "status", "gpulab-llama-server")


def run_supervisor(states, statuses, log_file=None):
    answers = iter(states)
    commands = []

    def run_command(self, command, *unused_args, **unused_kwargs):
        commands.append(list(command))
        return next(answers)

    statuses = iter(statuses)
    args = dict(ARGS, manager="supervisor", unit="gpulab-llama-server", supervisorctl_path=CTL,
                supervisor_config=CONF, log_file=log_file)
    with mock.patch.object(llama_server_health.HealthWait, "health", lambda self: next(statuses)), \
            mock.patch.object(llama_server_health.time, "sleep"), \
            mock.patch.object(bounded_command.BoundedRunner, "run", run_command):
        result = module_harness.run_module(llama_server_health.main, args, {}, {})
    result.commands = commands
    return result


def test_under_supervisor_the_program_is_watched_until_200():
    running = (0, "gpulab-llama-server   RUNNING   pid 42, uptime 0:00:10\n", "")
    result = run_supervisor([running] * 3, [None, 503, 200])
    assert result.kind is ExitJson
    assert result.commands == [list(PROGRAM_STATUS)] * 3


def test_under_supervisor_a_program_in_backoff_fails_at_once_with_its_log(tmp_path):
    log = tmp_path / "gpulab-llama-server.log"
    log.write_text("".join("line %d\n" % number for number in range(40)))
    running = (0, "gpulab-llama-server   RUNNING   pid 42, uptime 0:00:10\n", "")
    backoff = (3, "gpulab-llama-server   BACKOFF   Exited too quickly (process log may have details)\n", "")
    result = run_supervisor([running, backoff], [None], log_file=str(log))
    assert result.kind is FailJson
    assert result.result["msg"].startswith(
        "gpulab-llama-server: the program exited and waits to be started again (Exited too quickly")
    assert result.result["journal"] == ["line %d" % number for number in range(10, 40)]


def test_under_supervisor_a_restart_while_loading_fails():
    first = (0, "gpulab-llama-server   RUNNING   pid 42, uptime 0:00:10\n", "")
    again = (0, "gpulab-llama-server   RUNNING   pid 77, uptime 0:00:01\n", "")
    result = run_supervisor([first, again], [None])
    assert result.kind is FailJson
    assert "restarted while loading (pid 77, was 42)" in result.result["msg"]


def test_without_a_unit_it_only_polls():
    statuses = iter([None, 503, 200])
    with mock.patch.object(llama_server_health.HealthWait, "health", lambda self: next(statuses)), \
            mock.patch.object(llama_server_health.time, "sleep"):
        result = module_harness.run_module(llama_server_health.main, dict(ARGS, unit=""), {}, {})
    assert result.kind is ExitJson and result.commands == []


def test_unwatched_it_only_polls_and_a_timeout_shows_the_log(tmp_path):
    log = tmp_path / "gpulab-vllm.log"
    log.write_text("compiling\n")
    statuses = iter([None, None])
    clock = iter([0, 10, 700])
    args = dict(ARGS, manager="supervisor", unit="gpulab-vllm", watch=False, log_file=str(log))
    with mock.patch.object(llama_server_health.HealthWait, "health", lambda self: next(statuses)), \
            mock.patch.object(llama_server_health.time, "sleep"), \
            mock.patch.object(llama_server_health.time, "time", lambda: next(clock)):
        result = module_harness.run_module(llama_server_health.main, args, {}, {})
    assert result.kind is FailJson and result.commands == []
    assert result.result["msg"].startswith("gpulab-vllm: /health did not answer 200 within 600 s")
    assert result.result["journal"] == ["compiling"]
