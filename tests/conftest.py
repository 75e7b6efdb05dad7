"""Make `ansible_collections.gpulab.inference` importable for every test, and resolvable by the
playbooks that tests run: the repository is the collection, linked into .build/collections
(the same link `make collection` creates). A skipped test fails (tests/no_skips.py)."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS_DIR = REPO_ROOT / '.build' / 'collections'
COLLECTION_LINK = COLLECTIONS_DIR / 'ansible_collections' / 'gpulab' / 'inference'

if not COLLECTION_LINK.exists() and not COLLECTION_LINK.is_symlink():
    COLLECTION_LINK.parent.mkdir(parents=True, exist_ok=True)
    try:
        COLLECTION_LINK.symlink_to(REPO_ROOT)
    except FileExistsError:  # another pytest-xdist worker made it first
        pass
if str(COLLECTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_DIR))

# pylint: disable-next=unused-import,wrong-import-position
from no_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401
