"""Serving input checks through ansible-runner: llama_server_plan and llama_rpc_server_plan refuse
bad input with a message naming it (and warn about a plain-text API key), and the validation
steps of the llama_server and llama_rpc_server roles stop before any change.

One playbook written into tmp_path holds every case, so the suite pays for one run:
- play 1 calls the modules on localhost, one task per case, errors ignored so every case runs;
- play 2 runs the roles' validate.yml (never their main.yml, which would create users and units
  here should a check regress) on local hosts, one host per case, each with its own files.
"""

import json
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from playbook_runner import REPO, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi

CASES_PLAY = "Module cases"
ROLE_PLAY = "Role validation cases"


def write_model_files(root):
    """A single-file model, a split model of 3 shards whose second shard is missing, a .gguf file
    that is not GGUF, and a model only its owner may read."""
    root.mkdir()
    root.chmod(0o755)
    (root / "single.gguf").write_bytes(b"GGUF" + bytes(60))
    for index in (1, 3):
        (root / ("split-%05d-of-00003.gguf" % index)).write_bytes(b"GGUF" + bytes(60))
    (root / "not-a-model.gguf").write_text("<html>404 Not Found</html>\n")
    return root


def write_account_models(root):
    """Under a directory every account may enter (pytest's own are 0700): a model only its owner
    may read and one anybody may read, for the service account check."""
    root.chmod(0o755)
    for name, mode in (("private.gguf", 0o600), ("public.gguf", 0o644)):
        (root / name).write_bytes(b"GGUF" + bytes(60))
        (root / name).chmod(mode)
    return root


def worker(host, address, port=50052, build_id="aaaaaaaaaaaa", **fields):
    """A worker as llama_rpc_server publishes it in servers.json; fields replace or drop (None) entries."""
    endpoint = {"instance": 0, "port": port, "device": "CPU", "memory_mib": 16000}
    for key in ("device", "instance", "memory_mib"):
        if key in fields:
            endpoint[key] = fields.pop(key)
    if port is None:
        del endpoint["port"]
    manifest = {"host": host, "address": address, "unit": "gpulab-rpc-server", "build_id": build_id,
                "endpoints": [endpoint]}
    manifest.update(fields)
    return manifest


LOCAL_GPUS = [{"index": 0, "cuda_arch": "120", "memory_total_mib": 97887}, {"index": 1, "cuda_arch": "120", "memory_total_mib": 97887}]
# The sandbox of the unit as the modules see it when the model sits under the test's /tmp.
NO_SANDBOX = {"PrivateTmp": None, "ProtectHome": None}


