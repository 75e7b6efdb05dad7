# -*- coding: utf-8 -*-
# Copyright: gpulab.inference maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load, once before the first task, the plugins every task's worker would load again
description:
  - Ansible runs each task on each host in a new worker process forked from the controller's main
    process. A plugin the main process has not loaded is loaded again by every worker that uses
    it; a plugin it has loaded is inherited by the fork.
  - At the start of a playbook this callback loads, in the main process, the connection, become
    and shell plugins an SSH inventory uses (with the configuration each reads from its
    documentation) and every filter plugin of this collection. Some of those filters import the
    collection's planners, about 35 ms each time.
  - It also has every forked worker freeze, at its start, the objects it inherits (C(gc.freeze)),
    so that the worker's garbage collections do not walk, and so copy page by page, the main
    process's whole heap. A no-op C(deploy.yml) on the container lab took about a fifth less of
    the controller's user time.
  - It changes no result and prints nothing; without it a run is only slower. The repository's
    C(ansible.cfg) and molecule's base configuration enable it.
version_added: 0.1.0
requirements:
  - enabled in C(callbacks_enabled) (C(ansible.cfg)) or C(ANSIBLE_CALLBACKS_ENABLED)
"""

import gc
import os

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import (
    become_loader,
    connection_loader,
    filter_loader,
    shell_loader,
)

# Both spellings: a plugin's configuration is registered under the name it was asked for, so an
# inventory's ansible_connection: ansible.builtin.ssh and a bare ssh are two different loads.
CONNECTIONS = ("ansible.builtin.ssh", "ssh", "ansible.builtin.local", "local")
BECOMES = ("ansible.builtin.sudo", "sudo")
SHELLS = ("ansible.builtin.sh", "sh")
COLLECTION = "gpulab.inference"
FILTER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "filter")


_FREEZE_IN_WORKERS = []


def freeze_inherited_objects_in_workers():
    """Have every process forked from this one call gc.freeze() first (once per process)."""
    if not _FREEZE_IN_WORKERS and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=gc.freeze)
        _FREEZE_IN_WORKERS.append(True)
    return bool(_FREEZE_IN_WORKERS)


def collection_filter_names(filter_dir=FILTER_DIR):
    """The fully qualified names of the collection's filter plugins, one per file."""
    try:
        files = sorted(os.listdir(filter_dir))
    except OSError:
        return []
    return [
        "%s.%s" % (COLLECTION, name[:-3])
        for name in files
        if name.endswith(".py") and not name.startswith("_")
    ]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpulab.inference.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        freeze_inherited_objects_in_workers()
        # Speed only: a plugin that fails to load here is loaded (and its error reported) by the
        # task that uses it, as without this callback.
        for loader, names in (
            (connection_loader, CONNECTIONS),
            (become_loader, BECOMES),
            (shell_loader, SHELLS),
        ):
            for name in names:
                try:
                    loader.get(name, class_only=True)
                except Exception as exc:  # pylint: disable=broad-except
                    self._display.vvv("preload: %s not loaded: %s" % (name, exc))
        for name in collection_filter_names():
            try:
                filter_loader.get(name)
            except Exception as exc:  # pylint: disable=broad-except
                self._display.vvv("preload: %s not loaded: %s" % (name, exc))
