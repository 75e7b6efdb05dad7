"""A driver upgrade without a reboot on the deployed lab, with deploy.yml and build.yml run
through ansible-runner.

The userspace driver is new, the kernel module old: nvidia-smi fails with NVML's
"Driver/library version mismatch". Both playbooks refuse before any change and every serving
unit keeps running; build.yml is asked for `llama_cpp_cuda: auto` with the lab's fake nvcc, the
case where a CPU build would otherwise be shipped to GPU nodes. (The upgrade with a reboot is the
end of converge.yml: molecule's idempotence step proves deploy.yml changes nothing after it.)

The GPUs, the driver and nvcc are the lab's test doubles (molecule/lab/files), rewritten in the
containers here and put back afterwards. The file runs after the checks of the deployed state.
"""

import os
import subprocess

import pytest

from lab_playbooks import REPO, run_on_lab

LAB = os.environ.get("GPULAB_LAB_NAME", "gpulab")
NODES = ("node-a", "node-b", "node-c")
SMI_DIR = "/etc/gpulab-fake-nvidia-smi"
NEW_DRIVER = "595.58.03"
FAKE_NVCC = "/usr/local/bin/nvcc"
SAVED = "/var/tmp/gpulab-driver-upgrade-test"


def podman_exec(node, *argv):
    result = subprocess.run(["podman", "exec", "%s-%s" % (LAB, node), *argv],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, (node, argv, result.stdout, result.stderr)
    return result.stdout


def serving_units(node):
    """{unit: InvocationID} of the node's active gpulab units: a restart changes the id."""
    listed = podman_exec(node, "systemctl", "list-units", "gpulab-*", "--state=active", "--plain", "--no-legend")
    units = sorted(line.split()[0] for line in listed.splitlines() if line.strip())
    return {unit: podman_exec(node, "systemctl", "show", "-p", "InvocationID", "--value", unit).strip()
            for unit in units}


def lab_run(tmp_path, name, playbook, **extravars):
    return run_on_lab(tmp_path / name, playbook, extravars=extravars)


def changed_hosts(run):
    return sorted(host for host, count in run.stats.get("changed", {}).items() if count)


@pytest.fixture(scope="module")
def lab():
    """Save every node's fake driver files, give node-a the fake nvcc; put both back afterwards."""
    for node in NODES:
        podman_exec(node, "sh", "-c", 'rm -rf "$1" && mkdir -p "$1" && cp -a "$2"/. "$1"/', "-", SAVED, SMI_DIR)
    podman_exec("node-a", "sh", "-c", 'mkdir -p /etc/gpulab-fake-nvcc && echo 12.8.93 > /etc/gpulab-fake-nvcc/version')
    subprocess.run(["podman", "cp", str(REPO / "molecule" / "lab" / "files" / "fake-nvcc"), "%s-node-a:%s" % (LAB, FAKE_NVCC)],
                   check=True, timeout=60)
    units_before = {node: serving_units(node) for node in NODES}
    assert any(units_before.values()), "no active gpulab unit on the lab: did the converge run?"
    yield units_before
    for node in NODES:
        podman_exec(node, "sh", "-c", 'rm -rf "$2" && mkdir -p "$2" && cp -a "$1"/. "$2"/ && rm -rf "$1"', "-", SAVED, SMI_DIR)
    podman_exec("node-a", "rm", "-rf", FAKE_NVCC, "/etc/gpulab-fake-nvcc")


def test_the_converge_ended_with_the_driver_upgraded_and_rebooted():
    # converge.yml's last play, which the idempotence step ran again with deploy.yml before it
    for node in NODES:
        assert "590.44.01" in podman_exec(node, "cat", "%s/proc-driver-nvidia-version" % SMI_DIR)
        assert "590.44.01" in podman_exec(node, "cat", "%s/query-gpu.csv" % SMI_DIR)


def test_without_a_reboot_both_playbooks_refuse_before_any_change(lab, tmp_path):
    # The userspace driver is new, the loaded kernel module is still the old one.
    podman_exec("node-b", "sh", "-c", 'echo "$1" > "$2/mismatch"', "-", NEW_DRIVER, SMI_DIR)

    deploy = lab_run(tmp_path, "deploy", "playbooks/deploy.yml")
    build = lab_run(tmp_path, "build", "playbooks/build.yml", llama_cpp_cuda="auto", llama_cpp_nvcc_path=FAKE_NVCC)

    assert deploy.status == "failed", deploy.stats
    assert [host for host, _task, _msg in deploy.failures] == ["node-b"], deploy.failures
    message = deploy.failures[0][2]
    assert "node-b: the NVIDIA userspace driver" in message and "Reboot the node" in message, message
    assert changed_hosts(deploy) == [], deploy.changed_tasks()

    # build.yml run on its own starts with the preflight, which refuses as deploy.yml does
    # (llama_cpp_build's own nvidia-smi check: tests/playbooks/test_build_cuda_checks.py).
    assert build.status == "failed", build.stats
    assert [host for host, _task, _msg in build.failures] == ["node-b"], build.failures
    message = build.failures[0][2]
    assert "node-b: the NVIDIA userspace driver" in message and "Reboot the node" in message, message
    assert changed_hosts(build) == [], build.changed_tasks()

    assert {node: serving_units(node) for node in NODES} == lab
