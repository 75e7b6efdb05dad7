#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurp_files
short_description: Several small files of a node in one module run, each as ansible.builtin.slurp returns it
version_added: 0.4.0
description:
  - Reads every file of O(files) and returns each under its name in RV(files), shaped as M(ansible.builtin.slurp)'s
    result - C(content) (base64) and C(source), or C(msg) and C(source) when it is absent or cannot be read - so
    the C(b64decode), C(from_json) and C(is defined) a role applied to a slurp apply unchanged.
  - One module run where a role read its manifests, plans and descriptions with one slurp each; a deploy that
    changes nothing runs them all.
  - A file absent is not an error unless its name is in O(required); then the module fails naming every
    required file it could not read.
  - Reads only; check mode reads too.
author:
  - gpulab.inference contributors (@gpulab)
options:
  files:
    description: Name to path of each file to read.
    type: dict
    required: true
  required:
    description: Names of O(files) that must be read; any other may be absent.
    type: list
    elements: str
    default: []
  max_bytes:
    description: The most bytes read of one file; a larger one is not read (RV(files) says so).
    type: int
    default: 16777216
extends_documentation_fragment:
  - gpulab.inference.read_only
"""

EXAMPLES = r"""
- name: Read the model manifest, the fabric description and the memory plan
  gpulab.inference.slurp_files:
    files:
      model_manifest: /var/lib/gpulab/model-manifest.json
      fabric: /var/lib/gpulab/fabric.json
      memory_plan: /var/lib/gpulab/memory-plan.json
    required: [memory_plan]
  register: head_files

- name: Use the memory plan
  ansible.builtin.debug:
    msg: "{{ (head_files.files.memory_plan.content | b64decode | from_json).layout }}"
"""

RETURN = r"""
files:
  description: Name to result; C(content), C(encoding) and C(source) for a file read, C(msg), C(source) and C(missing)
    for one that was not.
  returned: always
  type: dict
  sample: {"fabric": {"msg": "file not found: /var/lib/gpulab/fabric.json", "source": "/var/lib/gpulab/fabric.json",
           "missing": true}, "memory_plan": {"content": "eyJsYXlvdXQiOiAiYXV0byJ9", "encoding": "base64",
           "source": "/var/lib/gpulab/memory-plan.json"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.slurp_files import slurp_all


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type='dict', required=True),
            required=dict(type='list', elements='str', default=[]),
            max_bytes=dict(type='int', default=16777216),
        ),
        supports_check_mode=True,
    )
    files = dict((str(name), str(path)) for name, path in module.params['files'].items())
    results, problems = slurp_all(files, module.params['required'], module.params['max_bytes'])
    if problems:
        module.fail_json(msg='slurp_files: %s' % '; '.join(problems), files=results)
    module.exit_json(changed=False, files=results)


if __name__ == '__main__':
    main()
