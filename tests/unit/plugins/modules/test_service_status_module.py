"""service_status with run_command and get_bin_path patched: the commands it runs under systemd and
supervisord, logs on request, and failures named."""

import module_harness
from module_harness import ExitJson, FailJson

from ansible_collections.gpulab.inference.plugins.modules import service_status

SYSTEMCTL = "/usr/bin/systemctl"
JOURNALCTL = "/usr/bin/journalctl"
BINS = {"systemctl": SYSTEMCTL, "journalctl": JOURNALCTL}
LIST = (SYSTEMCTL, "list-units", "--all", "--plain", "--no-legend", "--type=service", "--", "gpulab-*")
SHOW = (SYSTEMCTL, "show", "--property=Id,ActiveState,SubState,Result,NRestarts,MainPID,ActiveEnterTimestamp,"
        "ExecMainStartTimestamp,InvocationID,UnitFileState", "--", "gpulab-llama-server.service")
LISTED = "gpulab-llama-server.service loaded active running llama-server inference head (gpulab.inference)\n"
SHOWN = ("Id=gpulab-llama-server.service\nActiveState=active\nSubState=running\nResult=success\nNRestarts=1\n"
         "MainPID=42\nActiveEnterTimestamp=Tue 2026-12-01 08:00:00 UTC\nInvocationID=abc123\nUnitFileState=disabled\n")


def run(args, answers):
    return module_harness.run_module(service_status.main, args, answers, BINS)


def test_systemd_units_with_their_state():
    result = run({"manager": "systemd"}, {LIST: (0, LISTED, ""), SHOW: (0, SHOWN, "")})
    assert result.kind is ExitJson
    assert result.result["manager"] == "systemd"
    assert result.result["services"] == [{
        "name": "gpulab-llama-server.service", "state": "active", "sub_state": "running", "result": "success",
        "restarts": 1, "main_pid": 42, "started": "Tue 2026-12-01 08:00:00 UTC", "invocation_id": "abc123",
        "enabled": "disabled"}]
    assert result.result["changed"] is False


def test_systemd_log_lines_on_request():
    journal = (JOURNALCTL, "--no-pager", "--quiet", "--output=short-iso", "--lines=2", "--unit=gpulab-llama-server.service")
    result = run({"manager": "systemd", "log_lines": 2},
                 {LIST: (0, LISTED, ""), SHOW: (0, SHOWN, ""), journal: (0, "one\ntwo\n", "")})
    assert result.result["services"][0]["log"] == ["one", "two"]


def test_systemd_log_since_the_current_start():
    journal = (JOURNALCTL, "--no-pager", "--quiet", "--output=cat", "_SYSTEMD_INVOCATION_ID=abc123")
    result = run({"manager": "systemd", "log_since_start": True},
                 {LIST: (0, LISTED, ""), SHOW: (0, SHOWN, ""), journal: (0, "Starting RPC server\nAccepted client connection\n", "")})
    assert result.result["services"][0]["log"] == ["Starting RPC server", "Accepted client connection"]


def test_supervisor_log_since_the_last_start(tmp_path):
    config = tmp_path / "supervisord.conf"
    config.write_text("[supervisord]\n")
    (tmp_path / "gpulab-rpc-server-0.log").write_text("Starting RPC server\nold\nStarting RPC server\nnew\n")
    ctl = str(tmp_path / "supervisorctl")
    result = run({"manager": "supervisor", "supervisor_config": str(config), "supervisorctl_path": ctl,
                  "supervisor_log_dir": str(tmp_path), "log_since_start": True, "log_start_pattern": "^Starting RPC"},
                 {(ctl, "-c", str(config), "status"): (0, "gpulab-rpc-server-0   RUNNING   pid 9, uptime 0:00:10\n", "")})
    assert result.result["services"][0]["log"] == ["Starting RPC server", "new"]


def test_no_units_runs_no_show():
    result = run({"manager": "systemd"}, {LIST: (0, "", "")})
    assert result.result["services"] == [] and result.commands == [list(LIST)]


def test_init_asks_systemd_where_it_is_the_init_system(monkeypatch):
    monkeypatch.setattr(service_status.os.path, "isdir", lambda path: path == "/run/systemd/system")
    result = run({"manager": "init"}, {LIST: (0, LISTED, ""), SHOW: (0, SHOWN, "")})
    assert result.result["manager"] == "systemd"
    assert [unit["name"] for unit in result.result["services"]] == ["gpulab-llama-server.service"]


def test_init_without_systemd_reports_none_and_runs_nothing(monkeypatch, tmp_path):
    # supervisord's configuration is there, but init does not ask it
    config = tmp_path / "supervisord.conf"
    config.write_text("[supervisord]\n")
    monkeypatch.setattr(service_status.os.path, "isdir", lambda path: False)
    result = run({"manager": "init", "supervisor_config": str(config)}, {})
    assert result.kind is ExitJson
    assert result.result["manager"] == "none" and result.result["services"] == [] and result.commands == []


