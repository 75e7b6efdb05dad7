# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""CUDA rules: which toolkit can build for a GPU, which driver can run what a toolkit built.

Pure functions over version strings and GPU facts; nothing here runs a command.

Sources of the tables:
- llama.cpp, ggml/src/ggml-cuda/CMakeLists.txt: the architecture comments ("86 == RTX 3000,
  needs CUDA v11.1", "89 ... needs CUDA v11.8", "90 ... needs CUDA v11.8", "120 == Blackwell,
  needs CUDA v12.8"), 121a only from CUDA 12.9, 50/61/70 only below CUDA 13, and the rewrite of
  every plain 12X (with an optional -real/-virtual suffix) into the architecture-specific 12Xa
  ("Blackwell FP4 tensor core instructions are not forwards compatible and therefore need 12Xa").
- NVIDIA CUDA Toolkit release notes: the GPU targets each nvcc release added (8.0 in 11.0, 8.6 in
  11.1, 8.7 in 11.4, 8.9/9.0 in 11.8, 10.0/10.1/12.0 in 12.8, 10.3/12.1 in 12.9, 11.0 in 13.0,
  which renamed 10.1 to 11.0), CUDA 13.0 dropping offline compilation for compute capabilities
  below 7.5, and table 3 "CUDA Toolkit and Corresponding Driver Versions" (the minimum Linux
  driver branch of each toolkit release).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


class CudaError(ValueError):
    """Bad input: the message names the offending value and what to do."""


# Compute capability -> (first toolkit that compiles for it, first toolkit that no longer does).
# None: still supported by the newest toolkit this table knows (13.0).
TOOLKIT_RANGE_BY_COMPUTE_CAP = {
    "5.0": ("6.0", "13.0"),
    "5.2": ("6.5", "13.0"),
    "5.3": ("7.0", "13.0"),
    "6.0": ("8.0", "13.0"),
    "6.1": ("8.0", "13.0"),
    "6.2": ("8.0", "13.0"),
    "7.0": ("9.0", "13.0"),
    "7.2": ("10.0", "13.0"),
    "7.5": ("10.0", None),
    "8.0": ("11.0", None),
    "8.6": ("11.1", None),
    "8.7": ("11.4", None),
    "8.9": ("11.8", None),
    "9.0": ("11.8", None),
    "10.0": ("12.8", None),
    "10.1": ("12.8", "13.0"),  # Thor: called 11.0 from CUDA 13.0 on
    "10.3": ("12.9", None),
    "11.0": ("13.0", None),
    "12.0": ("12.8", None),
    "12.1": ("12.9", None),
}

# Toolkit major.minor -> the oldest Linux driver branch that supports it (nvidia-smi's
# "CUDA Version" is then at least that toolkit's major.minor).
MIN_DRIVER_BRANCH_BY_TOOLKIT = {
    "11.8": "520",
    "12.0": "525",
    "12.1": "530",
    "12.2": "535",
    "12.3": "545",
    "12.4": "550",
    "12.5": "555",
    "12.6": "560",
    "12.8": "570",
    "12.9": "575",
    "13.0": "580",
}

_VERSION_RE = re.compile(r"^\s*([0-9]+)\.([0-9]+)")
_COMPUTE_CAP_RE = re.compile(r"\A([0-9]+)\.([0-9])\Z")
# One compiled architecture as CMake spells it: 90, 90-real, 120a-real, 100f, 90-virtual.
COMPILED_ARCH_RE = re.compile(r"\A(?P<base>[1-9][0-9]{1,2})(?P<suffix>[af]?)(?P<kind>-real|-virtual)?\Z")


def major_minor(version):
    """'12.8.93' -> (12, 8); None when the text does not start with MAJOR.MINOR."""
    match = _VERSION_RE.match(str(version or ""))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


def _text(version_tuple):
    return "%d.%d" % version_tuple


def compute_cap_arch(compute_cap):
    """'12.0' -> '120', '9.0' -> '90'; CudaError for anything else."""
    match = _COMPUTE_CAP_RE.match(str(compute_cap or "").strip())
    if not match:
        raise CudaError("compute capability %r is not of the form MAJOR.MINOR (e.g. 12.0, 9.0)" % (compute_cap,))
    return "%d%s" % (int(match.group(1)), match.group(2))


def compiled_arch(arch):
    """What llama.cpp's CMake compiles for one CMAKE_CUDA_ARCHITECTURES entry.

    Every plain 12X (optionally -real/-virtual) becomes the architecture-specific 12Xa, as in
    ggml/src/ggml-cuda/CMakeLists.txt; everything else is compiled as written.
    """
    text = str(arch).strip().lower()
    match = COMPILED_ARCH_RE.match(text)
    if not match:
        raise CudaError("CUDA architecture %r is not an SM number with an optional a/f suffix and "
                        "-real/-virtual (e.g. 90-real, 120a-real)" % (arch,))
    base, suffix, kind = match.group("base"), match.group("suffix"), match.group("kind") or ""
    if re.match(r"\A12[0-9]\Z", base) and not suffix:
        suffix = "a"
    return base + suffix + kind


def compiled_arch_for_compute_cap(compute_cap):
    """The entry this collection compiles for a GPU: SASS for exactly that GPU, in llama.cpp's spelling.

    '12.0' -> '120a-real', '9.0' -> '90-real', '8.6' -> '86-real'.
    """
    return compiled_arch(compute_cap_arch(compute_cap) + "-real")


def arch_compute_cap(arch):
    """'120a-real' -> '12.0', '90' -> '9.0': the compute capability an entry targets."""
    match = COMPILED_ARCH_RE.match(str(arch).strip().lower())
    if not match:
        raise CudaError("CUDA architecture %r is not an SM number (e.g. 90, 120a-real)" % (arch,))
    base = match.group("base")
    return "%s.%s" % (base[:-1], base[-1])


def compiled_arch_runs_on(arch, compute_cap):
    """True when code compiled for `arch` (e.g. '120a-real') runs natively on a GPU of `compute_cap`.

    Plain and 'a' entries run on their own compute capability only (a conservative reading:
    plain SASS would also run on later minors of the same major, 'a' code never does); an 'f'
    (family) entry runs on later minors of the same major (100f on 10.0 and 10.3).
    """
    match = COMPILED_ARCH_RE.match(str(arch).strip().lower())
    if not match:
        return False
    try:
        gpu = compute_cap_arch(compute_cap)
    except CudaError:
        return False
    built, wanted = int(match.group("base")), int(gpu)
    if match.group("suffix") == "f":
        return built // 10 == wanted // 10 and wanted >= built
    return built == wanted


def toolkit_problem(gpu_name, compute_cap, toolkit_version, host=None):
    """Why the toolkit cannot compile for this GPU (None when it can or the GPU is not in the table)."""
    toolkit = major_minor(toolkit_version)
    limits = TOOLKIT_RANGE_BY_COMPUTE_CAP.get(str(compute_cap))
    if toolkit is None or limits is None:
        return None
    first, removed = limits
    where = " on %s" % host if host else ""
    if toolkit < major_minor(first):
        return ("%s%s (compute capability %s) needs CUDA toolkit %s or newer; the toolkit found is %s. "
                "Upgrade the CUDA toolkit on the build host (or point llama_cpp_nvcc_path at a newer nvcc)."
                % (gpu_name or "GPU", where, compute_cap, first, toolkit_version))
    if removed and toolkit >= major_minor(removed):
        return ("%s%s (compute capability %s) is no longer supported by CUDA toolkit %s (dropped in %s). "
                "Build with a CUDA 12 toolkit (llama_cpp_nvcc_path)."
                % (gpu_name or "GPU", where, compute_cap, toolkit_version, removed))
    return None


def driver_problem(driver_cuda_version, toolkit_version, host=None, driver_version=None, forward_compat=False):
    """Why binaries built with this toolkit will not start under this driver (None when they will).

    The driver's supported CUDA version (nvidia-smi's "CUDA Version") must be at least the
    toolkit's major.minor, or the binaries stop with "CUDA driver version is insufficient for
    CUDA runtime version". With forward_compat the operator states that NVIDIA's CUDA
    forward-compatibility package (cuda-compat-<major>-<minor>) for this toolkit is installed.
    """
    toolkit = major_minor(toolkit_version)
    if toolkit is None:
        return None
    where = " on %s" % host if host else ""
    driver = major_minor(driver_cuda_version)
    if driver is None:
        return ("the NVIDIA driver%s reports no CUDA version (nvidia-smi missing or failing), so CUDA %s "
                "binaries cannot start there: install or repair the driver and reboot"
                % (where, _text(toolkit)))
    if driver >= toolkit or forward_compat:
        return None
    branch = MIN_DRIVER_BRANCH_BY_TOOLKIT.get(_text(toolkit))
    return ("the NVIDIA driver%s (%s) supports CUDA %s, older than the CUDA toolkit %s the build uses: "
            "upgrade the driver%s to one that supports CUDA %s%s and reboot, or build with an older toolkit "
            "(llama_cpp_nvcc_path), or install NVIDIA's forward-compatibility package cuda-compat-%d-%d "
            "(data-centre GPUs only) and set llama_cpp_cuda_forward_compat: true"
            % (where, driver_version or "version unknown", _text(driver), toolkit_version, where,
               _text(toolkit), " (driver branch %s or newer)" % branch if branch else "",
               toolkit[0], toolkit[1]))


def check_cuda_build(nodes, toolkit_version, forward_compat=False):
    """All refusals for a CUDA build that these nodes will run ([] = it may go ahead).

    nodes: [{'host', 'driver_cuda_version', 'driver_version', 'gpus': [{'name', 'compute_cap'}]}].
    One message per GPU model and compute capability the toolkit cannot compile for, and one per
    node whose driver cannot run what the toolkit builds.
    """
    problems = []
    seen = set()
    for node in nodes or []:
        for gpu in node.get("gpus") or []:
            key = (gpu.get("name"), str(gpu.get("compute_cap")))
            if key in seen:
                continue
            seen.add(key)
            problem = toolkit_problem(gpu.get("name"), gpu.get("compute_cap"), toolkit_version, node.get("host"))
            if problem:
                problems.append(problem)
    for node in nodes or []:
        problem = driver_problem(node.get("driver_cuda_version"), toolkit_version, node.get("host"),
                                 node.get("driver_version"), forward_compat)
        if problem:
            problems.append(problem)
    return problems
