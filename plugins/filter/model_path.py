# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: model_path
short_description: The model a serving role loads, from its own variable or the model manifest
version_added: 0.2.0
description:
  - The one rule llama_server, memory_plan and vllm_server share. O(given) (the role's own model
    path) wins when set; otherwise the C(path) of the model manifest the model role wrote on the
    node (C(gpulab_model_manifest), read with M(ansible.builtin.slurp) into O(_input)).
  - Neither fails, naming O(variable), the manifest and what to run, before any change.
  - The rule lives in C(plugins/module_utils/model_manifest.py) (C(model_path)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The registered result of slurping the manifest (C(failed_when) false), or an empty dict when it was not read.
    type: dict
    required: true
  given:
    description: The role's own model path; empty to take the manifest's.
    type: str
    default: ""
  manifest:
    description: The manifest's path, for the message.
    type: str
    required: true
  variable:
    description: The name of the role's own model path variable, for the message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the model manifest when no model path is set
  ansible.builtin.slurp:
    src: "{{ llama_server_model_manifest }}"
  register: __llama_server_model_manifest_raw
  failed_when: false
  when: llama_server_model_path | length == 0

- name: Decide the model to serve
  ansible.builtin.set_fact:
    __llama_server_model: >-
      {{ __llama_server_model_manifest_raw | gpulab.inference.model_path(given=llama_server_model_path,
         manifest=llama_server_model_manifest, variable='llama_server_model_path') }}
"""

RETURN = r"""
_value:
  description: The absolute path of the model (the first GGUF shard, or a Hugging Face directory).
  type: str
  sample: /var/lib/gpulab/models/minimax-m2/MiniMax-M2-Q4_K_M-00001-of-00005.gguf
"""

import base64
import binascii

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.model_manifest import (
    ModelManifestError,
    model_path as decide,
)


def model_path(slurped, given="", manifest="", variable=""):
    slurped = slurped if isinstance(slurped, dict) else {}
    text = None
    if slurped.get("content") is not None:
        try:
            text = base64.b64decode(slurped["content"], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, TypeError) as exc:
            raise AnsibleFilterError("gpulab.inference.model_path: %s could not be decoded: %s" % (manifest, exc))
    try:
        return decide(given, text, manifest, variable, unreadable=slurped.get("msg"))
    except ModelManifestError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """Which model a serving role loads."""

    def filters(self):
        return {"model_path": model_path}
