#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_cpp_build_plan
short_description: Resolve the CMake options and the build id of a llama.cpp build
version_added: "0.1.0"
description:
  - Turns the role's choices and the host's toolchain into the exact CMake options, the
    CUDA architecture list and the build id (a short sha256 of the source id, the options,
    the nvcc version, the compiler version and the GPU architectures).
  - Without O(source_dir) it only checks the choices, so bad input fails before anything
    is unpacked or built. With O(source_dir) it also reads the source tree for the RPC
    server's target name and for the C(GGML_RPC_RDMA) option.
  - Changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  source_id:
    description: Identity of the source (C(git:URL@COMMIT) or C(archive:sha256:DIGEST)).
    type: str
    required: true
  source_dir:
    description: Unpacked llama.cpp tree. Leave empty to validate only.
    type: path
  source_dir_optional:
    description:
      - A O(source_dir) that does not exist yet (not unpacked) is not an error; the choices are only checked, as
        without O(source_dir), and RV(source_read) is false. One module run checks the choices before any change
        and, where the tree is there already, resolves the whole plan.
    type: bool
    default: false
  cuda:
    description: Build with CUDA; C(auto) when nvcc and GPUs are present.
    type: str
    choices: [auto, "on", "off"]
    default: auto
  cuda_architectures:
    description: Override list (90, 90a, 100f, 120, ...); empty means the GPUs' own.
    type: list
    elements: str
    default: []
  gpus:
    description:
      - GPU facts of the build host (items with C(cuda_arch) or C(compute_cap)).
      - Used only when O(nodes) is empty.
    type: list
    elements: dict
    default: []
  nodes:
    description:
      - One survey per host that is to run the build, each the RV(gpulab.inference.llama_cpp_toolchain#module:node)
        of M(gpulab.inference.llama_cpp_toolchain) run on that host (C(host), C(cpu_arch),
        C(glibc_version), C(driver_version), C(driver_cuda_version), C(gpu_driver), C(gpus)).
      - The CUDA architectures are the union of the GPUs of every node that can share the build
        host's binaries, so one build id serves them all; nodes that cannot (another CPU
        architecture, an older glibc, a driver of an older CUDA major) are listed in
        RV(local_hosts) and build for themselves.
      - A toolkit too old or too new for a GPU, or a driver too old for the toolkit, on any
        sharing node fails the module, naming the node, the GPU and what to upgrade.
    type: list
    elements: dict
    default: []
  forward_compat:
    description:
      - The nodes have NVIDIA's CUDA forward-compatibility package for the toolkit installed, so a
        driver that supports an older CUDA than the toolkit is accepted.
    type: bool
    default: false
  keep_builds:
    description: Builds kept on each node, current and the previous one included; less than 2 is refused.
    type: int
    default: 2
  rpc_rdma:
    description: Build the RPC RDMA transport; C(auto) when the source has it and libibverbs is present.
    type: str
    choices: [auto, "on", "off"]
    default: auto
  toolchain:
    description: The build host's toolchain as reported by M(gpulab.inference.llama_cpp_toolchain).
    type: dict
    required: true
  native:
    description: Tune for the build host's CPU (C(GGML_NATIVE)); binaries may then not run elsewhere.
    type: bool
    default: false
  curl:
    description: C(LLAMA_CURL).
    type: bool
    default: false
  build_number:
    description: C(LLAMA_BUILD_NUMBER) for sources without .git.
    type: str
    default: ""
  build_commit:
    description: C(LLAMA_BUILD_COMMIT) for sources without .git.
    type: str
    default: ""
  extra_cmake_options:
    description: More C(-D) options; they override the resolved ones and enter the fingerprint.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Check the choices before touching anything
  gpulab.inference.llama_cpp_build_plan:
    source_id: "archive:sha256:{{ archive_sha256 }}"
    cuda: "on"
    cuda_architectures: ["120"]
    toolchain: "{{ llama_cpp_build_toolchain.toolchain }}"

- name: Resolve the build from the unpacked tree
  gpulab.inference.llama_cpp_build_plan:
    source_id: "git:https://github.com/ggml-org/llama.cpp@0c1e570"
    source_dir: /var/cache/gpulab/llama.cpp/src/0c1e570
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    toolchain: "{{ llama_cpp_build_toolchain.toolchain }}"
  register: plan
"""

RETURN = r"""
build_id:
  description: Short sha256 of the fingerprint; null when validating only.
  returned: always
  type: str
  sample: 3f2a9c0d1e4b
fingerprint:
  description: The hashed inputs.
  returned: when source_dir is given
  type: dict
cmake_options:
  description: Resolved C(-D) options (values as CMake strings).
  returned: when source_dir is given
  type: dict
cmake_args:
  description: The same as a sorted argv list (C(-DKEY=VALUE)).
  returned: when source_dir is given
  type: list
  elements: str
cuda:
  description: Whether CUDA is on.
  returned: always
  type: bool
cuda_architectures:
  description: Architectures compiled for (empty for a CPU build).
  returned: always
  type: list
  elements: str
rpc_rdma:
  description: Whether the RDMA transport is on.
  returned: when source_dir is given
  type: bool
