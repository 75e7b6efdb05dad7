"""playbooks/stop.yml on a local host under supervisord (a stand-in supervisorctl that keeps its
programs' states in a file and logs each call): the engine's programs stopped through role service,
the head first, a program that is not the collection's left alone, and the output saying whether
each starts again at boot: enabled by default, kept down with gpulab_stop_disable (autostart off),
removed with gpulab_stop_retire."""

import pytest
from playbook_runner import run_in
from supervisor_double import calls, programs, supervisord_node

PROGRAMS = ("gpulab-rpc-server-0", "gpulab-llama-server", "gpu-embed")
OWN = ["gpulab-llama-server", "gpulab-rpc-server-0"]


def node(tmp_path):
    """A node whose supervisord runs the head, one RPC server and a program of its own."""
    host = supervisord_node(tmp_path, dict((program, "RUNNING") for program in PROGRAMS))
    return {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": host}}, "rpc_workers": {"hosts": {"node-a": {}}}}}}}}


def said(run):
    """The output of each 'Say what was stopped' task, in order."""
    return [e["event_data"]["res"]["msg"] for e in run.events
            if e.get("event") == "runner_on_ok"
            and e["event_data"].get("task") == "Say what was stopped and whether a reboot starts it again"]


@pytest.mark.parametrize("extravars, at_boot, autostart", [
    ({}, "starts again (enabled)", "true"),
    ({"gpulab_stop_disable": True}, "stays down (disabled)", "false"),
])
def test_stop_says_whether_the_programs_start_again_at_boot(tmp_path, extravars, at_boot, autostart):
    run = run_in(tmp_path / "runner", "playbooks/stop.yml", node(tmp_path), extravars=extravars)
    assert run.status == "successful", run.failures
    assert calls(tmp_path, "stop") == [["stop", name] for name in OWN]
    assert programs(tmp_path) == {
        "gpulab-llama-server": "STOPPED", "gpulab-rpc-server-0": "STOPPED", "gpu-embed": "RUNNING"}
    # node-a is the head and a worker: the head's play stops every engine's units there, the other
    # nodes' play does not run on it again
    lines = ["gpulab-llama-server: " + at_boot, "gpulab-rpc-server-0: " + at_boot]
    assert said(run) == [lines]
    for program in OWN:
        assert ("autostart=%s" % autostart) in (tmp_path / "etc" / "supervisor.d" / (program + ".conf")).read_text()
    assert "autostart=true" in (tmp_path / "etc" / "supervisor.d" / "gpu-embed.conf").read_text()


def test_retire_removes_the_programs_and_their_files(tmp_path):
    run = run_in(tmp_path / "runner", "playbooks/stop.yml", node(tmp_path),
                 extravars={"gpulab_stop_retire": True, "gpulab_stop_engines": ["llama_cpp"]})
    assert run.status == "successful", run.failures
    assert programs(tmp_path) == {"gpu-embed": "RUNNING"}
    assert sorted(path.name for path in (tmp_path / "etc" / "supervisor.d").iterdir()) == ["gpu-embed.conf"]
    assert said(run) == [["gpulab-llama-server: stays down (retired)", "gpulab-rpc-server-0: stays down (retired)"]]
