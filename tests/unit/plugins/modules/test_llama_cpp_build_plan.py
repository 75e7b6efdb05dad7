"""llama_cpp_build_plan: what it decides and writes, and a table of bad inputs, each refused with a message naming the
option or field, no traceback, nothing written."""

from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.modules import (
    llama_cpp_build_plan,
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
    ({"extra_cmake_options": {"GGML_CUDA\n": "ON"}}, ["option name 'GGML_CUDA\\n'"]),
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


def test_an_optional_tree_not_unpacked_yet_only_checks_and_one_unpacked_is_read(tmp_path):
    nodes = [survey("node-a", [BLACKWELL])]
    absent = plan({"source_dir": str(tmp_path / "src"), "source_dir_optional": True, "rpc_rdma": "off", "nodes": nodes})
    assert absent.kind is ExitJson, absent.result
    assert (absent.result["source_read"], absent.result["build_id"]) == (False, None)
    assert "cmake_options" not in absent.result
    assert absent.result["cuda_architectures"] == ["120a-real"]
    tree = str(llama_tree(tmp_path))
    present = plan({"source_dir": tree, "source_dir_optional": True, "rpc_rdma": "off", "nodes": nodes})
    required = plan({"source_dir": tree, "rpc_rdma": "off", "nodes": nodes})
    assert present.result["source_read"] is True and present.result["build_id"]
    assert present.result == required.result
    bad = plan({"source_dir": str(tmp_path / "src"), "source_dir_optional": True, "cuda_architectures": ["sm_120"],
                "nodes": nodes})
    assert bad.kind is FailJson


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