def module_cases(models, builds, shared):
    """Task name -> (module, arguments, expected message fragments or None for a case that passes).

    The good cases are bad ones with the fault removed, so each refusal is known to come from the fault.
    """
    single = str(models / "single.gguf")
    head = {"model_path": single, "hardening": NO_SANDBOX}

    def plan(**args):
        return ("llama_server_plan", dict(head, **args))

    def rpc(**args):
        base = {"cuda": False, "address": "10.0.0.2", "memory_mib": 16000, "allowed_sources": ["10.0.0.1"]}
        base.update(args)
        return ("llama_rpc_server_plan", base)

    return {
        # llama_server_plan: tensor split, shards, endpoints
        "split length differs": plan(workers=[worker("node-b", "10.0.0.2")], local_gpus=LOCAL_GPUS, tensor_split=[1, 1])
        + (["has 2 entries but there are 3 devices", "RPC0", "CUDA0", "CUDA1", "equal or proportional"],),
        "split length matches": plan(workers=[worker("node-b", "10.0.0.2")], local_gpus=LOCAL_GPUS, tensor_split=[1, 1, 1]) + (None,),
        "split entry not a number": plan(workers=[worker("node-b", "10.0.0.2")], tensor_split=["one"])
        + (["llama_server_tensor_split entry 'one' is not a number"],),
        "split mode unknown": plan(workers=[worker("node-b", "10.0.0.2")], tensor_split="fastest")
        + (["llama_server_tensor_split 'fastest' is not equal, proportional or a list"],),
        "split proportional without memory": plan(workers=[worker("node-b", "10.0.0.2", memory_mib=None)], tensor_split="proportional")
        + (["memory size is unknown for RPC0"],),
        "model absent": plan(model_path=str(models / "absent.gguf")) + (["model file(s) missing on the head: %s" % (models / "absent.gguf")],),
        "shard missing": plan(model_path=str(models / "split-00001-of-00003.gguf")) + (["split-00002-of-00003.gguf"],),
        "model not named .gguf": plan(model_path=str(models / "single.bin")) + (["does not end with .gguf"],),
        "model not a GGUF": plan(model_path=str(models / "not-a-model.gguf")) + (["not-a-model.gguf is not a GGUF file", "llama_server_model_path"],),
        "model hidden by PrivateTmp": plan(hardening={"PrivateTmp": "yes"})
        + (["which PrivateTmp=yes hides from the service", "llama_server_hardening_overrides"],),
        "model unreadable by the account": plan(model_path=str(shared / "private.gguf"), service_user="nobody")
        + (["nobody cannot read %s" % (shared / "private.gguf"), "mode 0600"],),
        "model readable by the account": plan(model_path=str(shared / "public.gguf"), service_user="nobody", local_gpus=LOCAL_GPUS) + (None,),
        "health timeout negative": plan(health_timeout_s=-5) + (["llama_server_health_timeout_s is -5"],),
        "health load rate zero": plan(health_load_rate_mib_s=0) + (["llama_server_health_load_rate_mib_s is 0"],),
        "restart delays reversed": plan(restart_sec=30, restart_max_delay_s=5) + (["restart_max_delay_s (5 s) is below restart_sec (30 s)"],),
        "workers share an endpoint": plan(workers=[worker("node-b", "10.0.0.2"), worker("node-c", "10.0.0.2")])
        + (["workers node-b and node-c both use 10.0.0.2:50052"],),
        "workers on other ports": plan(workers=[worker("node-b", "10.0.0.2"), worker("node-c", "10.0.0.2", 50053)]) + (None,),
        # llama_server_plan: what a worker's servers.json may hold
        "endpoint without port": plan(workers=[worker("node-b", "10.0.0.2", port=None)])
        + (["worker node-b: endpoints entry 0 port None is not a port number"],),
        "endpoint port abc": plan(workers=[worker("node-b", "10.0.0.2", port="abc")])
        + (["worker node-b: endpoints entry 0 port 'abc' is not a port number"],),
        "endpoint port out of range": plan(workers=[worker("node-b", "10.0.0.2", port=70000)])
        + (["worker node-b: endpoints entry 0 port 70000 is out of range"],),
        "worker address 999.1.1.1": plan(workers=[worker("node-b", "999.1.1.1")])
        + (["worker node-b: address '999.1.1.1' is not an IP address"],),
        "worker address with a command": plan(workers=[worker("node-b", "10.0.0.2; touch /tmp/owned")])
        + (["worker node-b: address '10.0.0.2; touch /tmp/owned' is not an IP address"],),
        "worker device with a command": plan(workers=[worker("node-b", "10.0.0.2", device="CPU$(id)")])
        + (["worker node-b: endpoints entry 0 device 'CPU$(id)' is not a ggml device name"],),
        "worker unit name with a space": plan(workers=[worker("node-b", "10.0.0.2", unit="rpc server")])
        + (["worker node-b: unit 'rpc server' is not a systemd unit name"],),
        "worker build id not hex": plan(workers=[worker("node-b", "10.0.0.2", build_id="latest")])
        + (["worker node-b: build_id 'latest' is not a 12-digit hex build id"],),
        "worker without endpoints": plan(workers=[worker("node-b", "10.0.0.2", endpoints=[])])
        + (["worker node-b exposes no RPC endpoint"],),
        "worker manifest a list": plan(workers=[["node-b"]]) + (["option 'workers'", "convert to dict"],),
        "worker instance negative": plan(workers=[worker("node-b", "10.0.0.2", instance=-1)])
        + (["worker node-b: endpoints entry 0 instance -1 is negative"],),
        # llama_server_plan: the head's build
        "head build absent": plan(build_link=str(builds / "absent")) + (["does not exist: deploy a llama.cpp build first"],),
        "head BUILD_INFO not UTF-8": plan(build_link=str(builds / "latin1")) + (["BUILD_INFO.json is not UTF-8 text"],),
        "head BUILD_INFO not JSON": plan(build_link=str(builds / "garbage")) + (["BUILD_INFO.json is not valid JSON"],),
        "worker on another build": plan(build_link=str(builds / "aaaaaaaaaaaa"), workers=[worker("node-b", "10.0.0.2", build_id="bbbbbbbbbbbb")])
        + (["worker node-b runs llama.cpp build bbbbbbbbbbbb but the head has build aaaaaaaaaaaa"],),
        "worker on the head's build": plan(build_link=str(builds / "aaaaaaaaaaaa"), workers=[worker("node-b", "10.0.0.2")]) + (None,),
        "api key in plain text": plan(local_gpus=LOCAL_GPUS, api_key_set=True, api_key_vaulted=False) + (None,),
        "api key vaulted": plan(local_gpus=LOCAL_GPUS, api_key_set=True, api_key_vaulted=True) + (None,),
        # llama_rpc_server_plan
        "rpc bind to 0.0.0.0": rpc(address="0.0.0.0") + (["refusing to bind the RPC server to 0.0.0.0", "llama_rpc_server_allow_any_address"],),
        # No "::" in a case name: pytest-xdist's --dist loadscope cuts a test id at its last "::",
        # which would run this case, and the module's playbook with it, in a scope of its own.
        "rpc bind to the IPv6 wildcard": rpc(address="::") + (["refusing to bind the RPC server to ::", "llama_rpc_server_allow_any_address"],),
        "rpc bind to any, allowed": rpc(address="0.0.0.0", allow_any_address=True) + (None,),
        "rpc bind to the fabric address": rpc() + (None,),
        "rpc bind to a host name": rpc(address="node-b") + (["bind address 'node-b' is not an IP address"],),
        "rpc gpu entry without index": rpc(cuda=True, gpus=[{"name": "NVIDIA H200"}]) + (["gpus entry 0", "has no index"],),
        "rpc gpu indices twice": rpc(cuda=True, gpus=LOCAL_GPUS, gpu_indices=[0, 0])
        + (["llama_rpc_server_gpu_indices names GPU 0 more than once"],),
        "rpc gpu index absent": rpc(cuda=True, gpus=LOCAL_GPUS, gpu_indices=[5]) + (["GPU indices [5] are not present", "llama_rpc_server_gpu_indices"],),
        "rpc cuda without gpus": rpc(cuda=True) + (["no GPU was found on this node"],),
        "rpc ports beyond 65535": rpc(cuda=True, gpus=LOCAL_GPUS, port_base=65535) + (["ports 65535..65536 are out of range", "llama_rpc_server_port_base"],),
        "rpc port base zero": rpc(port_base=0) + (["ports 0..0 are out of range"],),
        "rpc port on the ssh port": rpc(port_base=2222, ssh_ports=[22, 2222])
        + (["llama_rpc_server_port_base puts the RPC servers on 2222, which SSH uses", "away from 22, 2222"],),
        "rpc allowed source not an address": rpc(allowed_sources=["head.lab"])
        + (["llama_rpc_server_allowed_sources entry 'head.lab' is not an IP address or prefix"],),
        "rpc allowed sources empty": rpc(allowed_sources=[]) + (["llama_rpc_server_allowed_sources is empty"],),
        "rpc build without the server binary": rpc(build_link=str(builds / "no-rpc")) + (["has no executable", "GGML_RPC=ON"],),
        "rpc build with a path as binary name": rpc(build_link=str(builds / "bad-binary-name")) + (["rpc_server_binary '../../bin/sh' is not a file name"],),
        # llama_rpc_reachability and llama_server_health
        "reach endpoint port abc": ("llama_rpc_reachability", {"endpoints": [{"host": "node-b", "address": "10.0.0.2", "port": "abc"}]},
                                    ["endpoints entry 0 port 'abc' is not a port number"]),
        "reach timeout zero": ("llama_rpc_reachability", {"endpoints": [], "timeout_s": 0}, ["timeout_s is 0"]),
        "health wait timeout negative": ("llama_server_health", {"url": "http://127.0.0.1:1", "unit": "x.service", "timeout_s": -1},
                                         ["timeout_s is -1"]),
        "health poll zero": ("llama_server_health", {"url": "http://127.0.0.1:1", "unit": "x.service", "timeout_s": 5, "poll_s": 0},
                             ["poll_s is 0"]),
    }


