# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """The kept services' history, updated by the modules that look at the GPUs (module_utils/kept_history.py)."""

    DOCUMENTATION = r"""
options:
  keep:
    description:
      - The node's kept services (role C(gpu_drain)'s C(gpu_drain_keep) patterns), matched as the drain matches them
        (a unit with or without C(.service), a program with or without its group, a container's name).
      - With O(kept_history_file), what the processes each pattern matches hold on each GPU now is added to the
        history (the most held, with when it was last seen running); a pattern no longer listed is dropped.
    type: list
    elements: str
    default: []
  kept_history_file:
    description:
      - The node's kept services history (C(gpulab_kept_history_file), JSON, C({"managed_by", "services"})), read
        and rewritten atomically after this look, the directory made where missing; RV(kept_history) returns it.
        The memory plans reserve from it for a kept service that is down or still loading.
      - A record of what was read, like a fact cache, so a rewrite is not reported as a change; in check mode it is
        not written. Not written on a node that keeps nothing and has no such file yet. Empty reads and writes nothing.
      - A file that is not such a record fails the task, naming it.
    type: path
    default: ""
"""
