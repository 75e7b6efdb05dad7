#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_source
short_description: List the files of a model at its source, with sizes and sha256
description:
  - Reads what a model is at its source, a directory (or a GGUF file in it) on the host it runs
    on, or an HTTP(S) mirror (a plain file server, or a Hugging Face-compatible endpoint with
    O(hf_layout)).
  - A GGUF source names the first shard (C(<prefix>-00001-of-0000N.gguf)); every shard is listed.
    A Hugging Face checkpoint is a directory - C(config.json), the index and the safetensors it
    names (or C(model.safetensors)), and the tokenizer and generation files present.
  - sha256 comes from a C(SHA256SUMS) file beside the files (C(sha256sum * > SHA256SUMS)); without
    one it is null, and the first node computes and records it.
  - Reads only; sizes over HTTP come from HEAD, so a mirror must send C(Content-Length).
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
  source:
    description: An absolute path (a GGUF file or a checkpoint directory) or an C(http://)/C(https://) URL of one.
    type: str
    required: true
  hf_layout:
    description: The mirror serves files as C(<source>/resolve/main/<file>) (a Hugging Face-compatible endpoint).
    type: bool
    default: false
  timeout_s:
    description: Socket timeout of each HTTP request.
    type: int
    default: 30
seealso:
  - module: gpulab.inference.model_files
  - module: gpulab.inference.model_fetch
"""

EXAMPLES = r"""
- name: List a split GGUF on the lab's mirror
  gpulab.inference.model_source:
    source: http://10.231.77.5/models/MiniMax-M2-Q4_K_M/MiniMax-M2-Q4_K_M-00001-of-00005.gguf

- name: List a Hugging Face checkpoint on the controller
  gpulab.inference.model_source:
    source: /srv/models/MiniMax-M2
  delegate_to: localhost

- name: List a checkpoint on a Hugging Face-compatible endpoint of the lab
  gpulab.inference.model_source:
    source: http://hf-mirror.lab:8080/MiniMaxAI/MiniMax-M2
    hf_layout: true
"""

RETURN = r"""
kind:
  description: C(gguf) or C(hf).
  returned: always
  type: str
  sample: gguf
base:
  description: The directory or URL the files are relative to.
  returned: always
  type: str
  sample: http://10.231.77.5/models/m
files:
  description: Each file's name (relative to RV(base)), size_bytes and sha256 (null when the source has no SHA256SUMS).
  returned: always
  type: list
  elements: dict
  sample: [{name: m-00001-of-00002.gguf, size_bytes: 2097152, sha256: null}]
serve_name:
  description: The file llama-server loads (the first shard), empty for a checkpoint directory.
  returned: always
  type: str
  sample: m-00001-of-00002.gguf
name:
  description: The model's name, the default directory name on the nodes (the source's last directory).
  returned: always
  type: str
  sample: m
total_bytes:
  description: Sum of the files' sizes.
  returned: always
  type: int
  sample: 4194304
"""

import posixpath

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import model_io
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", required=True),
            hf_layout=dict(type="bool", default=False),
            timeout_s=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    source = module.params["source"]
    try:
        kind = mt.source_kind(source)
        if kind == "url":
            listed = model_io.list_http(source, module.params["hf_layout"], model_io.HTTPSource(module.params["timeout_s"]))
        elif kind == "controller":
            listed = model_io.list_directory(source)
        else:
            raise mt.ModelTransferError("source=head names no place: give the model's path on the head")
        kind, base, files, serve = listed
        files = mt.check_files(files, "files of %s" % source)
    except mt.ModelTransferError as error:
        module.fail_json(msg="model source %s: %s" % (source, error))
    module.exit_json(changed=False, kind=kind, base=base, files=files, serve_name=serve,
                     name=posixpath.basename(base.rstrip("/")),
                     total_bytes=sum(entry["size_bytes"] for entry in files))


if __name__ == "__main__":
    main()
