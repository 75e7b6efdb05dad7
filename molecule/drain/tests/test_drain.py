"""After drain -> serve -> restore, a failed deployment and a resumed drain: every node runs
and enables exactly the units it did before the first drain."""

import pytest

CONSUMERS = {
    # unit: enabled before the drain
    "whisper-asr.service": "enabled",
    "gpu-embed.service": "enabled",
    "gpu-notebook.service": "disabled",
}


def snapshot(host):
    return sorted(host.check_output("gpulab-test-unit-snapshot").splitlines())


def test_active_and_enabled_units_are_as_before(host):
    before = host.file("/var/lib/gpulab-drain-test/before.txt").content_string.splitlines()
    assert "active gpu-notebook.service" in before
    assert snapshot(host) == before


@pytest.mark.parametrize("unit, enabled", sorted(CONSUMERS.items()))
def test_consumers_run_with_their_enabled_state(host, unit, enabled):
    assert host.run("systemctl is-active %s" % unit).stdout.strip() == "active"
    assert host.run("systemctl is-enabled %s" % unit).stdout.strip() == enabled


def test_inference_units_are_stopped_and_still_enabled(host):
    unit = "gpulab-llama-server.service" if host.check_output("hostname") == "node-a" else "gpulab-rpc-server@0.service"
    assert host.run("systemctl is-active %s" % unit).stdout.strip() == "inactive"
    assert host.run("systemctl is-enabled %s" % unit).stdout.strip() == "enabled"


def test_no_state_file_is_left(host):
    assert not host.file("/var/lib/gpulab/drain-state.json").exists


def test_fake_nvidia_smi_reports_the_restored_consumers(host):
    apps = host.check_output(
        "nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv,noheader,nounits")
    assert sorted(int(line.rsplit(",", 1)[1]) for line in apps.splitlines()) == [2048, 4096, 6144]
