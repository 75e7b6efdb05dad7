"""playbooks/build.yml refuses, before any change, a CUDA build that cannot work: a toolkit too old
for a node's GPU, a driver older than the toolkit, a driver upgraded without a reboot, nvcc without
a visible GPU. `llama_cpp_cuda: auto` never turns these into a CPU build.

The node's GPUs and driver come from the lab's fake nvidia-smi (a test double replaying captured
output, molecule/lab/files/nvidia-smi/<profile>/), the toolkit from the lab's fake nvcc."""

import json
import shutil

import pytest
from playbook_runner import LAB_FILES

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi
from test_bad_input_build import PLAN_TASK, assert_stopped_before_any_change, build_inventory

FAKE_NVCC = str(LAB_FILES / "fake-nvcc")
FAKE_SMI = str(LAB_FILES / "fake-nvidia-smi")
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def cuda_node(tmp_path, toolkit, profile="rtx-pro-6000-x2", driver=None, cuda_version=None, mismatch=None, **overrides):
    """Inventory and environment of one node with the given toolkit and GPU profile.

    driver/cuda_version rewrite what the profile's nvidia-smi reports (an older or newer driver);
    mismatch makes every nvidia-smi call fail as after a driver upgrade without a reboot."""
    smi_dir = tmp_path / "fake-nvidia-smi"
    shutil.copytree(LAB_FILES / "nvidia-smi" / profile, smi_dir)
    if driver:
        old_driver = (smi_dir / "query-gpu.csv").read_text().split(",")[4].strip()
        for name in ("query-gpu.csv", "version.txt", "plain.txt", "proc-driver-nvidia-version"):
            path = smi_dir / name
            path.write_text(path.read_text().replace(old_driver, driver))
    if cuda_version:
        version = smi_dir / "version.txt"
        lines = [line if not line.startswith("CUDA Version") else "CUDA Version        : %s" % cuda_version
                 for line in version.read_text().splitlines()]
        version.write_text("\n".join(lines) + "\n")
    if mismatch:
        (smi_dir / "mismatch").write_text(mismatch + "\n")
    nvcc_version = tmp_path / "nvcc-version"
    nvcc_version.write_text(toolkit + "\n")
    settings = dict(
        llama_cpp_cuda="auto",
        llama_cpp_nvcc_path=FAKE_NVCC,
        llama_cpp_nvidia_smi_path=FAKE_SMI,
        llama_cpp_driver_version_file=str(smi_dir / "proc-driver-nvidia-version"),
    )
    settings.update(overrides)
    # The gpu-inventory.json the preflight of deploy.yml's first play wrote (these cases run the
    # build plays without it): the node's GPUs and driver, none where nvidia-smi is not found.
    # After an upgrade without a reboot the userspace driver (mismatch) is not the loaded module's.
    gpus = [] if settings["llama_cpp_nvidia_smi_path"] != FAKE_SMI else nvidia_smi.parse_gpu_query(
        (smi_dir / "query-gpu.csv").read_text())
    module_version = gpus[0]["driver_version"] if gpus else None
    cuda = [line.split(":")[1].strip() for line in (smi_dir / "version.txt").read_text().splitlines()
            if line.startswith("CUDA Version")]
    inventory_file = tmp_path / "gpu-inventory.json"
    inventory_file.write_text(json.dumps(nvidia_smi.inventory_snapshot(gpus, {
        "driver_version": mismatch or module_version, "kernel_module_version": module_version,
        "cuda_version": cuda[0] if gpus else None})))
    settings["gpulab_gpu_inventory_file"] = str(inventory_file)
    env = {"GPULAB_FAKE_NVCC_VERSION_FILE": str(nvcc_version), "GPULAB_FAKE_NVIDIA_SMI_DIR": str(smi_dir)}
    return build_inventory(tmp_path, **settings), env


def run_refused(run_playbook, tmp_path, inventory, env, *fragments):
    result = run_playbook("playbooks/build.yml", inventory, envvars=env)
    assert_stopped_before_any_change(result, tmp_path, PLAN_TASK, *fragments)
    # auto never fell back to a CPU build: nothing was unpacked, built or switched.
    assert not (tmp_path / "install").exists()
    return result


