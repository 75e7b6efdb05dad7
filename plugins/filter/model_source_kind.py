# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: model_source_kind
short_description: Where a model_source is - the lab's mirror, the controller or the head
version_added: 0.2.0
description:
  - C(url) for an C(http://) or C(https://) URL (the lab's mirror), C(controller) for an
    absolute path on the controller, C(head) for C(head) (the model is already on the head).
  - Anything else (a relative path, another scheme, a URL with a query) fails naming the value.
  - The rule lives in C(plugins/module_utils/model_transfer.py) (C(source_kind)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The value of C(model_source).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Decide where the source is listed
  ansible.builtin.set_fact:
    source_kind: "{{ model_source | gpulab.inference.model_source_kind }}"
"""

RETURN = r"""
_value:
  description: C(url), C(controller) or C(head).
  type: str
  sample: url
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.model_transfer import ModelTransferError, source_kind


def model_source_kind(source):
    try:
        return source_kind(source)
    except ModelTransferError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """Where a model comes from."""

    def filters(self):
        return {"model_source_kind": model_source_kind}
