"""Monitoring on the deployed lab (converge.yml's Monitoring play, with the lab's short intervals):
Prometheus on the head lists every target up, the GPU metrics of every node carry the fake
nvidia-smi's answers (per process too, from a consumers file), the last benchmark's headline is
exported, every dashboard panel's query returns a series, a benchmark's report holds the dashboard's GPU
series from Prometheus for its minutes beside its own sampler's, and stopping an RPC server of node-b
fires the worker-down alert within its bound (status.yml lists it) and resolves it after the
restart. Prometheus binds to the head's loopback, so every query runs there."""

import json
import shlex
import time
from pathlib import Path

import pytest
import yaml

from lab_playbooks import REPO, lab_host, run_on_lab

PROMETHEUS = "http://127.0.0.1:9090"
DASHBOARDS = REPO / "roles" / "monitoring" / "files" / "dashboards"
SMI_DIR = "/etc/gpulab-fake-nvidia-smi"
MIB = 1024 * 1024
NODES = ("node-a", "node-b", "node-c")
# The metrics of each engine's own /metrics; the default scenario serves llama.cpp, so the vLLM panels
# are the vllm scenario's to check.
OTHER_ENGINE_METRICS = ("vllm:",)
RPC_UNIT = "gpulab-rpc-server@0.service"  # node-b's first RPC server, which the alert test stops
CONSUMER_MIB = 3210
# The fake nvidia-smi's one-shot query (the collector's and the report's sampler's), and a short benchmark.
GPU_FIELDS = "index,uuid,name,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,memory.free,utilization.gpu"
BENCH_RUN = {"gpulab_bench_profile": "short", "bench_concurrency": [1], "bench_requests_per_level": 2,
             "bench_warmup_requests": 1, "bench_prompt_tokens": 128, "bench_max_tokens": 8, "bench_request_rates": []}


def lab_settings():
    """The Monitoring play's lab intervals and bounds, from converge.yml."""
    plays = yaml.safe_load((Path(__file__).resolve().parents[1] / "converge.yml").read_text())
    return next(play["vars"] for play in plays if play.get("name") == "Monitoring")


def seconds(text):
    return int(str(text)[:-1]) * {"s": 1, "m": 60}[str(text)[-1]]


@pytest.fixture(scope="module")
def head():
    return lab_host("node-a")


@pytest.fixture(scope="module")
def worker():
    return lab_host("node-b")


def api(head, path, **params):
    args = " ".join("--data-urlencode %s" % shlex.quote("%s=%s" % item) for item in params.items())
    answer = json.loads(head.check_output("curl -sfG --max-time 10 %s %s" % (shlex.quote(PROMETHEUS + path), args)))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(head, promql):
    return api(head, "/api/v1/query", query=promql)["result"]