def fake_build(root, build_id, binary_name="ggml-rpc-server", with_binary=True, info=None):
    """A deployed build as the serving roles read it: BUILD_INFO.json and an executable RPC server."""
    (root / "bin").mkdir(parents=True)
    if info is None:
        info = json.dumps({"build_id": build_id, "cuda": False, "rpc_server_binary": binary_name}).encode()
    (root / "BUILD_INFO.json").write_bytes(info)
    if with_binary:
        binary = root / "bin" / "ggml-rpc-server"
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return root


def fake_builds(root):
    """Builds the module cases read: a good one and broken ones."""
    fake_build(root / "aaaaaaaaaaaa", "aaaaaaaaaaaa")
    fake_build(root / "latin1", "aaaaaaaaaaaa", info=b'{"build_id": "aaaaaaaaaaaa", "compiler": "gcc \xe9"}')
    fake_build(root / "garbage", "aaaaaaaaaaaa", info=b"not json")
    fake_build(root / "no-rpc", "aaaaaaaaaaaa", with_binary=False)
    fake_build(root / "bad-binary-name", "aaaaaaaaaaaa", binary_name="../../bin/sh")
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
    # The roles read the node's GPUs from the file gpu_preflight writes in deploy.yml's first play:
    # here the one it writes on a CPU node (the fake builds are CPU builds).
    gpu_inventory = tmp_path / "gpu-inventory.json"
    gpu_inventory.write_text(json.dumps(nvidia_smi.inventory_snapshot([], {})))
    # The account is root here: no llama-server account exists on the test machine, and the
    # model under /tmp is allowed through the sandbox overrides; both checks have module cases.
    # The memory plan's record (role memory_plan) resolves the split, the context and the slots
    # (its serving intent's) left at auto.
    memory_plan = tmp_path / "memory-plan.json"
    memory_plan.write_text(json.dumps({"model_path": str(models / "single.gguf"), "tensor_split": [1.0],
                                       "options": {"ctx_size": 4096, "tensor_split": "auto"},
                                       "intent": {"intent": "throughput", "concurrency": 4, "parallel": 4,
                                                  "parallel_reason": "throughput: 4 streams"}}))
    head = {"role_case": "gpulab.inference.llama_server", "llama_server_build_link": head_build,
            "llama_server_model_path": str(models / "single.gguf"), "llama_server_worker_manifest": str(same_build),
            "llama_server_user": "root", "llama_server_hardening_overrides": NO_SANDBOX,
            "gpulab_memory_plan_file": str(memory_plan)}
    cases = {
        "head-lockstep": dict(head, llama_server_worker_manifest=str(other_build)),
        "head-plain-key": dict(head, llama_server_api_key="sk-plain-text"),
        "head-missing-shard": dict(head, llama_server_model_path=str(models / "split-00001-of-00003.gguf")),
        "head-unreachable-worker": dict(head, llama_server_worker_manifest=str(silent_worker), role_case_reach=True,
                                        llama_server_worker_connect_timeout_s=2),
        "head-model-in-tmp": dict(head, llama_server_hardening_overrides={}),
        "head-auto-without-plan": dict(head, gpulab_memory_plan_file=str(tmp_path / "no-memory-plan.json")),
        "worker-any-address": {"role_case": "gpulab.inference.llama_rpc_server", "llama_rpc_server_build_link": head_build,
                               "llama_rpc_server_address": "0.0.0.0", "llama_rpc_server_allowed_sources": ["10.0.0.1"]},
    }
    return {"all": {"children": {
        "role_cases": {"hosts": {name: local_host(gpulab_gpu_inventory_file=str(gpu_inventory), **hostvars)
                                 for name, hostvars in cases.items()}},
        "rpc_workers": {"hosts": {"node-b": local_host()}},
    }}}


