"""llama_cpp_build through playbooks/build.yml: each bad input stops the play in validation,
with a message naming the offending value, before anything is unpacked, built or installed."""

import json
import tarfile

import pytest
from playbook_runner import LAB_FILES, local_host

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi

FAKE_NVCC = str(LAB_FILES / "fake-nvcc")
PLAN_TASK = "Check the CUDA, architecture, RDMA and retention choices against the toolkit and every node"
TOOLCHAIN_TASK = "Report the build host's toolchain"


def tiny_archive(tmp_path):
    """A tarball shaped like a llama.cpp tree but without the RPC server target.

    Validation never reads it; should a regression let a case past validation, the role would
    stop at "no RPC server target" instead of building (and a git source would reach the internet).
    """
    tree = tmp_path / "tree" / "llama.cpp"
    tree.mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(llama.cpp C CXX)\n")
    archive = tmp_path / "llama.cpp-tiny.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="llama.cpp")
    return archive


def cpu_inventory(tmp_path):
    path = tmp_path / "cpu-gpu-inventory.json"
    path.write_text(json.dumps(nvidia_smi.inventory_snapshot([], {})))
    return str(path)


def build_inventory(tmp_path, **overrides):
    """One local node, head and only GPU node, whose every build path lies under tmp_path."""
    hostvars = local_host(
        llama_cpp_source="archive",
        llama_cpp_archive_src=str(tiny_archive(tmp_path)),
        llama_cpp_install_dir=str(tmp_path / "install"),
        llama_cpp_work_dir=str(tmp_path / "work"),
        llama_cpp_ccache_dir=str(tmp_path / "ccache"),
        llama_cpp_distribute_controller_cache=str(tmp_path / "controller-cache"),
        llama_cpp_distribute_remote_dir=str(tmp_path / "dist"),
        llama_cpp_rpc_rdma="off",
        # CPU unless a test says otherwise: the controller may have a CUDA toolkit of its own.
        llama_cpp_cuda="off",
        llama_cpp_nvidia_smi_path=str(tmp_path / "no-nvidia-smi"),
        # The build plays as deploy.yml runs them, after its preflight: the checks under test are
        # llama_cpp_build's own (the preflight would stop a driver mismatch first).
        gpulab_build_preflight=False,
        # The gpu-inventory.json that preflight writes on a CPU node.
        gpulab_gpu_inventory_file=cpu_inventory(tmp_path),
    )
    hostvars.update(overrides)
    return {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": hostvars}},
    }}}}}


def assert_stopped_before_any_change(result, tmp_path, task, *fragments, in_validate_yml=True):
    """The play failed once, in the role's validation, naming every fragment, and left nothing behind."""
    assert result.status == "failed", result.failures
    assert len(result.failures) == 1, result.failures
    failed = result.failed_events()[0]
    assert (failed["host"], failed["role"], failed["task"]) == ("node-a", "llama_cpp_build", task)
    if in_validate_yml:
        assert failed["task_path"].split(":")[0].endswith("roles/llama_cpp_build/tasks/validate.yml")
    msg = failed["res"]["msg"]
    for fragment in fragments:
        assert fragment in msg, msg
    assert result.changed_tasks() == []
    left = [name for name in ("install", "work", "ccache", "controller-cache", "dist") if (tmp_path / name).exists()]
    assert left == []


def test_unknown_source_kind_is_refused_by_the_argument_spec(run_playbook, tmp_path):
    result = run_playbook("playbooks/build.yml", build_inventory(tmp_path, llama_cpp_source="svn"))
    assert_stopped_before_any_change(
        result, tmp_path,
        "Validating arguments against arg spec 'main' - "
        "Build llama.cpp (CUDA + RPC) once per fingerprint and install it under its build id",
        "llama_cpp_source", "svn", "git, archive", in_validate_yml=False)


def test_missing_archive_is_named(run_playbook, tmp_path):
    missing = tmp_path / "missing.tar.gz"
    result = run_playbook("playbooks/build.yml", build_inventory(tmp_path, llama_cpp_archive_src=str(missing)))
    assert_stopped_before_any_change(
        result, tmp_path, "Stop when the archive is missing",
        "llama_cpp_archive_src %s (on the controller)" % missing, "is not a file")


@pytest.mark.parametrize("make, message", [
    (None, "does not exist"),
    (0o644, "is not executable"),
])
def test_bad_nvcc_path_is_named(run_playbook, tmp_path, make, message):
    nvcc = tmp_path / "nvcc"
    if make is not None:
        nvcc.write_text("#!/bin/sh\n")
        nvcc.chmod(make)
    result = run_playbook("playbooks/build.yml", build_inventory(tmp_path, llama_cpp_nvcc_path=str(nvcc)))
    assert_stopped_before_any_change(
        result, tmp_path, TOOLCHAIN_TASK, "nvcc_path (llama_cpp_nvcc_path) %s %s" % (nvcc, message))
    assert "Traceback" not in result.failures[0][2]


@pytest.mark.parametrize("architectures, bad", [(["90", "12.0"], "'12.0'"), (["sm_90", "120"], "'sm_90'")])
def test_architecture_typo_is_named(run_playbook, tmp_path, architectures, bad):
    # nvcc is present (the lab's test double), so the architecture list is what stops the play.
    version_file = tmp_path / "nvcc-version"
    version_file.write_text("12.8.93\n")
    inventory = build_inventory(
        tmp_path, llama_cpp_cuda="on", llama_cpp_nvcc_path=FAKE_NVCC, llama_cpp_cuda_architectures=architectures)
    result = run_playbook("playbooks/build.yml", inventory, envvars={"GPULAB_FAKE_NVCC_VERSION_FILE": str(version_file)})
    assert_stopped_before_any_change(
        result, tmp_path, PLAN_TASK, "llama_cpp_cuda_architectures has invalid entries %s:" % bad, "120")
    good = [a for a in architectures if "'%s'" % a != bad]
    assert "'%s'" % good[0] not in result.failures[0][2]
