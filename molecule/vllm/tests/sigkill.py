"""SIGKILL of a unit's main process on the lab's head, and the wait until a new process serves: the
fault-matrix check the vLLM and echo engine tests share (docs/faults.md)."""

import time


def main_pid(host, unit):
    return host.check_output("systemctl show --property=MainPID --value %s" % unit)


def serves_again_after_sigkill(host, unit, health_url, bound_s, serves=lambda: True):
    """Seconds from the SIGKILL of unit's main process until a new one answers health_url and
    serves() holds; AssertionError after bound_s."""
    before = main_pid(host, unit)
    assert before != "0", "%s has no main process to kill" % unit
    killed_at = time.monotonic()
    host.run("kill -KILL %s" % before)
    while time.monotonic() - killed_at < bound_s:
        if main_pid(host, unit) not in ("0", before) and host.run("curl -sf --max-time 2 %s" % health_url).rc == 0 and serves():
            return time.monotonic() - killed_at
        time.sleep(1)
    raise AssertionError("%s did not serve again within %d s of its SIGKILL" % (unit, bound_s))
