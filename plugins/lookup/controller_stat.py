# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: controller_stat
short_description: A file on the controller, as ansible.builtin.stat returns it in C(stat), without a module run
version_added: 0.4.0
description:
  - Returns, for each path, the keys of M(ansible.builtin.stat)'s C(stat) result that the roles read - C(exists),
    C(isreg), C(size), C(mtime) and, with O(checksum=true), C(checksum) (sha256) - read on the controller itself.
  - A stat delegated to localhost is a module run, a Python process on the controller, each deploy; the lookup
    reads the file in the controller's own process.
  - A path that does not exist gives C(exists=false) only, as stat does.
author:
  - gpulab.inference contributors (@gpulab)
options:
  _terms:
    description: Paths on the controller.
    type: list
    elements: path
    required: true
  checksum:
    description: Also hash each regular file (sha256) into C(checksum).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Name the source by its archive checksum
  ansible.builtin.set_fact:
    source_id: "archive:sha256:{{ lookup('gpulab.inference.controller_stat', archive, checksum=true).checksum }}"
"""

RETURN = r"""
_raw:
  description: One dict per path, the keys of M(ansible.builtin.stat)'s C(stat) listed above.
  type: list
  elements: dict
"""

import os
import stat

from ansible.errors import AnsibleLookupError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpulab.inference.plugins.module_utils.model_io import sha256_file


def controller_stat(path, checksum=False):
    """The stat keys the roles read, for one path on this machine."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {'exists': False}
    except OSError as exc:
        raise AnsibleLookupError('controller_stat: cannot stat %s: %s' % (path, exc.strerror or exc))
    result = {'exists': True, 'isreg': stat.S_ISREG(info.st_mode), 'isdir': stat.S_ISDIR(info.st_mode),
              'size': info.st_size, 'mtime': info.st_mtime}
    if checksum and result['isreg']:
        try:
            result['checksum'] = sha256_file(path).hexdigest()
        except OSError as exc:
            raise AnsibleLookupError('controller_stat: cannot read %s: %s' % (path, exc.strerror or exc))
    return result


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        unknown = sorted(set(kwargs) - {'checksum'})
        if unknown:
            raise AnsibleLookupError('controller_stat: unknown option %s (it takes checksum)' % ', '.join(unknown))
        try:
            checksum = boolean(kwargs.get('checksum', False), strict=True)
        except TypeError:
            raise AnsibleLookupError('controller_stat: checksum must be a boolean, not %r' % (kwargs['checksum'],))
        return [controller_stat(str(term), checksum) for term in terms]