@pytest.mark.parametrize("toolkit", ["12.6.85", "12.4.131"])
def test_blackwell_node_with_an_old_toolkit_is_refused(run_playbook, tmp_path, toolkit):
    inventory, env = cuda_node(tmp_path, toolkit)
    run_refused(run_playbook, tmp_path, inventory, env,
                "%s on node-a (compute capability 12.0) needs CUDA toolkit 12.8 or newer; the toolkit found is %s"
                % (BLACKWELL, toolkit),
                "Upgrade the CUDA toolkit")


def test_driver_older_than_the_toolkit_is_refused(run_playbook, tmp_path):
    # Driver 560 supports CUDA 12.6; the toolkit is 12.8.
    inventory, env = cuda_node(tmp_path, "12.8.93", driver="560.35.03", cuda_version="12.6")
    run_refused(run_playbook, tmp_path, inventory, env,
                "the NVIDIA driver on node-a (560.35.03) supports CUDA 12.6, older than the CUDA toolkit 12.8.93",
                "upgrade the driver on node-a to one that supports CUDA 12.8 (driver branch 570 or newer)")


def test_forward_compat_package_lets_an_older_driver_pass_the_check(run_playbook, tmp_path):
    # With the package declared, the driver check passes; the tiny archive then stops the role
    # at the RPC target, after validation: proof that validation accepted it.
    inventory, env = cuda_node(tmp_path, "12.8.93", driver="560.35.03", cuda_version="12.6",
                               llama_cpp_cuda_forward_compat=True)
    result = run_playbook("playbooks/build.yml", inventory, envvars=env)
    assert result.status == "failed"
    assert "no RPC server target found" in result.failures[0][2], result.failures
    assert not (tmp_path / "install" / "current").exists()


def test_driver_upgraded_without_reboot_is_refused_not_built_for_cpu(run_playbook, tmp_path):
    inventory, env = cuda_node(tmp_path, "12.8.93", mismatch="590.44")
    run_refused(run_playbook, tmp_path, inventory, env,
                "Driver/library version mismatch", "node-a", "reboot")


def test_nvcc_without_a_visible_gpu_is_refused(run_playbook, tmp_path):
    inventory, env = cuda_node(tmp_path, "12.8.93", llama_cpp_nvidia_smi_path=str(tmp_path / "no-nvidia-smi"))
    run_refused(run_playbook, tmp_path, inventory, env,
                "llama_cpp_cuda is 'auto' and nvcc %s is present, but no NVIDIA GPU is visible" % FAKE_NVCC)


def test_h200_with_cuda_12_6_passes_validation(run_playbook, tmp_path):
    # Hopper needs 11.8: validation accepts it (the tiny archive stops the role right after).
    inventory, env = cuda_node(tmp_path, "12.6.85", profile="h200", driver="560.35.03", cuda_version="12.6")
    result = run_playbook("playbooks/build.yml", inventory, envvars=env)
    assert "no RPC server target found" in result.failures[0][2], result.failures


@pytest.mark.parametrize("overrides, fragments", [
    ({"llama_cpp_keep_builds": 1}, ["llama_cpp_keep_builds is 1", "previous one", "2 or more"]),
    ({"llama_cpp_keep_builds": 0}, ["llama_cpp_keep_builds is 0"]),
    ({"llama_cpp_extra_cmake_options": {"GGML CUDA": True}}, ["extra_cmake_options has the option name 'GGML CUDA'"]),
    ({"llama_cpp_extra_cmake_options": {"-DGGML_CUDA": True}}, ["option name '-DGGML_CUDA'"]),
    ({"llama_cpp_cuda_architectures": ["90-real"]}, [BLACKWELL, "is not covered by llama_cpp_cuda_architectures 90-real",
                                                     "add 120a-real"]),
    ({"llama_cpp_cuda_architectures": ["121"]}, ["architecture 121a (compute capability 12.1) needs CUDA toolkit 12.9"]),
])
def test_bad_build_input_is_named(run_playbook, tmp_path, overrides, fragments):
    inventory, env = cuda_node(tmp_path, "12.8.93", **overrides)
    run_refused(run_playbook, tmp_path, inventory, env, *fragments)
