# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind the llama.cpp build and distribution roles.

Nothing here runs a command or touches a file: callers hand in captured text
and get values back, so every rule is unit-tested with plain strings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    cuda_arch_from_compute_cap,
)

BUILD_ID_LENGTH = 12
BUILD_ID_PATTERN = re.compile(r"^[0-9a-f]{%d}$" % BUILD_ID_LENGTH)

# One CMAKE_CUDA_ARCHITECTURES entry: SM number, optional arch-specific (a) or
# family-specific (f) suffix, e.g. 90, 90a, 100f, 120a.
CUDA_ARCH_PATTERN = re.compile(r"^(?P<base>[1-9][0-9]{1,2})(?P<suffix>[af]?)$")

BUILD_INFO_REQUIRED_KEYS = (
    "build_id",
    "source",
    "cmake_options",
    "cuda",
    "cuda_architectures",
    "nvcc_version",
    "compiler",
    "cpu_arch",
    "glibc_version",
    "rpc_server_binary",
    "binaries",
)


class LlamaCppError(ValueError):
    """Bad input: the message names the offending value and what to do."""


# --- GPU architectures -------------------------------------------------------

def compute_cap_to_cuda_arch(compute_cap):
    """'12.0' -> '120', '9.0' -> '90', '8.6' -> '86': gpu_facts' mapping, with this module's error."""
    try:
        return cuda_arch_from_compute_cap(str(compute_cap))
    except NvidiaSmiParseError:
        raise LlamaCppError(
            "compute capability %r is not of the form MAJOR.MINOR (e.g. 12.0, 9.0, 8.6)"
            % (compute_cap,)) from None


def _arch_sort_key(arch):
    match = CUDA_ARCH_PATTERN.match(arch)
    return (int(match.group("base")), match.group("suffix"))


def validate_cuda_architectures(architectures):
    """Check an override list and return it normalised (strings, unique, sorted).

    Raises LlamaCppError naming every entry that is not an SM number with an
    optional a/f suffix, so a typo such as '12.0', 'sm_90' or '9O' stops the play.
    """
    if isinstance(architectures, str):
        architectures = [item for item in re.split(r"[;,\s]+", architectures) if item]
    bad = []
    normalised = []
    for item in architectures or []:
        text = str(item).strip().lower()
        if not CUDA_ARCH_PATTERN.match(text):
            bad.append(str(item))
        elif text not in normalised:
            normalised.append(text)
    if bad:
        raise LlamaCppError(
            "llama_cpp_cuda_architectures has invalid entries %s: each must be an SM number "
            "with an optional 'a' or 'f' suffix, e.g. 90, 90a, 100f, 120 (compute capability "
            "12.0 is written 120)" % ", ".join(repr(b) for b in bad))
    return sorted(normalised, key=_arch_sort_key)


def architectures_from_gpus(gpus):
    """Sorted unique CUDA architectures of gathered GPU facts.

    Each item carries `cuda_arch` ('120') or at least `compute_cap` ('12.0').
    """
    found = []
    for gpu in gpus or []:
        arch = gpu.get("cuda_arch") or compute_cap_to_cuda_arch(gpu.get("compute_cap", ""))
        arch = str(arch)
        if arch not in found:
            found.append(arch)
    return validate_cuda_architectures(found)


def arch_covers(build_arch, gpu_arch):
    """True when code built for `build_arch` runs natively on a GPU of `gpu_arch`.

    Plain and 'a' entries match their own SM only; an 'f' (family) entry also
    matches later minor versions of the same major (100f runs on 100 and 103).
    """
    built = CUDA_ARCH_PATTERN.match(str(build_arch))
    gpu = CUDA_ARCH_PATTERN.match(str(gpu_arch))
    if not built or not gpu:
        return False
    built_base, gpu_base = int(built.group("base")), int(gpu.group("base"))
    if built.group("suffix") == "f":
        return built_base // 10 == gpu_base // 10 and gpu_base >= built_base
    return built_base == gpu_base


# --- Captured tool output ----------------------------------------------------

def parse_nvcc_version(text):
    """'Cuda compilation tools, release 12.8, V12.8.93' -> '12.8.93' (None if absent)."""
    match = re.search(r"release\s+([0-9]+\.[0-9]+)(?:,\s*V([0-9][0-9.]*))?", text or "")
    if not match:
        return None
    return match.group(2) or match.group(1)


def parse_compiler_version(text):
    """First line of `c++ --version` -> {'id': 'gnu'|'clang'|..., 'version': '12.2.0'}."""
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    version = re.search(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)(?!.*[0-9]+\.[0-9]+)", first)
    lowered = first.lower()
    if "clang" in lowered:
        compiler_id = "clang"
    elif lowered.startswith(("c++", "g++", "gcc", "cc ")) or "gcc" in lowered or "(gcc)" in lowered:
        compiler_id = "gnu"
    else:
        compiler_id = "unknown"
    return {"id": compiler_id, "version": version.group(1) if version else None}


