#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_cpp_build_record
short_description: Write the BUILD_INFO.json of a staged llama.cpp build
version_added: "0.2.0"
description:
  - Checksums the binaries under O(path)/bin, asks C(llama-cli --version) for the version, build
    number and commit, reads the CUDA architectures back from the build tree's C(CMakeCache.txt)
    (spelled as llama.cpp compiles them, e.g. C(120a-real)) and writes C(BUILD_INFO.json) in O(path),
    through a temporary file renamed into place.
  - Fails, writing nothing, when the binaries are missing, C(--version) prints no version, or the
    architectures in the cache are not those the plan asked for.
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: none
    description: Runs the staged binary and writes a file.
  diff_mode:
    support: none
    description: No diff is reported.
options:
  path:
    description: The staged build directory (holding C(bin/)).
    type: path
    required: true
  build_tree:
    description: The CMake build tree the binaries come from (its C(CMakeCache.txt) is read).
    type: path
    required: true
  binaries:
    description: Names of the binaries under O(path)/bin.
    type: list
    elements: str
    required: true
  version_binary:
    description: The binary asked for C(--version).
    type: str
    default: llama-cli
  plan:
    description: The result of M(gpulab.inference.llama_cpp_build_plan) for this build.
    type: dict
    required: true
  toolchain:
    description: The build host's toolchain from M(gpulab.inference.llama_cpp_toolchain).
    type: dict
    required: true
  source_kind:
    description: Where the source came from.
    type: str
    choices: [git, archive]
    required: true
  source_id:
    description: Identity of the source (C(git:URL@COMMIT) or C(archive:sha256:DIGEST)).
    type: str
    required: true
  source_version:
    description: The git tag, branch or commit asked for (C(git) sources).
    type: str
    default: ""
  built_on:
    description: Inventory name of the build host.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Write BUILD_INFO.json
  gpulab.inference.llama_cpp_build_record:
    path: /opt/gpulab/llama.cpp/.staging-3f2a9c0d1e4b
    build_tree: /var/cache/gpulab/llama.cpp/build/archive-0123456789ab
    binaries: [llama-server, ggml-rpc-server, llama-bench, llama-cli]
    plan: "{{ __llama_cpp_build_plan }}"
    toolchain: "{{ __llama_cpp_build_toolchain.toolchain }}"
    source_kind: archive
    source_id: "archive:sha256:0123..."
    built_on: "{{ inventory_hostname }}"
"""

RETURN = r"""
build_info:
  description: The document written.
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write
from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import (
    LlamaCppError,
    compose_build_info,
    parse_cmake_cache_architectures,
    parse_llama_version,
    source_record,
)


VERSION_TIMEOUT_S = 60


def _read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def record(module):
    params = module.params
    bin_dir = os.path.join(params["path"], "bin")
    missing = [name for name in params["binaries"] if not os.path.isfile(os.path.join(bin_dir, name))]
    if missing:
        raise LlamaCppError("binaries missing under %s: %s" % (bin_dir, ", ".join(missing)))
    binaries = dict((name, module.digest_from_file(os.path.join(bin_dir, name), "sha256")) for name in params["binaries"])
    # --version loads the backends (CUDA initialises every GPU): a wedged GPU would hang it.
    command = [os.path.join(bin_dir, params["version_binary"]), "--version"]
    timeout = module.get_bin_path("timeout", required=True)
    rc, out, err = module.run_command([timeout, "--kill-after=5s", "%ds" % VERSION_TIMEOUT_S] + command)
    if rc in (124, 137):
        raise LlamaCppError("%s did not answer within %d s: the CUDA backend waits on a GPU that does not answer "
                            "(check nvidia-smi, reset the GPU or reboot the node), nothing was recorded"
                            % (" ".join(command), VERSION_TIMEOUT_S))
    version = parse_llama_version((out or "") + "\n" + (err or ""))
    cache = _read_text(os.path.join(params["build_tree"], "CMakeCache.txt"))
    if cache is None:
        raise LlamaCppError("no CMakeCache.txt in %s: configure the build tree first" % params["build_tree"])
    info = compose_build_info(params["plan"], params["toolchain"], version, binaries,
                              parse_cmake_cache_architectures(cache),
                              source_record(params["source_kind"], params["source_id"], params["source_version"]),
                              params["built_on"])
    target = os.path.join(params["path"], "BUILD_INFO.json")
    try:
        # A full disk or a failed rename leaves no temporary file in the build directory.
        atomic_write(target, json.dumps(info, indent=2, sort_keys=True) + "\n", 0o644, prefix=".BUILD_INFO.", suffix="")
    except OSError as exc:
        raise LlamaCppError("cannot write %s: %s" % (target, exc))
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            build_tree=dict(type="path", required=True),
            binaries=dict(type="list", elements="str", required=True),
            version_binary=dict(type="str", default="llama-cli"),
            plan=dict(type="dict", required=True),
            toolchain=dict(type="dict", required=True),
            source_kind=dict(type="str", choices=["git", "archive"], required=True),
            source_id=dict(type="str", required=True),
            source_version=dict(type="str", default=""),
            built_on=dict(type="str", required=True),
        ),
        supports_check_mode=False,
    )
    if not os.path.isdir(module.params["path"]):
        module.fail_json(msg="path %s is not a directory" % module.params["path"])
    try:
        info = record(module)
    except LlamaCppError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, build_info=info)


if __name__ == "__main__":
    main()
