#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_cpp_build_verify
short_description: Check an installed llama.cpp build against its BUILD_INFO.json
version_added: "0.1.0"
description:
  - Reads C(BUILD_INFO.json) in O(path) and compares the sha256 of every binary it lists
    with the files under C(bin/).
  - Used before reusing a build, and on a peer after the binaries arrive.
  - Changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  path:
    description: A build directory (C(/opt/gpulab/llama.cpp/<build-id>)) or the C(current) link.
    type: path
    required: true
  fail_on_mismatch:
    description: Fail when the directory is missing, BUILD_INFO.json is invalid or a checksum differs.
    type: bool
    default: true
  reference:
    description:
      - The BUILD_INFO.json of the build the cluster runs (the build host's). When given,
        RV(lockstep_problem) says whether this build may serve beside it. It may when it has the
        same id, or when it is a local build that had to be (another CPU architecture, an older
        glibc, an older CUDA major) from the same source.
    type: dict
  current:
    description:
      - The C(current) link of the install directory, read and verified in the same module run
        (RV(current)) with O(reference) and O(path). Its binaries are hashed once when it points at O(path).
    type: path
"""

EXAMPLES = r"""
- name: Verify the binaries that just arrived
  gpulab.inference.llama_cpp_build_verify:
    path: /opt/gpulab/llama.cpp/.incoming-3f2a9c0d1e4b

- name: Is a valid build already installed under this id?
  gpulab.inference.llama_cpp_build_verify:
    path: /opt/gpulab/llama.cpp/3f2a9c0d1e4b
    fail_on_mismatch: false
  register: existing
"""

RETURN = r"""
valid:
  description: BUILD_INFO.json is valid and every binary matches its checksum.
  returned: always
  type: bool
build_id:
  description: Build id read from BUILD_INFO.json (null if unreadable).
  returned: always
  type: str
build_info:
  description: The parsed BUILD_INFO.json (empty if unreadable).
  returned: always
  type: dict
mismatches:
  description: Binaries whose checksum differs or that are missing.
  returned: always
  type: list
  elements: str
reason:
  description: Why the build is not valid (empty when it is).
  returned: always
  type: str
lockstep_problem:
  description: Why this build may not serve beside O(reference) (null when it may or without O(reference)).
  returned: always
  type: str
current:
  description:
    - O(current) verified as O(path) is (the keys above), and C(link_target), where the link points (null when
      O(current) is not a link).
  returned: when O(current) is given
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_build_info import (
    LlamaCppError,
    check_lockstep_summary,
    checksum_mismatches,
    lockstep_problem,
    parse_build_info,
)


def inspect(module, path):
    info_path = os.path.join(path, "BUILD_INFO.json")
    if not os.path.isfile(info_path):
        return {"valid": False, "build_id": None, "build_info": {}, "mismatches": [],
                "reason": "%s does not exist" % info_path}
    with open(info_path, "rb") as handle:
        text = handle.read()
    try:
        info = parse_build_info(text)
    except LlamaCppError as exc:
        return {"valid": False, "build_id": None, "build_info": {}, "mismatches": [],
                "reason": "%s: %s" % (info_path, exc)}
    actual = {}
    for name in info["binaries"]:
        binary = os.path.join(path, "bin", name)
        if os.path.isfile(binary):
            actual[name] = module.digest_from_file(binary, "sha256")
    mismatches = checksum_mismatches(info["binaries"], actual)
    reason = "checksum differs or file missing under %s/bin: %s" % (path, ", ".join(mismatches)) \
        if mismatches else ""
    return {"valid": not mismatches, "build_id": info["build_id"], "build_info": info,
            "mismatches": mismatches, "reason": reason}


def lockstep_of(module, verified, path):
    """Why the build verified at path may not serve beside the reference (None without one)."""
    if module.params["reference"] is None:
        return None
    return lockstep_problem(module.params["reference"], verified["build_info"] if verified["valid"] else {}, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            fail_on_mismatch=dict(type="bool", default=True),
            reference=dict(type="dict"),
            current=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if module.params["reference"] is not None:
        # The build host's BUILD_INFO.json, read there: checked like any file from another host.
        try:
            check_lockstep_summary(module.params["reference"], "reference (the build host's BUILD_INFO.json)")
        except LlamaCppError as exc:
            module.fail_json(msg=str(exc))
    path, current = module.params["path"], module.params["current"]
    verified = inspect(module, path)
    result = dict(verified, lockstep_problem=lockstep_of(module, verified, path))
    if current is not None:
        # hashed once when current points at path (a deploy that changes nothing)
        same = os.path.exists(current) and os.path.realpath(current) == os.path.realpath(path)
        seen = dict(verified) if same else inspect(module, current)
        result["current"] = dict(seen, lockstep_problem=lockstep_of(module, seen, current),
                                 link_target=os.readlink(current) if os.path.islink(current) else None)
    if module.params["fail_on_mismatch"] and not result["valid"]:
        module.fail_json(msg=result["reason"], **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
