"""playbooks/status.yml on local hosts under supervisord (a stand-in supervisorctl, the files the roles
publish under tmp_path, the lab's fake nvidia-smi): every gpulab-* program (the RPC guard too) with
state, whether it starts at boot and start time, build id, model, endpoints, residency, the log lines
on request, and nothing changed."""

import json
import stat
import sys

from playbook_runner import LAB_FILES, local_host, run_in

STATUS = """\
gpulab-llama-server   RUNNING   pid 4242, uptime 0:10:00
gpulab-rpc-guard      RUNNING   pid 70, uptime 0:10:06
gpulab-rpc-server-0   RUNNING   pid 77, uptime 0:10:05
unrelated             RUNNING   pid 5, uptime 0:01:00
"""


def node(tmp_path, name):
    """A node's directories and supervisorctl under tmp_path/name, as its host variables."""
    root = tmp_path / name
    for directory in ("etc/rpc-server", "etc/supervisor.d", "llama.cpp/current", "log"):
        (root / directory).mkdir(parents=True)
    # stop.yml with gpulab_stop_disable turned the head's autostart off; the guard's file is gone
    (root / "etc" / "supervisor.d" / "gpulab-llama-server.conf").write_text("[program:gpulab-llama-server]\nautostart=false\n")
    (root / "etc" / "supervisor.d" / "gpulab-rpc-server-0.conf").write_text("[program:gpulab-rpc-server-0]\nautostart=true\n")
    (root / "etc" / "supervisord.conf").write_text("[supervisord]\n")
    ctl = root / "supervisorctl"
    ctl.write_text("#!/bin/sh\ncat <<'END'\n%sEND\nexit 3\n" % STATUS)
    ctl.chmod(ctl.stat().st_mode | stat.S_IEXEC)
    smi = root / "nvidia-smi"
    smi.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, LAB_FILES / "fake-nvidia-smi"))
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    (root / "llama.cpp" / "current" / "BUILD_INFO.json").write_text(json.dumps({"build_id": "b8070-test"}))
    (root / "log" / "gpulab-llama-server.log").write_text("first\nload_tensors: offloaded 5/5 layers to GPU\nserving\n")
    return local_host(gpulab_service_manager="supervisor", gpulab_config_dir=str(root / "etc"),
                      gpulab_supervisor_config=str(root / "etc" / "supervisord.conf"), gpulab_supervisorctl=str(ctl),
                      gpulab_log_dir=str(root / "log"), gpulab_llama_cpp_current_link=str(root / "llama.cpp" / "current"),
                      gpu_preflight_nvidia_smi_path=str(smi), llama_server_port=9)


def inventory(tmp_path):
    head, worker = node(tmp_path, "node-a"), node(tmp_path, "node-b")
    (tmp_path / "node-a" / "etc" / "model.json").write_text(json.dumps({"path": "/models/m-00001-of-00002.gguf"}))
    (tmp_path / "node-b" / "etc" / "rpc-server" / "servers.json").write_text(json.dumps(
        {"host": "node-b", "address": "10.0.0.2", "endpoints": [{"instance": 0, "port": 50052, "device": "CPU"}]}))
    # the worker's weight cache: 3.5 GiB in two tensors (sparse files) against the 3 GiB bound its last
    # deploy recorded
    cache = tmp_path / "node-b" / "cache" / "rpc"
    cache.mkdir(parents=True)
    for name, size_mib in (("00000000000000a1", 1536), ("00000000000000a2", 2048)):
        with open(cache / name, "wb") as stream:
            stream.truncate(size_mib << 20)
    (cache / "README").write_text("not a tensor\n")
    (tmp_path / "node-b" / "rpc-cache.json").write_text(json.dumps(
        {"managed_by": "gpulab.inference", "schema": "gpulab.inference.rpc_cache/1", "path": str(cache), "model": "k",
         "since": 1.0, "max_gib": 3.0, "disk_fraction": 0.5, "min_free_gib": 1.0}))
    worker["gpulab_rpc_cache_file"] = str(tmp_path / "node-b" / "rpc-cache.json")
    return {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": head}}, "rpc_workers": {"hosts": {"node-b": worker}}}}}}}


ENV = {"GPULAB_FAKE_NVIDIA_SMI_DIR": str(LAB_FILES / "nvidia-smi" / "h200")}


def statuses(run):
    return dict((e["event_data"]["host"], e["event_data"]["res"]["msg"]) for e in run.events
                if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Print the node's status")


def test_status_per_node_under_supervisord(tmp_path):
    run = run_in(tmp_path / "runner", "playbooks/status.yml", inventory(tmp_path), envvars=ENV)
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    shown = statuses(run)
    head, worker = shown["node-a"], shown["node-b"]
    assert head["service_manager"] == "supervisor"
    assert [(s["name"], s["state"], s["main_pid"], s["enabled"]) for s in head["services"]] == [
        ("gpulab-llama-server", "running", 4242, "disabled"), ("gpulab-rpc-guard", "running", 70, None),
        ("gpulab-rpc-server-0", "running", 77, "enabled")]
    assert head["at_a_glance"] == ["gpulab-llama-server running disabled", "gpulab-rpc-guard running unknown",
                                   "gpulab-rpc-server-0 running enabled"]
    assert head["services"][0]["started"].endswith("Z") and "log" not in head["services"][0]
    assert (head["build_id"], head["model"]) == ("b8070-test", "/models/m-00001-of-00002.gguf")
    assert head["endpoints"] == ["http://127.0.0.1:9 (llama.cpp, /health unreachable)"]
    assert worker["endpoints"] == ["10.0.0.2:50052 (RPC, CPU)"] and worker["model"] is None
    assert head["gpus"][0]["name"] == "NVIDIA H200"
    assert head["rpc_cache"] is None
    cache = worker["rpc_cache"]
    assert (cache["enabled"], cache["path"], cache["files"], cache["size_bytes"], cache["max_bytes"]) == (
        True, str(tmp_path / "node-b" / "cache" / "rpc"), 2, 3584 << 20, 3 << 30)
    assert (cache["size_gib"], cache["bound_gib"], cache["over_bound"]) == (3.5, 3.0, True)
    assert cache["summary"] == "%s holds 3.50 GiB in 2 files, bound 3.00 GiB; over its bound" % cache["path"]


def test_a_cache_turned_off_is_said_to_be_off(tmp_path):
    run = run_in(tmp_path / "runner", "playbooks/status.yml", inventory(tmp_path), envvars=ENV,
                 extravars={"llama_rpc_server_cache_enabled": False})
    assert run.status == "successful", run.failures
    cache = statuses(run)["node-b"]["rpc_cache"]
    assert cache["enabled"] is False and cache["size_bytes"] == 3584 << 20
    assert cache["summary"].startswith("off (llama_rpc_server_cache_enabled is false); ")


def test_vllm_reads_no_rpc_cache(tmp_path):
    run = run_in(tmp_path / "runner", "playbooks/status.yml", inventory(tmp_path), envvars=ENV,
                 extravars={"gpulab_engine": "vllm"})
    assert run.status == "successful", run.failures
    assert statuses(run)["node-b"]["rpc_cache"] is None


def test_log_lines_on_request(tmp_path):
    run = run_in(tmp_path / "runner", "playbooks/status.yml", inventory(tmp_path), envvars=ENV,
                 cmdline="-e status_log_lines=2")
    assert run.status == "successful", run.failures
    head = statuses(run)["node-a"]
    assert head["services"][0]["log"] == ["load_tensors: offloaded 5/5 layers to GPU", "serving"]
    assert head["services"][2]["log"] == []