def parse_cmake_version(text):
    """'cmake version 3.25.1' -> '3.25.1' (None if absent)."""
    match = re.search(r"cmake version\s+([0-9][0-9A-Za-z.\-]*)", text or "")
    return match.group(1) if match else None


def parse_glibc_version(text):
    """'glibc 2.36' (os.confstr) or a `ldd --version` line -> '2.36'."""
    match = re.search(r"(?:glibc|GLIBC|GNU libc)[^0-9]*([0-9]+\.[0-9]+)", text or "")
    if not match:
        match = re.search(r"\)\s+([0-9]+\.[0-9]+)\s*$", (text or "").splitlines()[0] if text else "")
    return match.group(1) if match else None


def parse_driver_versions(text):
    """`nvidia-smi --version` or the plain banner -> {'driver_version': '580.159.04', 'cuda_version': '13.0'}."""
    driver = re.search(r"DRIVER [Vv]ersion\s*:\s*([0-9][0-9.]*)", text or "", re.IGNORECASE)
    cuda = re.search(r"CUDA Version\s*:\s*([0-9]+\.[0-9]+)", text or "", re.IGNORECASE)
    return {
        "driver_version": driver.group(1) if driver else None,
        "cuda_version": cuda.group(1) if cuda else None,
    }


def version_tuple(version):
    """'2.36' -> (2, 36); None or garbage -> ()."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", str(version or "")))


# --- llama.cpp source tree ---------------------------------------------------

def rpc_server_target(cmakelists_text):
    """Target name in tools/rpc (or examples/rpc) CMakeLists.txt: 'ggml-rpc-server' or 'rpc-server'."""
    match = re.search(r"set\s*\(\s*TARGET\s+([A-Za-z0-9_.\-]+)\s*\)", cmakelists_text or "")
    if match:
        return match.group(1)
    match = re.search(r"add_executable\s*\(\s*([A-Za-z0-9_.\-]*rpc[A-Za-z0-9_.\-]*)\s", cmakelists_text or "")
    return match.group(1) if match else None


def has_rpc_rdma_option(cmakelists_text):
    """True when the ggml-rpc CMakeLists.txt declares the GGML_RPC_RDMA option."""
    return re.search(r"option\s*\(\s*GGML_RPC_RDMA\b", cmakelists_text or "") is not None


# --- Configuration -----------------------------------------------------------

def resolve_cuda(mode, nvcc_path, gpus):
    """auto|on|off -> bool. 'on' without nvcc is an error; auto needs nvcc and GPUs."""
    if mode not in ("auto", "on", "off"):
        raise LlamaCppError("llama_cpp_cuda is %r: use auto, on or off" % (mode,))
    if mode == "off":
        return False
    if mode == "on":
        if not nvcc_path:
            raise LlamaCppError(
                "llama_cpp_cuda is 'on' but no nvcc was found on this host: install the CUDA "
                "toolkit (or put nvcc on PATH / set llama_cpp_nvcc_path), or use 'auto' or 'off'")
        return True
    return bool(nvcc_path) and bool(gpus)


def resolve_rdma(mode, source_has_option, libibverbs_present, llama_cpp_version="this llama.cpp version"):
    """auto|on|off -> bool for GGML_RPC_RDMA."""
    if mode not in ("auto", "on", "off"):
        raise LlamaCppError("llama_cpp_rpc_rdma is %r: use auto, on or off" % (mode,))
    if mode == "off":
        return False
    if mode == "on":
        if not source_has_option:
            raise LlamaCppError(
                "llama_cpp_rpc_rdma is 'on' but %s has no GGML_RPC_RDMA option "
                "(ggml/src/ggml-rpc/CMakeLists.txt): use a newer llama.cpp or set it to auto/off"
                % llama_cpp_version)
        if not libibverbs_present:
            raise LlamaCppError(
                "llama_cpp_rpc_rdma is 'on' but libibverbs was not found on the build host: "
                "install libibverbs-dev (rdma-core) or set it to auto/off")
        return True
    return bool(source_has_option) and bool(libibverbs_present)


def _cmake_value(value):
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    return str(value)


def cmake_options(cuda, cuda_architectures, rdma, native=False, curl=False, build_number=None,
                  build_commit=None, extra=None):
    """Resolved -D options as a dict of strings (what the fingerprint hashes).

    Every switch the binaries' portability depends on is spelled out, so a
    default that changes between llama.cpp versions (or CMake auto-detection
    such as GGML_RPC_RDMA) cannot silently change what gets built.
    """
    options = {
        "CMAKE_BUILD_TYPE": "Release",
        "BUILD_SHARED_LIBS": False,
        "GGML_RPC": True,
        "GGML_RPC_RDMA": bool(rdma),
        "GGML_CUDA": bool(cuda),
        "GGML_NATIVE": bool(native),
        "LLAMA_CURL": bool(curl),
        "LLAMA_BUILD_TESTS": False,
        "LLAMA_BUILD_EXAMPLES": False,
    }
    if cuda:
        options["CMAKE_CUDA_ARCHITECTURES"] = ";".join(cuda_architectures)
    if build_number not in (None, ""):
        options["LLAMA_BUILD_NUMBER"] = str(build_number)
    if build_commit not in (None, ""):
        options["LLAMA_BUILD_COMMIT"] = str(build_commit)
    for key, value in (extra or {}).items():
        options[str(key)] = value
    return dict((key, _cmake_value(value)) for key, value in options.items())


def cmake_arguments(options):
    """Dict of options -> sorted ['-DKEY=VALUE', ...] for cmake's argv."""
    return ["-D%s=%s" % (key, options[key]) for key in sorted(options)]


