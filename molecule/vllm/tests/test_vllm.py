"""vLLM (test double) on the lab's head: the service, its account and files, the arguments the
role planned, and the API with its reasoning channel."""

import json
import os

from sigkill import serves_again_after_sigkill

LAB = os.environ.get("GPULAB_LAB_NAME", "gpulab")
FABRIC = os.environ.get("GPULAB_LAB_FABRIC_PREFIX", "10.231.77")
HEAD = f"{FABRIC}.10"
MODEL = "/var/lib/gpulab/models/synthetic-minimax-m2-fp8"
RECORD = "/var/cache/gpulab/vllm/test-double-record.json"


def test_service_runs_unprivileged(host):
    service = host.service("gpulab-vllm")
    assert service.is_running and service.is_enabled
    assert host.check_output("systemctl show --property=User --value gpulab-vllm.service") == "gpulab-vllm"


def test_api_key_file_is_private(host):
    key = host.file("/etc/gpulab/vllm/api-key")
    assert key.mode == 0o640 and key.user == "root" and key.group == "gpulab-vllm"
    wrapper = host.file("/opt/gpulab/bin/gpulab-vllm")
    assert "lab-vllm-key" not in wrapper.content_string


def test_planned_arguments_reached_vllm(host):
    record = json.loads(host.file(RECORD).content_string)
    argv = record["argv"]
    assert argv[:2] == ["serve", MODEL]
    pairs = dict(zip(argv[2::1], argv[3::1]))
    assert pairs["--tensor-parallel-size"] == "2"
    assert pairs["--host"] == HEAD and pairs["--max-model-len"] == "4096"
    assert pairs["--reasoning-parser"] == "minimax_m2_append_think"
    assert pairs["--tool-call-parser"] == "minimax_m2"
    assert "--enable-expert-parallel" in argv and "--api-key" not in argv
    assert record["api_key_set"] is True
    assert record["env"]["VLLM_HOST_IP"] == HEAD


def test_chat_completion_with_reasoning(host):
    body = json.dumps({"model": "synthetic-minimax-m2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    out = host.check_output(
        f"curl -sf -H 'Authorization: Bearer lab-vllm-key' -H 'Content-Type: application/json' "
        f"-d '{body}' http://{HEAD}:8000/v1/chat/completions")
    message = json.loads(out)["choices"][0]["message"]
    assert message["content"] and message["reasoning"]


def test_api_refuses_requests_without_the_key(host):
    code = host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' http://{HEAD}:8000/v1/models")
    assert code == "401"


def test_plan_is_published_for_the_report(host):
    plan = json.loads(host.file("/etc/gpulab/vllm/plan.json").content_string)
    assert plan["label"] == "TP=2+EP" and plan["node_role"] == "head"
    assert plan["model"]["tensor_source"] == "safetensors"
    # TP=2+EP: half the experts, half of every sharded weight, norms and router whole on each GPU
    assert 0.5 < plan["estimate"]["weights_bytes"] / plan["model"]["weights_bytes"] < 0.55


def test_benchmark_and_report_ran_against_vllm():
    """The bench step of the converge measured the vLLM server and wrote the report on the controller."""
    from pathlib import Path

    repo = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
    reports = sorted((repo / "reports").glob("%s-%sT%sZ/report.json" % (LAB, "[0-9]" * 8, "[0-9]" * 6)),
                     key=lambda path: path.stat().st_mtime)
    assert reports, "no report under %s/reports/%s-*" % (repo, LAB)
    report = json.loads(reports[-1].read_text())
    levels = report["benchmark"]["levels"]
    assert [level["concurrency"] for level in levels] == [1, 2, 4]
    for level in levels:
        assert level["requests_failed"] == 0, level["errors"]
        assert level["output_tokens"] > 0
    for png in ("residency.png", "utilisation.png", "throughput.png"):
        assert (reports[-1].parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report describes vLLM's plan and checkpoint, not a llama.cpp model or build of the head.
    assert report["vllm"]["label"] == "TP=2+EP", report["vllm"]
    assert report["build"] is None, report["build"]


def test_the_drain_left_the_collections_vllm_running(host):
    """deploy.yml ran twice (converge, idempotence); the second drain saw vLLM on GPU 0 and kept it."""
    apps = host.check_output("nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory "
                             "--format=csv,noheader,nounits")
    main_pid = host.check_output("systemctl show -p MainPID --value gpulab-vllm.service")
    assert main_pid != "0" and apps.startswith(main_pid + ","), apps
    assert host.check_output("systemctl show -p NRestarts --value gpulab-vllm.service") == "0"
    # Nothing was drained: no state file, so nothing of the collection's is listed to restore.
    assert not host.file("/var/lib/gpulab/drain-state.json").exists


# Fault matrix (docs/faults.md, "SIGKILL of each service the collection runs"): the unit's
# Restart=on-failure brings the server back after vllm_server_restart_sec (30 s by default, a GPU's
# memory freed first); the bound adds 30 s for the double's start and systemd's timing.
VLLM_SIGKILL_BOUND_S = 60


def test_a_killed_vllm_serves_again_within_its_bound(host):
    """SIGKILL of vLLM's main process (the test double): a new process serves /health and a chat
    completion within VLLM_SIGKILL_BOUND_S, under the same unit. Runs after the drain's check, which
    counts the unit's restarts."""
    unit = "gpulab-vllm.service"
    body = json.dumps({"model": "synthetic-minimax-m2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    chat = (f"curl -sf --max-time 5 -H 'Authorization: Bearer lab-vllm-key' -H 'Content-Type: application/json' "
            f"-d '{body}' http://{HEAD}:8000/v1/chat/completions")

    def answers():
        served = host.run(chat)
        return served.rc == 0 and bool(json.loads(served.stdout)["choices"][0]["message"]["content"])

    took = serves_again_after_sigkill(host, unit, f"http://{HEAD}:8000/health", VLLM_SIGKILL_BOUND_S, answers)
    print("vLLM served again %.1f s after its SIGKILL" % took)
    assert int(host.check_output("systemctl show --property=NRestarts --value %s" % unit)) >= 1