def wait_for(what, check, timeout_s):
    """check() until it returns a true value (returned) or timeout_s passes (fails, naming what)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "%s: not within %d s" % (what, timeout_s)
        time.sleep(1)


def wait_for_or_none(check, timeout_s):
    try:
        return wait_for("", check, timeout_s)
    except AssertionError:
        return None


def by_node(results):
    return dict((item["metric"]["node"], float(item["value"][1])) for item in results)


@pytest.fixture(scope="module")
def consumer(worker):
    """A GPU consumer on node-b for the fake nvidia-smi: node-b's node exporter (a process that runs
    throughout) holding CONSUMER_MIB on its first GPU (consumers file, by pid file); removed afterwards."""
    uuid = worker.check_output("cut -d, -f2 %s/query-gpu.csv | head -n1" % SMI_DIR).strip()
    pid = worker.check_output("systemctl show --property=MainPID --value gpulab-node-exporter.service").strip()
    worker.check_output("echo %s > /run/gpulab-monitoring-test.pid" % pid)
    worker.check_output("echo /run/gpulab-monitoring-test.pid,%s,%d > %s/consumers" % (uuid, CONSUMER_MIB, SMI_DIR))
    yield {"uuid": uuid, "pid": pid}
    worker.run("rm -f %s/consumers /run/gpulab-monitoring-test.pid" % SMI_DIR)


def test_every_target_is_up(head):
    def all_up():
        targets = api(head, "/api/v1/targets", state="active")["activeTargets"]
        jobs = sorted((t["labels"]["job"], t["labels"].get("node", "")) for t in targets)
        return jobs if all(t["health"] == "up" for t in targets) else None
    jobs = wait_for("every target up", all_up, 60)
    assert jobs == sorted([("node", node) for node in NODES] + [("llama_cpp", "node-a"), ("prometheus", "")])


def test_gpu_metrics_of_every_node_are_the_fake_nvidia_smis(head):
    for node in NODES:
        host = lab_host(node)
        gpus = [line.split(", ") for line in host.check_output("cat %s/query-gpu.csv" % SMI_DIR).splitlines()]
        sensors = [line.split(", ") for line in host.check_output("cat %s/query-gpu-sensors.csv" % SMI_DIR).splitlines()]
        for gpu, sensor in zip(gpus, sensors):
            labels = '{node="%s", gpu="%s", uuid="%s"}' % (node, gpu[0], gpu[1])
            total = wait_for("%s GPU %s memory" % (node, gpu[0]),
                             lambda: query(head, "gpulab_gpu_memory_total_bytes" + labels), 30)
            assert float(total[0]["value"][1]) == int(gpu[6]) * MIB
            assert float(query(head, "gpulab_gpu_power_watts" + labels)[0]["value"][1]) == float(sensor[1])
            assert float(query(head, "gpulab_gpu_temperature_celsius" + labels)[0]["value"][1]) == float(sensor[2])
            assert float(query(head, "gpulab_gpu_clock_sm_hertz" + labels)[0]["value"][1]) == float(sensor[3]) * 1e6


def test_gpu_memory_per_process_is_the_fake_nvidia_smis(head, consumer):
    promql = 'gpulab_gpu_process_memory_used_bytes{node="node-b", uuid="%s", pid="%s"}' % (consumer["uuid"], consumer["pid"])
    found = wait_for("the consumer's memory", lambda: query(head, promql), 30)
    assert [float(item["value"][1]) for item in found] == [CONSUMER_MIB * MIB]


def test_the_last_benchmarks_headline_is_exported(head):
    found = wait_for("gpulab_bench_decode_tok_s", lambda: query(head, "gpulab_bench_decode_tok_s"), 30)
    assert by_node(found).keys() == {"node-a"} and by_node(found)["node-a"] > 0


def test_every_dashboard_panel_returns_a_series(head, consumer):
    empty = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                if any(name in target["expr"] for name in OTHER_ENGINE_METRICS):
                    continue
                # a series a scrape or two away (the consumer's) gets a few intervals
                if not wait_for_or_none(lambda: query(head, target["expr"]), 20):
                    empty.append("%s: %s: %s" % (path.name, panel["title"], target["expr"]))
    assert empty == []


def test_the_benchmark_report_holds_prometheus_series_beside_its_samplers(tmp_path):
    # The scenario's inventory leaves gpulab_monitoring_enabled off (converge.yml runs the monitoring
    # play itself); bench.yml with it on asks Prometheus, every scrape interval, for the run's minutes.
    reports = tmp_path / "reports"
    run = run_on_lab(tmp_path / "bench", "playbooks/bench.yml", extravars=dict(
        BENCH_RUN, bench_report_dir=str(reports), gpulab_monitoring_enabled=True,
        bench_prometheus_step_s=lab_settings()["monitoring_scrape_interval_s"]))
    assert run.status == "successful", run.failures
    (report_json,) = list(reports.glob("*/report.json"))
    section = json.loads(report_json.read_text())["prometheus"]
    assert section["errors"] == [] and section["source"] == "http://127.0.0.1:9090 on node-a"
    rows = dict(((row["node"], row["gpu"]), row) for row in section["gpus"])
    expected = {}
    for node in NODES:
        host = lab_host(node)
        # the fake's live answer: a consumer of an earlier test is in its memory.used, as in Prometheus's
        gpus = [line.split(", ") for line in host.check_output(
            "nvidia-smi --query-gpu=%s --format=csv,noheader,nounits" % GPU_FIELDS).splitlines()]
        sensors = [line.split(", ") for line in host.check_output("cat %s/query-gpu-sensors.csv" % SMI_DIR).splitlines()]
        for gpu, sensor in zip(gpus, sensors):
            expected[(node, gpu[0])] = {"memory_peak": float(gpu[7]), "power_peak": float(sensor[1]),
                                        "utilisation_peak": float(gpu[9])}
    assert sorted(rows) == sorted(expected)
    for key, figures in expected.items():
        row = rows[key]
        assert row["points"] >= 1, row
        assert dict((name, row[name]) for name in figures) == pytest.approx(figures, abs=0.01), key
        # the report's own sampler read the same GPU through the same query: the two agree
        assert row["sampler"] is not None and row["sampler"]["memory_peak"] == figures["memory_peak"], row
    text = (report_json.parent / "report.md").read_text()
    assert "## From Prometheus" in text and "Prometheus did not give a series" not in text


def test_worker_down_fires_and_resolves_and_status_says_so(head, worker, tmp_path):
    settings = lab_settings()
    # From the stop: the collector sees the port closed (its interval), Prometheus scrapes it and
    # evaluates the rule (two intervals), the rule's for, and the evaluation that fires it.
    bound = (seconds(settings["monitoring_alert_down_for"]) + settings["monitoring_collector_interval_s"]
             + 2 * settings["monitoring_scrape_interval_s"] + settings["monitoring_evaluation_interval_s"])
    alert = 'ALERTS{alertname="GpulabWorkerDown", node="node-b", alertstate="%s"}'
    assert query(head, alert % "firing") == []
    began = time.monotonic()
    worker.check_output("systemctl stop %s" % RPC_UNIT)
    try:
        wait_for("GpulabWorkerDown firing", lambda: query(head, alert % "firing"), bound + 30)
        fired = time.monotonic() - began
        status = run_on_lab(tmp_path / "status", "playbooks/status.yml",
                            cmdline="--limit node-a -e gpulab_monitoring_enabled=true")
    finally:
        worker.check_output("systemctl start %s" % RPC_UNIT)
    began = time.monotonic()
    wait_for("GpulabWorkerDown resolved",
             lambda: not query(head, 'ALERTS{alertname="GpulabWorkerDown", node="node-b"}'), bound + 30)
    resolved = time.monotonic() - began
    assert fired <= bound, "fired after %.0f s, bound %d s" % (fired, bound)
    # status.yml, while it fired: where Prometheus is, the tunnel to it, the alert
    assert status.status == "successful", status.failures
    (shown,) = [e["event_data"]["res"]["msg"] for e in status.events if e.get("event") == "runner_on_ok"
                and e["event_data"].get("task") == "Print where Prometheus is, the tunnel that reaches it and the alerts firing"]
    assert shown["prometheus"] == "http://127.0.0.1:9090 on node-a" and shown["answers"] is True
    assert shown["reach_it"].startswith("ssh -N -L 9090:127.0.0.1:9090 ")
    assert [line for line in shown["firing"] if line.startswith("firing GpulabWorkerDown node-b ")], shown
    # the head heals by itself once the worker is back; the tests after this one need it serving
    wait_for("the head serving again", lambda: head.run("curl -sf --max-time 5 http://127.0.0.1:8080/health").rc == 0, 180)
    assert resolved <= bound, "resolved after %.0f s, bound %d s" % (resolved, bound)
