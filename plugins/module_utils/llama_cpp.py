# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind the llama.cpp build and distribution roles (what a build's BUILD_INFO.json
says, and the lockstep rule, are in llama_build_info.py).

Nothing here runs a command or touches a file: callers hand in captured text
and get values back, so every rule is unit-tested with plain strings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.cuda import (
    CudaError,
    arch_compute_cap,
    check_cuda_build,
    compiled_arch,
    compiled_arch_for_compute_cap,
    compiled_arch_runs_on,
    toolkit_problem,
)
from ansible_collections.gpulab.inference.plugins.module_utils.llama_build_info import (
    BUILD_ID_LENGTH,
    BUILD_ID_PATTERN,
    LlamaCppError,
    sharing_problems,
)


# One CMAKE_CUDA_ARCHITECTURES entry: SM number, optional arch-specific (a) or
# family-specific (f) suffix, optional -real (SASS only) or -virtual (PTX only),
# e.g. 90, 90-real, 100f, 120a-real.
CUDA_ARCH_PATTERN = re.compile(r"\A(?P<base>[1-9][0-9]{1,2})(?P<suffix>[af]?)(?P<kind>-real|-virtual)?\Z")
# Build ids in a text (wrapper scripts, unit files) that name a build directory.
BUILD_DIR_REF = r"/(?P<id>[0-9a-f]{%d})(?![0-9a-f])" % BUILD_ID_LENGTH
MIN_KEEP_BUILDS = 2


# --- GPU architectures -------------------------------------------------------

def _arch_sort_key(arch):
    match = CUDA_ARCH_PATTERN.match(arch)
    return (int(match.group("base")), match.group("suffix"), match.group("kind") or "")


def validate_cuda_architectures(architectures):
    """Check an override list and return it as llama.cpp compiles it (unique, sorted).

    Raises LlamaCppError naming every entry that is not an SM number with an optional
    a/f suffix and -real/-virtual, so a typo such as '12.0', 'sm_90' or '9O' stops the play.
    A plain 12X becomes 12Xa, as ggml/src/ggml-cuda/CMakeLists.txt rewrites it.
    """
    if isinstance(architectures, str):
        architectures = [item for item in re.split(r"[;,\s]+", architectures) if item]
    bad = []
    normalised = []
    for item in architectures or []:
        text = str(item).strip().lower()
        if not CUDA_ARCH_PATTERN.match(text):
            bad.append(str(item))
            continue
        text = compiled_arch(text)
        if text not in normalised:
            normalised.append(text)
    if bad:
        raise LlamaCppError(
            "llama_cpp_cuda_architectures has invalid entries %s: each must be an SM number "
            "with an optional 'a' or 'f' suffix and -real/-virtual, e.g. 90, 90-real, 100f, 120a-real "
            "(compute capability 12.0 is written 120)" % ", ".join(repr(b) for b in bad))
    return sorted(normalised, key=_arch_sort_key)


def architectures_from_gpus(gpus):
    """Sorted unique CUDA architectures, as compiled, for gathered GPU facts.

    Each item carries `compute_cap` ('12.0') or at least `cuda_arch` ('120'); every GPU gets
    SASS for exactly its architecture ('120a-real', '90-real').
    """
    found = []
    for gpu in gpus or []:
        compute_cap = gpu.get("compute_cap")
        try:
            if compute_cap:
                arch = compiled_arch_for_compute_cap(compute_cap)
            else:
                arch = compiled_arch(str(gpu.get("cuda_arch") or "") + "-real")
        except CudaError:
            raise LlamaCppError(
                "compute capability %r is not of the form MAJOR.MINOR (e.g. 12.0, 9.0, 8.6)"
                % (compute_cap if compute_cap else gpu.get("cuda_arch"),)) from None
        if arch not in found:
            found.append(arch)
    return validate_cuda_architectures(found)


def arch_covers(build_arch, gpu_arch):
    """True when code built for `build_arch` (e.g. '120a-real') runs natively on a GPU of `gpu_arch` ('120').

    Plain and 'a' entries match their own SM only; an 'f' (family) entry also
    matches later minor versions of the same major (100f runs on 100 and 103).
    """
    gpu = CUDA_ARCH_PATTERN.match(str(gpu_arch))
    if not gpu:
        return False
    base = gpu.group("base")
    return compiled_arch_runs_on(build_arch, "%s.%s" % (base[:-1], base[-1]))


