"""bench_record: the digest of what a benchmark measured and whether a deploy measures again."""

import copy

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.bench_record import last_run, parse_record, served_identity

# As module service_status returns them on the lab (systemd on the workers, supervisord on the head).
SERVICES = {
    "node-a": [{"name": "gpulab-llama-server", "state": "running", "sub_state": "pid 812, uptime 0:03:10",
                "result": None, "restarts": None, "main_pid": 812, "started": "Wed 2026-12-02 13:02:11 UTC",
                "enabled": "enabled"}],
    "node-b": [{"name": "gpulab-rpc-server@0.service", "state": "active", "sub_state": "running", "result": "success",
                "restarts": 0, "main_pid": 4242, "started": "Wed 2026-12-02 13:01:58 UTC",
                "invocation_id": "0b1f4c7e2a9d4c55b0f3e1d2c3b4a596", "enabled": "enabled"},
               {"name": "gpulab-rpc-guard.service", "state": "active", "sub_state": "running", "result": "success",
                "restarts": 0, "main_pid": 4201, "started": "Wed 2026-12-02 13:01:55 UTC",
                "invocation_id": "7d0e4f1a2b3c4d5e6f708192a3b4c5d6", "enabled": "enabled"}],
}
SETTINGS = {"bench_profile": "short", "bench_concurrency": [1, 2, 4], "bench_max_tokens": 64}


def test_the_same_services_and_settings_give_the_same_digest_in_any_order():
    reordered = {"node-b": list(reversed(SERVICES["node-b"])), "node-a": SERVICES["node-a"]}
    assert served_identity(SERVICES, SETTINGS) == served_identity(reordered, dict(reversed(list(SETTINGS.items()))))
    assert len(served_identity(SERVICES, SETTINGS)) == 64


def test_the_supervisord_start_time_moving_by_a_second_is_no_change():
    moved = copy.deepcopy(SERVICES)
    moved["node-a"][0]["started"] = "Wed 2026-12-02 13:02:12 UTC"
    moved["node-a"][0]["sub_state"] = "pid 812, uptime 0:09:41"
    assert served_identity(moved, SETTINGS) == served_identity(SERVICES, SETTINGS)


@pytest.mark.parametrize("change", [
    lambda s: s["node-a"][0].update(main_pid=913),
    lambda s: s["node-b"][0].update(invocation_id="f" * 32),
    lambda s: s["node-b"][0].update(state="failed", main_pid=None),
    lambda s: s["node-b"].pop(),
    lambda s: s.update({"node-c": [dict(SERVICES["node-b"][0], main_pid=5151)]}),
], ids=["head restarted", "worker restarted under systemd", "worker failed", "service retired", "node added"])
def test_a_restart_or_a_new_service_changes_the_digest(change):
    changed = copy.deepcopy(SERVICES)
    change(changed)
    assert served_identity(changed, SETTINGS) != served_identity(SERVICES, SETTINGS)


def test_a_setting_changes_the_digest():
    assert served_identity(SERVICES, dict(SETTINGS, bench_max_tokens=128)) != served_identity(SERVICES, SETTINGS)


RECORD = {"identity": served_identity(SERVICES, SETTINGS), "report": "/srv/reports/lab-20261202T130500Z/report.md",
          "finished": "2026-12-02T13:05:00Z"}


def test_nothing_changed_leaves_the_report_standing_and_says_how_to_measure_again():
    decision = last_run(RECORD, served_identity(SERVICES, SETTINGS), report_exists=True, again=False)
    assert decision["measure"] is False
    assert "2026-12-02T13:05:00Z" in decision["reason"] and "lab-20261202T130500Z/report.md" in decision["reason"]
    assert "bench_again_unchanged" in decision["reason"] and "playbooks/bench.yml" in decision["reason"]


@pytest.mark.parametrize("record, identity, report_exists, again, reason", [
    ({}, RECORD["identity"], True, False, "no earlier benchmark"),
    (None, RECORD["identity"], True, False, "no earlier benchmark"),
    (RECORD, "0" * 64, True, False, "changed since the benchmark of 2026-12-02T13:05:00Z"),
    (RECORD, RECORD["identity"], False, False, "report of the last benchmark (/srv/reports/lab-20261202T130500Z/report.md) is gone"),
    (RECORD, RECORD["identity"], True, True, "bench_again_unchanged is true"),
], ids=["no record", "unreadable record", "changed", "report removed", "again"])
def test_each_reason_to_measure(record, identity, report_exists, again, reason):
    decision = last_run(record, identity, report_exists, again)
    assert decision["measure"] is True
    assert reason in decision["reason"]


@pytest.mark.parametrize("text, expected", [
    ("", {}), (None, {}), ('{"identity": "ab', {}), ("[1]", {}), ("null", {}),
    ('{"identity": "ab", "report": "r"}', {"identity": "ab", "report": "r"}),
])
def test_a_record_reads_as_a_mapping_or_as_none(text, expected):
    assert parse_record(text) == expected
