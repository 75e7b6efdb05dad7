# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: role_options
short_description: Every option of every role's argument spec, with the role that owns it
version_added: 0.1.0
description:
  - Reads, on the controller, C(<roles directory>/<role>/meta/argument_specs.yml) of every role and returns every
    option of each role's C(main) entry point (what a role validates when a play runs it; other entry points take
    parameters from the role that includes them), mapped to the role and the spec without its description, ready
    for M(ansible.builtin.validate_argument_spec).
  - An option two roles describe with another type, choices or default is an error.
  - The rule lives in C(plugins/module_utils/serving_checks.py).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The roles directory, e.g. C(role_path ~ '/..') in one of the collection's roles.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Every role's options
  ansible.builtin.debug:
    msg: "{{ (role_path ~ '/..') | gpulab.inference.role_options }}"
"""

RETURN = r"""
_value:
  description: Option name to the role that declares it and its spec.
  type: dict
  sample:
    llama_server_port:
      role: llama_server
      spec: {type: int, default: 8080}
"""

import glob
import os

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks


# libyaml's loader where PyYAML has it: the preflight reads every role's spec once per node, and
# the pure-Python loader takes half a second for them.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def role_options(roles_dir):
    """Every role's options under roles_dir (serving_checks.role_options of their spec files)."""
    if not isinstance(roles_dir, str):
        raise AnsibleFilterError("gpulab.inference.role_options: expects the roles directory, got %s"
                                 % type(roles_dir).__name__)
    paths = sorted(glob.glob(os.path.join(str(roles_dir), "*", "meta", "argument_specs.yml")))
    if not paths:
        raise AnsibleFilterError("gpulab.inference.role_options: no <role>/meta/argument_specs.yml under %s" % roles_dir)
    try:
        parsed = {}
        for path in paths:
            with open(path) as spec_file:
                parsed[os.path.basename(os.path.dirname(os.path.dirname(path)))] = yaml.load(spec_file, Loader=_LOADER)
        return serving_checks.role_options(parsed)
    except (OSError, yaml.YAMLError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError("gpulab.inference.role_options: %s" % exc)


class FilterModule:
    """The roles' options of gpulab.inference."""

    def filters(self):
        return {"role_options": role_options}
