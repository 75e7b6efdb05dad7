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
    assert "value of gpulab_engine must be one of: llama_cpp, vllm, auto, got: vlm" in failure[2], failure
