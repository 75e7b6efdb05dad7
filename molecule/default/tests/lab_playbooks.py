"""The collection's playbooks run against the converged lab with ansible-runner, for the verify tests
(the repository's ansible.cfg and the demo inventory, as `make demo` uses them)."""

import os
import sys
from pathlib import Path

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
from playbook_runner import COLLECTIONS, PlaybookRun, run_in  # noqa: E402,F401 pylint: disable=wrong-import-position,unused-import

INVENTORY = str(REPO / "inventory" / "demo")
ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}


def run_on_lab(private, playbook, extravars=None, cmdline=None):
    """run_in against the lab: playbook relative to the repository, runner data under private."""
    return run_in(private, playbook, INVENTORY, extravars=extravars, envvars=ENV, cmdline=cmdline)
