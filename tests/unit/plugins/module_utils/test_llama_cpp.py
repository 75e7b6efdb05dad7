"""Rules behind the llama.cpp build and distribution roles."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import llama_build_info as bi
from ansible_collections.gpulab.inference.plugins.module_utils import llama_cpp as lc

PINNED_CUDA_ID = "2fad4334d9e2"

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llama_cpp"


def fixture(name):
    return (FIXTURES / name).read_text()


def test_architectures_from_gpus_unique_and_sorted():
    gpus = [{"compute_cap": "12.0", "cuda_arch": "120"}, {"compute_cap": "9.0"},
            {"compute_cap": "12.0", "cuda_arch": "120"}]
    # Compiled as llama.cpp's CMake compiles them: SASS per GPU, 12X as the arch-specific 12Xa.
    assert lc.architectures_from_gpus(gpus) == ["90-real", "120a-real"]
    assert lc.architectures_from_gpus([{"cuda_arch": "86"}]) == ["86-real"]


def test_architectures_from_no_gpus_is_empty():
    assert lc.architectures_from_gpus([]) == []


# --- architecture list validation ---------------------------------------------

def test_valid_override_is_normalised():
    assert lc.validate_cuda_architectures(["120a", "90", 86, "100F", "90"]) == ["86", "90", "100f", "120a"]


def test_override_as_cmake_string_is_spelled_as_compiled():
    # ggml/src/ggml-cuda/CMakeLists.txt turns every plain 12X into 12Xa.
    assert lc.validate_cuda_architectures("90;120") == ["90", "120a"]
    assert lc.validate_cuda_architectures(["121-real", "90-virtual", "120a-real"]) == [
        "90-virtual", "120a-real", "121a-real"]


@pytest.mark.parametrize("typo", ["12.0", "sm_90", "9O", "120b", "native", "1200", "0", "120-fake", "120 a"])
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
    ("120a-real", "120", True),
    ("120a-real", "121", False),
    ("90-real", "90", True),
    ("90-virtual", "90", True),
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
    assert lc.resolve_cuda("auto", None, []) is False
    assert lc.resolve_cuda("off", "/usr/bin/nvcc", gpus) is False
    assert lc.resolve_cuda("off", "/usr/bin/nvcc", [], driver_error="mismatch") is False
    assert lc.resolve_cuda("on", "/usr/bin/nvcc", [], architectures=["120a-real"]) is True
    assert lc.resolve_cuda("auto", "/usr/bin/nvcc", [], architectures=["120a-real"]) is True
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
    data = lc.fingerprint("archive:sha256:00", {"GGML_RPC": "ON", "GGML_CUDA": "ON"}, "12.8.93",
                          {"id": "gnu", "version": "12.2.0"}, ["120a-real"])
    assert lc.canonical_json(data) == (
        '{"cmake_options":{"GGML_CUDA":"ON","GGML_RPC":"ON"},"compiler":"gnu 12.2.0",'
        '"cuda_architectures":["120a-real"],"nvcc_version":"12.8.93","source":"archive:sha256:00"}')
    assert lc.build_id(data) == lc.build_id(json.loads(lc.canonical_json(data)))
    assert lc.build_id(data) == PINNED_CUDA_ID


def test_cpu_build_fingerprint_excludes_nvcc():
    # A toolkit upgrade must not rebuild (nor re-ship) a CPU build.
    cpu = {"GGML_RPC": "ON", "GGML_CUDA": "OFF"}
    compiler = {"id": "gnu", "version": "12.2.0"}
    with_nvcc = lc.fingerprint("archive:sha256:00", cpu, "12.8.93", compiler, [])
    assert with_nvcc["nvcc_version"] == "none"
    assert lc.build_id(with_nvcc) == lc.build_id(lc.fingerprint("archive:sha256:00", cpu, "12.9.41", compiler, []))
    assert lc.build_id(with_nvcc) == lc.build_id(lc.fingerprint("archive:sha256:00", cpu, None, compiler, []))


def test_empty_source_id_is_rejected():
    with pytest.raises(lc.LlamaCppError, match="source id is empty"):
        lc.fingerprint("", {}, None, {}, [])


# --- BUILD_INFO.json ------------------------------------------------------------------

INFO = {
    "build_id": "0123456789ab", "source": {"kind": "archive"}, "cmake_options": {},
    "cuda": True, "cuda_architectures": ["120a-real"], "nvcc_version": "12.8.93",
    "compiler": "gnu 12.2.0", "cpu_arch": "x86_64", "glibc_version": "2.36",
    "rpc_server_binary": "ggml-rpc-server", "binaries": {"llama-server": "a" * 64, "ggml-rpc-server": "b" * 64},
}


def test_build_info_round_trip():
    assert bi.parse_build_info(json.dumps(INFO)) == INFO


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    (json.dumps({k: v for k, v in INFO.items() if k != "binaries"}), "lacks binaries"),
    (json.dumps(dict(INFO, build_id="XYZ")), "'XYZ'"),
    (json.dumps(dict(INFO, binaries={})), "binaries must map"),
    (json.dumps(dict(INFO, build_id=123456789012)), "build_id 123456789012 is not"),
    (json.dumps(dict(INFO, build_id="0123456789ab\n")), "build_id '0123456789ab\\\\n' is not"),
    (json.dumps(dict(INFO, binaries={"../../bin/sh": "a" * 64})), "name '../../bin/sh', which is not a plain file name"),
    (json.dumps(dict(INFO, binaries={"llama-server\nx": "a" * 64})), "which is not a plain file name"),
    (json.dumps(dict(INFO, binaries={"llama-server": "aa"})), "checksum 'aa', not a sha256"),
    (json.dumps(dict(INFO, binaries={"llama-server": 7})), "checksum 7, not a sha256"),
    (json.dumps(dict(INFO, source="git")), "BUILD_INFO.json: source is 'git', expected an object"),
    (json.dumps(dict(INFO, cpu_arch="x86_64; id")), "cpu_arch is 'x86_64; id'"),
    (json.dumps(dict(INFO, glibc_version=2.36)), "glibc_version is 2.36, expected a version"),
    (json.dumps(dict(INFO, cuda="yes")), "cuda is 'yes', expected true or false"),
    (json.dumps(dict(INFO, nvcc_version="12.8\n")), "nvcc_version is '12.8\\\\n'"),
])
def test_bad_build_info(text, message):
    with pytest.raises(lc.LlamaCppError, match=message):
        bi.parse_build_info(text)


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
    ({"driver_cuda_version": "11.8"}, "driver supports CUDA 11.8, an older major"),
    ({"driver_cuda_version": "12.6"}, "supports CUDA 12.6, older than the CUDA toolkit 12.8.93"),
    ({"driver_cuda_version": None}, "reports no CUDA version"),
    ({"gpus": [{"cuda_arch": "90"}]}, "GPU (compute capability 9.0) is not among the build's architectures 120a-real"),
])
def test_incompatible_peer_says_why(change, message):
    problems = lc.compatibility_problems(INFO, dict(PEER, **change))
    assert len(problems) == 1
    assert message in problems[0]


def test_cpu_build_ignores_gpus_and_driver():
    cpu_build = dict(INFO, cuda=False, cuda_architectures=[], nvcc_version=None)
    assert lc.compatibility_problems(cpu_build, dict(PEER, driver_cuda_version=None,
                                                     gpus=[{"cuda_arch": "90"}])) == []


# --- auto never falls back to a CPU build where a GPU build was meant ------------------------

@pytest.mark.parametrize("mode, gpus, driver_error, message", [
    # nvcc present, no GPU visible: a CPU build would be shipped to GPU nodes.
    ("auto", [], None, "no NVIDIA GPU is visible"),
    ("on", [], None, "no GPU architecture is known"),
    # Driver upgraded without a reboot: nvidia-smi lists nothing, the driver error says why.
    ("auto", [], "node-b: Driver/library version mismatch", "Driver/library version mismatch"),
    ("on", [{"compute_cap": "12.0"}], "node-b: reboot", "node-b: reboot"),
])
def test_cuda_auto_refuses_instead_of_a_silent_cpu_build(mode, gpus, driver_error, message):
    with pytest.raises(lc.LlamaCppError, match=message) as error:
        lc.resolve_cuda(mode, "/usr/local/cuda/bin/nvcc", gpus, driver_error)
    assert "llama_cpp_cuda" in str(error.value)


# --- --version and the CMake cache -------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    # common/build-info.cpp (current): version, build number, commit.
    ("version: b8070-0c1e570 (build 8070, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n",
     {"version": "b8070-0c1e570", "build_number": "8070", "commit": "0c1e570",
      "compiler": "GNU 12.2.0", "target": "Linux x86_64"}),
    # The lab's archive has no .git: build number 0, commit given to CMake.
    ("version: b0-0c1e570 (build 0, commit 0c1e570)\nbuilt with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu\n",
     {"version": "b0-0c1e570", "build_number": "0", "commit": "0c1e570",
      "compiler": "cc (Debian 12.2.0-14) 12.2.0", "target": "x86_64-linux-gnu"}),
    # common/arg.cpp (older): build number and commit only.
    ("ggml_cuda_init: found 1 CUDA devices\nversion: 4567 (33a75f41)\nbuilt with MSVC 19.40 for x64\n",
     {"version": "4567", "build_number": "4567", "commit": "33a75f41", "compiler": "MSVC 19.40", "target": "x64"}),
])
def test_llama_version_is_parsed(text, expected):
    assert lc.parse_llama_version(text) == expected


@pytest.mark.parametrize("text", ["", "error: unknown argument --version", "\x00\x01"])
def test_llama_version_without_a_version_line_is_named(text):
    with pytest.raises(lc.LlamaCppError, match="no 'version: ...' line"):
        lc.parse_llama_version(text)


@pytest.mark.parametrize("cache, expected", [
    ("CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_CUDA_ARCHITECTURES:STRING=90-real;120a-real\n", ["90-real", "120a-real"]),
    # A plain 12X in the cache is compiled as 12Xa (ggml/src/ggml-cuda/CMakeLists.txt).
    ("CMAKE_CUDA_ARCHITECTURES:UNINITIALIZED=120;121-real\n", ["120a", "121a-real"]),
    ("CMAKE_BUILD_TYPE:STRING=Release\nGGML_CUDA:BOOL=OFF\n", None),
])
def test_cmake_cache_architectures_as_compiled(cache, expected):
    assert lc.parse_cmake_cache_architectures(cache) == expected


def test_cmake_cache_with_a_strange_architecture_is_named():
    with pytest.raises(lc.LlamaCppError, match="CMakeCache.txt.*'native'"):
        lc.parse_cmake_cache_architectures("CMAKE_CUDA_ARCHITECTURES:STRING=native\n")


def test_non_utf8_build_info_is_named():
    with pytest.raises(lc.LlamaCppError, match="not UTF-8"):
        bi.parse_build_info(b'{"build_id": "\xff\xfe"}')
    assert bi.parse_build_info(json.dumps(INFO).encode()) == INFO


# --- BUILD_INFO.json composition -------------------------------------------------------------------

PLAN = {"build_id": "0123456789ab", "cuda": True, "cuda_architectures": ["90-real", "120a-real"],
        "cmake_options": {"GGML_CUDA": "ON"}, "rpc_rdma": False, "rpc_server_binary": "ggml-rpc-server",
        "fingerprint": {"compiler": "gnu 12.2.0"}}
TOOLCHAIN = {"nvcc_version": "12.8.93", "driver_version": "580.95.05", "cpu_arch": "x86_64", "glibc_version": "2.36"}
VERSION = {"version": "b0-0c1e570", "build_number": "0", "commit": "0c1e570"}


def test_build_info_records_architectures_as_compiled():
    info = lc.compose_build_info(PLAN, TOOLCHAIN, VERSION, {"llama-server": "a" * 64}, ["90-real", "120a-real"],
                                 {"kind": "archive", "id": "archive:sha256:00"}, "node-a")
    assert info["cuda_architectures"] == ["90-real", "120a-real"]
    assert (info["build_id"], info["commit"], info["build_number"]) == ("0123456789ab", "0c1e570", "0")
    assert info["nvcc_version"] == "12.8.93"
    assert bi.parse_build_info(json.dumps(info))["binaries"] == {"llama-server": "a" * 64}


def test_cpu_build_info_has_no_toolkit():
    plan = dict(PLAN, cuda=False, cuda_architectures=[])
    info = lc.compose_build_info(plan, TOOLCHAIN, VERSION, {"llama-server": "a" * 64}, None, {"kind": "git"}, "node-a")
    assert (info["cuda"], info["cuda_architectures"], info["nvcc_version"]) == (False, [], None)


@pytest.mark.parametrize("compiled, binaries, message", [
    (["120a-real"], {"llama-server": "a" * 64}, "compiled 120a-real but the plan asked for 90-real;120a-real"),
    (None, {"llama-server": "a" * 64}, "without CMAKE_CUDA_ARCHITECTURES"),
    (["90-real", "120a-real"], {}, "no binaries"),
])
def test_build_info_refuses_what_was_not_built(compiled, binaries, message):
    with pytest.raises(lc.LlamaCppError, match=message):
        lc.compose_build_info(PLAN, TOOLCHAIN, VERSION, binaries, compiled, {}, "node-a")


# --- one build for every node that can share it -----------------------------------------------------

def node(host, compute_caps, driver_cuda="13.0", cpu_arch="x86_64", glibc="2.36", mismatch=False, name=None):
    return {"host": host, "cpu_arch": cpu_arch, "glibc_version": glibc, "driver_version": "580.95.05",
            "driver_cuda_version": driver_cuda, "gpu_driver": {"mismatch": mismatch, "message": "reboot %s" % host},
            "gpus": [{"name": name or "GPU %s" % cap, "compute_cap": cap} for cap in compute_caps]}


BUILD_HOST = {"cpu_arch": "x86_64", "glibc_version": "2.36", "nvcc_path": "/usr/local/cuda/bin/nvcc",
              "nvcc_version": "12.8.93"}


def test_union_of_every_sharing_node_is_one_build():
    # The lab: an sm_90 node beside sm_120 nodes gets one build for both architectures.
    nodes = [node("node-a", ["12.0", "12.0"]), node("node-b", ["12.0"]), node("node-c", ["9.0"])]
    targets = lc.plan_build_targets("auto", BUILD_HOST, nodes)
    assert targets == {"cuda": True, "cuda_architectures": ["90-real", "120a-real"],
                       "sharing_hosts": ["node-a", "node-b", "node-c"], "local_hosts": {}}


def test_only_what_cannot_share_binaries_builds_locally():
    nodes = [node("node-a", ["12.0"]), node("arm", ["9.0"], cpu_arch="aarch64"),
             node("old-glibc", ["8.6"], glibc="2.31"), node("cuda11", ["8.0"], driver_cuda="11.8")]
    targets = lc.plan_build_targets("auto", BUILD_HOST, nodes)
    assert targets["cuda_architectures"] == ["120a-real"]
    assert targets["sharing_hosts"] == ["node-a"]
    assert sorted(targets["local_hosts"]) == ["arm", "cuda11", "old-glibc"]
    assert "cpu arch aarch64" in targets["local_hosts"]["arm"][0]
    assert "an older major" in targets["local_hosts"]["cuda11"][0]


def test_cpu_build_ignores_toolkit_and_drivers():
    nodes = [node("node-a", ["12.0"], driver_cuda="12.6", mismatch=True), node("node-c", ["9.0"])]
    targets = lc.plan_build_targets("off", BUILD_HOST, nodes)
    assert (targets["cuda"], targets["cuda_architectures"]) == (False, [])
    assert targets["sharing_hosts"] == ["node-a", "node-c"]


def test_no_nvcc_and_no_gpu_is_a_cpu_build():
    targets = lc.plan_build_targets("auto", dict(BUILD_HOST, nvcc_path=None, nvcc_version=None), [node("cpu", [])])
    assert targets["cuda"] is False


def test_driver_upgraded_without_reboot_is_refused_not_built_for_cpu():
    nodes = [node("node-a", ["12.0"]), dict(node("node-b", []), gpu_driver={"mismatch": True, "message": "reboot node-b"})]
    with pytest.raises(lc.LlamaCppError, match="node-b: reboot node-b"):
        lc.plan_build_targets("auto", BUILD_HOST, nodes)


def test_an_inventory_driver_unlike_its_kernel_module_is_refused():
    # gpu-inventory.json's driver: the userspace driver and the loaded kernel module differ after an
    # upgrade without a reboot.
    inventory = {"driver_version": "590.44.01", "kernel_module_version": "580.95.05", "cuda_version": "13.1"}
    nodes = [node("node-a", ["12.0"]), dict(node("node-b", ["12.0"]), gpu_driver=inventory)]
    with pytest.raises(lc.LlamaCppError, match="node-b: the NVIDIA userspace driver 590.44.01 and the loaded kernel module "
                                               "580.95.05 differ .Driver/library version mismatch.: reboot the node, then "
                                               "run gpu_preflight again"):
        lc.plan_build_targets("auto", BUILD_HOST, nodes)
    same = dict(inventory, kernel_module_version="590.44.01")
    assert lc.node_driver_error(dict(node("node-b", ["12.0"]), gpu_driver=same)) is None
    cpu = {"driver_version": None, "kernel_module_version": None, "cuda_version": None}
    assert lc.node_driver_error(dict(node("cpu", []), gpu_driver=cpu)) is None


def test_override_must_cover_every_sharing_gpu():
    nodes = [node("node-a", ["12.0"]), node("node-c", ["9.0"], name="NVIDIA H200")]
    with pytest.raises(lc.LlamaCppError, match="NVIDIA H200 on node-c .compute capability 9.0. is not covered"):
        lc.plan_build_targets("on", BUILD_HOST, nodes, ["120"])
    assert lc.plan_build_targets("on", BUILD_HOST, nodes, ["120", "90-real"])["cuda_architectures"] == [
        "90-real", "120a"]


def test_override_too_new_for_the_toolkit_is_refused():
    with pytest.raises(lc.LlamaCppError, match=r"architecture 121a \(compute capability 12.1\) needs CUDA toolkit 12.9 or newer; the toolkit found is 12.8.93"):
        lc.plan_build_targets("on", BUILD_HOST, [], ["121"])


# --- the one lockstep rule (distribution and the head) -----------------------------------------------


# --- pruning -----------------------------------------------------------------------------------------

INSTALLED = [("aaaaaaaaaaa1", 100), ("aaaaaaaaaaa2", 200), ("aaaaaaaaaaa3", 300), ("aaaaaaaaaaa4", 400)]


@pytest.mark.parametrize("current, previous, referenced, keep, expected", [
    ("aaaaaaaaaaa4", "aaaaaaaaaaa3", [], 2, ["aaaaaaaaaaa1", "aaaaaaaaaaa2"]),
    # The previous build is kept even when it is the oldest (rollback).
    ("aaaaaaaaaaa4", "aaaaaaaaaaa1", [], 2, ["aaaaaaaaaaa2", "aaaaaaaaaaa3"]),
    # A build a unit still references is never removed, even beyond keep.
    ("aaaaaaaaaaa4", "aaaaaaaaaaa3", ["aaaaaaaaaaa1"], 2, ["aaaaaaaaaaa2"]),
    ("aaaaaaaaaaa4", "aaaaaaaaaaa3", [], 3, ["aaaaaaaaaaa1"]),
    ("aaaaaaaaaaa4", None, [], 2, ["aaaaaaaaaaa1", "aaaaaaaaaaa2"]),
    ("aaaaaaaaaaa4", "aaaaaaaaaaa3", [], 9, []),
])
def test_prune_selection(current, previous, referenced, keep, expected):
    assert lc.select_prunable(INSTALLED, current, previous, referenced, keep) == expected


@pytest.mark.parametrize("keep", [1, 0, -3, "two", None])
def test_keep_builds_below_two_is_refused(keep):
    with pytest.raises(lc.LlamaCppError, match="llama_cpp_keep_builds is"):
        lc.check_keep_builds(keep)


def test_referenced_build_ids_are_read_from_wrappers_and_units():
    texts = ["exec /opt/gpulab/llama.cpp/0123456789ab/bin/llama-server --port 8080\n",
             "ExecStart=/opt/gpulab/bin/rpc-server-wrapper\n# /opt/gpulab/llama.cpp/current/bin\n",
             "/opt/gpulab/llama.cpp/abcdefabcdef0/bin (13 digits: not a build id)\n"
             "/other/llama.cpp/fedcba987654/bin\n"]
    assert lc.referenced_build_ids(texts, "/opt/gpulab/llama.cpp/") == ["0123456789ab"]


@pytest.mark.parametrize("current", ["aaaaaaaaaaa9", "", None, "aaaaaaaaaaa4\n", 12])
def test_prune_refuses_a_current_that_is_not_installed(current):
    with pytest.raises(lc.LlamaCppError, match="current build"):
        lc.select_prunable(INSTALLED, current, "aaaaaaaaaaa3", [], 2)


def test_prune_keeps_linked_and_running_builds_beyond_keep():
    assert lc.select_prunable(INSTALLED, "aaaaaaaaaaa4", "aaaaaaaaaaa3", [], 2,
                              linked=["aaaaaaaaaaa1"], running=["aaaaaaaaaaa2"]) == []


def test_node_surveys_take_a_node_s_own_survey_before_the_build_host_s():
    own = {"node-a": {"node": {"host": "node-a"}}, "node-b": {"skipped": True}, "node-c": None}
    here = [{"item": "node-b", "node": {"host": "node-b (build host's)"}}, {"item": "node-a", "node": {"host": "other"}}]
    assert lc.unsurveyed(["node-a", "node-b", "node-c"], own) == ["node-b", "node-c"]
    assert lc.node_surveys(["node-b", "node-a"], own, here) == [{"host": "node-b (build host's)"}, {"host": "node-a"}]
    with pytest.raises(lc.LlamaCppError, match="^node-c has no survey for the build"):
        lc.node_surveys(["node-a", "node-c"], own, here)
