#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_files
short_description: What a node holds of a model, what it must fetch, whether it has room, and verification
description:
  - O(state=plan) compares the files a model is (O(files), from M(gpulab.inference.model_source))
    with what O(path) holds - a file verified before and unchanged since (size and mtime as
    recorded in O(manifest)) is kept without reading it; one of the right size never verified
    here is read back and kept when right; the others are fetched, resuming a C(.part) left by
    an interrupted transfer. It reports the bytes to move and the free space, and C(problem)
    when the filesystem cannot take them. Every file's C(records) (name, size, sha256, mtime)
    say what the manifest records.
  - O(state=verify) checks every file after a transfer - one in O(verified) (the records of
    M(gpulab.inference.model_fetch), hashed while written) or recorded in O(manifest) and
    unchanged since is trusted, any other is read back - against the size and sha256 of O(files),
    and returns the records for the model manifest. A mismatch fails naming the file.
  - Never writes; the role writes the manifest.
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Nothing is written.
options:
  path:
    description: The model directory on this node.
    type: path
    required: true
  files:
    description: The model's files, each C(name), C(size_bytes), C(sha256) (null - any, computed here).
    type: list
    elements: dict
    required: true
  manifest:
    description: This node's model manifest; its C(files) records say what was verified before. Missing - none.
    type: path
    required: true
  state:
    description: V(plan) or V(verify).
    type: str
    choices: [plan, verify]
    default: plan
  verified:
    description: Records (C(name), C(size_bytes), C(sha256), C(mtime_ns)) of files verified while they were written.
    type: list
    elements: dict
    default: []
  reverify:
    description:
      - With O(state=plan), trust no record of O(manifest) - every file of the right size is read back and
        compared with the sha256 of O(files), so a file changed on disk with its size and mtime kept
        (a corrupted sector, a tool that restores times) is found and fetched again. Reads the whole model.
    type: bool
    default: false
  host:
    description: The node's name in the refusal (its inventory name); empty - the host name.
    type: str
    default: ""
  free_bytes:
    description: Free bytes to plan with instead of the filesystem's (a test hook); -1 - the filesystem's.
    type: int
    default: -1
seealso:
  - module: gpulab.inference.model_source
  - module: gpulab.inference.model_fetch
"""

EXAMPLES = r"""
- name: Plan what this node still needs
  gpulab.inference.model_files:
    path: /var/lib/gpulab/models/m
    files: "{{ source.files }}"
    manifest: /etc/gpulab/model.json
  register: plan

- name: Verify the files and get their records
  gpulab.inference.model_files:
    path: /var/lib/gpulab/models/m
    files: "{{ source.files }}"
    manifest: /etc/gpulab/model.json
    state: verify
    verified: "{{ fetch.files }}"
"""

RETURN = r"""
plan:
  description: Each file with C(action) (keep, verify or fetch) and C(offset) (where a fetch resumes).
  returned: state=plan
  type: list
  elements: dict
fetch:
  description: The files to fetch (entries of C(plan)).
  returned: state=plan
  type: list
  elements: dict
fetch_bytes:
  description: Bytes still to move.
  returned: state=plan
  type: int
resumed_bytes:
  description: Bytes already in C(.part) files that the fetch keeps.
  returned: state=plan
  type: int
records:
  description: The records (C(name), C(size_bytes), C(sha256), C(mtime_ns)) of the files kept, for O(verified) of the next call.
  returned: always
  type: list
  elements: dict
hashed_bytes:
  description: Bytes read back to plan (files of the right size not verified here before).
  returned: state=plan
  type: int
needed_bytes:
  description: Bytes the filesystem must still take.
  returned: state=plan
  type: int
free_bytes:
  description: Free bytes where the files go (the nearest existing directory).
  returned: state=plan
  type: int
problem:
  description: The refusal when the node lacks the space, else null.
  returned: state=plan
  type: str
verified_bytes:
  description: Bytes read back to verify.
  returned: state=verify
  type: int
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_manifest as mm
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt


def read_records(path):
    try:
        with open(path, encoding="utf-8") as stream:
            manifest = json.load(stream)
    except (OSError, ValueError):
        return {}
    return mm.records_by_name(manifest) if isinstance(manifest, dict) else {}


def node_state(path, files):
    present, parts = {}, {}
    for entry in files:
        stat = model_io.file_stat(os.path.join(path, entry["name"]))
        if stat:
            present[entry["name"]] = stat
        part = model_io.file_stat(os.path.join(path, entry["name"]) + mt.PART_SUFFIX)
        if part:
            parts[entry["name"]] = part[0]
    return present, parts


def plan(module, path, files, records):
    present, parts = node_state(path, files)
    steps = mt.plan_node(files, present, records, parts)
    # Files of the right size never verified here (a lost manifest, a model already on the
    # head) are read back now, so the plan only keeps or fetches.
    hashed = dict((step["name"], model_io.sha256_file(os.path.join(path, step["name"])).hexdigest())
                  for step in steps if step["action"] == "verify")
    if hashed:
        steps = mt.plan_node(files, present, records, parts, hashed)
    summary = mt.plan_summary(steps)
    directory, free = model_io.free_bytes(path)
    if module.params["free_bytes"] >= 0:
        free = module.params["free_bytes"]
    needed = mt.space_needed(steps)
    kept = [s for s in steps if s["action"] == "keep"]
    module.exit_json(changed=False, plan=steps, fetch=[s for s in steps if s["action"] == "fetch"],
                     records=mm.file_records(kept, present), hashed_bytes=sum(s["size_bytes"] for s in steps if s["name"] in hashed),
                     fetch_bytes=summary["fetch_bytes"], resumed_bytes=summary["resumed_bytes"],
                     needed_bytes=needed, free_bytes=free,
                     problem=mt.space_problem(module.params.get("host") or os.uname()[1], directory, free, needed))


def verify(module, path, files, records):
    for record in module.params["verified"]:
        records[record["name"]] = record
    present, unused_parts = node_state(path, files)
    steps = mt.plan_node(files, present, records, {})
    problems, digests, read = [], {}, 0
    for step in steps:
        if step["action"] == "fetch":
            problems.append(mt.verify_problem(step, None, present[step["name"]][0]) if step["name"] in present
                            else "%s is missing" % step["name"])
        elif step["action"] == "verify":
            digests[step["name"]] = model_io.sha256_file(os.path.join(path, step["name"])).hexdigest()
            read += step["size_bytes"]
            problem = mt.verify_problem(step, digests[step["name"]], present[step["name"]][0])
            if problem:
                problems.append(problem)
        else:
            digests[step["name"]] = step["sha256"]
    if problems:
        module.fail_json(msg="%s on %s: %s" % (path, module.params["host"] or os.uname()[1], "; ".join(problems)))
    verified = [dict(entry, sha256=digests[entry["name"]]) for entry in files]
    module.exit_json(changed=False, records=mm.file_records(verified, present), verified_bytes=read)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True),
            manifest=dict(type="path", required=True),
            state=dict(type="str", choices=["plan", "verify"], default="plan"),
            verified=dict(type="list", elements="dict", default=[]),
            free_bytes=dict(type="int", default=-1),
            host=dict(type="str", default=""),
            reverify=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        files = mt.check_files(module.params["files"])
    except mt.ModelTransferError as error:
        module.fail_json(msg="model_files: %s" % error)
    records = read_records(module.params["manifest"])
    if module.params["state"] == "plan":
        plan(module, path, files, {} if module.params["reverify"] else records)
    verify(module, path, files, records)


if __name__ == "__main__":
    main()
