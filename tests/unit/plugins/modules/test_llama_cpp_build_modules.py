"""llama_cpp_build_plan, llama_cpp_build_record, llama_cpp_build_verify and llama_cpp_prune_plan:
what they decide and write, and a table of bad inputs, each refused with a message naming the
option or field, no traceback, nothing written."""

import json
import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.modules import (
    llama_cpp_build_plan,
    llama_cpp_build_record,
    llama_cpp_build_verify,
    llama_cpp_prune_plan,
)

from module_harness import ExitJson, FailJson, run_module

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llama_cpp"
TOOLCHAIN = {"cpu_arch": "x86_64", "glibc_version": "2.36", "nvcc_path": "/usr/local/cuda/bin/nvcc",
             "nvcc_version": "12.8.93", "compiler": {"id": "gnu", "version": "12.2.0"}, "libibverbs_present": False}
BLACKWELL = {"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "compute_cap": "12.0"}
H200 = {"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0"}


def survey(host, gpus, driver_cuda="13.0", **changes):
    node = {"host": host, "cpu_arch": "x86_64", "glibc_version": "2.36", "driver_version": "580.95.05",
            "driver_cuda_version": driver_cuda, "gpu_driver": {"mismatch": False}, "gpus": gpus}
    node.update(changes)
    return node


def llama_tree(tmp_path):
    """The files of a llama.cpp tree the plan reads (captured CMakeLists of llama.cpp)."""
    tree = tmp_path / "src"
    (tree / "tools" / "rpc").mkdir(parents=True)
    (tree / "ggml" / "src" / "ggml-rpc").mkdir(parents=True)
    (tree / "tools" / "rpc" / "CMakeLists.txt").write_text((FIXTURES / "rpc-target-current.cmake").read_text())
    (tree / "ggml" / "src" / "ggml-rpc" / "CMakeLists.txt").write_text((FIXTURES / "ggml-rpc-with-rdma.cmake").read_text())
    return tree


def plan(args):
    base = {"source_id": "archive:sha256:00", "toolchain": TOOLCHAIN}
    base.update(args)
    return run_module(llama_cpp_build_plan.main, base, {}, None)


# --- llama_cpp_build_plan ---------------------------------------------------------------------------

def test_plan_builds_once_for_every_generation(tmp_path):
    run = plan({"source_dir": str(llama_tree(tmp_path)), "rpc_rdma": "off",
                "nodes": [survey("node-a", [BLACKWELL]), survey("node-b", [BLACKWELL]), survey("node-c", [H200])]})
    assert run.kind is ExitJson, run.result
    assert run.result["cuda_architectures"] == ["90-real", "120a-real"]
    assert run.result["cmake_options"]["CMAKE_CUDA_ARCHITECTURES"] == "90-real;120a-real"
    assert run.result["sharing_hosts"] == ["node-a", "node-b", "node-c"]
    assert run.result["rpc_server_binary"] == "ggml-rpc-server"
    assert run.result["changed"] is False


def test_plan_build_id_ignores_the_driver(tmp_path):
    tree = str(llama_tree(tmp_path))
    ids = set()
    for driver, cuda in (("570.86.10", "12.8"), ("580.95.05", "13.0"), ("590.44.01", "13.1")):
        run = plan({"source_dir": tree, "rpc_rdma": "off",
                    "nodes": [survey("node-a", [BLACKWELL], driver_cuda=cuda, driver_version=driver)]})
        assert run.kind is ExitJson, run.result
        ids.add(run.result["build_id"])
    assert len(ids) == 1


PLAN_BAD = [
    # (args, fragments of the message)
    ({"keep_builds": 1}, ["llama_cpp_keep_builds is 1"]),
    ({"extra_cmake_options": {"GGML CUDA": "ON"}}, ["extra_cmake_options has the option name 'GGML CUDA'"]),
    ({"extra_cmake_options": {"A=B": "ON"}}, ["option name 'A=B'"]),
    ({"cuda_architectures": ["sm_120"]}, ["llama_cpp_cuda_architectures has invalid entries 'sm_120'"]),
    ({"nodes": [survey("node-a", [BLACKWELL])], "toolchain": dict(TOOLCHAIN, nvcc_version="12.6.85")},
     ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition on node-a (compute capability 12.0) needs CUDA toolkit 12.8"]),
    ({"nodes": [survey("node-b", [BLACKWELL], driver_cuda="12.6")]}, ["the NVIDIA driver on node-b", "supports CUDA 12.6"]),
    ({"nodes": [survey("node-b", [], gpu_driver={"mismatch": True, "message": "reboot the host"})]},
     ["node-b: reboot the host"]),
    ({"nodes": [survey("node-b", [])]}, ["no NVIDIA GPU is visible"]),
    ({"nodes": [survey("node-b", [{"name": "odd", "compute_cap": "twelve"}])]}, ["compute capability 'twelve'"]),
    ({"cuda": "on", "toolchain": dict(TOOLCHAIN, nvcc_path=None)}, ["llama_cpp_cuda is 'on' but no nvcc was found"]),
    ({"rpc_rdma": "on"}, ["llama_cpp_rpc_rdma is 'on' but libibverbs was not found"]),
]


@pytest.mark.parametrize("args, fragments", PLAN_BAD)
def test_plan_bad_input(args, fragments):
    args = dict({"nodes": [survey("node-a", [BLACKWELL])]}, **args)
    run = plan(args)
    assert run.kind is FailJson, run.result
    for fragment in fragments:
        assert fragment in run.result["msg"]
    assert "Traceback" not in run.result["msg"]


def test_plan_refuses_a_tree_without_an_rpc_server(tmp_path):
    (tmp_path / "empty").mkdir()
    run = plan({"source_dir": str(tmp_path / "empty"), "nodes": [survey("node-a", [BLACKWELL])]})
    assert run.kind is FailJson
    assert "no RPC server target found in %s" % (tmp_path / "empty") in run.result["msg"]


def test_plan_reads_a_non_utf8_cmakelists_without_a_traceback(tmp_path):
    tree = llama_tree(tmp_path)
    path = tree / "ggml" / "src" / "ggml-rpc" / "CMakeLists.txt"
    path.write_bytes(b"# \xff\xfe\n" + path.read_bytes())
    run = plan({"source_dir": str(tree), "rpc_rdma": "auto", "nodes": [survey("node-a", [BLACKWELL])]})
    assert run.kind is ExitJson, run.result


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
    answers = {(str(stage / "bin" / "llama-cli"), "--version"): (0, "", version_out)}
    return run_module(llama_cpp_build_record.main, args, answers, None)


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


# --- llama_cpp_build_verify -------------------------------------------------------------------------

REFERENCE = {"build_id": "0123456789ab", "source": {"id": "archive:sha256:00"}, "cpu_arch": "x86_64",
             "glibc_version": "2.36", "cuda": False, "nvcc_version": None}


def installed_build(tmp_path, info_bytes=None, binary=b"llama\n"):
    build = tmp_path / "0123456789ab"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "llama-server").write_bytes(binary)
    if info_bytes is None:
        import hashlib
        info = dict(REFERENCE, cmake_options={}, cuda_architectures=[], compiler="gnu 12.2.0",
                    rpc_server_binary="ggml-rpc-server",
                    binaries={"llama-server": hashlib.sha256(b"llama\n").hexdigest()})
        info_bytes = json.dumps(info).encode()
    (build / "BUILD_INFO.json").write_bytes(info_bytes)
    return build


def verify(path, **args):
    return run_module(llama_cpp_build_verify.main, dict({"path": str(path)}, **args), {}, None)


def test_verify_valid_build_in_lockstep(tmp_path):
    run = verify(installed_build(tmp_path), reference=REFERENCE)
    assert run.kind is ExitJson, run.result
    assert (run.result["valid"], run.result["lockstep_problem"]) == (True, None)


def test_verify_names_a_node_out_of_lockstep(tmp_path):
    run = verify(installed_build(tmp_path), reference=dict(REFERENCE, build_id="bbbbbbbbbbbb"))
    assert "could run the cluster's build bbbbbbbbbbbb" in run.result["lockstep_problem"]


VERIFY_BAD = [
    (b"\xff\xfe{", None, "is not UTF-8"),
    (b"{", None, "is not valid JSON"),
    (b"[]", None, "must hold a JSON object"),
    (b'{"build_id": "0123456789ab"}', None, "lacks source"),
    (None, b"tampered\n", "checksum differs or file missing"),
]


@pytest.mark.parametrize("info_bytes, binary, fragment", VERIFY_BAD)
def test_verify_bad_build_info(tmp_path, info_bytes, binary, fragment):
    build = installed_build(tmp_path, info_bytes, binary or b"llama\n")
    run = verify(build)
    assert run.kind is FailJson, run.result
    assert fragment in run.result["msg"]
    assert "Traceback" not in run.result["msg"]
    lenient = verify(build, fail_on_mismatch=False, reference=REFERENCE)
    assert lenient.kind is ExitJson
    assert lenient.result["valid"] is False
    assert "has no valid llama.cpp build" in lenient.result["lockstep_problem"]


# --- llama_cpp_prune_plan ---------------------------------------------------------------------------

def test_prune_keeps_current_previous_and_referenced(tmp_path):
    install = tmp_path / "install"
    ids = ["aaaaaaaaaaa%d" % i for i in range(1, 6)]
    for age, build in enumerate(ids):
        (install / build).mkdir(parents=True)
        os.utime(install / build, (1000 + age, 1000 + age))
    (install / "current").symlink_to(ids[4])
    (install / ".staging-x").mkdir()
    units = tmp_path / "units"
    units.mkdir()
    (units / "gpulab-llama-server.service").write_text("ExecStart=%s/%s/bin/llama-server\n" % (install, ids[0]))
    run = run_module(llama_cpp_prune_plan.main, {"install_dir": str(install), "current": ids[4], "previous": ids[1],
                                                 "keep": 2, "reference_paths": [str(units), str(tmp_path / "none")]}, {}, None)
    assert run.kind is ExitJson, run.result
    assert run.result["referenced"] == [ids[0]]
    assert run.result["prunable"] == [str(install / ids[2]), str(install / ids[3])]
    assert all((install / build).exists() for build in ids)


@pytest.mark.parametrize("keep", [1, 0, -1])
def test_prune_refuses_keep_below_two(tmp_path, keep):
    run = run_module(llama_cpp_prune_plan.main, {"install_dir": str(tmp_path), "current": "aaaaaaaaaaa1", "keep": keep}, {}, None)
    assert run.kind is FailJson
    assert "llama_cpp_keep_builds is %d" % keep in run.result["msg"]
