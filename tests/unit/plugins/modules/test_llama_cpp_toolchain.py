# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpulab.inference.llama_cpp_toolchain: what it runs, what it reports, compatibility verdicts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpulab.inference.plugins.modules import llama_cpp_toolchain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llama_cpp"

BINARIES = {
    "c++": "/usr/bin/c++",
    "cmake": "/usr/bin/cmake",
    "ninja": "/usr/bin/ninja",
    "ccache": "/usr/bin/ccache",
    "nvcc": "/usr/local/cuda/bin/nvcc",
    "nvidia-smi": "/usr/bin/nvidia-smi",
}

OUTPUTS = {
    ("/usr/bin/c++", "--version"): (FIXTURES / "cxx-gnu-debian12.txt").read_text(),
    ("/usr/bin/cmake", "--version"): (FIXTURES / "cmake-debian12.txt").read_text(),
    ("/usr/local/cuda/bin/nvcc", "--version"): (FIXTURES / "nvcc-12.8.txt").read_text(),
    ("/usr/bin/nvidia-smi", "--version"): (FIXTURES / "nvidia-smi-version.txt").read_text(),
}


def run_module(args, capsys, binaries=None, outputs=None):
    binaries = BINARIES if binaries is None else binaries
    outputs = OUTPUTS if outputs is None else outputs
    calls = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return binaries.get(name)

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        text = outputs.get(tuple(argv))
        if isinstance(text, tuple):
            return text  # (rc, stdout, stderr) as given
        return (0, text, "") if text is not None else (1, "", "not found")

    with patch_module_args(args), \
            mock.patch.object(AnsibleModule, "get_bin_path", get_bin_path), \
            mock.patch.object(AnsibleModule, "run_command", run_command), \
            mock.patch.object(llama_cpp_toolchain.platform, "machine", return_value="x86_64"), \
            mock.patch.object(llama_cpp_toolchain.os, "confstr", return_value="glibc 2.36"), \
            mock.patch.object(llama_cpp_toolchain.glob, "glob", return_value=[]), \
            mock.patch.object(llama_cpp_toolchain.os, "sched_getaffinity", return_value={0, 1, 2, 3}):
        with pytest.raises(SystemExit) as exit_info:
            llama_cpp_toolchain.main()
    return exit_info.value.code != 0, json.loads(capsys.readouterr().out), calls


def test_reports_full_toolchain(tmp_path, capsys):
    failed, result, calls = run_module({"install_dir": str(tmp_path)}, capsys)
    assert not failed, result
    assert result["changed"] is False
    toolchain = result["toolchain"]
    assert toolchain == {
        "cpu_arch": "x86_64",
        "cpu_count": 4,
        "glibc_version": "2.36",
        "compiler": {"id": "gnu", "version": "12.2.0", "path": "/usr/bin/c++"},
        "cmake_version": "3.25.1",
        "ninja_path": "/usr/bin/ninja",
        "ccache_path": "/usr/bin/ccache",
        "nvcc_path": "/usr/local/cuda/bin/nvcc",
        "nvcc_version": "12.8.93",
        "libibverbs_present": False,
        "driver_version": "580.159.04",
        "driver_cuda_version": "13.0",
        "installed_build_id": None,
    }
    # Registered, never a fact: plays hand data over through files (docs/CONTRACTS.md).
    assert "ansible_facts" not in result
    assert result["compatible"] is None
    assert sorted(calls) == [
        ["/usr/bin/c++", "--version"],
        ["/usr/bin/cmake", "--version"],
        ["/usr/bin/nvidia-smi", "--version"],
        ["/usr/local/cuda/bin/nvcc", "--version"],
    ]


