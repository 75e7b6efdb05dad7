"""Serving input checks through ansible-runner: llama_server_plan and llama_rpc_server_plan refuse
bad input with a message naming it (and warn about a plain-text API key), and the validation
steps of the llama_server and llama_rpc_server roles stop before any change.

One playbook written into tmp_path holds every case, so the suite pays for one run:
- play 1 calls the modules on localhost, one task per case, errors ignored so every case runs;
- play 2 runs the roles' validate.yml (never their main.yml, which would create users and units
  here should a check regress) on local hosts, one host per case, each with its own files.
"""

import json
import stat

import pytest
import yaml
from playbook_runner import local_host, run_in

CASES_PLAY = "Module cases"
ROLE_PLAY = "Role validation cases"


def write_model_files(root):
    """A single-file model, and a split model of 3 shards whose second shard is missing."""
    root.mkdir()
    (root / "single.gguf").write_bytes(b"GGUF" + bytes(60))
    for index in (1, 3):
        (root / ("split-%05d-of-00003.gguf" % index)).write_bytes(b"GGUF" + bytes(60))
    return root


def worker(host, address, port=50052, build_id="aaaaaaaaaaaa"):
    """A worker as llama_rpc_server publishes it in servers.json."""
    return {"host": host, "address": address, "unit": "gpulab-rpc-server@", "build_id": build_id,
            "endpoints": [{"instance": 0, "port": port, "device": "CPU", "memory_mib": 16000}]}


LOCAL_GPUS = [{"index": 0, "cuda_arch": "120", "memory_mib": 97887}, {"index": 1, "cuda_arch": "120", "memory_mib": 97887}]


def module_cases(models):
    """Task name -> (module, arguments). The 'good' cases are the bad ones with the fault removed."""
    single = str(models / "single.gguf")
    return {
        "split length differs": ("llama_server_plan", {
            "model_path": single, "workers": [worker("node-b", "10.0.0.2")], "local_gpus": LOCAL_GPUS,
            "tensor_split": [1, 1]}),
        "split length matches": ("llama_server_plan", {
            "model_path": single, "workers": [worker("node-b", "10.0.0.2")], "local_gpus": LOCAL_GPUS,
            "tensor_split": [1, 1, 1]}),
        "model absent": ("llama_server_plan", {"model_path": str(models / "absent.gguf")}),
        "shard missing": ("llama_server_plan", {"model_path": str(models / "split-00001-of-00003.gguf")}),
        "workers share an endpoint": ("llama_server_plan", {
            "model_path": single, "workers": [worker("node-b", "10.0.0.2"), worker("node-c", "10.0.0.2")]}),
        "workers on other ports": ("llama_server_plan", {
            "model_path": single, "workers": [worker("node-b", "10.0.0.2"), worker("node-c", "10.0.0.2", 50053)]}),
        "api key in plain text": ("llama_server_plan", {
            "model_path": single, "local_gpus": LOCAL_GPUS, "api_key_set": True, "api_key_vaulted": False}),
        "api key vaulted": ("llama_server_plan", {
            "model_path": single, "local_gpus": LOCAL_GPUS, "api_key_set": True, "api_key_vaulted": True}),
        "rpc bind to 0.0.0.0": ("llama_rpc_server_plan", {"cuda": False, "address": "0.0.0.0", "memory_mib": 16000}),
        "rpc bind to ::": ("llama_rpc_server_plan", {"cuda": False, "address": "::", "memory_mib": 16000}),
        "rpc bind to any, allowed": ("llama_rpc_server_plan", {
            "cuda": False, "address": "0.0.0.0", "allow_any_address": True, "memory_mib": 16000}),
        "rpc bind to the fabric address": ("llama_rpc_server_plan", {"cuda": False, "address": "10.0.0.2", "memory_mib": 16000}),
    }


def fake_build(root, build_id):
    """A deployed build as the serving roles read it: BUILD_INFO.json and an executable RPC server."""
    (root / "bin").mkdir(parents=True)
    (root / "BUILD_INFO.json").write_text(json.dumps(
        {"build_id": build_id, "cuda": False, "rpc_server_binary": "ggml-rpc-server"}))
    binary = root / "bin" / "ggml-rpc-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return root


