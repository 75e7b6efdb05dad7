"""Wrong values on the converged lab, over SSH through ansible-runner: deploy.yml refuses them in its
first play (the preflight), each named as the operator set it, with nothing changed and no drain state
on any node, so no drained service ever waits on a value the roles would refuse later."""

import time

from lab_playbooks import lab_host, run_on_lab

NODES = ("node-a", "node-b", "node-c")
PREFLIGHT = "Preflight checks and GPU facts"


def refused_first(tmp_path, label, extravars):
    began = time.monotonic()
    run = run_on_lab(tmp_path / label, "deploy.yml", extravars=extravars)
    took = time.monotonic() - began
    assert run.status == "failed"
    (failure, *_others) = run.failures
    plays = {e["event_data"].get("play") for e in run.events if e.get("event", "").startswith("runner_on_")}
    assert plays == {PREFLIGHT}, plays
    assert run.changed_tasks() == []
    for name in NODES:
        assert not lab_host(name).file("/var/lib/gpulab/drain-state.json").exists
    # The first play only: a loaded two-core machine takes seconds, the drain would have come minutes later.
    assert took < 120, took
    return failure


def test_null_verbosity_a_keep_list_as_text_and_a_bad_choice_are_refused_together(tmp_path):
    failure = refused_first(tmp_path, "values", {"llama_server_log_verbosity": None, "gpu_drain_keep": "notalist",
                                                 "llama_server_cache_type_k": "q9_9"})
    assert failure[1] == "The serving variables are usable", failure
    message = failure[2]
    assert "llama_server_log_verbosity=null on every node" in message
    assert "gpu_drain_keep='notalist' on every node" in message
    assert "llama_server_cache_type_k='q9_9' on every node" in message


def test_an_unknown_engine_is_refused_before_the_gpu_tables(tmp_path):
    failure = refused_first(tmp_path, "engine", {"gpulab_engine": "vlm"})
    assert "gpulab_engine is 'vlm'; set one of llama_cpp, vllm" in failure[2], failure


def test_a_relative_path_and_nulls_without_a_meaning_are_refused(tmp_path):
    # gpulab_state_dir=relative/dir was taken from the deploy user's home on every node, owned by root
    failure = refused_first(tmp_path, "paths", {"gpulab_state_dir": "relative/dir", "bench_profiles": None,
                                                "gpulab_service_hardening": None})
    assert failure[1] == "The serving variables are usable", failure
    message = failure[2]
    assert "gpulab_state_dir='relative/dir' on every node is a relative path" in message
    assert "bench_profiles=null on every node is null, which role bench gives no meaning" in message
    assert "gpulab_service_hardening=null on every node is null, which role common gives no meaning" in message


def test_a_list_as_text_for_a_path_is_refused(tmp_path):
    # what -e gpulab_state_dir=[1,2] hands over
    failure = refused_first(tmp_path, "list-as-text", {"gpulab_state_dir": "[1,2]"})
    assert "gpulab_state_dir='[1,2]' on every node is text that reads as a list" in failure[2], failure
