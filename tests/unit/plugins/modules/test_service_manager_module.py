"""service_manager: gpulab_service_manager resolved on the node by the one rule, as a fact."""

import module_harness
from module_harness import ExitJson, FailJson

from ansible_collections.gpulab.inference.plugins.module_utils import service_manager as rule
from ansible_collections.gpulab.inference.plugins.modules import service_manager


SYSTEMCTL = "/usr/bin/systemctl"


def run(args, booted, monkeypatch, answers=None, bin_path=None):
    monkeypatch.setattr(rule, "systemd_booted", lambda: booted)
    monkeypatch.setattr(service_manager, "systemd_booted", lambda: booted)
    return module_harness.run_module(service_manager.main, args, answers or {}, bin_path or {})


def test_auto_is_systemd_where_systemd_booted_the_node(monkeypatch):
    result = run({"requested": "auto"}, True, monkeypatch)
    assert result.kind is ExitJson and result.commands == []
    assert result.result["manager"] == "systemd"
    # no systemctl to ask: the version is unknown
    assert result.result["ansible_facts"] == {"gpulab_service_manager_resolved": {"requested": "auto", "manager": "systemd",
                                                                                  "version": 0}}
    assert result.result["changed"] is False


def test_auto_is_supervisor_in_a_container_without_systemd_as_pid_1(monkeypatch):
    assert run({"requested": "auto"}, False, monkeypatch).result["manager"] == "supervisor"


def test_an_explicit_manager_wins(monkeypatch):
    assert run({"requested": "supervisor"}, True, monkeypatch).result["manager"] == "supervisor"
    assert run({"requested": "systemd"}, False, monkeypatch).result["manager"] == "systemd"


def test_an_unknown_manager_names_the_variable(monkeypatch):
    result = run({"requested": "runit"}, True, monkeypatch)
    assert result.kind is FailJson
    assert result.result["msg"] == "gpulab_service_manager is 'runit': set auto, systemd or supervisor"


def test_under_systemd_its_version_comes_with_the_answer(monkeypatch):
    answers = {(SYSTEMCTL, "--version"): (0, "systemd 255 (255.4-1ubuntu8.4)\n+PAM +AUDIT\n", "")}
    result = run({"requested": "auto"}, True, monkeypatch, answers, {"systemctl": SYSTEMCTL})
    assert result.commands == [[SYSTEMCTL, "--version"]]
    assert result.result["version"] == 255
    assert result.result["ansible_facts"]["gpulab_service_manager_resolved"]["version"] == 255


def test_a_systemctl_that_fails_gives_version_0(monkeypatch):
    answers = {(SYSTEMCTL, "--version"): (1, "", "Failed to connect to bus")}
    assert run({"requested": "systemd"}, True, monkeypatch, answers, {"systemctl": SYSTEMCTL}).result["version"] == 0


def test_under_supervisord_no_version_is_asked(monkeypatch):
    result = run({"requested": "auto"}, False, monkeypatch, {}, {"systemctl": SYSTEMCTL})
    assert result.commands == [] and result.result["version"] == 0