def parse_cmake_cache_architectures(cache_text):
    """CMAKE_CUDA_ARCHITECTURES from a CMakeCache.txt, as llama.cpp compiles them (12X -> 12Xa).

    None when the cache has no such entry (a CPU build).
    """
    match = re.search(r"^CMAKE_CUDA_ARCHITECTURES(?::[A-Z]+)?=(.*)$", cache_text or "", re.MULTILINE)
    if not match:
        return None
    entries = [item for item in re.split(r"[;\s]+", match.group(1).strip()) if item]
    try:
        return [compiled_arch(item) for item in entries]
    except CudaError as exc:
        raise LlamaCppError("CMakeCache.txt: %s" % exc) from None


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


def parse_llama_version(text):
    """`llama-cli --version` -> {'version', 'build_number', 'commit', 'compiler', 'target'}.

    Two formats (common/build-info.cpp, common/arg.cpp in llama.cpp):
      version: b8070-0c1e570 (build 8070, commit 0c1e570)   (current)
      version: 4567 (0c1e570)                               (older: build number, commit)
    followed by "built with <compiler> for <target>". Raises LlamaCppError without a version line.
    """
    text = text or ""
    current = re.search(r"^version:\s*(\S+)\s+\(build\s+(-?[0-9]+),\s*commit\s+([^)\s]+)\)", text, re.MULTILINE)
    older = re.search(r"^version:\s*(-?[0-9]+)\s+\(([^)\s]+)\)", text, re.MULTILINE)
    built = re.search(r"^built with (.+?) for (.+?)\s*$", text, re.MULTILINE)
    if current:
        result = {"version": current.group(1), "build_number": current.group(2), "commit": current.group(3)}
    elif older:
        result = {"version": older.group(1), "build_number": older.group(1), "commit": older.group(2)}
    else:
        first = text.strip().splitlines()[0] if text.strip() else ""
        raise LlamaCppError("--version printed no 'version: ...' line (first line: %r): is this a llama.cpp binary?"
                            % first[:200])
    result["compiler"] = built.group(1) if built else None
    result["target"] = built.group(2) if built else None
    return result


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

def resolve_cuda(mode, nvcc_path, gpus, driver_error=None, architectures=None):
    """auto|on|off -> bool.

    'on' without nvcc is an error. 'auto' builds for the CPU only where there is no nvcc; with
    nvcc it builds for CUDA, and is an error when no GPU is visible (unless architectures are
    given) or the driver cannot be read (e.g. upgraded without a reboot): a CPU build there
    would be shipped to GPU nodes without anyone noticing.
    """
    if mode not in ("auto", "on", "off"):
        raise LlamaCppError("llama_cpp_cuda is %r: use auto, on or off" % (mode,))
    if mode == "off":
        return False
    if mode == "on":
        if not nvcc_path:
            raise LlamaCppError(
                "llama_cpp_cuda is 'on' but no nvcc was found on this host: install the CUDA "
                "toolkit (or put nvcc on PATH / set llama_cpp_nvcc_path), or use 'auto' or 'off'")
    elif not nvcc_path:
        return False
    if driver_error:
        raise LlamaCppError(
            "llama_cpp_cuda is %r and nvcc %s is present, but the NVIDIA driver cannot be used: %s "
            "(set llama_cpp_cuda: 'off' only if a CPU build is really wanted)" % (mode, nvcc_path, driver_error))
    if not gpus and not architectures:
        if mode == "on":
            raise LlamaCppError(
                "CUDA is on but no GPU architecture is known: no GPUs were gathered on the nodes, "
                "so set llama_cpp_cuda_architectures (e.g. ['120a-real'])")
        raise LlamaCppError(
            "llama_cpp_cuda is 'auto' and nvcc %s is present, but no NVIDIA GPU is visible on the nodes "
            "that will run the build (nvidia-smi missing or listing none): check the driver, or set "
            "llama_cpp_cuda: 'off' for a CPU build, or 'on' with llama_cpp_cuda_architectures" % nvcc_path)
    return True


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
    """The inputs that decide what gets built; the driver is deliberately absent.

    nvcc enters only when options say GGML_CUDA=ON.
    """
    if not source_id:
        raise LlamaCppError("the llama.cpp source id is empty: cannot fingerprint the build")
    cuda = str((options or {}).get("GGML_CUDA", "OFF")).upper() in ("ON", "TRUE", "1", "YES")
    return {
        "source": str(source_id),
        "cmake_options": dict((str(k), str(v)) for k, v in (options or {}).items()),
        # A CPU build does not use nvcc: a toolkit upgrade must not change its id.
        "nvcc_version": str(nvcc_version) if nvcc_version and cuda else "none",
        "compiler": "%s %s" % (compiler.get("id"), compiler.get("version"))
        if isinstance(compiler, dict) else str(compiler),
        "cuda_architectures": sorted(str(a) for a in (cuda_architectures or [])),
    }


