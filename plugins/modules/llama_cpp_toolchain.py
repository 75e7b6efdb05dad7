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
  - With O(build_info), also says whether this host can run that build's binaries and why not.
  - Changes nothing; the result is also set as the fact C(gpulab_llama_cpp_toolchain).
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  install_dir:
    description: Directory holding one sub-directory per build id and the C(current) link.
    type: path
    default: /opt/gpulab/llama.cpp
  nvcc_path:
    description:
      - nvcc to report. When empty, C(nvcc) on PATH, then C(/usr/local/cuda/bin/nvcc).
    type: path
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
"""

import glob
import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import (
    LlamaCppError,
    compatibility_problems,
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


class Toolchain(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params

    def _run(self, argv):
        rc, out, err = self.module.run_command(argv)
        return out if rc == 0 else ""

    def _nvcc_path(self):
        if self.params["nvcc_path"]:
            return self.params["nvcc_path"] if os.access(self.params["nvcc_path"], os.X_OK) else None
        return self.module.get_bin_path("nvcc", opt_dirs=["/usr/local/cuda/bin"])

    def _installed_build_id(self):
        path = os.path.join(self.params["install_dir"], "current", "BUILD_INFO.json")
        try:
            with open(path) as handle:
                return json.load(handle).get("build_id")
        except (IOError, OSError, ValueError):
            return None

    def gather(self):
        compiler_path = self.module.get_bin_path("c++")
        compiler = parse_compiler_version(self._run([compiler_path, "--version"])) if compiler_path else \
            {"id": None, "version": None}
        compiler["path"] = compiler_path
        cmake_path = self.module.get_bin_path("cmake")
        nvcc_path = self._nvcc_path()
        smi_path = self.module.get_bin_path("nvidia-smi")
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
            build_info=dict(type="dict"),
            gpus=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    toolchain = Toolchain(module).gather()
    compatible, problems = None, []
    if module.params["build_info"] is not None:
        peer = dict(toolchain, gpus=module.params["gpus"])
        try:
            problems = compatibility_problems(module.params["build_info"], peer)
        except LlamaCppError as exc:
            module.fail_json(msg=str(exc), toolchain=toolchain)
        compatible = not problems
    module.exit_json(changed=False, toolchain=toolchain, compatible=compatible, problems=problems,
                     ansible_facts={"gpulab_llama_cpp_toolchain": toolchain})


if __name__ == "__main__":
    main()