def role_inventory(tmp_path, models):
    """One local host per role case; node-b is only a worker whose manifest head-lockstep reads."""
    head_build = str(fake_build(tmp_path / "builds" / "aaaaaaaaaaaa", "aaaaaaaaaaaa"))
    other_build = tmp_path / "servers-other-build.json"
    other_build.write_text(json.dumps(worker("node-b", "10.0.0.2", build_id="bbbbbbbbbbbb")))
    same_build = tmp_path / "servers.json"
    same_build.write_text(json.dumps(worker("node-b", "10.0.0.2", build_id="aaaaaaaaaaaa")))
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    silent_worker = tmp_path / "servers-silent.json"
    silent_worker.write_text(json.dumps(worker("node-b", "127.0.0.1", port=1, build_id="aaaaaaaaaaaa")))
    head = {"role_case": "gpulab.inference.llama_server", "llama_server_build_link": head_build,
            "llama_server_model_path": str(models / "single.gguf"), "llama_server_worker_manifest": str(same_build)}
    cases = {
        "head-lockstep": dict(head, llama_server_worker_manifest=str(other_build)),
        "head-plain-key": dict(head, llama_server_api_key="sk-plain-text"),
        "head-missing-shard": dict(head, llama_server_model_path=str(models / "split-00001-of-00003.gguf")),
        "head-unreachable-worker": dict(head, llama_server_worker_manifest=str(silent_worker), role_case_reach=True,
                                        llama_server_worker_connect_timeout_s=2),
        "worker-any-address": {"role_case": "gpulab.inference.llama_rpc_server", "llama_rpc_server_build_link": head_build,
                               "llama_rpc_server_address": "0.0.0.0", "llama_rpc_server_allowed_sources": ["10.0.0.1"]},
    }
    return {"all": {"children": {
        "role_cases": {"hosts": {name: local_host(**hostvars) for name, hostvars in cases.items()}},
        "rpc_workers": {"hosts": {"node-b": local_host()}},
    }}}


def playbook(cases):
    return [
        {"name": CASES_PLAY, "hosts": "localhost", "gather_facts": False, "connection": "local",
         "tasks": [{"name": name, "gpulab.inference.%s" % module: args, "ignore_errors": True}
                   for name, (module, args) in cases.items()]},
        {"name": ROLE_PLAY, "hosts": "role_cases", "gather_facts": False,
         "tasks": [{"name": "Validate through the role",
                    "ansible.builtin.include_role": {"name": "{{ role_case }}", "tasks_from": "validate.yml"}},
                   {"name": "Check the workers' reachability through the role",
                    "ansible.builtin.include_role": {"name": "{{ role_case }}", "tasks_from": "reachability.yml"},
                    "when": "role_case_reach | default(false)"}]},
    ]


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    """Run the playbook once; the run, its outcome by (play, host, task), and the model files before it."""
    tmp_path = tmp_path_factory.mktemp("serving")
    models = write_model_files(tmp_path / "models")
    inventory = role_inventory(tmp_path, models)
    book = tmp_path / "serving-cases.yml"
    book.write_text(yaml.safe_dump(playbook(module_cases(models)), sort_keys=False))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = run_in(tmp_path_factory.mktemp("runner"), book, inventory)
    outcome = {}
    for event in result.events:
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            data = event["event_data"]
            outcome[(data["play"], data["host"], data["task"])] = (event["event"], data)
    return {"result": result, "outcome": outcome, "models": models, "tmp_path": tmp_path, "before": before}


def module_case(serving, name):
    """(event kind, res) of one module case."""
    kind, data = serving["outcome"][(CASES_PLAY, "localhost", name)]
    return kind, data["res"]


def assert_refused(serving, name, *fragments):
    kind, res = module_case(serving, name)
    assert kind == "runner_on_failed", res
    assert res["changed"] is False
    for fragment in fragments:
        assert fragment in res["msg"], res["msg"]
    return res["msg"]


def assert_accepted(serving, name):
    kind, res = module_case(serving, name)
    assert kind == "runner_on_ok", res.get("msg")
    assert res["changed"] is False
    return res


def test_tensor_split_of_wrong_length_names_both_lengths(serving):
    msg = assert_refused(serving, "split length differs", "has 2 entries but there are 3 devices", "RPC0", "CUDA0", "CUDA1")
    assert "equal or proportional" in msg
    assert assert_accepted(serving, "split length matches")["tensor_split_arg"] == "1,1,1"


