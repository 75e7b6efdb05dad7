"""playbooks/status.yml on the deployed lab, under systemd: every node's units with state, start time
and restart count, the build, the model and the endpoints, the last log lines on request."""


from lab_playbooks import run_on_lab


def test_status_playbook_reports_every_node(tmp_path):
    run = run_on_lab(tmp_path / "status", "playbooks/status.yml", cmdline="-e status_log_lines=3")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    shown = {e["event_data"]["host"]: e["event_data"]["res"]["msg"] for e in run.events
             if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Print the node's status"}
    assert sorted(shown) == ["node-a", "node-b", "node-c"]
    head = shown["node-a"]
    assert head["service_manager"] == "systemd"
    (unit,) = [s for s in head["services"] if s["name"] == "gpulab-llama-server.service"]
    assert unit["state"] == "active" and unit["started"] and isinstance(unit["restarts"], int)
    assert len(unit["log"]) == 3
    assert head["model"].endswith(".gguf")
    assert head["endpoints"][0] == "http://127.0.0.1:8080 (llama.cpp, /health 200)"
    assert len({node["build_id"] for node in shown.values()}) == 1
    assert unit["enabled"] == "enabled"
    for worker in ("node-b", "node-c"):
        services = {s["name"]: s for s in shown[worker]["services"]}
        # every unit the collection installs there, the firewall's second line of defence included
        for name in ("gpulab-rpc-server@0.service", "gpulab-rpc-guard.service", "gpulab-rpc-server-firewall.service"):
            assert services[name]["state"] == "active", (worker, services)
            assert services[name]["enabled"] == "enabled", (worker, services[name])
        assert ":50052 (RPC, " in shown[worker]["endpoints"][0]
        # the weight cache the deploy bounded: its directory, the figures and the line that says them
        cache = shown[worker]["rpc_cache"]
        assert cache["enabled"] is True and cache["path"] == "/var/cache/gpulab/rpc/rpc", (worker, cache)
        assert cache["max_bytes"] > 0 and cache["over_bound"] is False, (worker, cache)
        assert cache["size_gib"] == round(cache["size_bytes"] / 2**30, 2), (worker, cache)
        assert cache["summary"] == "%s holds %.2f GiB in %d file%s, bound %.2f GiB" % (
            cache["path"], cache["size_gib"], cache["files"], "" if cache["files"] == 1 else "s", cache["bound_gib"])
