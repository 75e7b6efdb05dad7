"""bench_last_run: the record's text parsed, its report looked for on the controller, and the decision of
module_utils/bench_record.py returned with the digest to record."""

import json

from ansible_collections.gpulab.inference.plugins.filter.bench_last_run import FilterModule, bench_last_run
from ansible_collections.gpulab.inference.plugins.module_utils.bench_record import served_identity

SERVICES = {"node-a": [{"name": "gpulab-llama-server", "state": "running", "main_pid": 812}]}
SETTINGS = {"bench_profile": "short"}


def record_text(report):
    return json.dumps({"identity": served_identity(SERVICES, SETTINGS), "report": str(report), "finished": "t"})


def test_first_deploy_measures_and_returns_the_digest_to_record():
    result = bench_last_run("", SERVICES, SETTINGS)
    assert result["measure"] is True
    assert result["identity"] == served_identity(SERVICES, SETTINGS)


def test_the_recorded_digest_with_its_report_leaves_it_standing_unless_asked_again(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("# report\n")
    assert bench_last_run(record_text(report), SERVICES, SETTINGS)["measure"] is False
    assert bench_last_run(record_text(report), SERVICES, SETTINGS, again=True)["measure"] is True


def test_a_report_removed_from_the_controller_measures_again(tmp_path):
    result = bench_last_run(record_text(tmp_path / "gone" / "report.md"), SERVICES, SETTINGS)
    assert result["measure"] is True and "is gone" in result["reason"]


def test_a_half_written_record_measures_again():
    for text in ('{"identity": "ab', "[1, 2]", "null"):
        assert bench_last_run(text, SERVICES, SETTINGS)["measure"] is True


def test_registered_under_its_name():
    assert FilterModule().filters() == {"bench_last_run": bench_last_run}
