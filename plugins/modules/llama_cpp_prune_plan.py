#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llama_cpp_prune_plan
short_description: Choose the installed llama.cpp builds that may be removed
version_added: "0.2.0"
description:
  - Lists the build directories under O(install_dir) (12 hex digits) and returns those beyond
    O(keep), oldest first.
  - Never returns the current build, the previous one (O(previous), kept for rollback) or a
    build that a wrapper script or unit file under O(reference_paths) names
    (C(<install_dir>/<build-id>)).
  - O(keep) below 2 is refused. Changes nothing.
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  install_dir:
    description: Directory holding one sub-directory per build id.
    type: path
    required: true
  current:
    description: The build id current points at.
    type: str
    required: true
  previous:
    description: The build id current pointed at before this run (empty when none).
    type: str
    default: ""
  keep:
    description: Builds kept, current and previous included; at least 2.
    type: int
    default: 2
  reference_paths:
    description: Files or directories (read one level deep) whose text may name a build directory.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Choose the builds to remove
  gpulab.inference.llama_cpp_prune_plan:
    install_dir: /opt/gpulab/llama.cpp
    current: 3f2a9c0d1e4b
    previous: 0123456789ab
    keep: 2
    reference_paths: [/opt/gpulab/bin, /etc/systemd/system]
  register: prune
"""

RETURN = r"""
prunable:
  description: Paths of the build directories to remove, oldest first.
  returned: always
  type: list
  elements: str
referenced:
  description: Build ids named by a file under O(reference_paths).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.llama_cpp import (
    BUILD_ID_PATTERN,
    LlamaCppError,
    check_keep_builds,
    referenced_build_ids,
    select_prunable,
)

MAX_REFERENCE_BYTES = 1024 * 1024


def _texts(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(os.path.join(path, name) for name in sorted(os.listdir(path)))
        else:
            files.append(path)
    for path in files:
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as handle:
                yield handle.read(MAX_REFERENCE_BYTES).decode("utf-8", "replace")
        except (IOError, OSError):
            continue


def plan(params):
    check_keep_builds(params["keep"])
    install_dir = params["install_dir"]
    installed = []
    if os.path.isdir(install_dir):
        for name in os.listdir(install_dir):
            path = os.path.join(install_dir, name)
            if BUILD_ID_PATTERN.match(name) and os.path.isdir(path) and not os.path.islink(path):
                installed.append((name, os.stat(path).st_mtime))
    referenced = referenced_build_ids(_texts(params["reference_paths"]), install_dir)
    prunable = select_prunable(installed, params["current"], params["previous"] or None, referenced, params["keep"])
    return {"prunable": [os.path.join(install_dir, build) for build in prunable], "referenced": referenced}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            install_dir=dict(type="path", required=True),
            current=dict(type="str", required=True),
            previous=dict(type="str", default=""),
            keep=dict(type="int", default=2),
            reference_paths=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        result = plan(module.params)
    except LlamaCppError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
