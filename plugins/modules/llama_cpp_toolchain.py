#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_cpp_toolchain
short_description: Report the toolchain that decides whether llama.cpp binaries can be built or run on a host
version_added: "0.1.0"
description:
  - Reports the CPU architecture, glibc version, C++ compiler, CMake, ninja, ccache, nvcc,
    libibverbs and the NVIDIA driver's CUDA version of the host, plus the llama.cpp build
    currently installed under O(install_dir)/current.
  - With O(build_info), also says whether this host can run that build's binaries and why not,
    telling apart reasons to build locally (RV(sharing_problems)) from a build that misses this
    host's GPUs or needs a newer driver (RV(run_problems)).
  - RV(node) is what M(gpulab.inference.llama_cpp_build_plan) needs to know of every host that
    is to run a build.
  - Changes nothing; it sets no fact (register the result).
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
  - gpulab.inference.gpu_inventory
options:
  install_dir:
    description: Directory holding one sub-directory per build id and the C(current) link.
    type: path
    default: /opt/gpulab/llama.cpp
  nvcc_path:
    description:
      - nvcc to report. When empty, C(nvcc) on PATH, then C(/usr/local/cuda/bin/nvcc).
      - A path that does not exist or is not executable fails the module.
    type: path
  nvidia_smi_path:
    description: The C(nvidia-smi) that reports the driver's CUDA version (a name on PATH or a path).
    type: str
    default: nvidia-smi
  host:
    description: Inventory name of this host, copied into RV(node).
    type: str
    default: ""
  gpu_driver:
    description:
      - This host's driver as M(gpulab.inference.gpu_inventory) returns it (C(driver_version), C(kernel_module_version),
        C(cuda_version)), or its C(gpulab_gpu_driver) fact from M(gpulab.inference.gpu_facts) (C(mismatch), C(message)),
        copied into RV(node). With O(gpu_inventory), the driver of that file.
    type: dict
    default: {}
  forward_compat:
    description: NVIDIA's CUDA forward-compatibility package is installed here (see M(gpulab.inference.llama_cpp_build_plan)).
    type: bool
    default: false
  build_info:
    description:
      - Contents of a BUILD_INFO.json. When given, RV(compatible) and RV(problems) say whether
        this host can run that build.
    type: dict
  gpus:
    description:
      - GPUs of this host (items with C(cuda_arch) or C(compute_cap)), as gathered by
        M(gpulab.inference.gpu_facts); used only with O(build_info).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Report the build host's toolchain
  gpulab.inference.llama_cpp_toolchain:
  register: llama_cpp_build_toolchain

- name: Can this peer run the head's binaries?
  gpulab.inference.llama_cpp_toolchain:
    build_info: "{{ hostvars[llama_cpp_build_host].llama_cpp_build_info }}"
    gpus: "{{ ansible_facts.gpulab_gpus | default([]) }}"
  register: llama_cpp_peer_toolchain

- name: Which build is installed?
  gpulab.inference.llama_cpp_toolchain:
    install_dir: /opt/gpulab/llama.cpp
  register: installed
"""

RETURN = r"""
toolchain:
  description: What was found; absent tools are null.
  returned: always
  type: dict
  sample:
    cpu_arch: x86_64
    cpu_count: 16
    glibc_version: "2.36"
    compiler: {id: gnu, version: "12.2.0", path: /usr/bin/c++}
    cmake_version: "3.25.1"
    ninja_path: /usr/bin/ninja
    ccache_path: /usr/bin/ccache
    nvcc_path: /usr/local/cuda/bin/nvcc
    nvcc_version: "12.8.93"
    libibverbs_present: false
    driver_version: "580.159.04"
    driver_cuda_version: "13.0"
    installed_build_id: 3f2a9c0d1e4b
compatible:
  description: Whether this host can run the binaries of O(build_info); null without it.
  returned: always
  type: bool
problems:
  description: Why it cannot (empty when it can).
  returned: always
  type: list
  elements: str
sharing_problems:
  description: Reasons this host cannot share that build's binaries at all (it builds locally).
  returned: always
  type: list
  elements: str
run_problems:
  description: Reasons a host that shares binaries would still fail with that build (missing GPU architecture, old driver).
  returned: always
  type: list
  elements: str
node:
  description: This host as the build plan surveys it.
  returned: always
  type: dict
  sample:
    host: node-b
    cpu_arch: x86_64
    glibc_version: "2.36"
    driver_version: "580.95.05"
    driver_cuda_version: "13.0"
    gpu_driver: {mismatch: false}
    gpus: [{name: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition, compute_cap: "12.0"}]
    forward_compat: false
