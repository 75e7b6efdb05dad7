"""playbooks/bench.yml run again on the converged lab, whose head has not changed since: each run
sends fresh prompts (a new seed), so llama-server's prompt cache serves none of them: the server's own
count of cached tokens says so for each run. Sending the second run's prompts again on purpose
(bench_prompt_seed) shows that the cached tokens are really counted, and that a cache hit is visible
in the time to the first token. Two fresh runs are not compared with each other by time: on two
shared cores their prefill differed by 2.0x in one `make test` (821 against 1,647 tok/s, neither
cached), as much as a cache hit would.

Each run is the short profile at concurrency 1 only, with as many prompts as the demo
inventory's llama-server has slots (llama_server_parallel 4: a warm-up and three requests), so
that every prompt of a run still sits in a slot when the control sends it again. The reports go
to a temporary directory, so that test_benchmark.py keeps reading the converge's report.
"""

import json

import pytest

from lab_playbooks import run_on_lab

RUN = {
    "gpulab_bench_profile": "short",
    "bench_concurrency": [1],
    "bench_requests_per_level": 3,
    "bench_warmup_requests": 1,
    "bench_prompt_tokens": 128,
    "bench_max_tokens": 8,
    "bench_request_rates": [],
}
# The chat template's first tokens are the same in every prompt; the prompts are not.
CACHED_FRESH_FRACTION = 0.1


def bench(tmp_path_factory, name, **extra):
    reports = tmp_path_factory.mktemp("reports-" + name)
    run = run_on_lab(tmp_path_factory.mktemp("runner-" + name), "playbooks/bench.yml",
                     extravars=dict(RUN, bench_report_dir=str(reports), **extra))
    assert run.status == "successful", run.failures
    (report_json,) = list(reports.glob("*/report.json"))
    return json.loads(report_json.read_text())["benchmark"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    first = bench(tmp_path_factory, "first")
    second = bench(tmp_path_factory, "second")
    again = bench(tmp_path_factory, "again", bench_prompt_seed=second["prompt"]["seed"])
    return first, second, again


def level_one(benchmark):
    (level,) = benchmark["levels"]
    assert level["concurrency"] == 1 and level["requests_failed"] == 0, level["errors"]
    return level


def test_each_run_draws_its_own_prompts_sized_on_the_served_tokenizer(runs):
    first, second, again = runs
    assert first["prompt"]["seed_source"] == second["prompt"]["seed_source"] == "fresh"
    assert first["prompt"]["seed"] != second["prompt"]["seed"]
    assert (again["prompt"]["seed"], again["prompt"]["seed_source"]) == (second["prompt"]["seed"], "bench_prompt_seed")
    for benchmark in runs:
        assert benchmark["prompt"]["sizing"] == "tokenizer"
        assert benchmark["prompt"]["max_error_tokens"] <= 1, benchmark["prompt"]


def test_fresh_prompts_find_nothing_in_the_prompt_cache(runs):
    for benchmark in runs[:2]:
        level = level_one(benchmark)
        assert level["cached_prompt_tokens"] is not None, "llama-server reported no cached tokens (timings.cache_n)"
        assert level["cached_prompt_fraction"] < CACHED_FRESH_FRACTION, level
        assert not [w for w in benchmark["warnings"] if "prompt cache" in w]


def test_the_same_prompts_again_are_served_from_the_cache_and_counted(runs):
    # the control: what the first two runs avoid is measured when it happens
    level = level_one(runs[2])
    assert level["cached_prompt_fraction"] > 0.5, level
    # The run just before sent the same prompts fresh: served from the cache, the first token comes
    # sooner (issue 37: prefill about 3x faster when whole prompts were cached).
    fresh = level_one(runs[1])
    assert level["ttft_s"]["mean"] < fresh["ttft_s"]["mean"], (level["ttft_s"], fresh["ttft_s"])
    assert [w for w in runs[2]["warnings"] if "prompt cache" in w and "bench_prompt_seed" in w], runs[2]["warnings"]
