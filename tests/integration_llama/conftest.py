# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make `ansible_collections.gpulab.inference` importable from a plain checkout."""

import os
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _collections_root():
    built = os.path.join(REPO_ROOT, ".build", "collections")
    if os.path.isdir(os.path.join(built, "ansible_collections", "gpulab", "inference")):
        return built
    # a checkout not set up with `make`: link it under a temporary ansible_collections tree
    root = tempfile.mkdtemp(prefix="gpulab-collections-")
    os.makedirs(os.path.join(root, "ansible_collections", "gpulab"))
    os.symlink(REPO_ROOT, os.path.join(root, "ansible_collections", "gpulab", "inference"))
    return root


try:
    import ansible_collections.gpulab.inference  # noqa: F401  pylint: disable=unused-import
except ImportError:
    sys.path.insert(0, _collections_root())
