"""Rules behind the llama.cpp build and distribution roles."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import llama_cpp as lc

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llama_cpp"


def fixture(name):
    return (FIXTURES / name).read_text()


# --- architecture mapping ----------------------------------------------------

@pytest.mark.parametrize("cap, arch", [
    ("12.0", "120"),   # Blackwell workstation (RTX PRO 6000)
    ("10.0", "100"),   # Blackwell datacenter
    ("9.0", "90"),     # Hopper (H200)
    ("8.9", "89"),     # Ada
    ("8.6", "86"),     # Ampere consumer
    ("7.5", "75"),     # Turing
    (" 12.1 ", "121"),
])
def test_compute_cap_maps_to_cmake_arch(cap, arch):
    assert lc.compute_cap_to_cuda_arch(cap) == arch


@pytest.mark.parametrize("cap", ["12", "sm_120", "", "12.0.1", "twelve"])
def test_malformed_compute_cap_is_rejected(cap):
    with pytest.raises(lc.LlamaCppError, match="compute capability"):
        lc.compute_cap_to_cuda_arch(cap)


def test_architectures_from_gpus_unique_and_sorted():
    gpus = [{"compute_cap": "12.0", "cuda_arch": "120"}, {"compute_cap": "9.0"},
            {"compute_cap": "12.0", "cuda_arch": "120"}]
    assert lc.architectures_from_gpus(gpus) == ["90", "120"]


def test_architectures_from_no_gpus_is_empty():
    assert lc.architectures_from_gpus([]) == []


# --- architecture list validation ---------------------------------------------

def test_valid_override_is_normalised():
    assert lc.validate_cuda_architectures(["120a", "90", 86, "100F", "90"]) == ["86", "90", "100f", "120a"]


def test_override_as_cmake_string():
    assert lc.validate_cuda_architectures("90;120") == ["90", "120"]


@pytest.mark.parametrize("typo", ["12.0", "sm_90", "9O", "120b", "native", "1200", "0"])
def test_typo_in_override_names_the_entry(typo):
    with pytest.raises(lc.LlamaCppError) as error:
        lc.validate_cuda_architectures(["90", typo])
    assert repr(typo) in str(error.value)
    assert "llama_cpp_cuda_architectures" in str(error.value)


@pytest.mark.parametrize("built, gpu, covered", [
    ("120", "120", True),
    ("120a", "120", True),
    ("90", "120", False),
    ("100f", "103", True),
    ("100f", "100", True),
    ("100f", "120", False),
    ("103f", "100", False),
    ("100a", "103", False),
])
def test_arch_coverage(built, gpu, covered):
    assert lc.arch_covers(built, gpu) is covered


# --- captured tool output -------------------------------------------------------

def test_nvcc_version():
    assert lc.parse_nvcc_version(fixture("nvcc-12.8.txt")) == "12.8.93"
    assert lc.parse_nvcc_version("Cuda compilation tools, release 11.8") == "11.8"
    assert lc.parse_nvcc_version("bash: nvcc: command not found") is None


def test_compiler_version():
    assert lc.parse_compiler_version(fixture("cxx-gnu-debian12.txt")) == {"id": "gnu", "version": "12.2.0"}
    assert lc.parse_compiler_version("Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64") == \
        {"id": "clang", "version": "18.1.3"}
    assert lc.parse_compiler_version("") == {"id": "unknown", "version": None}


def test_cmake_and_glibc_versions():
    assert lc.parse_cmake_version(fixture("cmake-debian12.txt")) == "3.25.1"
    assert lc.parse_glibc_version("glibc 2.36") == "2.36"
    assert lc.parse_glibc_version(fixture("ldd-debian12.txt")) == "2.36"


def test_driver_versions_from_banner_and_version_flag():
    expected = {"driver_version": "580.159.04", "cuda_version": "13.0"}
    assert lc.parse_driver_versions(fixture("nvidia-smi-plain-h200.txt")) == expected
    assert lc.parse_driver_versions(fixture("nvidia-smi-version.txt")) == expected
    assert lc.parse_driver_versions("") == {"driver_version": None, "cuda_version": None}


# --- source tree ------------------------------------------------------------------

def test_rpc_server_target_is_read_not_assumed():
    assert lc.rpc_server_target(fixture("rpc-target-current.cmake")) == "ggml-rpc-server"
    assert lc.rpc_server_target(fixture("rpc-target-older.cmake")) == "rpc-server"
    assert lc.rpc_server_target("") is None


def test_rdma_option_detection():
    assert lc.has_rpc_rdma_option(fixture("ggml-rpc-with-rdma.cmake")) is True
    assert lc.has_rpc_rdma_option(fixture("ggml-rpc-without-rdma.cmake")) is False


# --- configuration ----------------------------------------------------------------

def test_cuda_resolution():
    gpus = [{"cuda_arch": "120"}]
    assert lc.resolve_cuda("auto", "/usr/local/cuda/bin/nvcc", gpus) is True
    assert lc.resolve_cuda("auto", None, gpus) is False
    assert lc.resolve_cuda("auto", "/usr/bin/nvcc", []) is False
    assert lc.resolve_cuda("off", "/usr/bin/nvcc", gpus) is False
    assert lc.resolve_cuda("on", "/usr/bin/nvcc", []) is True
    with pytest.raises(lc.LlamaCppError, match="no nvcc was found"):
        lc.resolve_cuda("on", None, gpus)
    with pytest.raises(lc.LlamaCppError, match="'yes'"):
        lc.resolve_cuda("yes", None, gpus)


def test_rdma_resolution():
    assert lc.resolve_rdma("auto", True, True) is True
    assert lc.resolve_rdma("auto", False, True) is False
    assert lc.resolve_rdma("auto", True, False) is False
    assert lc.resolve_rdma("off", True, True) is False
    with pytest.raises(lc.LlamaCppError, match="has no GGML_RPC_RDMA option"):
        lc.resolve_rdma("on", False, True, "llama.cpp b4000")
    with pytest.raises(lc.LlamaCppError, match="libibverbs"):
        lc.resolve_rdma("on", True, False)


def test_cmake_options_spell_out_portability():
    options = lc.cmake_options(cuda=False, cuda_architectures=[], rdma=False)
    assert options["BUILD_SHARED_LIBS"] == "OFF"
    assert options["GGML_RPC"] == "ON"
    assert options["GGML_RPC_RDMA"] == "OFF"
    assert options["GGML_NATIVE"] == "OFF"
    assert options["LLAMA_CURL"] == "OFF"
    assert "CMAKE_CUDA_ARCHITECTURES" not in options
    assert "LLAMA_BUILD_NUMBER" not in options


def test_cmake_options_cuda_and_build_info():
    options = lc.cmake_options(cuda=True, cuda_architectures=["90", "120"], rdma=True,
                               build_number=8070, build_commit="0c1e570",
                               extra={"GGML_OPENMP": False, "GGML_CUDA_FA_ALL_QUANTS": True})
    assert options["GGML_CUDA"] == "ON"
    assert options["CMAKE_CUDA_ARCHITECTURES"] == "90;120"
    assert options["LLAMA_BUILD_NUMBER"] == "8070"
    assert options["LLAMA_BUILD_COMMIT"] == "0c1e570"
    assert options["GGML_OPENMP"] == "OFF"
    assert options["GGML_CUDA_FA_ALL_QUANTS"] == "ON"
    assert lc.cmake_arguments({"B": "1", "A": "ON"}) == ["-DA=ON", "-DB=1"]


# --- fingerprint -------------------------------------------------------------------

BASE = dict(source_id="archive:sha256:" + "ab" * 32,
            options={"GGML_RPC": "ON", "GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "120"},
            nvcc_version="12.8.93", compiler={"id": "gnu", "version": "12.2.0"},
            cuda_architectures=["120"])


def make_id(**changes):
    args = dict(BASE, **changes)
    return lc.build_id(lc.fingerprint(args["source_id"], args["options"], args["nvcc_version"],
                                      args["compiler"], args["cuda_architectures"]))


def test_same_inputs_same_id():
    assert make_id() == make_id()
    assert len(make_id()) == 12
    assert lc.BUILD_ID_PATTERN.match(make_id())


def test_option_order_is_irrelevant():
    reordered = dict(reversed(list(BASE["options"].items())))
    assert list(reordered) != list(BASE["options"])
    assert make_id(options=reordered) == make_id()
    assert make_id(cuda_architectures=["120", "90"]) == make_id(cuda_architectures=["90", "120"])


@pytest.mark.parametrize("change", [
    {"source_id": "archive:sha256:" + "cd" * 32},
    {"source_id": "git:https://github.com/ggml-org/llama.cpp.git@0c1e570"},
    {"options": dict(BASE["options"], GGML_NATIVE="ON")},
    {"options": dict(BASE["options"], CMAKE_CUDA_ARCHITECTURES="90;120")},
    {"nvcc_version": "12.9.41"},
    {"nvcc_version": None},
    {"compiler": {"id": "gnu", "version": "13.3.0"}},
    {"compiler": {"id": "clang", "version": "12.2.0"}},
    {"cuda_architectures": ["90", "120"]},
])
def test_any_component_change_changes_id(change):
    assert make_id(**change) != make_id()


def test_no_nvcc_is_recorded_as_none():
    data = lc.fingerprint("git:x@1", {}, None, {"id": "gnu", "version": "12.2.0"}, [])
    assert data["nvcc_version"] == "none"
    assert data["compiler"] == "gnu 12.2.0"


def test_pinned_id_catches_accidental_hash_changes():
    # Changing the hash recipe rebuilds every cluster: make it a deliberate edit.
    data = lc.fingerprint("archive:sha256:00", {"GGML_RPC": "ON"}, "12.8.93",
                          {"id": "gnu", "version": "12.2.0"}, ["120"])
    assert lc.canonical_json(data) == (
        '{"cmake_options":{"GGML_RPC":"ON"},"compiler":"gnu 12.2.0","cuda_architectures":["120"],'
        '"nvcc_version":"12.8.93","source":"archive:sha256:00"}')
    assert lc.build_id(data) == "b21f520ccc08"


def test_empty_source_id_is_rejected():
    with pytest.raises(lc.LlamaCppError, match="source id is empty"):
        lc.fingerprint("", {}, None, {}, [])


# --- BUILD_INFO.json ------------------------------------------------------------------

INFO = {
    "build_id": "0123456789ab", "source": {"kind": "archive"}, "cmake_options": {},
    "cuda": True, "cuda_architectures": ["120"], "nvcc_version": "12.8.93",
    "compiler": "gnu 12.2.0", "cpu_arch": "x86_64", "glibc_version": "2.36",
    "rpc_server_binary": "ggml-rpc-server", "binaries": {"llama-server": "aa", "ggml-rpc-server": "bb"},
}


def test_build_info_round_trip():
    assert lc.parse_build_info(json.dumps(INFO)) == INFO


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    (json.dumps({k: v for k, v in INFO.items() if k != "binaries"}), "lacks binaries"),
    (json.dumps(dict(INFO, build_id="XYZ")), "'XYZ'"),
    (json.dumps(dict(INFO, binaries={})), "binaries must map"),
])
def test_bad_build_info(text, message):
    with pytest.raises(lc.LlamaCppError, match=message):
        lc.parse_build_info(text)


def test_checksum_mismatches():
    assert lc.checksum_mismatches({"a": "1", "b": "2"}, {"a": "1", "b": "2"}) == []
    assert lc.checksum_mismatches({"a": "1", "b": "2", "c": "3"}, {"a": "9", "b": "2"}) == ["a", "c"]


# --- compatibility ------------------------------------------------------------------------

PEER = {"cpu_arch": "x86_64", "glibc_version": "2.36", "driver_cuda_version": "13.0",
        "gpus": [{"cuda_arch": "120"}, {"compute_cap": "12.0"}]}


def test_identical_peer_is_compatible():
    assert lc.compatibility_problems(INFO, PEER) == []


def test_newer_glibc_and_driver_are_compatible():
    assert lc.compatibility_problems(INFO, dict(PEER, glibc_version="2.39", driver_cuda_version="12.9")) == []


@pytest.mark.parametrize("change, message", [
    ({"cpu_arch": "aarch64"}, "cpu arch aarch64 differs"),
    ({"glibc_version": "2.35"}, "glibc 2.35 is older than the build host's 2.36"),
    ({"glibc_version": None}, "glibc None"),
    ({"driver_cuda_version": "11.8"}, "driver supports CUDA 11.8"),
    ({"driver_cuda_version": None}, "no NVIDIA driver"),
    ({"gpus": [{"cuda_arch": "90"}]}, "GPU architecture 90 is not in the build's list 120"),
])
def test_incompatible_peer_says_why(change, message):
    problems = lc.compatibility_problems(INFO, dict(PEER, **change))
    assert len(problems) == 1
    assert message in problems[0]


def test_cpu_build_ignores_gpus_and_driver():
    cpu_build = dict(INFO, cuda=False, cuda_architectures=[], nvcc_version=None)
    assert lc.compatibility_problems(cpu_build, dict(PEER, driver_cuda_version=None,
                                                     gpus=[{"cuda_arch": "90"}])) == []


def test_lockstep_mismatches_name_host_and_both_ids():
    expected = {"node-a": "aaaaaaaaaaaa", "node-b": "aaaaaaaaaaaa", "node-c": "cccccccccccc"}
    reported = {"node-a": "aaaaaaaaaaaa", "node-b": "bbbbbbbbbbbb", "node-c": "cccccccccccc"}
    assert lc.lockstep_mismatches(expected, reported) == [("node-b", "aaaaaaaaaaaa", "bbbbbbbbbbbb")]
    assert lc.lockstep_mismatches(expected, expected) == []
