"""llama_cpp_build_record: what it decides and writes, and a table of bad inputs, each refused with a message naming the
option or field, no traceback, nothing written."""

import json
import os
import stat
from unittest import mock

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import atomic_file
from ansible_collections.gpulab.inference.plugins.modules import (
    llama_cpp_build_plan,
    llama_cpp_build_record,
)

from module_harness import ExitJson, FailJson, run_module

TOOLCHAIN = {"cpu_arch": "x86_64", "glibc_version": "2.36", "nvcc_path": "/usr/local/cuda/bin/nvcc",
             "nvcc_version": "12.8.93", "compiler": {"id": "gnu", "version": "12.2.0"}, "libibverbs_present": False}


def plan(args):
    base = {"source_id": "archive:sha256:00", "toolchain": TOOLCHAIN}
    base.update(args)
    return run_module(llama_cpp_build_plan.main, base, {}, None)


# --- llama_cpp_build_record -------------------------------------------------------------------------

RECORD_PLAN = {"build_id": "0123456789ab", "cuda": True, "cuda_architectures": ["90-real", "120a-real"],
               "cmake_options": {"GGML_CUDA": "ON"}, "rpc_rdma": False, "rpc_server_binary": "ggml-rpc-server",
               "fingerprint": {"compiler": "gnu 12.2.0"}}
VERSION_OUT = "version: b0-0c1e570 (build 0, commit 0c1e570)\nbuilt with cc 12.2.0 for x86_64-linux-gnu\n"


def staged(tmp_path, cache="CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120a-real\n"):
    stage = tmp_path / ".staging-0123456789ab"
    (stage / "bin").mkdir(parents=True)
    for name in ("llama-cli", "ggml-rpc-server"):
        (stage / "bin" / name).write_text("binary %s\n" % name)
    tree = tmp_path / "tree"
    tree.mkdir()
    if cache is not None:
        (tree / "CMakeCache.txt").write_text(cache)
    return stage, tree


def record(stage, tree, version_out=VERSION_OUT, **changes):
    args = {"path": str(stage), "build_tree": str(tree), "binaries": ["llama-cli", "ggml-rpc-server"],
            "plan": RECORD_PLAN, "toolchain": TOOLCHAIN, "source_kind": "archive",
            "source_id": "archive:sha256:" + "ab" * 32, "built_on": "node-a"}
    args.update(changes)
    answers = {version_command(stage): (0, "", version_out)}
    return run_module(llama_cpp_build_record.main, args, answers, {"timeout": TIMEOUT})


TIMEOUT = "/usr/bin/timeout"


def version_command(stage):
    return (TIMEOUT, "--kill-after=5s", "60s", str(stage / "bin" / "llama-cli"), "--version")


def test_record_writes_build_info_with_architectures_as_compiled(tmp_path):
    stage, tree = staged(tmp_path, "CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120-real\n")
    run = record(stage, tree)
    assert run.kind is ExitJson, run.result
    info = json.loads((stage / "BUILD_INFO.json").read_text())
    assert info == run.result["build_info"]
    # The cache says 120-real; llama.cpp's CMake compiles it as 120a-real.
    assert info["cuda_architectures"] == ["90-real", "120a-real"]
    assert (info["commit"], info["build_number"]) == ("0c1e570", "0")
    assert info["source"] == {"kind": "archive", "id": "archive:sha256:" + "ab" * 32, "archive_sha256": "ab" * 32}
    assert set(info["binaries"]) == {"llama-cli", "ggml-rpc-server"}
    assert stat.S_IMODE(os.stat(stage / "BUILD_INFO.json").st_mode) == 0o644
    assert [p.name for p in stage.iterdir() if p.name.startswith(".BUILD_INFO")] == []


RECORD_BAD = [
    # (cache, version output, changes, fragments)
    ("CMAKE_CUDA_ARCHITECTURES:STRING=120a-real\n", VERSION_OUT, {}, ["compiled 120a-real but the plan asked for 90-real;120a-real"]),
    (None, VERSION_OUT, {}, ["no CMakeCache.txt in"]),
    ("CMAKE_CUDA_ARCHITECTURES:STRING=native\n", VERSION_OUT, {}, ["CMakeCache.txt", "'native'"]),
    ("CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120a-real\n", "Segmentation fault\n", {}, ["--version printed no 'version: ...' line"]),
    ("CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120a-real\n", VERSION_OUT, {"binaries": ["llama-cli", "llama-server"]},
     ["binaries missing under", "llama-server"]),
]


@pytest.mark.parametrize("cache, version_out, changes, fragments", RECORD_BAD)
def test_record_bad_input_writes_nothing(tmp_path, cache, version_out, changes, fragments):
    stage, tree = staged(tmp_path, cache)
    run = record(stage, tree, version_out, **changes)
    assert run.kind is FailJson, run.result
    for fragment in fragments:
        assert fragment in run.result["msg"]
    assert not (stage / "BUILD_INFO.json").exists()
    assert [p.name for p in stage.iterdir() if p.name != "bin"] == []


def test_record_refuses_a_missing_staging_directory(tmp_path):
    run = record(tmp_path / "missing", tmp_path)
    assert run.kind is FailJson
    assert run.result["msg"] == "path %s is not a directory" % (tmp_path / "missing")


def test_a_failed_move_leaves_no_temporary_file(tmp_path):
    stage, tree = staged(tmp_path, "CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120-real\n")

    def refuse(src, dest):
        raise OSError(28, "No space left on device")

    with mock.patch.object(atomic_file.os, "replace", refuse):
        run = record(stage, tree)
    assert run.kind is FailJson
    assert "No space left on device" in run.result["msg"]
    assert [p.name for p in stage.iterdir() if p.name.startswith(".BUILD_INFO")] == []
    assert not (stage / "BUILD_INFO.json").exists()


@pytest.mark.parametrize("rc", [124, 137])
def test_a_version_call_that_hangs_is_stopped_and_nothing_is_recorded(tmp_path, rc):
    stage, tree = staged(tmp_path, "CMAKE_CUDA_ARCHITECTURES:STRING=90-real;120-real\n")
    args = {"path": str(stage), "build_tree": str(tree), "binaries": ["llama-cli", "ggml-rpc-server"],
            "plan": RECORD_PLAN, "toolchain": TOOLCHAIN, "source_kind": "archive",
            "source_id": "archive:sha256:" + "ab" * 32, "built_on": "node-a"}
    run = run_module(llama_cpp_build_record.main, args, {version_command(stage): (rc, "", "")}, {"timeout": TIMEOUT})
    assert run.kind is FailJson, run.result
    assert "llama-cli --version did not answer within 60 s" in run.result["msg"]
    assert not (stage / "BUILD_INFO.json").exists()