"""

import glob
import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import GPU_INVENTORY_OPTION, use_gpu_inventory
from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import (
    BUILD_ID_PATTERN,
    LlamaCppError,
    run_problems,
    sharing_problems,
    parse_cmake_version,
    parse_compiler_version,
    parse_driver_versions,
    parse_glibc_version,
    parse_nvcc_version,
)

# CMake's find_library(ibverbs) needs the development link, not just the runtime.
LIBIBVERBS_GLOBS = (
    "/usr/lib/*/libibverbs.so",
    "/usr/lib64/libibverbs.so",
    "/usr/lib/libibverbs.so",
    "/usr/local/lib/libibverbs.so",
)


COMMAND_TIMEOUT_S = 30


class Toolchain(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params

    def _run(self, argv):
        # Bounded: nvidia-smi waits on a wedged GPU, nvcc or a compiler on a hung network mount.
        timeout = self.module.get_bin_path("timeout")
        command = [timeout, "--kill-after=5s", "%ds" % COMMAND_TIMEOUT_S] + list(argv) if timeout else list(argv)
        rc, out, err = self.module.run_command(command)
        if timeout and rc in (124, 137):
            self.module.fail_json(msg="%s did not answer within %d s: for nvidia-smi, a GPU the driver waits on (reset it "
                                      "or reboot the node); otherwise check the tool and the file system it is on"
                                  % (" ".join(argv), COMMAND_TIMEOUT_S), rc=rc, cmd=command)
        return out if rc == 0 else ""

    def _nvcc_path(self):
        path = self.params["nvcc_path"]
        if path:
            if not os.path.isfile(path):
                self.module.fail_json(msg="nvcc_path (llama_cpp_nvcc_path) %s does not exist: point it at the "
                                          "CUDA toolkit's bin/nvcc or leave it empty to search PATH" % path)
            if not os.access(path, os.X_OK):
                self.module.fail_json(msg="nvcc_path (llama_cpp_nvcc_path) %s is not executable: fix its mode "
                                          "(chmod +x) or point it at the CUDA toolkit's bin/nvcc" % path)
            return path
        return self.module.get_bin_path("nvcc", opt_dirs=["/usr/local/cuda/bin"])

    def _installed_build_id(self):
        path = os.path.join(self.params["install_dir"], "current", "BUILD_INFO.json")
        try:
            with open(path, "rb") as handle:
                info = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError, ValueError):
            return None
        # A damaged BUILD_INFO.json counts as no build: the build plan then builds again.
        build_id = info.get("build_id") if isinstance(info, dict) else None
        return build_id if isinstance(build_id, str) and BUILD_ID_PATTERN.match(build_id) else None

    def gather(self):
        compiler_path = self.module.get_bin_path("c++")
        compiler = parse_compiler_version(self._run([compiler_path, "--version"])) if compiler_path else \
            {"id": None, "version": None}
        compiler["path"] = compiler_path
        cmake_path = self.module.get_bin_path("cmake")
        nvcc_path = self._nvcc_path()
        smi_path = self.module.get_bin_path(self.params["nvidia_smi_path"])
        driver = {"driver_version": None, "cuda_version": None}
        if smi_path:
            # `--version` is cheap and names the CUDA version; older drivers lack it.
            driver = parse_driver_versions(self._run([smi_path, "--version"]))
            if not driver["cuda_version"]:
                driver = parse_driver_versions(self._run([smi_path]))
        try:
            glibc = parse_glibc_version(os.confstr("CS_GNU_LIBC_VERSION"))
        except (ValueError, OSError, AttributeError):
            glibc = None
        try:
            cpu_count = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpu_count = os.cpu_count()
        return {
            "cpu_arch": platform.machine(),
            "cpu_count": cpu_count,
            "glibc_version": glibc,
            "compiler": compiler,
            "cmake_version": parse_cmake_version(self._run([cmake_path, "--version"])) if cmake_path else None,
            "ninja_path": self.module.get_bin_path("ninja"),
            "ccache_path": self.module.get_bin_path("ccache"),
            "nvcc_path": nvcc_path,
            "nvcc_version": parse_nvcc_version(self._run([nvcc_path, "--version"])) if nvcc_path else None,
            "libibverbs_present": any(glob.glob(pattern) for pattern in LIBIBVERBS_GLOBS),
            "driver_version": driver["driver_version"],
            "driver_cuda_version": driver["cuda_version"],
            "installed_build_id": self._installed_build_id(),
        }


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            install_dir=dict(type="path", default="/opt/gpulab/llama.cpp"),
            nvcc_path=dict(type="path"),
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            host=dict(type="str", default=""),
            gpu_driver=dict(type="dict", default={}),
            forward_compat=dict(type="bool", default=False),
            build_info=dict(type="dict"),
            gpus=dict(type="list", elements="dict", default=[]),
            gpu_inventory=GPU_INVENTORY_OPTION,
        ),
        supports_check_mode=True,
    )


def survey(toolchain, params):
    """This host as llama_cpp_build_plan's `nodes` items and run_problems expect it."""
    return {
        "host": params["host"],
        "cpu_arch": toolchain["cpu_arch"],
        "glibc_version": toolchain["glibc_version"],
        "driver_version": toolchain["driver_version"],
        "driver_cuda_version": toolchain["driver_cuda_version"],
        "gpu_driver": params["gpu_driver"],
        "gpus": [dict((key, gpu.get(key)) for key in ("index", "name", "compute_cap", "cuda_arch"))
                 for gpu in params["gpus"]],
        "forward_compat": params["forward_compat"],
    }


def main():
    module = build_module()
    use_gpu_inventory(module, "gpus", "gpu_driver")
    toolchain = Toolchain(module).gather()
    node = survey(toolchain, module.params)
    compatible, sharing, running = None, [], []
    if module.params["build_info"] is not None:
        try:
            sharing = sharing_problems(module.params["build_info"], node)
            running = [] if sharing else run_problems(module.params["build_info"], node)
        except LlamaCppError as exc:
            module.fail_json(msg=str(exc), toolchain=toolchain)
        compatible = not sharing and not running
    module.exit_json(changed=False, toolchain=toolchain, compatible=compatible, problems=sharing + running,
                     sharing_problems=sharing, run_problems=running, node=node)


if __name__ == "__main__":
    main()
