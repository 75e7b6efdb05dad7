# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: stale_programs
short_description: The supervisord programs whose files exist but which are no longer planned
version_added: 0.3.0
description:
  - Reads the paths of program files (C(<program>.conf)) in O(_input) and returns, sorted, the
    programs not in O(planned).
  - The rule lives in C(plugins/module_utils/service_manager.py) (C(stale_programs)).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: Paths of program files, as C(ansible.builtin.find) lists them.
    type: list
    elements: path
    required: true
  planned:
    description: The programs that stay.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Programs to remove
  ansible.builtin.debug:
    msg: "{{ found.files | map(attribute='path') | gpulab.inference.stale_programs(['gpulab-rpc-server-0']) }}"
"""

RETURN = r"""
_value:
  description: Program names, sorted.
  type: list
  elements: str
  sample: [gpulab-rpc-server-1]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    stale_programs,
)


def _stale_programs(program_files, planned):
    try:
        return stale_programs(list(program_files or []), list(planned or []))
    except ServiceManagerError as exc:
        raise AnsibleFilterError("gpulab.inference.stale_programs: %s" % exc)


class FilterModule:
    """supervisord programs that are no longer planned."""

    def filters(self):
        return {"stale_programs": _stale_programs}
