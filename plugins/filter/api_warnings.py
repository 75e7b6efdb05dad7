# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: api_warnings
short_description: The heads' APIs served off loopback without a key because the operator allowed it
version_added: 0.4.0
description:
  - One sentence per API of O(_input) that the engine deployed serves (its prefix O(prefix)) bound off loopback without
    an API key while its C(*_allow_unauthenticated) is true, as M(gpulab.inference.node_exposure) returns them in
    its RV(gpulab.inference.node_exposure#module:warnings_found), computed on the controller without a module run.
  - An API open without the operator's consent is a problem the preflight refuses, not a warning; it is not listed.
  - The rule is C(plugins/module_utils/exposure.py)'s C(api_exposure).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The heads' APIs (role common's C(gpulab_head_apis)), each with C(prefix), C(bind), C(api_key_set) and C(allow_unauthenticated).
    type: list
    elements: dict
    required: true
  host:
    description: The node named in the sentences.
    type: str
    required: true
  prefix:
    description: The deployed engine's API variables' prefix (role common's C(gpulab_engine_spec.api.prefix)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Say which API is open by the operator's choice
  ansible.builtin.debug:
    msg: "{{ gpulab_head_apis | gpulab.inference.api_warnings(inventory_hostname, gpulab_engine_spec.api.prefix) }}"
"""

RETURN = r"""
_value:
  description: One sentence per API open by the operator's choice; empty when there is none.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.exposure import api_warnings as exposure_api_warnings


def api_warnings(apis, host, prefix):
    if not isinstance(apis, (list, tuple)) or not all(isinstance(api, dict) for api in apis):
        raise AnsibleFilterError("gpulab.inference.api_warnings: the input must be a list of APIs (mappings), got %r" % (apis,))
    return exposure_api_warnings(host, prefix, list(apis))


class FilterModule:
    """The heads' APIs open by the operator's choice."""

    def filters(self):
        return {"api_warnings": api_warnings}