def test_cpu_node_without_cuda_tools(tmp_path, capsys):
    binaries = {"c++": "/usr/bin/c++", "cmake": "/usr/bin/cmake"}
    failed, result, calls = run_module({"install_dir": str(tmp_path)}, capsys, binaries=binaries)
    assert not failed, result
    assert result["toolchain"]["nvcc_path"] is None
    assert result["toolchain"]["nvcc_version"] is None
    assert result["toolchain"]["driver_cuda_version"] is None
    assert result["toolchain"]["ccache_path"] is None
    assert ["/usr/local/cuda/bin/nvcc", "--version"] not in calls


def test_falls_back_to_the_plain_banner_for_old_drivers(tmp_path, capsys):
    outputs = dict(OUTPUTS)
    del outputs[("/usr/bin/nvidia-smi", "--version")]
    outputs[("/usr/bin/nvidia-smi",)] = (FIXTURES / "nvidia-smi-plain-h200.txt").read_text()
    failed, result, calls = run_module({"install_dir": str(tmp_path)}, capsys, outputs=outputs)
    assert not failed, result
    assert result["toolchain"]["driver_cuda_version"] == "13.0"
    assert ["/usr/bin/nvidia-smi"] in calls


def test_reads_installed_build_id(tmp_path, capsys):
    build = tmp_path / "0123456789ab"
    build.mkdir()
    (build / "BUILD_INFO.json").write_text(json.dumps({"build_id": "0123456789ab"}))
    (tmp_path / "current").symlink_to("0123456789ab")
    failed, result = run_module({"install_dir": str(tmp_path)}, capsys)[:2]
    assert not failed, result
    assert result["toolchain"]["installed_build_id"] == "0123456789ab"


@pytest.mark.parametrize("content", [b"[]", b'"0123456789ab"', b'{"build_id": 123456789012}',
                                     b'{"build_id": "0123456789ab\\n"}', b'{"build_id": "\xff"}', b"\xff\xfe", b"{"])
def test_a_damaged_installed_build_info_counts_as_no_build(tmp_path, capsys, content):
    build = tmp_path / "0123456789ab"
    build.mkdir()
    (build / "BUILD_INFO.json").write_bytes(content)
    (tmp_path / "current").symlink_to("0123456789ab")
    failed, result = run_module({"install_dir": str(tmp_path)}, capsys)[:2]
    assert not failed, result
    assert result["toolchain"]["installed_build_id"] is None


def test_every_command_is_bounded_and_a_hanging_nvidia_smi_is_named(tmp_path, capsys):
    bound = ("/usr/bin/timeout", "--kill-after=5s", "30s")
    outputs = dict((bound + argv, text) for argv, text in OUTPUTS.items())
    binaries = dict(BINARIES, timeout="/usr/bin/timeout")
    failed, result, calls = run_module({"install_dir": str(tmp_path)}, capsys, binaries=binaries, outputs=outputs)
    assert not failed, result
    assert all(tuple(call[:3]) == bound for call in calls)
    hanging = dict(outputs)
    hanging[bound + ("/usr/bin/nvidia-smi", "--version")] = (124, "", "")
    failed, result = run_module({"install_dir": str(tmp_path)}, capsys, binaries=binaries, outputs=hanging)[:2]
    assert failed
    assert result["msg"].startswith("/usr/bin/nvidia-smi --version did not answer within 30 s")


BUILD_INFO = {"build_id": "0123456789ab", "cpu_arch": "x86_64", "glibc_version": "2.36", "cuda": True,
              "nvcc_version": "12.8.93", "cuda_architectures": ["120a-real"]}


def test_compatible_peer(tmp_path, capsys):
    args = {"install_dir": str(tmp_path), "build_info": BUILD_INFO, "gpus": [{"compute_cap": "12.0", "cuda_arch": "120"}]}
    failed, result = run_module(args, capsys)[:2]
    assert not failed, result
    assert result["compatible"] is True
    assert result["problems"] == []


def test_incompatible_peer_says_why(tmp_path, capsys):
    args = {"install_dir": str(tmp_path), "build_info": BUILD_INFO, "gpus": [{"compute_cap": "9.0", "cuda_arch": "90"}]}
    failed, result = run_module(args, capsys)[:2]
    assert not failed, result
    assert result["compatible"] is False
    assert result["problems"] == ["GPU (compute capability 9.0) is not among the build's architectures 120a-real"]
    assert result["run_problems"] == result["problems"]
    assert result["sharing_problems"] == []