def playbook(cases):
    return [
        {"name": CASES_PLAY, "hosts": "localhost", "gather_facts": False, "connection": "local",
         "tasks": [{"name": name, "gpulab.inference.%s" % module: args, "ignore_errors": True}
                   for name, (module, args, unused) in cases.items()]},
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
    builds = fake_builds(tmp_path / "module-builds")
    shared = write_account_models(Path(tempfile.mkdtemp(prefix="gpulab-serving-", dir="/var/tmp")))
    inventory = role_inventory(tmp_path, models)
    cases = module_cases(models, builds, shared)
    book = tmp_path / "serving-cases.yml"
    book.write_text(yaml.safe_dump(playbook(cases), sort_keys=False))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    try:
        result = run_in(tmp_path_factory.mktemp("runner"), book, inventory)
    finally:
        shutil.rmtree(str(shared))
    outcome = {}
    for event in result.events:
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            data = event["event_data"]
            outcome[(data["play"], data["host"], data["task"])] = (event["event"], data)
    return {"result": result, "outcome": outcome, "models": models, "tmp_path": tmp_path, "before": before, "cases": cases}


def module_case(serving, name):
    """(event kind, res) of one module case."""
    kind, data = serving["outcome"][(CASES_PLAY, "localhost", name)]
    return kind, data["res"]


def assert_refused(serving, name, *fragments):
    kind, res = module_case(serving, name)
    assert kind == "runner_on_failed", res
    assert res["changed"] is False
    # A module that crashed reports MODULE FAILURE with the traceback in module_stderr.
    assert "MODULE FAILURE" not in res["msg"] and "Traceback" not in res.get("module_stderr", ""), res
    for fragment in fragments:
        assert fragment in res["msg"], res["msg"]
    return res["msg"]


CASE_NAMES = list(module_cases(Path("/models"), Path("/builds"), Path("/shared")))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_module_case(serving, name):
    """Every bad input is refused with a message naming the option or field; every good one passes."""
    unused_module, unused_args, fragments = serving["cases"][name]
    if fragments is None:
        assert_accepted(serving, name)
    else:
        assert_refused(serving, name, *fragments)


def assert_accepted(serving, name):
    kind, res = module_case(serving, name)
    assert kind == "runner_on_ok", res.get("msg")
    assert res["changed"] is False
    return res


def test_tensor_split_of_wrong_length_names_both_lengths(serving):
    msg = assert_refused(serving, "split length differs", "has 2 entries but there are 3 devices", "RPC0", "CUDA0", "CUDA1")
    assert "equal or proportional" in msg
    assert assert_accepted(serving, "split length matches")["tensor_split_arg"] == "1,1,1"


def test_missing_shard_is_named_alone(serving):
    msg = assert_refused(serving, "shard missing", "split-00002-of-00003.gguf")
    assert "00001-of-00003" not in msg
    assert "00003-of-00003" not in msg


def test_workers_sharing_address_and_port_are_both_named(serving):
    assert_refused(serving, "workers share an endpoint", "workers node-b and node-c both use 10.0.0.2:50052")
    res = assert_accepted(serving, "workers on other ports")
    assert res["rpc"] == "10.0.0.2:50052,10.0.0.2:50053"


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


HEAD_PLAN_TASK = "Plan the RPC list, the tensor split and the health timeout (checks lockstep and every model shard)"
ROLE_TASKS = {
    "head-lockstep": HEAD_PLAN_TASK,
    "head-missing-shard": HEAD_PLAN_TASK,
    "head-model-in-tmp": HEAD_PLAN_TASK,
    "head-auto-without-plan": HEAD_PLAN_TASK,
    "worker-any-address": "Plan one RPC server per exposed device, the firewall and the restart policy",
    "head-unreachable-worker": "Connect to every worker endpoint the head is not attached to",
}


def test_role_lockstep_mismatch_names_both_build_ids(serving):
    msg = role_failure(serving, "head-lockstep")
    assert "worker node-b runs llama.cpp build bbbbbbbbbbbb but the head has build aaaaaaaaaaaa" in msg


def test_role_missing_shard_stops_the_head(serving):
    assert "split-00002-of-00003.gguf" in role_failure(serving, "head-missing-shard")


def test_role_wildcard_rpc_bind_stops_the_worker(serving):
    assert "refusing to bind the RPC server to 0.0.0.0" in role_failure(serving, "worker-any-address")


def test_role_unreachable_worker_is_named(serving):
    msg = role_failure(serving, "head-unreachable-worker", "reachability.yml")
    assert "cannot connect to RPC endpoint(s) 127.0.0.1:1 (node-b) within 2 s" in msg


def test_role_model_hidden_by_the_sandbox_stops_the_head(serving):
    assert "which PrivateTmp=yes hides from the service" in role_failure(serving, "head-model-in-tmp")


def test_role_plain_text_api_key_warns(serving):
    kind, data = serving["outcome"][(ROLE_PLAY, "head-plain-key", HEAD_PLAN_TASK)]
    assert kind == "runner_on_ok", data["res"].get("msg")
    assert any("not vault-encrypted" in warning for warning in data["res"]["warnings"])


def test_role_auto_split_and_context_come_from_the_memory_plan(serving):
    kind, data = serving["outcome"][(ROLE_PLAY, "head-plain-key", HEAD_PLAN_TASK)]
    argv = data["res"]["argv"]
    assert argv[argv.index("--tensor-split") + 1] == "1" and argv[argv.index("--ctx-size") + 1] == "4096"


def test_role_auto_without_a_memory_plan_is_named(serving):
    assert ("llama_server_tensor_split and llama_server_ctx_size are auto: the memory plan resolves them"
            in role_failure(serving, "head-auto-without-plan"))


def test_nothing_changed(serving):
    result = serving["result"]
    assert result.status == "failed"
    assert result.changed_tasks() == []
    assert sorted(f[0] for f in result.failures) == [
        "head-auto-without-plan", "head-lockstep", "head-missing-shard", "head-model-in-tmp", "head-unreachable-worker",
        "worker-any-address"]
    after = sorted(p.name for p in serving["tmp_path"].rglob("*"))
    assert after == serving["before"]


# deploy.yml itself: a wrong value of any role's variable set by -e or the inventory stops the first
# play in seconds, naming the variable as the user set it, before any node is read or changed.
def deploy_inventory(tmp_path, head_vars=None, worker_vars=None):
    def host(name, **extra):
        return local_host(gpulab_gpu_inventory_file=str(tmp_path / name / "gpu-inventory.json"), **extra)

    return {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": host("node-a", gpulab_fabric_address="10.0.0.1", **(head_vars or {}))}},
        "rpc_workers": {"hosts": {"node-b": host("node-b", gpulab_fabric_address="10.0.0.2", **(worker_vars or {}))}},
    }}}}}