# --- Fingerprint -------------------------------------------------------------

def canonical_json(value):
    """JSON with sorted keys and no whitespace: equal data, equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(source_id, options, nvcc_version, compiler, cuda_architectures):
    """The inputs that decide what gets built; the driver is deliberately absent."""
    if not source_id:
        raise LlamaCppError("the llama.cpp source id is empty: cannot fingerprint the build")
    return {
        "source": str(source_id),
        "cmake_options": dict((str(k), str(v)) for k, v in (options or {}).items()),
        "nvcc_version": str(nvcc_version) if nvcc_version else "none",
        "compiler": "%s %s" % (compiler.get("id"), compiler.get("version"))
        if isinstance(compiler, dict) else str(compiler),
        "cuda_architectures": sorted(str(a) for a in (cuda_architectures or [])),
    }


def build_id(fingerprint_data):
    """Short sha256 of the canonical JSON of a fingerprint."""
    digest = hashlib.sha256(canonical_json(fingerprint_data).encode("utf-8")).hexdigest()
    return digest[:BUILD_ID_LENGTH]


# --- BUILD_INFO.json ---------------------------------------------------------

def parse_build_info(text):
    """Load and check a BUILD_INFO.json; raises LlamaCppError naming what is missing."""
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise LlamaCppError("BUILD_INFO.json is not valid JSON: %s" % exc)
    if not isinstance(info, dict):
        raise LlamaCppError("BUILD_INFO.json must hold a JSON object")
    missing = [key for key in BUILD_INFO_REQUIRED_KEYS if key not in info]
    if missing:
        raise LlamaCppError("BUILD_INFO.json lacks %s" % ", ".join(missing))
    if not BUILD_ID_PATTERN.match(str(info["build_id"])):
        raise LlamaCppError("BUILD_INFO.json build_id %r is not a %d-digit hex id"
                            % (info["build_id"], BUILD_ID_LENGTH))
    if not isinstance(info["binaries"], dict) or not info["binaries"]:
        raise LlamaCppError("BUILD_INFO.json binaries must map each binary to its sha256")
    return info


def checksum_mismatches(expected, actual):
    """Names of binaries whose sha256 differs from BUILD_INFO (or that are missing)."""
    return sorted(name for name, digest in expected.items() if actual.get(name) != digest)


# --- Distribution ------------------------------------------------------------

def compatibility_problems(build_info, peer):
    """Why a peer cannot run the build host's binaries ([] = it can).

    peer: {'cpu_arch', 'glibc_version', 'driver_cuda_version', 'gpus': [{'cuda_arch'|'compute_cap'}]}
    Rules: same CPU architecture; glibc at least the build host's (static binaries
    still load the host's libc); for a CUDA build, the driver supports the toolkit's
    major version and every local GPU is in the build's architecture list.
    """
    problems = []
    if peer.get("cpu_arch") != build_info.get("cpu_arch"):
        problems.append("cpu arch %s differs from the build's %s"
                        % (peer.get("cpu_arch"), build_info.get("cpu_arch")))
    peer_glibc = version_tuple(peer.get("glibc_version"))
    build_glibc = version_tuple(build_info.get("glibc_version"))
    if not peer_glibc or peer_glibc < build_glibc:
        problems.append("glibc %s is older than the build host's %s"
                        % (peer.get("glibc_version"), build_info.get("glibc_version")))
    if build_info.get("cuda"):
        toolkit_major = version_tuple(build_info.get("nvcc_version"))[:1]
        driver_major = version_tuple(peer.get("driver_cuda_version"))[:1]
        if not driver_major:
            problems.append("no NVIDIA driver found for a CUDA build")
        elif driver_major < toolkit_major:
            problems.append("driver supports CUDA %s, older than the build's toolkit %s"
                            % (peer.get("driver_cuda_version"), build_info.get("nvcc_version")))
        built = build_info.get("cuda_architectures") or []
        for gpu in peer.get("gpus") or []:
            arch = str(gpu.get("cuda_arch") or compute_cap_to_cuda_arch(gpu.get("compute_cap", "")))
            if not any(arch_covers(b, arch) for b in built):
                problems.append("GPU architecture %s is not in the build's list %s"
                                % (arch, ";".join(built)))
    return problems


def lockstep_mismatches(expected, reported):
    """Hosts whose reported build id differs from the expected one.

    expected/reported: {host: build_id}. Returns [(host, expected_id, reported_id)].
    """
    return sorted((host, expected[host], reported.get(host))
                  for host in expected if reported.get(host) != expected[host])