def build_id(fingerprint_data):
    """Short sha256 of the canonical JSON of a fingerprint."""
    digest = hashlib.sha256(canonical_json(fingerprint_data).encode("utf-8")).hexdigest()
    return digest[:BUILD_ID_LENGTH]


# --- Distribution: who can share one build ---------------------------------

def run_problems(build_info, node):
    """Why a node that shares binaries would still fail with this build ([] = it runs it).

    Every GPU's architecture must be among those compiled (BUILD_INFO's spelling, e.g.
    120a-real), and the driver must cover the toolkit's major.minor (module_utils/cuda.py).
    """
    problems = []
    if not build_info.get("cuda"):
        return problems
    built = build_info.get("cuda_architectures") or []
    for gpu in node.get("gpus") or []:
        compute_cap = gpu.get("compute_cap")
        if not compute_cap:
            arch = str(gpu.get("cuda_arch") or "")
            compute_cap = "%s.%s" % (arch[:-1], arch[-1:]) if len(arch) >= 2 else ""
        if not any(compiled_arch_runs_on(b, compute_cap) for b in built):
            label = gpu.get("name") or ("%s" % gpu["index"] if gpu.get("index") is not None else "")
            problems.append("GPU %s(compute capability %s) is not among the build's architectures %s"
                            % (label + " " if label else "", compute_cap, ";".join(built) or "none"))
    problems.extend(check_cuda_build(
        [dict(node, gpus=[])], build_info.get("nvcc_version"), forward_compat=node.get("forward_compat", False)))
    return problems


def compatibility_problems(build_info, peer):
    """Why a peer cannot run the build host's binaries ([] = it can): sharing_problems + run_problems."""
    return sharing_problems(build_info, peer) or run_problems(build_info, peer)


def partition_nodes(build, nodes):
    """Split surveyed nodes into those that share the build host's binaries and those that build locally.

    Returns (sharing, local): sharing is the list of node dicts, local a list of (host, problems).
    """
    sharing, local = [], []
    for node in nodes or []:
        problems = sharing_problems(build, node)
        if problems:
            local.append((node.get("host"), problems))
        else:
            sharing.append(node)
    return sharing, local


# --- BUILD_INFO.json composition ---------------------------------------------

def compose_build_info(plan, toolchain, version, binaries, compiled_architectures, source, built_on):
    """The BUILD_INFO.json document of a staged build (a dict; the caller writes it).

    plan: llama_cpp_build_plan's result; toolchain: llama_cpp_toolchain's; version:
    parse_llama_version's; binaries: {name: sha256}; compiled_architectures: read back from the
    CMake cache (parse_cmake_cache_architectures), None for a CPU build; source: {'kind', 'id', ...}.
    """
    if not binaries:
        raise LlamaCppError("no binaries to record in BUILD_INFO.json")
    if plan.get("cuda"):
        if not compiled_architectures:
            raise LlamaCppError("CUDA build without CMAKE_CUDA_ARCHITECTURES in the CMake cache")
        if sorted(compiled_architectures) != sorted(plan.get("cuda_architectures") or []):
            raise LlamaCppError("the CMake cache compiled %s but the plan asked for %s: remove the build tree and run again"
                                % (";".join(compiled_architectures), ";".join(plan.get("cuda_architectures") or [])))
    return {
        "managed_by": "gpulab.inference",
        "build_id": plan["build_id"],
        "llama_cpp_version": version.get("version"),
        "build_number": version.get("build_number"),
        "commit": version.get("commit"),
        "source": source,
        "cmake_options": plan.get("cmake_options") or {},
        "cuda": bool(plan.get("cuda")),
        "cuda_architectures": list(compiled_architectures or []) if plan.get("cuda") else [],
        "rpc_rdma": bool(plan.get("rpc_rdma")),
        "nvcc_version": toolchain.get("nvcc_version") if plan.get("cuda") else None,
        "compiler": (plan.get("fingerprint") or {}).get("compiler"),
        "driver_version": toolchain.get("driver_version"),
        "cpu_arch": toolchain.get("cpu_arch"),
        "glibc_version": toolchain.get("glibc_version"),
        "built_on": built_on,
        "fingerprint": plan.get("fingerprint") or {},
        "rpc_server_binary": plan.get("rpc_server_binary"),
        "binaries": dict(binaries),
    }


