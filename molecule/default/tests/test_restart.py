"""Stopping and restarting the head on the deployed lab: the wrapper ends what it started, so
systemd does not wait out TimeoutStopSec (lab containers run under cgroup v1 on the CI machines)
and the unit ends inactive, not failed. The file runs last and leaves the head serving."""

import time

import pytest

from lab_playbooks import lab_host

UNIT = "gpulab-llama-server.service"


@pytest.fixture(scope="module")
def head():
    return lab_host("node-a")


def unit_state(host):
    return dict(line.split("=", 1) for line in host.check_output(
        f"systemctl show --property=ActiveState --property=Result --property=NRestarts {UNIT}").splitlines())


def wait_until_serving(host, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while host.run("curl -sf --max-time 5 http://127.0.0.1:8080/health").rc != 0:
        assert time.monotonic() < deadline, host.run(f"journalctl --no-pager -n 40 -u {UNIT}").stdout
        time.sleep(1)


def test_head_restart_takes_seconds_and_ends_active(head):
    wait_until_serving(head)
    began = time.monotonic()
    head.check_output(f"systemctl restart {UNIT}")
    took = time.monotonic() - began
    assert took < 15, f"systemctl restart took {took:.1f} s"
    assert unit_state(head)["ActiveState"] == "active"
    wait_until_serving(head)


def test_head_stop_ends_inactive_not_failed(head):
    wait_until_serving(head)
    began = time.monotonic()
    try:
        head.check_output(f"systemctl stop {UNIT}")
        took = time.monotonic() - began
        state = unit_state(head)
    finally:
        head.check_output(f"systemctl start {UNIT}")
        wait_until_serving(head)
    assert took < 15, f"systemctl stop took {took:.1f} s"
    assert (state["ActiveState"], state["Result"]) == ("inactive", "success")
