"""The engine seam's proof: a third engine that exists only in tests (tests/engines/echo_engine, the
OpenAI-compatible TEST DOUBLE served as a program) is added to role common's engine table as extra
variables, and the collection's own playbooks deploy it (retiring vLLM), report and benchmark it,
show it in status.yml, heal it after a SIGKILL and stop it - with no change to any file of the
collection outside its table entry (here) and its role (tests/engines).

It retires the scenario's vLLM, so it runs after the vLLM checks (conftest.py orders it last); the
side effect that follows starts vLLM again under supervisord. Every test takes testinfra's `host`, so
pytest keeps them in this file's order (it groups the tests of one host)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
sys.path.insert(0, str(REPO / "tests"))
from common_defaults import common_default, engine_ports  # noqa: E402 pylint: disable=wrong-import-position
from playbook_runner import run_in  # noqa: E402 pylint: disable=wrong-import-position
from sigkill import serves_again_after_sigkill  # noqa: E402 pylint: disable=wrong-import-position

PORT = 18095
# Its one entry in the engine table: nothing else names it.
ECHO = {
    "label": "echo",
    "role": "echo_engine",
    "steps": ["serve", "report"],
    "formats": ["hf"],
    "units": ["gpulab-echo.service"],
    "users": ["gpulab-echo"],
    "ports": [{"variable": "echo_engine_port", "port": PORT, "at": "head", "what": "the echo engine's API"}],
    "api": {"prefix": "echo_engine", "host": "127.0.0.1", "port": PORT, "api_key": "", "unit": "gpulab-echo.service"},
    "health_path": "/health",
    "models_path": "/v1/models",
    "report_inputs": [],
}
ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO),
       "ANSIBLE_ROLES_PATH": "%s:%s" % (REPO / "tests" / "engines", REPO / "roles")}


def table():
    """Role common's table with its values written out, as an operator writes one in the inventory or
    -e (a value there cannot name a role default), and the echo engine's entry added."""
    engines = common_default("gpulab_engines")
    for name, entry in engines.items():
        values = dict((port["variable"], common_default(port["variable"])) for port in entry["ports"])
        values["vllm_server_distributed_backend"] = common_default("vllm_server_distributed_backend")
        entry["ports"] = engine_ports(name, values)
    engines["echo"] = ECHO
    return engines


def extravars(**more):
    return dict({"gpulab_engines": table(), "gpulab_engine": "echo"}, **more)


@pytest.fixture(name="inventory", scope="module")
def fixture_inventory(tmp_path_factory):
    # The scenario's hosts with its group_vars, as molecule assembles its inventory.
    inventory = tmp_path_factory.mktemp("echo") / "inventory"
    inventory.mkdir()
    shutil.copy(str(REPO / "molecule" / "vllm" / "inventory" / "hosts.yml"), str(inventory / "hosts.yml"))
    (inventory / "group_vars").symlink_to(REPO / "molecule" / "vllm" / "group_vars")
    return str(inventory)


@pytest.fixture(name="deployed", scope="module")
def fixture_deployed(inventory, tmp_path_factory):
    return run_in(tmp_path_factory.mktemp("deploy"), "deploy.yml", inventory, extravars=extravars(), envvars=ENV)


def answer(host, path):
    return host.check_output("curl -s --max-time 5 http://127.0.0.1:%d%s" % (PORT, path))


def test_deploy_retires_vllm_and_serves_the_echo_engine(deployed, host):
    assert deployed.status == "successful", deployed.failures
    assert host.service("gpulab-echo").is_running
    assert not host.service("gpulab-vllm").is_running
    assert answer(host, "/health") == '{"status": "ok"}'
    said = deployed.ok_results("Print the answer")
    assert said and said[0]["msg"].startswith("echo engine on node-a: ")


def test_the_benchmark_measured_the_echo_engine(deployed, host):
    written = deployed.ok_results("Write the report")
    assert written, deployed.failures
    report = written[0]
    # the head's record of the last run names this report
    record = json.loads(host.file("/var/lib/gpulab/bench/last-run.json").content_string)
    assert record["report"] == report["files"]["markdown"]
    # the model /v1/models of the echo engine names, measured at a speed the double serves
    assert any("echo-model" in line for line in report["summary"]), report["summary"]
    assert report["headline"]["decode_tok_s"] > 0


def test_status_shows_the_echo_engine(deployed, inventory, host, tmp_path):
    assert deployed.status == "successful" and host.service("gpulab-echo").is_running
    run = run_in(tmp_path, "playbooks/status.yml", inventory, extravars=extravars(), envvars=ENV)
    assert run.status == "successful", run.failures
    head = run.ok_results("Print the node's status")[0]["msg"]
    asked = [e["event"] for e in run.events if e.get("event_data", {}).get("task") == "Ask the engine's head for its health"]
    assert head["endpoints"][0] == "http://127.0.0.1:%d (echo, /health 200)" % PORT, (asked, head)
    assert ("gpulab-echo.service", "active") in [(s["name"], s["state"]) for s in head["services"]]


def test_a_killed_echo_engine_is_restarted(deployed, host):
    assert deployed.status == "successful"
    serves_again_after_sigkill(host, "gpulab-echo.service", "http://127.0.0.1:%d/health" % PORT, 30)


def test_stop_stops_the_echo_engine(deployed, inventory, host, tmp_path):
    assert deployed.status == "successful"
    run = run_in(tmp_path, "playbooks/stop.yml", inventory, envvars=ENV,
                 extravars=extravars(gpulab_stop_engines=["echo"], gpulab_stop_retire=True))
    assert run.status == "successful", run.failures
    assert not host.service("gpulab-echo").is_running
    said = run.ok_results("Say what was stopped and whether a reboot starts it again")
    assert said[0]["msg"] == ["gpulab-echo.service: stays down (retired)"]
