"""CUDA rules: toolkit per compute capability, driver per toolkit, architectures as compiled."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import cuda

RTX_PRO_6000 = ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0")
H200 = ("NVIDIA H200", "9.0")
B200 = ("NVIDIA B200", "10.0")
GB300 = ("NVIDIA GB300", "10.3")
DGX_SPARK = ("NVIDIA GB10", "12.1")
V100 = ("Tesla V100-SXM2-32GB", "7.0")

# The CUDA version nvidia-smi reports ("CUDA Version") for each driver branch (NVIDIA's CUDA
# release notes, table 3): 560 -> 12.6, 570 -> 12.8, 580 -> 13.0.
DRIVER_CUDA = {"560": "12.6", "570": "12.8", "575": "12.9", "580": "13.0"}

TOOLKIT_OLD = "needs CUDA toolkit"
DRIVER_OLD = "older than the CUDA toolkit"


@pytest.mark.parametrize("gpu, toolkit, driver, refusals", [
    # RTX PRO 6000 Blackwell (12.0): toolkit 12.8 or newer, driver covering the toolkit.
    (RTX_PRO_6000, "12.6.85", "560", [TOOLKIT_OLD]),
    (RTX_PRO_6000, "12.6.85", "570", [TOOLKIT_OLD]),
    (RTX_PRO_6000, "12.6.85", "580", [TOOLKIT_OLD]),
    (RTX_PRO_6000, "12.8.93", "560", [DRIVER_OLD]),
    (RTX_PRO_6000, "12.8.93", "570", []),
    (RTX_PRO_6000, "12.8.93", "580", []),
    (RTX_PRO_6000, "13.0.48", "560", [DRIVER_OLD]),
    (RTX_PRO_6000, "13.0.48", "570", [DRIVER_OLD]),
    (RTX_PRO_6000, "13.0.48", "580", []),
    # Hopper from 11.8; data-centre Blackwell 10.0 from 12.8, 10.3 from 12.9; GB10 (12.1) from 12.9.
    (H200, "12.6.85", "560", []),
    (H200, "12.8.93", "560", [DRIVER_OLD]),
    (B200, "12.6.85", "570", [TOOLKIT_OLD]),
    (B200, "12.8.93", "570", []),
    (GB300, "12.8.93", "580", [TOOLKIT_OLD]),
    (GB300, "12.9.41", "575", []),
    (DGX_SPARK, "12.8.93", "580", [TOOLKIT_OLD]),
    (DGX_SPARK, "12.9.41", "580", []),
    (DGX_SPARK, "12.9.41", "570", [DRIVER_OLD]),
    # Both wrong at once: both are named, the toolkit first.
    (GB300, "12.8.93", "560", [TOOLKIT_OLD, DRIVER_OLD]),
    (RTX_PRO_6000, "13.0.48", "560", [DRIVER_OLD]),
    # CUDA 13 no longer compiles for Volta.
    (V100, "13.0.48", "580", ["no longer supported by CUDA toolkit 13.0.48"]),
    (V100, "12.8.93", "580", []),
])
def test_gpu_toolkit_driver_triples(gpu, toolkit, driver, refusals):
    name, compute_cap = gpu
    node = {"host": "node-b", "driver_version": driver + ".00", "driver_cuda_version": DRIVER_CUDA[driver],
            "gpus": [{"name": name, "compute_cap": compute_cap}]}
    problems = cuda.check_cuda_build([node], toolkit)
    assert len(problems) == len(refusals), problems
    for problem, expected in zip(problems, refusals):
        assert expected in problem


def test_toolkit_refusal_names_gpu_compute_capability_toolkit_and_minimum():
    problem = cuda.toolkit_problem(RTX_PRO_6000[0], "12.0", "12.6.85", "node-a")
    assert problem == (
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition on node-a (compute capability 12.0) needs CUDA "
        "toolkit 12.8 or newer; the toolkit found is 12.6.85. Upgrade the CUDA toolkit on the build host "
        "(or point llama_cpp_nvcc_path at a newer nvcc).")


def test_driver_refusal_names_both_versions_and_what_to_upgrade():
    problem = cuda.driver_problem("12.6", "12.8.93", "node-b", "560.35.03")
    assert "the NVIDIA driver on node-b (560.35.03) supports CUDA 12.6" in problem
    assert "older than the CUDA toolkit 12.8.93" in problem
    assert "upgrade the driver on node-b to one that supports CUDA 12.8 (driver branch 570 or newer)" in problem
    assert "cuda-compat-12-8" in problem and "llama_cpp_cuda_forward_compat" in problem


def test_forward_compat_accepts_an_older_driver():
    assert cuda.driver_problem("12.6", "12.8.93", "node-b", forward_compat=True) is None


def test_missing_driver_is_named():
    assert "reports no CUDA version" in cuda.driver_problem(None, "12.8.93", "node-b")


def test_one_refusal_per_gpu_model_and_per_node():
    nodes = [{"host": h, "driver_cuda_version": "12.6", "gpus": [{"name": RTX_PRO_6000[0], "compute_cap": "12.0"}] * 2}
             for h in ("node-a", "node-b")]
    problems = cuda.check_cuda_build(nodes, "12.6.85")
    assert len(problems) == 1
    assert problems == [cuda.toolkit_problem(RTX_PRO_6000[0], "12.0", "12.6.85", "node-a")]


def test_unknown_compute_capability_is_left_to_nvcc():
    assert cuda.toolkit_problem("future GPU", "13.5", "13.0.48") is None


@pytest.mark.parametrize("arch, compiled", [
    # ggml/src/ggml-cuda/CMakeLists.txt: ^12[0-9](-real|-virtual)?$ -> 12Xa.
    ("120", "120a"), ("120-real", "120a-real"), ("121-virtual", "121a-virtual"), ("120a-real", "120a-real"),
    ("120f", "120f"), ("90", "90"), ("90-real", "90-real"), ("100", "100"), ("86-real", "86-real"),
])
def test_arch_as_llama_cpp_compiles_it(arch, compiled):
    assert cuda.compiled_arch(arch) == compiled


@pytest.mark.parametrize("cap, compiled", [("12.0", "120a-real"), ("12.1", "121a-real"), ("9.0", "90-real"),
                                           ("10.0", "100-real"), ("8.6", "86-real")])
def test_arch_compiled_for_each_gpu(cap, compiled):
    assert cuda.compiled_arch_for_compute_cap(cap) == compiled
    assert cuda.arch_compute_cap(compiled) == cap


@pytest.mark.parametrize("bad", ["sm_120", "12.0", "native", "all", "120b"])
def test_malformed_arch_is_named(bad):
    with pytest.raises(cuda.CudaError) as error:
        cuda.compiled_arch(bad)
    assert repr(bad) in str(error.value)


@pytest.mark.parametrize("arch, cap, runs", [
    ("120a-real", "12.0", True), ("120a-real", "12.1", False), ("90-real", "12.0", False),
    ("100f", "10.3", True), ("103f", "10.0", False), ("90-real", "9.0", True), ("90-real", "bogus", False),
])
def test_compiled_arch_runs_on(arch, cap, runs):
    assert cuda.compiled_arch_runs_on(arch, cap) is runs


@pytest.mark.parametrize("version, parsed", [("12.8.93", (12, 8)), ("13.0", (13, 0)), ("", None), (None, None), ("v12", None)])
def test_major_minor(version, parsed):
    assert cuda.major_minor(version) == parsed


# One compute-capability parser for gpu_facts, nvidia-smi's answers and the build's architectures.
@pytest.mark.parametrize("cap, arch", [
    ("12.0", "120"),   # Blackwell workstation (RTX PRO 6000)
    ("10.0", "100"),   # Blackwell datacenter
    ("9.0", "90"),     # Hopper (H200)
    ("8.9", "89"),     # Ada
    ("8.6", "86"),     # Ampere consumer
    ("7.5", "75"),     # Turing
    ("12.1", "121"),
    (" 12.1 ", "121"),
])
def test_compute_cap_maps_to_cmake_arch(cap, arch):
    assert cuda.compute_cap_arch(cap) == arch


@pytest.mark.parametrize("cap", ["12", "sm_120", "", "12.0.1", "twelve", "9", "x.y", None])
def test_malformed_compute_cap_is_rejected(cap):
    with pytest.raises(cuda.CudaError, match="compute capability .* MAJOR.MINOR"):
        cuda.compute_cap_arch(cap)