DEPLOY_CASES = [
    ("-e ctx_size=abc", "-e llama_server_ctx_size=abc", {}, {},
     ["llama_server_ctx_size='abc' on every node is not a whole number or auto: set the context in tokens"]),
    ("-e parallel=0", "-e llama_server_parallel=0", {}, {},
     ["llama_server_parallel='0' on every node is below 1: set the number of requests served at once"]),
    ("inventory: unquoted on, RPC port 0", None, {"llama_server_flash_attn": True}, {"llama_rpc_server_port_base": 0},
     ["llama_server_flash_attn=True on node-a is a boolean", "llama_rpc_server_port_base=0 on node-b is below 1"]),
    ("-e bench_max_tokens=1", "-e bench_max_tokens=1", {}, {},
     ["bench_max_tokens='1' on every node is below 2: set output tokens per request"]),
    ("-e context below the slots", "-e llama_server_ctx_size=2 -e llama_server_parallel=4", {}, {},
     ["llama_server_ctx_size=2 on every node over llama_server_parallel=4 leaves less than one token"]),
    # The role's own validation found this 45 s in, after the drain.
    ("-e verbosity null as JSON", """-e '{"llama_server_log_verbosity": null}'""", {}, {},
     ["llama_server_log_verbosity=null on every node is null, which role llama_server gives no meaning: remove the "
      "setting for the default 4, or set a whole number."]),
    ("-e verbosity=null", "-e llama_server_log_verbosity=null", {}, {},
     ["llama_server_log_verbosity='null' on every node: argument 'llama_server_log_verbosity' is of type str"]),
    ("inventory: a keep list as text, a null host", None, {"gpu_drain_keep": "notalist"}, {"llama_server_host": None},
     ["gpu_drain_keep='notalist' on node-a is text, which Ansible would take as a list of its comma-separated parts",
      "llama_server_host=null on node-b is null, which role llama_server gives no meaning: remove the setting for the "
      "default '127.0.0.1', or set a string"]),
    # A relative path was taken from the deploy user's home on every node; a list from -e arrives as text.
    ("-e gpulab_state_dir=relative/dir", "-e gpulab_state_dir=relative/dir", {}, {},
     ["gpulab_state_dir='relative/dir' on every node is a relative path, which a task would take from wherever it runs "
      "(the deploy user's home on a node): set an absolute path."]),
    ("-e gpulab_state_dir=[1,2]", "-e gpulab_state_dir=[1,2]", {}, {},
     ["gpulab_state_dir='[1,2]' on every node is text that reads as a list (-e name=value gives text): set a path, one value."]),
    ("-e null where no null is meant", """-e '{"bench_profiles": null, "gpulab_service_hardening": null, "model_dir": null}'""",
     {}, {}, ["bench_profiles=null on every node is null, which role bench gives no meaning: remove the setting for the "
              "role's default, or set a mapping.",
              "gpulab_service_hardening=null on every node is null, which role common gives no meaning",
              "model_dir=null on every node is null, which role model gives no meaning: remove the setting for the default ''"]),
    ("-e port as text, one bad choice", "-e llama_server_port=8081 -e llama_server_cache_type_k=q3", {}, {},
     ["llama_server_cache_type_k='q3' on every node: value of llama_server_cache_type_k must be one of: f32, f16"]),
]


