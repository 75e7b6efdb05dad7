# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kept services' history on the node (gpulab_kept_history_file, docs/CONTRACTS.md), updated
at every look at the GPUs (modules gpu_facts and gpu_residency, options keep and
kept_history_file): what each kept service held when last seen running, which the plans reserve
for it when it is down (kept_room).

A record of what was read, like gpu-inventory.json: a rewrite is no change of the deployment, so
the modules report none; in check mode the updated history is returned and not written.
"""

from __future__ import annotations

import os
import time

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import keep_file, nice_json
from ansible_collections.gpulab.inference.plugins.module_utils.kept_room import (
    KeptRoomError,
    history_document,
    parse_history,
    update_history,
)

# The options both modules take (their documentation says the same).
KEPT_HISTORY_OPTIONS = dict(
    keep=dict(type='list', elements='str', default=[]),
    kept_history_file=dict(type='path', default=''),
)


def now_text():
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


def read_text(path):
    """The file's text, or None when there is none yet."""
    if not os.path.exists(path):
        return None
    with open(path, 'rb') as stream:
        return stream.read().decode('utf-8', 'replace')


def keep_history(module, residency):
    """The node's history after this look (None without kept_history_file); written when the node
    keeps services or already has the file, so a node that keeps none gets no file."""
    path, keep = module.params['kept_history_file'], module.params['keep']
    if not path or residency is None:
        return None
    try:
        text = read_text(path)
        history = update_history(parse_history(text, path), residency.get('processes'), keep, now_text())
        if keep or text is not None:
            keep_file(path, nice_json(history_document(history)), module.check_mode)
    except KeptRoomError as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='kept services history %s cannot be read or written: %s' % (path, exc))
    return history
