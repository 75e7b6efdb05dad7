# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Attributes of the modules that only read the host or compute a plan."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads or computes; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""
