"""Monitoring with the vLLM engine (deploy.yml's monitoring play, gpulab_monitoring_enabled in
group_vars/gpu_nodes.yml): Prometheus on node-a scrapes vLLM's /metrics (the test double's, in vLLM's
names) with the API key, GPU memory per process carries the fake nvidia-smi's consumer (the vLLM unit,
40000 MiB), and every dashboard panel of vLLM's series returns one."""

import json
import shlex
import time
from pathlib import Path

PROMETHEUS = "http://127.0.0.1:9090"
DASHBOARDS = Path(__file__).resolve().parents[3] / "roles" / "monitoring" / "files" / "dashboards"
MIB = 1024 * 1024


def query(host, promql):
    answer = json.loads(host.check_output("curl -sfG --max-time 10 %s --data-urlencode %s" % (
        shlex.quote(PROMETHEUS + "/api/v1/query"), shlex.quote("query=" + promql))))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_for(what, check, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "%s: not within %d s" % (what, timeout_s)
        time.sleep(1)


def test_every_target_is_up_vllm_included(host):
    def all_up():
        found = query(host, "up")
        return found if found and all(item["value"][1] == "1" for item in found) and len(found) == 3 else None
    found = wait_for("every target up", all_up)
    assert sorted((item["metric"]["job"], item["metric"].get("node", "")) for item in found) == [
        ("node", "node-a"), ("prometheus", ""), ("vllm", "node-a")]


def test_vllms_own_series_are_scraped(host):
    found = wait_for("vllm:num_requests_running", lambda: query(host, 'vllm:num_requests_running{job="vllm"}'))
    assert found[0]["metric"]["model_name"] == "synthetic-minimax-m2" and found[0]["metric"]["part"] == "head"
    assert query(host, 'vllm:generation_tokens_total{job="vllm"}')


def test_gpu_memory_per_process_is_the_fake_nvidia_smis(host):
    pid = host.check_output("systemctl show --property=MainPID --value gpulab-vllm.service").strip()
    promql = 'gpulab_gpu_process_memory_used_bytes{node="node-a", pid="%s"}' % pid
    found = wait_for("the vLLM process's GPU memory", lambda: query(host, promql))
    assert [(item["metric"]["uuid"], float(item["value"][1])) for item in found] == [
        ("GPU-5b0e6f3a-91c2-4e8d-a7f4-0c3d2b1e9a60", 40000 * MIB)]


def test_every_vllm_panel_returns_a_series(host):
    exprs = [target["expr"] for path in sorted(DASHBOARDS.glob("*.json"))
             for panel in json.loads(path.read_text())["panels"] for target in panel.get("targets", [])
             if "vllm:" in target["expr"]]
    assert exprs
    assert [expr for expr in exprs if not query(host, expr)] == []