def test_absent_model_is_named(serving):
    assert_refused(serving, "model absent", "model file(s) missing on the head: %s" % (serving["models"] / "absent.gguf"))


def test_missing_shard_is_named_alone(serving):
    msg = assert_refused(serving, "shard missing", "split-00002-of-00003.gguf")
    assert "00001-of-00003" not in msg
    assert "00003-of-00003" not in msg


def test_workers_sharing_address_and_port_are_both_named(serving):
    assert_refused(serving, "workers share an endpoint", "workers node-b and node-c both use 10.0.0.2:50052")
    res = assert_accepted(serving, "workers on other ports")
    assert res["rpc"] == "10.0.0.2:50052,10.0.0.2:50053"


@pytest.mark.parametrize("name, address", [("rpc bind to 0.0.0.0", "0.0.0.0"), ("rpc bind to ::", "::")])
def test_rpc_wildcard_bind_is_refused(serving, name, address):
    assert_refused(serving, name, "refusing to bind the RPC server to %s" % address, "llama_rpc_server_allow_any_address")


def test_rpc_wildcard_bind_when_allowed_warns(serving):
    res = assert_accepted(serving, "rpc bind to any, allowed")
    assert res["address"] == "0.0.0.0"
    assert any("no authentication" in warning for warning in res.get("warnings", []))
    fabric = assert_accepted(serving, "rpc bind to the fabric address")
    assert fabric.get("warnings", []) == []
    assert [(s["device"], s["port"]) for s in fabric["servers"]] == [("CPU", 50052)]


def test_plain_text_api_key_warns_and_does_not_fail(serving):
    res = assert_accepted(serving, "api key in plain text")
    assert any("llama_server_api_key is not vault-encrypted" in warning for warning in res["warnings"])
    assert assert_accepted(serving, "api key vaulted").get("warnings", []) == []


def role_failure(serving, host, tasks_file="validate.yml"):
    kind, data = serving["outcome"][(ROLE_PLAY, host, ROLE_TASKS[host])]
    assert kind == "runner_on_failed", data["res"]
    assert data["task_path"].split(":")[0].endswith("tasks/" + tasks_file)
    # A looped assert reports each item's message under results.
    items = [item["msg"] for item in data["res"].get("results", []) if item.get("failed")]
    return " | ".join(items) if items else data["res"]["msg"]


HEAD_PLAN_TASK = "Plan the RPC list, the tensor split and the health timeout (checks every model shard)"
ROLE_TASKS = {
    "head-lockstep": "Fail when a worker runs another build than the head (lockstep)",
    "head-missing-shard": HEAD_PLAN_TASK,
    "worker-any-address": "Plan one RPC server per exposed device",
    "head-unreachable-worker": "Fail when a worker endpoint does not answer",
}


def test_role_lockstep_mismatch_names_both_build_ids(serving):
    msg = role_failure(serving, "head-lockstep")
    assert "Worker node-b runs llama.cpp build bbbbbbbbbbbb" in msg
    assert "head head-lockstep has build aaaaaaaaaaaa" in msg


def test_role_missing_shard_stops_the_head(serving):
    assert "split-00002-of-00003.gguf" in role_failure(serving, "head-missing-shard")


def test_role_wildcard_rpc_bind_stops_the_worker(serving):
    assert "refusing to bind the RPC server to 0.0.0.0" in role_failure(serving, "worker-any-address")


def test_role_unreachable_worker_is_named(serving):
    msg = role_failure(serving, "head-unreachable-worker", "reachability.yml")
    assert "cannot connect to RPC endpoint(s) 127.0.0.1:1 within 2 s" in msg


def test_role_plain_text_api_key_warns(serving):
    kind, data = serving["outcome"][(ROLE_PLAY, "head-plain-key", HEAD_PLAN_TASK)]
    assert kind == "runner_on_ok", data["res"].get("msg")
    assert any("not vault-encrypted" in warning for warning in data["res"]["warnings"])


def test_nothing_changed(serving):
    result = serving["result"]
    assert result.status == "failed"
    assert result.changed_tasks() == []
    assert sorted(f[0] for f in result.failures) == ["head-lockstep", "head-missing-shard", "head-unreachable-worker", "worker-any-address"]
    after = sorted(p.name for p in serving["tmp_path"].rglob("*"))
    assert after == serving["before"]