sharing_hosts:
  description: Hosts of O(nodes) that run this build (the build host's binaries).
  returned: always
  type: list
  elements: str
local_hosts:
  description: Hosts of O(nodes) that cannot share the build host's binaries, each with the reasons.
  returned: always
  type: dict
source_read:
  description: Whether O(source_dir) was read, so the plan is whole (RV(build_id) is set).
  returned: always
  type: bool
rpc_server_binary:
  description: Name of the RPC server target in this source (C(ggml-rpc-server) or C(rpc-server)).
  returned: when source_dir is given
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import (
    LlamaCppError,
    build_id,
    check_keep_builds,
    cmake_arguments,
    cmake_options,
    fingerprint,
    has_rpc_rdma_option,
    plan_build_targets,
    resolve_rdma,
    rpc_server_target,
    validate_cuda_architectures,
)

# Where the RPC server's target lives: current trees first, older ones after.
RPC_TARGET_FILES = ("tools/rpc/CMakeLists.txt", "examples/rpc/CMakeLists.txt")
RPC_BACKEND_FILES = ("ggml/src/ggml-rpc/CMakeLists.txt", "ggml/CMakeLists.txt")
CMAKE_OPTION_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def _read(source_dir, relative):
    try:
        with open(os.path.join(source_dir, relative), errors="replace") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def resolve(params):
    toolchain = params["toolchain"]
    check_keep_builds(params["keep_builds"])
    nodes = params["nodes"] or [dict(toolchain, host="build host", gpus=params["gpus"])]
    targets = plan_build_targets(params["cuda"], toolchain, nodes, params["cuda_architectures"],
                                 params["forward_compat"])
    cuda, architectures = targets["cuda"], targets["cuda_architectures"]
    if not cuda and params["cuda_architectures"]:
        validate_cuda_architectures(params["cuda_architectures"])
    for key in params["extra_cmake_options"]:
        if not CMAKE_OPTION_NAME.match(str(key)):
            raise LlamaCppError(
                "extra_cmake_options has the option name %r: CMake option names are letters, digits and _ "
                "(e.g. GGML_CUDA_FA_ALL_QUANTS)" % (key,))
    result = {"cuda": cuda, "cuda_architectures": architectures, "build_id": None, "source_read": False,
              "sharing_hosts": targets["sharing_hosts"], "local_hosts": targets["local_hosts"]}
    if not params["source_dir"] or (params["source_dir_optional"] and not os.path.exists(params["source_dir"])):
        if params["rpc_rdma"] == "on" and not toolchain.get("libibverbs_present"):
            resolve_rdma("on", True, False)
        return result

    source_dir = params["source_dir"]
    rpc_binary = None
    for relative in RPC_TARGET_FILES:
        rpc_binary = rpc_server_target(_read(source_dir, relative))
        if rpc_binary:
            break
    if not rpc_binary:
        raise LlamaCppError("no RPC server target found in %s (looked in %s): is this a llama.cpp tree?"
                            % (source_dir, ", ".join(RPC_TARGET_FILES)))
    source_has_rdma = any(has_rpc_rdma_option(_read(source_dir, f)) for f in RPC_BACKEND_FILES)
    rdma = resolve_rdma(params["rpc_rdma"], source_has_rdma, toolchain.get("libibverbs_present"),
                        "llama.cpp %s" % params["source_id"])
    options = cmake_options(cuda, architectures, rdma, native=params["native"], curl=params["curl"],
                            build_number=params["build_number"], build_commit=params["build_commit"],
                            extra=params["extra_cmake_options"])
    if cuda and toolchain.get("nvcc_path"):
        # A toolkit in another place must be the one CMake uses, not the first on PATH.
        options["CMAKE_CUDA_COMPILER"] = toolchain["nvcc_path"]
    data = fingerprint(params["source_id"], options, toolchain.get("nvcc_version"),
                       toolchain.get("compiler") or {}, architectures)
    result.update(
        source_read=True,
        build_id=build_id(data),
        fingerprint=data,
        cmake_options=options,
        cmake_args=cmake_arguments(options),
        rpc_rdma=rdma,
        rpc_server_binary=rpc_binary,
    )
    return result


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            source_id=dict(type="str", required=True),
            source_dir=dict(type="path"),
            source_dir_optional=dict(type="bool", default=False),
            cuda=dict(type="str", choices=["auto", "on", "off"], default="auto"),
            cuda_architectures=dict(type="list", elements="str", default=[]),
            gpus=dict(type="list", elements="dict", default=[]),
            nodes=dict(type="list", elements="dict", default=[]),
            forward_compat=dict(type="bool", default=False),
            keep_builds=dict(type="int", default=2),
            rpc_rdma=dict(type="str", choices=["auto", "on", "off"], default="auto"),
            toolchain=dict(type="dict", required=True),
            native=dict(type="bool", default=False),
            curl=dict(type="bool", default=False),
            build_number=dict(type="str", default=""),
            build_commit=dict(type="str", default=""),
            extra_cmake_options=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    try:
        result = resolve(module.params)
    except LlamaCppError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