# --- Pruning -----------------------------------------------------------------

def check_keep_builds(keep):
    """llama_cpp_keep_builds must keep current and the previous build (rollback)."""
    try:
        keep = int(keep)
    except (TypeError, ValueError):
        raise LlamaCppError("llama_cpp_keep_builds is %r: use a whole number, 2 or more" % (keep,))
    if keep < MIN_KEEP_BUILDS:
        raise LlamaCppError(
            "llama_cpp_keep_builds is %d: it counts the current build and the previous one, which is kept "
            "for rollback, so use %d or more" % (keep, MIN_KEEP_BUILDS))
    return keep


def referenced_build_ids(texts, install_dir):
    """Build ids that appear as <install_dir>/<id> in any of the texts (wrappers, unit files)."""
    pattern = re.compile(re.escape(str(install_dir).rstrip("/")) + BUILD_DIR_REF)
    found = set()
    for text in texts or []:
        found.update(match.group("id") for match in pattern.finditer(text or ""))
    return sorted(found)


def select_prunable(installed, current, previous, referenced, keep, linked=(), running=()):
    """Build ids to remove: never current, the previous one, a referenced, linked or running one.

    installed: [(build_id, mtime)]; keep counts current. linked: the ids the install directory's
    links (current) resolve to; running: the ids whose binaries a process runs. Returns ids,
    oldest first. A current that is not installed is an error: with a typo or a dangling link
    nothing would protect the build that serves.
    """
    keep = check_keep_builds(keep)
    ids = [bid for bid, _mtime in installed or []]
    if not isinstance(current, str) or not BUILD_ID_PATTERN.match(current):
        raise LlamaCppError("current build id %r is not a %d-digit hex build id; pass the build id the current "
                            "link points at" % (current, BUILD_ID_LENGTH))
    if current not in ids:
        raise LlamaCppError("current build %s is not installed (installed: %s); nothing is pruned until current "
                            "names an installed build: check the current link and the build id passed"
                            % (current, ", ".join(sorted(ids)) or "none"))
    protected = set([current, previous]) | set(referenced or []) | set(linked or []) | set(running or [])
    protected.discard(None)
    newest_first = sorted(installed or [], key=lambda item: (-item[1], item[0]))
    kept = [bid for bid, _mtime in newest_first if bid in protected]
    prunable = []
    for bid, _mtime in newest_first:
        if bid in protected:
            continue
        if len(kept) < keep:
            kept.append(bid)
        else:
            prunable.append(bid)
    return list(reversed(prunable))


# --- What one build must cover -----------------------------------------------

def node_driver_error(node):
    """Why a surveyed node's driver cannot be used (None when it can or the node has no GPU).

    node['gpu_driver'] is the driver of the node's gpu-inventory.json (driver_version,
    kernel_module_version, cuda_version) or gpu_facts' gpulab_gpu_driver: after a driver upgrade
    without a reboot the userspace driver differs from the loaded kernel module, or gpu_facts says
    mismatch=true.
    """
    driver = node.get("gpu_driver") or {}
    if driver.get("mismatch"):
        return "%s: %s" % (node.get("host"), driver.get("message") or
                           "the NVIDIA driver was upgraded without a reboot (driver/library version mismatch): reboot it")
    userspace, kernel = driver.get("driver_version"), driver.get("kernel_module_version")
    if userspace and kernel and userspace != kernel:
        return ("%s: the NVIDIA userspace driver %s and the loaded kernel module %s differ (Driver/library version "
                "mismatch): reboot the node, then run gpu_preflight again" % (node.get("host"), userspace, kernel))
    return None


