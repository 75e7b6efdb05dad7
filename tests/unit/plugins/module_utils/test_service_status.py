"""service_status parsers on the output systemctl and supervisorctl print, and on malformed lines."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import service_status as ss

LIST_UNITS = """\
gpulab-llama-server.service          loaded active running llama-server inference head (gpulab.inference)
\u25cf gpulab-rpc-server@1.service    loaded failed failed  ggml RPC server 1 for the llama-server head (gpulab.inference)
gpulab-rpc-server-firewall.service   loaded active exited  nftables rules of the RPC servers (gpulab.inference)
ssh.service                          loaded active running OpenBSD Secure Shell server
"""

SHOW = """\
Id=gpulab-llama-server.service
ActiveState=active
SubState=running
Result=success
NRestarts=2
MainPID=4242
ActiveEnterTimestamp=Tue 2026-12-01 08:00:00 UTC
ExecMainStartTimestamp=Tue 2026-12-01 08:00:00 UTC
InvocationID=5f0e2c2d7a8b4c1e9d3f6a7b8c9d0e1f

Id=gpulab-rpc-server@1.service
ActiveState=failed
SubState=failed
Result=exit-code
NRestarts=0
MainPID=0
ActiveEnterTimestamp=
ExecMainStartTimestamp=
"""

SUPERVISOR = """\
gpulab-llama-server              RUNNING   pid 1234, uptime 1 day, 2:03:04
gpulab-rpc-server-0              RUNNING   pid 77, uptime 0:00:09
gpulab-rpc-server-1              STOPPED   Dec 01 08:00 AM
gpulab-vllm                      FATAL     Exited too quickly (process log may have details)
other                            RUNNING   pid 5, uptime 0:01:00
"""


def test_list_units_keeps_matching_units_in_order_and_drops_the_bullet():
    assert ss.parse_list_units(LIST_UNITS, ["gpulab-*"]) == [
        "gpulab-llama-server.service", "gpulab-rpc-server@1.service", "gpulab-rpc-server-firewall.service"]
    assert ss.parse_list_units(LIST_UNITS, ["gpulab-rpc-server@*.service"]) == ["gpulab-rpc-server@1.service"]
    assert ss.parse_list_units("", ["gpulab-*"]) == []


def test_list_units_refuses_a_line_without_a_unit():
    with pytest.raises(ss.ServiceStatusError) as raised:
        ss.parse_list_units("0 loaded units listed.\n")
    assert "line 1" in str(raised.value)


def test_show_reads_state_restarts_and_start_time():
    status = ss.parse_systemctl_show(SHOW)
    assert status["gpulab-llama-server.service"] == {
        "name": "gpulab-llama-server.service", "state": "active", "sub_state": "running", "result": "success",
        "restarts": 2, "main_pid": 4242, "started": "Tue 2026-12-01 08:00:00 UTC",
        "invocation_id": "5f0e2c2d7a8b4c1e9d3f6a7b8c9d0e1f", "enabled": None}
    failed = status["gpulab-rpc-server@1.service"]
    assert (failed["state"], failed["result"], failed["main_pid"], failed["started"]) == ("failed", "exit-code", None, None)


@pytest.mark.parametrize("text, words", [("Id=a.service\nnot a property\n", "line 2"),
                                         ("ActiveState=active\n", "without Id")])
def test_show_refuses_what_it_cannot_read(text, words):
    with pytest.raises(ss.ServiceStatusError) as raised:
        ss.parse_systemctl_show(text)
    assert words in str(raised.value)


def test_supervisorctl_status():
    programs = ss.parse_supervisorctl_status(SUPERVISOR, ["gpulab-*"])
    assert [p["name"] for p in programs] == ["gpulab-llama-server", "gpulab-rpc-server-0", "gpulab-rpc-server-1", "gpulab-vllm"]
    head = programs[0]
    assert (head["state"], head["main_pid"], head["uptime_s"], head["restarts"]) == ("running", 1234, 93784, None)
    assert programs[1]["uptime_s"] == 9
    assert (programs[2]["state"], programs[2]["main_pid"], programs[2]["uptime_s"]) == ("stopped", None, None)
    assert programs[3]["sub_state"] == "Exited too quickly (process log may have details)"


def test_supervisorctl_status_refuses_a_line_without_a_state():
    with pytest.raises(ss.ServiceStatusError) as raised:
        ss.parse_supervisorctl_status("unix:///run/gpulab/supervisor.sock no such file\n")
    assert "line 1" in str(raised.value)


def test_since_last_start():
    lines = ["Starting RPC server v7.0.0", "Accepted client connection", "Starting RPC server v7.0.0", "transport : TCP"]
    assert ss.since_last(lines, "^Starting RPC server") == lines[2:]
    assert ss.since_last(lines[1:2], "^Starting RPC server") == lines[1:2]


def test_uptime_and_tail():
    assert ss.uptime_s("pid 1, uptime 3 days, 0:00:01") == 3 * 86400 + 1
    assert ss.uptime_s("Exited too quickly") is None
    assert ss.tail("a\nb\nc\n", 2) == ["b", "c"]
    assert ss.tail("a\nb\n", 0) == []


def test_node_summary_from_the_published_files():
    worker = {"host": "node-b", "address": "10.0.0.2",
              "endpoints": [{"port": 50052, "device": "CUDA0"}, {"port": 50053, "device": "CUDA1"}]}
    assert ss.node_summary({"build_id": "b1-abc"}, None, worker, None) == {
        "build_id": "b1-abc", "model": None, "endpoints": ["10.0.0.2:50052 (RPC, CUDA0)", "10.0.0.2:50053 (RPC, CUDA1)"],
        "rpc_watch": None}
    assert ss.node_summary(None, {"path": "/m.gguf"}, {"address": "fd00::2", "endpoints": [{"port": 1}]},
                           {"url": "http://127.0.0.1:8000"}) == {
        "build_id": None, "model": "/m.gguf", "endpoints": ["[fd00::2]:1 (RPC, ?)", "http://127.0.0.1:8000 (vLLM)"],
        "rpc_watch": None}
    assert ss.node_summary() == {"build_id": None, "model": None, "endpoints": [], "rpc_watch": None}


def test_a_hung_rpc_server_says_it_cannot_serve():
    worker = {"address": "10.0.0.2", "endpoints": [{"port": 50052, "device": "CUDA0"}, {"port": 50053, "device": "CUDA1"}]}
    watch = {"can_serve": False, "looked_at": 1765080000.5,
             "problems": ["gpulab-rpc-server@1.service: suspect (the process is stopped (state T: SIGSTOP or a debugger))"],
             "servers": [{"port": 50052, "verdict": "busy", "why": "serving 10.0.0.1:40000"},
                         {"port": 50053, "verdict": "suspect", "why": "the process is stopped (state T: SIGSTOP or a debugger)"}]}
    summary = ss.node_summary(None, None, worker, None, watch)
    assert summary["endpoints"] == [
        "10.0.0.2:50052 (RPC, CUDA0)",
        "10.0.0.2:50053 (RPC, CUDA1): cannot serve: hangs (the process is stopped (state T: SIGSTOP or a debugger))"]
    assert summary["rpc_watch"] == {"can_serve": False, "problems": watch["problems"], "looked_at": 1765080000.5}


def test_a_server_held_by_a_gone_client_says_it_cannot_serve():
    worker = {"address": "10.0.0.2", "endpoints": [{"port": 50052, "device": "CUDA0"}]}
    why = "client 10.0.0.1:40000 is gone: 10.0.0.1 connects again (a connection waits to be accepted) while this one stays idle"
    watch = {"can_serve": False, "servers": [{"port": 50052, "verdict": "stale", "why": why}]}
    assert ss.node_summary(None, None, worker, None, watch)["endpoints"] == [
        "10.0.0.2:50052 (RPC, CUDA0): cannot serve: held by a client that is gone (%s)" % why]


@pytest.mark.parametrize("text, expected", [
    ("[program:gpulab-vllm]\ncommand=/opt/gpulab/bin/gpulab-vllm\nautostart=true\n", "enabled"),
    ("[program:gpulab-vllm]\ncommand=/opt/gpulab/bin/gpulab-vllm\n", "enabled"),
    ("; managed by gpulab.inference\n[program:gpulab-vllm]\nAutoStart = Off ; stop.yml\n", "disabled"),
    ("[program:gpulab-vllm]\nautostart=no\n[program:other]\nautostart=true\n", "disabled"),
    ("[program:other]\nautostart=false\n[program:gpulab-vllm]\n", "enabled"),
    ("[program:other]\nautostart=false\n", None),
    (None, None),
])
def test_program_enablement_from_autostart(text, expected):
    assert ss.program_enablement(text, "gpulab-vllm") == expected


def test_program_enablement_refuses_what_supervisord_would():
    with pytest.raises(ss.ServiceStatusError) as raised:
        ss.program_enablement("[program:gpulab-vllm]\nautostart=maybe\n", "gpulab-vllm")
    assert str(raised.value) == "program file of gpulab-vllm line 2: autostart=maybe is not a boolean"


def test_show_blocks_keep_the_units_order_and_list_units_asks_for_every_state():
    text = "Id=b.service\nActiveState=active\n\nId=a.service\nActiveState=failed\n"
    assert ss.show_blocks(text) == [{"Id": "b.service", "ActiveState": "active"}, {"Id": "a.service", "ActiveState": "failed"}]
    with pytest.raises(ss.ServiceStatusError, match="line 2 is not a property"):
        ss.show_blocks("Id=a.service\nFailed to connect to bus\n")
    assert ss.list_units_args(["gpulab-*"]) == ["list-units", "--all", "--plain", "--no-legend", "--type=service", "--",
                                                "gpulab-*"]


def test_one_units_properties_and_one_parser_per_systemctl_answer():
    from ansible_collections.gpulab.inference.plugins.module_utils import gpu_drain, service_status
    text = "ActiveState=active\nSubState=running\nExecStart={ path=/x ; argv[]=/x --a=b }\n\n"
    assert service_status.show_properties(text) == {
        "ActiveState": "active", "SubState": "running", "ExecStart": "{ path=/x ; argv[]=/x --a=b }"}
    assert service_status.show_properties(None) == {}
    # the drain and the health wait read systemctl show and list-units with service_status's parsers
    assert gpu_drain.parse_systemctl_show is service_status.show_properties
    listed = "\u25cf ollama.service loaded active running Ollama\ncron.service loaded active running cron\n"
    assert gpu_drain.parse_active_units(listed) == ["ollama.service", "cron.service"]


def test_node_units_lists_the_instances_where_systemd_is_init():
    asked = []

    def run(args):
        asked.append(args)
        return 0, "gpulab-rpc-server@0.service loaded active running x\n\u25cf gpulab-rpc-server@2.service loaded failed failed x\n"
    assert ss.node_units(run, ["gpulab-rpc-server@*.service"], True) == [
        "gpulab-rpc-server@0.service", "gpulab-rpc-server@2.service"]
    assert asked == [ss.list_units_args(["gpulab-rpc-server@*.service"])]
    # not the init system, or no systemctl: none, and nothing asked
    assert ss.node_units(asked.append, ["*"], False) == [] and len(asked) == 1
    assert ss.node_units(lambda args: None, ["*"], True) == []


def test_node_units_names_a_failing_systemctl():
    with pytest.raises(ss.ServiceStatusError) as raised:
        ss.node_units(lambda args: (1, ""), ["*"], True)
    assert str(raised.value) == "systemctl list-units failed (rc 1): check `systemctl is-system-running`"


def test_active_units_reads_one_state_per_name():
    asked = []

    def run(args):
        asked.append(args)
        return 0, "active\ninactive\nactivating\n"
    assert ss.active_units(run, ["firewalld.service", "ufw.service", "x.service"]) == [
        "firewalld.service", "x.service"]
    assert asked == [["is-active", "firewalld.service", "ufw.service", "x.service"]]
    assert ss.active_units(run, []) == [] and len(asked) == 1
    assert ss.active_units(lambda args: None, ["ufw.service"]) == []


SHOW_RUNNING = "ActiveState=active\nSubState=running\nNRestarts=2\nResult=success\nExecMainStatus=0\n"


def test_unit_properties():
    assert ss.show_properties(SHOW_RUNNING)["NRestarts"] == "2"


@pytest.mark.parametrize("text, restarts_before, reason", [
    (SHOW_RUNNING, 2, None),
    ("ActiveState=activating\nSubState=auto-restart\nNRestarts=2\nResult=exit-code\nExecMainStatus=69", 2,
     "the service exited and waits to be restarted (result exit-code, exit status 69)"),
    ("ActiveState=failed\nSubState=failed\nNRestarts=0\nResult=exit-code\nExecMainStatus=1", 0,
     "the unit failed (result exit-code, exit status 1)"),
    (SHOW_RUNNING, 1, "the service was restarted 1 time(s) while loading"),
    ("ActiveState=inactive\nSubState=dead\nNRestarts=0", 0, "the unit is inactive"),
])
def test_unit_failure(text, restarts_before, reason):
    found = ss.unit_failure(ss.show_properties(text), restarts_before)
    if reason is None:
        assert found is None
    else:
        assert found.startswith(reason)
