"""The bench step at the end of the deploy: its report on the controller, its traces on the nodes.

The report is the one the converge (deploy.yml with gpulab_bench_enabled) wrote last under
<repository>/reports/<lab name>-<time>/ (bench_report_dir and bench_report_inventory_name as
inventory/demo/group_vars set them). The benchmark ran against the real llama-server on node-a.
"""

import json
import os
import time
from pathlib import Path

import pytest

LAB = os.environ.get("GPULAB_LAB_NAME", "gpulab")
REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
TRACE = "/var/lib/gpulab/bench/gpu-trace.json"
# GPUs of the fake nvidia-smi profiles: node-a rtx-pro-6000-x2, node-b rtx-pro-6000-maxq, node-c h200.
LAB_GPUS = 4
DECODE_AGREEMENT = 0.05


@pytest.fixture(scope="module")
def report_dir():
    # <lab>-<UTC time>, not <lab>-*: the second lane's lab (<lab>-2) writes its reports beside these
    reports = sorted((REPO / "reports").glob("%s-%sT%sZ/report.json" % (LAB, "[0-9]" * 8, "[0-9]" * 6)),
                     key=lambda path: path.stat().st_mtime)
    assert reports, "no report under %s/reports/%s-*: did the converge run the bench step?" % (REPO, LAB)
    return reports[-1].parent


@pytest.fixture(scope="module")
def report(report_dir):
    return json.loads((report_dir / "report.json").read_text())


@pytest.fixture()
def node(host):
    return host.check_output("hostname")


def test_report_has_its_files(report_dir):
    names = sorted(path.name for path in report_dir.iterdir())
    for name in ("report.md", "report.json", "residency.png", "utilisation.png", "throughput.png"):
        assert name in names
        assert (report_dir / name).stat().st_size > 1000 or name.endswith(".json")
    for png in ("residency.png", "utilisation.png", "throughput.png"):
        assert (report_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(n for n in names if n.startswith("trace-")) == ["trace-node-a.json", "trace-node-b.json", "trace-node-c.json"]


def test_benchmark_ran_against_llama_server_without_failures(report):
    bench = report["benchmark"]
    assert bench["engine"] == "llama.cpp"
    assert bench["prompt"]["sizing"] == "tokenizer"
    for level in bench["levels"]:
        assert level["requests_failed"] == 0, level["errors"]
        assert level["output_tokens"] == level["requests"] * bench["request"]["max_tokens"]


def test_decode_agrees_with_llama_server_timings(report):
    for level in report["benchmark"]["levels"]:
        ratio = level["server"]["decode_ratio"]
        assert abs(ratio - 1.0) <= DECODE_AGREEMENT, (
            "concurrency %d: client %.2f tok/s vs llama-server %.2f tok/s (ratio %.4f)"
            % (level["concurrency"], level["decode_tok_s"], level["server"]["decode_tok_s_intervals"], ratio))


def test_the_widest_level_ran_its_requests_side_by_side(report):
    # Throughput is a speed figure (docs/benchmarks.md), and on two shared CPU cores it need not
    # rise with concurrency. What the lab can show is that the level really overlapped its
    # requests in llama-server's parallel slots: the requests' summed durations are several
    # times the level's wall time (one slot would make them equal).
    levels = report["benchmark"]["levels"]
    assert len(levels) >= 2
    widest = levels[-1]
    tokens_per_request = widest["output_tokens"] / widest["requests"]
    request_s = widest["ttft_s"]["mean"] + widest["tpot_s"]["mean"] * (tokens_per_request - 1)
    overlap = widest["requests"] * request_s / widest["wall_s"]
    expected = min(widest["concurrency"], widest["requests"])
    assert overlap >= 0.5 * expected, "concurrency %d: requests overlapped %.2fx (wall %.2f s, request %.2f s)" % (
        widest["concurrency"], overlap, widest["wall_s"], request_s)


def test_report_covers_every_gpu_and_the_build(report, report_dir):
    assert len(report["residency"]["devices"]) == LAB_GPUS
    assert len(report["utilisation"]) == LAB_GPUS
    assert report["build"]["build_id"]
    commands = report["commands"]
    assert any("llama-server" in line and "--rpc" in line for line in commands["node-a"])
    assert all(any("rpc-server" in line for line in commands[worker]) for worker in ("node-b", "node-c"))
    assert "| decode tok/s by llama-server, ratio |" in (report_dir / "report.md").read_text()


def test_sampler_left_its_trace_and_stopped(host, node):
    trace = json.loads(host.file(TRACE).content_string)
    assert trace["samples"], "empty trace on %s" % node
    # "[A]" keeps the shell that runs pgrep, whose command line holds the pattern, from matching.
    # The sampler's async job is finished when the bench step collects it; Ansible's async wrapper
    # around it polls its child every 5 s, so its process may outlive the job by that long.
    deadline = time.monotonic() + 20
    while host.run("pgrep -f '[A]nsiballZ_gpu_sampler'").rc != 1:
        assert time.monotonic() < deadline, "a GPU sampler still runs on %s 20 s after the bench step" % node
        time.sleep(1)