def plan_build_targets(mode, toolchain, nodes, override_architectures=None, forward_compat=False):
    """Decide CUDA on/off and the architectures of the one build every sharing node runs.

    toolchain: the build host's (llama_cpp_toolchain); nodes: one survey per host that is to run
    the build ({'host', 'cpu_arch', 'glibc_version', 'driver_version', 'driver_cuda_version',
    'gpu_driver', 'gpus'}). The architectures are the union of the GPUs of every node that can
    share the build host's binaries (partition_nodes), so one build id serves them all.
    Raises LlamaCppError, listing every problem, for a toolkit too old (or too new) for a GPU,
    a driver too old for the toolkit, a driver upgraded without a reboot, or nvcc without GPUs.
    Returns {'cuda', 'cuda_architectures', 'sharing_hosts', 'local_hosts': {host: [problems]}}.
    """
    nvcc = toolchain.get("nvcc_path")
    tentative = mode != "off" and bool(nvcc)
    build = {"cpu_arch": toolchain.get("cpu_arch"), "glibc_version": toolchain.get("glibc_version"),
             "cuda": tentative, "nvcc_version": toolchain.get("nvcc_version")}
    sharing, local = partition_nodes(build, nodes)
    gpus = [gpu for node in sharing for gpu in node.get("gpus") or []]
    driver_errors = [error for error in (node_driver_error(node) for node in sharing) if error]
    overrides = validate_cuda_architectures(override_architectures) if override_architectures else []
    cuda = resolve_cuda(mode, nvcc, gpus, "; ".join(driver_errors) or None, overrides)
    if not cuda:
        build["cuda"] = False
        sharing, local = partition_nodes(build, nodes)
        architectures = []
    else:
        architectures = overrides or architectures_from_gpus(gpus)
        problems = check_cuda_build(sharing, toolchain.get("nvcc_version"), forward_compat)
        for arch in overrides:
            problem = toolkit_problem_for_arch(arch, toolchain.get("nvcc_version"))
            if problem:
                problems.append(problem)
        if overrides:
            for node in sharing:
                for gpu in node.get("gpus") or []:
                    if not any(compiled_arch_runs_on(a, gpu.get("compute_cap")) for a in overrides):
                        problems.append(
                            "%s on %s (compute capability %s) is not covered by llama_cpp_cuda_architectures %s: "
                            "add %s or leave the list empty to build for every node's GPUs"
                            % (gpu.get("name"), node.get("host"), gpu.get("compute_cap"), ";".join(overrides),
                               compiled_arch_for_compute_cap(gpu.get("compute_cap"))))
        if problems:
            raise LlamaCppError("refusing to build llama.cpp with CUDA %s: %s"
                                % (toolchain.get("nvcc_version"), " | ".join(problems)))
    return {
        "cuda": cuda,
        "cuda_architectures": architectures,
        "sharing_hosts": [node.get("host") for node in sharing],
        "local_hosts": dict(local),
    }


def toolkit_problem_for_arch(arch, toolkit_version):
    """toolkit_problem for an architecture entry of llama_cpp_cuda_architectures."""
    return toolkit_problem("architecture %s" % arch, arch_compute_cap(arch), toolkit_version)


def source_record(kind, source_id, version=None):
    """BUILD_INFO's `source`: {'kind', 'id'} plus the git version or the archive's sha256."""
    record = {"kind": kind, "id": source_id}
    if kind == "git":
        record["version"] = version
    elif str(source_id).startswith("archive:sha256:"):
        record["archive_sha256"] = str(source_id)[len("archive:sha256:"):]
    return record


def _own_survey(result):
    """The `node` of a survey's registered result, or None (skipped, failed, absent)."""
    return result.get("node") if isinstance(result, dict) else None


def node_surveys(nodes, self_surveys, surveyed_here=()):
    """Each node's survey (llama_cpp_toolchain's `node`), in the order of nodes.

    self_surveys: {node: the result of the survey it ran on itself in this play (role
    llama_cpp_build's entry point survey), or None}; surveyed_here: the results of the build host's
    own survey of the nodes without one (a loop's results, each with its `item`). A node with
    neither raises LlamaCppError naming it.
    """
    here = dict((result.get("item"), result.get("node")) for result in surveyed_here or () if isinstance(result, dict))
    surveys = []
    for node in nodes:
        survey = _own_survey(self_surveys.get(node)) or here.get(node)
        if not survey:
            raise LlamaCppError("%s has no survey for the build: run role gpulab.inference.llama_cpp_build's survey on it "
                                "in this play (playbooks/build.yml does), or leave it out of llama_cpp_build_nodes" % node)
        surveys.append(survey)
    return surveys


def unsurveyed(nodes, self_surveys):
    """The nodes without a survey of their own in self_surveys (see node_surveys), in order."""
    return [node for node in nodes if not _own_survey(self_surveys.get(node))]
