#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch a model's files over HTTP, resuming, verified, under their names only when complete
description:
  - Fetches each of O(files) from O(base_url) into O(path) as C(<name>.part), resuming a C(.part)
    an interrupted run left (an HTTP C(Range) request; a server that ignores it sends the file
    again and the part starts over), hashing while it writes.
  - A file gets its name (an atomic rename, then the directory is fsynced) only when its size
    and sha256 are the ones asked (a null sha256 is accepted and returned). A complete file with
    the wrong sha256 is removed and the run fails naming it; a connection that ends early keeps
    the C(.part) for the next run.
  - Writes its progress (bytes, rate, time left, the file, and C(finished) at the end, failed
    or not) to O(progress_file) about every second, for the play to show while it runs
    asynchronously.
  - Python's http.client only; every request under O(timeout_s).
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Reports the files it would fetch and fetches nothing.
  diff_mode:
    support: none
    description: Model files are binary.
options:
  base_url:
    description: >-
      The URL the file names are relative to (the lab's mirror, or another node's M(gpulab.inference.model_serve),
      which also serves the build host's llama.cpp tarball to the other nodes).
    type: str
    required: true
  hf_layout:
    description: Files are at C(<base_url>/resolve/main/<name>).
    type: bool
    default: false
  path:
    description: The model directory on this node; created (0755) when missing.
    type: path
    required: true
  files:
    description: The files to fetch, each C(name), C(size_bytes) and C(sha256) (or null).
    type: list
    elements: dict
    required: true
  progress_file:
    description: Where the progress goes (JSON); empty - nowhere.
    type: path
    default: ""
  timeout_s:
    description: Socket timeout of each request (connect and every read).
    type: int
    default: 60
  mode:
    description: Permissions of the files.
    type: raw
    default: "0644"
seealso:
  - module: gpulab.inference.model_files
  - module: gpulab.inference.model_serve
"""

EXAMPLES = r"""
- name: Fetch what the plan says this node lacks, in the background
  gpulab.inference.model_fetch:
    base_url: http://10.231.77.5/models/m
    path: /var/lib/gpulab/models/m
    files: "{{ plan.fetch }}"
    progress_file: /var/lib/gpulab/models/m.fetch-progress.json
  async: 86400
  poll: 0
  register: fetch_job
"""

RETURN = r"""
files:
  description: Each file fetched - C(name), C(size_bytes), C(sha256), C(mtime_ns), C(fetched_bytes) and C(resumed_from).
  returned: always
  type: list
  elements: dict
fetched_bytes:
  description: Bytes moved by this run.
  returned: always
  type: int
resumed_bytes:
  description: Bytes of C(.part) files kept from an interrupted run.
  returned: always
  type: int
elapsed_s:
  description: Seconds the transfer took.
  returned: always
  type: float
rate_bytes_s:
  description: fetched_bytes over elapsed_s.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            hf_layout=dict(type="bool", default=False),
            path=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True),
            progress_file=dict(type="path", default=""),
            timeout_s=dict(type="int", default=60),
            mode=dict(type="raw", default="0644"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        mt.source_kind(params["base_url"])
        files = mt.check_files(params["files"])
        mode = int(str(params["mode"]), 8)
    except (mt.ModelTransferError, ValueError) as error:
        module.fail_json(msg="model_fetch: %s" % error)
    if module.check_mode:
        module.exit_json(changed=True, files=[], fetched_bytes=0, resumed_bytes=0, elapsed_s=0.0, rate_bytes_s=0.0)
    client = model_io.HTTPSource(params["timeout_s"])
    total = sum(entry["size_bytes"] - mt.resume_offset(
        (model_io.file_stat("%s/%s%s" % (params["path"], entry["name"], mt.PART_SUFFIX)) or (None,))[0],
        entry["size_bytes"]) for entry in files)
    progress = model_io.ProgressFile(params["progress_file"], total)
    started = time.monotonic()
    fetched = []
    current = None
    try:
        for entry in files:
            current = entry["name"] + mt.PART_SUFFIX
            url = mt.file_url(params["base_url"], entry["name"], params["hf_layout"])
            fetched.append(model_io.fetch_file(client, url, params["path"], entry, progress, mode))
    except (mt.ModelTransferError, OSError) as error:
        try:
            progress.add(0, None, force=True, finished=True)
        except OSError:
            pass  # the same full disk: the play's wait ends at its interval and reads this result
        # A write that fails (a full disk) names no file: name the one being written.
        where = "%s: " % current if isinstance(error, OSError) and not error.filename and current else ""
        module.fail_json(msg="model_fetch into %s: %s%s" % (params["path"], where, error), files=fetched)
    progress.add(0, None, force=True, finished=True)
    elapsed = time.monotonic() - started
    moved = sum(item["fetched_bytes"] for item in fetched)
    module.exit_json(changed=bool(fetched), files=fetched, fetched_bytes=moved,
                     resumed_bytes=sum(item["resumed_from"] for item in fetched),
                     elapsed_s=round(elapsed, 3), rate_bytes_s=round(moved / elapsed, 1) if elapsed > 0 else 0.0)


if __name__ == "__main__":
    main()