@pytest.mark.parametrize("cmdline, head_vars, worker_vars, sentences", [c[1:] for c in DEPLOY_CASES],
                         ids=[c[0] for c in DEPLOY_CASES])
def test_deploy_refuses_a_wrong_serving_value_first(tmp_path, cmdline, head_vars, worker_vars, sentences):
    began = time.monotonic()
    result = run_in(tmp_path / "runner", "deploy.yml", deploy_inventory(tmp_path, head_vars, worker_vars), cmdline=cmdline)
    took = time.monotonic() - began
    assert result.status == "failed"
    (failure, *_others) = result.failures
    assert failure[1] == "The serving variables are usable", result.failures
    for sentence in sentences:
        assert sentence in failure[2]
    # one sentence per problem, and only the problems of the case (the port given as text passes)
    assert len(failure[2].splitlines()) == len(sentences), failure[2]
    assert "Traceback" not in failure[2]
    assert result.changed_tasks() == []
    assert not any((tmp_path / name).exists() for name in ("node-a", "node-b"))
    assert took < 60, took


def test_deploy_refuses_an_unknown_engine_before_the_gpu_tables(tmp_path):
    result = run_in(tmp_path / "runner", "deploy.yml", deploy_inventory(tmp_path), cmdline="-e gpulab_engine=vlm")
    assert result.status == "failed"
    (failure, *_others) = result.failures
    assert "gpulab_engine is 'vlm'; set one of llama_cpp, vllm" in failure[2], failure
    ran = {e["event_data"].get("task") for e in result.events if e.get("event") == "runner_on_ok"}
    # nothing of the GPU facts' step (roles/gpu_preflight/tasks/gpus.yml) ran
    gpu_tasks = {task["name"] for task in yaml.safe_load((REPO / "roles" / "gpu_preflight" / "tasks" / "gpus.yml").read_text())}
    assert gpu_tasks and not ran & gpu_tasks, ran & gpu_tasks
    assert result.changed_tasks() == []
