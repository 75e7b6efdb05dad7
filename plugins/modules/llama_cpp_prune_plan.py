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
  - Never returns the current build, the previous one (O(previous), kept for rollback), a
    build that a link in O(install_dir) (C(current)) resolves to, a build whose binaries a
    running process executes (C(/proc/<pid>/exe)) or a build that a wrapper script or unit
    file under O(reference_paths) names (C(<install_dir>/<build-id>)).
  - O(keep) below 2 is refused, and so is a O(current) that is not an installed build (a typo
    or a dangling link would otherwise leave the serving build unprotected). Changes nothing.
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
linked:
  description: Build ids a link in O(install_dir) resolves to.
  returned: always
  type: list
  elements: str
running:
  description: Build ids whose binaries a running process executes.
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
PROC_ROOT = "/proc"


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


def _link_targets(install_dir):
    """Where the links in install_dir (current, and any other) resolve to, as absolute paths."""
    targets = []
    for name in os.listdir(install_dir):
        path = os.path.join(install_dir, name)
        if os.path.islink(path):
            targets.append(os.path.realpath(path) + "/")
    return targets


def _running_executables():
    """The executables of the running processes (/proc/<pid>/exe); unreadable ones are skipped."""
    paths = []
    try:
        pids = [name for name in os.listdir(PROC_ROOT) if name.isdigit()]
    except OSError:
        return paths
    for pid in pids:
        try:
            paths.append(os.readlink(os.path.join(PROC_ROOT, pid, "exe")))
        except OSError:
            continue
    return paths


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
    real_dir = os.path.realpath(install_dir)
    linked = referenced_build_ids(_link_targets(install_dir), real_dir) if installed else []
    running = referenced_build_ids(_running_executables(), real_dir) if installed else []
    prunable = select_prunable(installed, params["current"].strip(), params["previous"].strip() or None, referenced,
                               params["keep"], linked=linked, running=running)
    return {"prunable": [os.path.join(install_dir, build) for build in prunable], "referenced": referenced,
            "linked": linked, "running": running}


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