def test_a_failing_systemctl_is_named():
    result = run({"manager": "systemd"}, {LIST: (1, "", "Failed to connect to bus")})
    assert result.kind is FailJson
    assert "list-units" in result.result["msg"] and "Failed to connect to bus" in result.result["msg"]


def test_supervisor_programs_with_start_time_and_log(tmp_path):
    config = tmp_path / "supervisord.conf"
    config.write_text("[supervisord]\n")
    (tmp_path / "gpulab-llama-server.log").write_text("a\nb\nc\n")
    ctl = str(tmp_path / "supervisorctl")
    status = (ctl, "-c", str(config), "status")
    (tmp_path / "gpulab-llama-server.conf").write_text("[program:gpulab-llama-server]\ncommand=x\nautostart=true\n")
    (tmp_path / "gpulab-rpc-server-0.conf").write_text("[program:gpulab-rpc-server-0]\nautostart = false ; by stop.yml\n")
    result = run({"manager": "supervisor", "supervisor_config": str(config), "supervisorctl_path": ctl,
                  "supervisor_log_dir": str(tmp_path), "supervisor_programs_dir": str(tmp_path), "log_lines": 2},
                 {status: (3, "gpulab-llama-server   RUNNING   pid 9, uptime 0:00:10\n"
                              "gpulab-rpc-server-0   STOPPED   Not started\n", "")})
    assert result.kind is ExitJson
    head, worker = result.result["services"]
    assert (head["state"], head["main_pid"], head["restarts"], head["log"]) == ("running", 9, None, ["b", "c"])
    assert head["started"].endswith("Z")
    assert (worker["state"], worker["started"], worker["log"]) == ("stopped", None, [])
    assert (head["enabled"], worker["enabled"]) == ("enabled", "disabled")


def test_supervisor_without_its_configuration_reports_nothing(tmp_path):
    result = run({"manager": "supervisor", "supervisor_config": str(tmp_path / "absent.conf")}, {})
    assert result.result["services"] == [] and result.commands == []


def test_negative_log_lines_are_refused():
    result = run({"manager": "systemd", "log_lines": -1}, {})
    assert result.kind is FailJson and "log_lines is -1" in result.result["msg"]


def test_build_model_and_endpoints_from_the_node_files(tmp_path):
    (tmp_path / "BUILD_INFO.json").write_text('{"build_id": "b8070-test"}')
    (tmp_path / "model.json").write_text('{"path": "/var/lib/gpulab/models/m.gguf"}')
    (tmp_path / "servers.json").write_text("not json")
    result = run({"manager": "systemd", "build_info": str(tmp_path / "BUILD_INFO.json"),
                  "model_manifest": str(tmp_path / "model.json"), "rpc_manifest": str(tmp_path / "servers.json"),
                  "vllm_plan": str(tmp_path / "absent.json")}, {LIST: (0, "", "")})
    assert (result.result["build_id"], result.result["model"], result.result["endpoints"]) == (
        "b8070-test", "/var/lib/gpulab/models/m.gguf", [])
    (unreadable,) = result.result["unreadable"]
    assert unreadable.startswith(str(tmp_path / "servers.json") + ": ")


def test_documentation_parses_and_matches_the_argument_spec():
    import yaml
    from unittest import mock

    options = yaml.safe_load(service_status.DOCUMENTATION)["options"]
    yaml.safe_load(service_status.RETURN)
    yaml.safe_load(service_status.EXAMPLES)
    with mock.patch.object(service_status, "AnsibleModule") as module:
        service_status.build_module()
    spec = module.call_args.kwargs["argument_spec"]
    assert set(options) == set(spec)
    for name, entry in spec.items():
        assert (options[name]["type"], options[name].get("default"), options[name].get("choices")) == (
            entry["type"], entry.get("default"), entry.get("choices")), name


def test_program_files_are_listed_whichever_manager_is_asked(tmp_path):
    programs = tmp_path / "supervisor.d"
    programs.mkdir()
    for name in ("gpulab-rpc-server-1.conf", "gpulab-rpc-server-0.conf", ".hidden.conf", "notes.txt"):
        (programs / name).write_text("[program:x]\n")
    (programs / "adir.conf").mkdir()
    result = run({"manager": "systemd", "supervisor_programs_dir": str(programs)}, {LIST: (0, "", "")})
    assert result.kind is ExitJson
    assert result.result["program_files"] == ["gpulab-rpc-server-0", "gpulab-rpc-server-1"]
    absent = run({"manager": "systemd", "supervisor_programs_dir": str(tmp_path / "none")}, {LIST: (0, "", "")})
    assert absent.result["program_files"] == []
