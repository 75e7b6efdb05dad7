"""Role llama_cpp_distribute ships the build host's binaries over the fabric: two local nodes,
the build host serving on loopback, the peer fetching with model_fetch. The build arrives and is
current, the file server is stopped and the tarballs are gone, a second run changes nothing, a dry
run changes nothing, and a corrupted tarball is refused before anything is unpacked."""

import hashlib
import json
import os
import platform
import socket

import pytest
from playbook_runner import local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi

BUILD_ID = "0123456789ab"
BINARIES = {"llama-server": b"#!/bin/sh\necho server\n", "ggml-rpc-server": b"#!/bin/sh\necho rpc\n"}
FETCH_TASK = "Fetch the tarball and check its sha256 before it gets its name"


def glibc():
    return os.confstr("CS_GNU_LIBC_VERSION").split()[1]


def fake_build(install):
    """A CPU build as llama_cpp_build leaves it: <install>/<id>/ with BUILD_INFO.json, and current."""
    build = install / BUILD_ID
    (build / "bin").mkdir(parents=True)
    for name, content in BINARIES.items():
        (build / "bin" / name).write_bytes(content)
        (build / "bin" / name).chmod(0o755)
    info = {"managed_by": "gpulab.inference", "build_id": BUILD_ID, "source": {"kind": "archive", "id": "archive:sha256:00"},
            "cpu_arch": platform.machine(), "glibc_version": glibc(), "cuda": False, "nvcc_version": None,
            "cuda_architectures": [], "cmake_options": {}, "compiler": "gnu 12.2.0", "rpc_server_binary": "ggml-rpc-server",
            "binaries": dict((name, hashlib.sha256(content).hexdigest()) for name, content in BINARIES.items())}
    (build / "BUILD_INFO.json").write_text(json.dumps(info))
    (install / "current").symlink_to(BUILD_ID)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture()
def lab(tmp_path):
    """node-a (build host, head) with a build, node-b without; both reach 127.0.0.1 as their fabric."""
    fake_build(tmp_path / "a" / "install")
    (tmp_path / "b" / "install").mkdir(parents=True)
    inventory_file = tmp_path / "gpu-inventory.json"
    inventory_file.write_text(json.dumps(nvidia_smi.inventory_snapshot([], {})))
    common = dict(gpulab_fabric_address="127.0.0.1", llama_cpp_distribute_remote_dir=str(tmp_path / "dist"),
                  llama_cpp_distribute_controller_cache=str(tmp_path / "controller-cache"),
                  llama_cpp_nvidia_smi_path=str(tmp_path / "no-nvidia-smi"), gpulab_gpu_inventory_file=str(inventory_file),
                  gpulab_bin_dir=str(tmp_path / "bin"), llama_cpp_distribute_serve_port=free_port())
    hosts = {"node-a": local_host(llama_cpp_install_dir=str(tmp_path / "a" / "install"), **common),
             "node-b": local_host(llama_cpp_install_dir=str(tmp_path / "b" / "install"), **common)}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts, "children": {
        "inference_head": {"hosts": {"node-a": {}}}}}}}}
    playbook = tmp_path / "distribute.yml"
    playbook.write_text("- hosts: gpu_nodes\n  gather_facts: false\n  roles:\n    - gpulab.inference.llama_cpp_distribute\n")
    pid_file = tmp_path / "serve.pid"

    def run(name, cmdline=None):
        return run_in(tmp_path / name, str(playbook), inventory, cmdline=cmdline,
                      extravars={"__llama_cpp_distribute_serve_pid_file": str(pid_file)})

    run.tmp = tmp_path
    run.pid_file = pid_file
    run.port = common["llama_cpp_distribute_serve_port"]
    return run


def served(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_peer_fetches_the_build_over_the_fabric_and_a_second_run_changes_nothing(lab):
    first = lab("first")
    assert first.status == "successful", first.failures
    (fetched,) = first.ok_results(FETCH_TASK)
    assert fetched["files"][0]["name"] == BUILD_ID + ".tar.gz"
    assert fetched["fetched_bytes"] == fetched["files"][0]["size_bytes"] > 0
    received = lab.tmp / "b" / "install"
    assert os.readlink(received / "current") == BUILD_ID
    for name, content in BINARIES.items():
        assert (received / BUILD_ID / "bin" / name).read_bytes() == content
    assert sorted(os.listdir(lab.tmp / "dist")) == []
    assert not (lab.tmp / "controller-cache").exists()
    assert not lab.pid_file.exists()
    assert not served(lab.port)
    second = lab("second")
    assert second.status == "successful", second.failures
    assert second.changed_tasks() == []
    assert second.ok_results(FETCH_TASK) == []


def test_a_dry_run_reports_the_copy_and_makes_none(lab):
    run = lab("check", cmdline="--check")
    assert run.status == "successful", run.failures
    assert ("node-b", "Report the copy a real run would make") in run.changed_tasks()
    assert os.listdir(lab.tmp / "b" / "install") == []
    assert not (lab.tmp / "dist").exists()


def test_a_corrupted_tarball_is_refused_before_anything_is_unpacked(lab):
    dist = lab.tmp / "dist"
    dist.mkdir()
    # What an interrupted fetch of another tarball left: the fetch resumes after it, and the
    # whole then has the wrong sha256.
    (dist / (BUILD_ID + ".tar.gz.part")).write_bytes(b"\x1f\x8b not this build")
    run = lab("corrupt")
    assert run.status == "failed"
    (failure,) = run.failures
    assert failure[:2] == ("node-b", FETCH_TASK)
    assert "%s.tar.gz has sha256" % BUILD_ID in failure[2]
    assert os.listdir(lab.tmp / "b" / "install") == []
    # The wrong .part is gone; what is left is the build host's tarball (the two nodes share this
    # directory here), kept for the next run.
    assert sorted(os.listdir(dist)) == [BUILD_ID + ".tar.gz"]
    assert not lab.pid_file.exists()
    assert not served(lab.port)
    again = lab("again")
    assert again.status == "successful", again.failures
    assert os.readlink(lab.tmp / "b" / "install" / "current") == BUILD_ID
    assert sorted(os.listdir(dist)) == []