def test_other_cpu_is_a_sharing_problem(tmp_path, capsys):
    args = {"install_dir": str(tmp_path), "build_info": dict(BUILD_INFO, cpu_arch="aarch64"), "host": "node-b"}
    failed, result = run_module(args, capsys)[:2]
    assert not failed, result
    assert result["sharing_problems"] == ["cpu arch x86_64 differs from the build's aarch64"]
    assert result["run_problems"] == []


def test_node_survey_for_the_build_plan(tmp_path, capsys):
    gpus = [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "cuda_arch": "90", "memory_total_mib": 143771}]
    args = {"install_dir": str(tmp_path), "host": "node-c", "gpus": gpus, "gpu_driver": {"mismatch": False}}
    failed, result = run_module(args, capsys)[:2]
    assert not failed, result
    assert result["node"] == {
        "host": "node-c", "cpu_arch": "x86_64", "glibc_version": "2.36", "driver_version": "580.159.04",
        "driver_cuda_version": "13.0", "gpu_driver": {"mismatch": False}, "forward_compat": False,
        "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "cuda_arch": "90"}]}
    assert result["compatible"] is None


@pytest.mark.parametrize("mode, message", [(0o644, "is not executable"), (None, "does not exist")])
def test_bad_nvcc_path_names_the_option(tmp_path, capsys, mode, message):
    nvcc = tmp_path / "nvcc"
    if mode is not None:
        nvcc.write_text("#!/bin/sh\n")
        nvcc.chmod(mode)
    failed, result = run_module({"install_dir": str(tmp_path), "nvcc_path": str(nvcc)}, capsys)[:2]
    assert failed
    assert result["msg"].startswith("nvcc_path (llama_cpp_nvcc_path) %s %s" % (nvcc, message))
    assert "Traceback" not in result["msg"]


def inventory_file(tmp_path, gpus):
    """gpu-inventory.json as gpu_preflight writes it (module gpu_inventory's record)."""
    path = tmp_path / "gpu-inventory.json"
    path.write_text(json.dumps({"managed_by": "gpulab.inference", "driver_version": "580.159.04",
                                "kernel_module_version": "580.159.04", "cuda_version": "13.0",
                                "gpu_count": len(gpus), "gpus": gpus}))
    return str(path)


def test_the_gpus_of_the_inventory_file_in_the_same_run(tmp_path, capsys):
    gpu = {"index": 0, "uuid": "GPU-1", "name": "NVIDIA H200", "pci_bus_id": "00000000:00:06.0", "compute_cap": "9.0",
           "cuda_arch": "90", "memory_total_mib": 143771}
    args = {"install_dir": str(tmp_path), "build_info": BUILD_INFO, "gpu_inventory": {"path": inventory_file(tmp_path, [gpu])}}
    failed, result = run_module(args, capsys)[:2]
    assert not failed, result
    assert result["node"]["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "cuda_arch": "90"}]
    # the driver as the preflight recorded it, as module gpu_inventory returns it
    assert result["node"]["gpu_driver"] == {"driver_version": "580.159.04", "kernel_module_version": "580.159.04",
                                            "cuda_version": "13.0"}
    assert result["run_problems"] == ["GPU NVIDIA H200 (compute capability 9.0) is not among the build's architectures 120a-real"]


def test_a_missing_inventory_file_is_named(tmp_path, capsys):
    args = {"install_dir": str(tmp_path), "gpu_inventory": {"path": str(tmp_path / "gpu-inventory.json")}}
    failed, result = run_module(args, capsys)[:2]
    assert failed
    assert result["msg"].startswith("%s is missing: role gpulab.inference.gpu_preflight writes it" % (tmp_path / "gpu-inventory.json"))
