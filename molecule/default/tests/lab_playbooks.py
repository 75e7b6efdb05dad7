"""The collection's playbooks run against the converged lab with ansible-runner, for the verify tests
(the repository's ansible.cfg and the demo inventory, as `make demo` uses them), and the lab's nodes
as testinfra hosts, reached as the verifier's `host` is."""

import os
import sys
from pathlib import Path

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
from playbook_runner import COLLECTIONS, PlaybookRun, run_in  # noqa: E402,F401 pylint: disable=wrong-import-position,unused-import

INVENTORY = str(REPO / "inventory" / "demo")
LAB = os.environ.get("GPULAB_LAB_NAME", "gpulab")
# Written by molecule/lab/create.yml: the nodes by name, the key, known_hosts, Ansible's sockets.
SSH_CONFIG = str(REPO / ".build" / "lab-ssh" / LAB / "ssh_config")
ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}


def run_on_lab(private, playbook, extravars=None, cmdline=None):
    """run_in against the lab: playbook relative to the repository, runner data under private."""
    return run_in(private, playbook, INVENTORY, extravars=extravars, envvars=ENV, cmdline=cmdline)


def lab_host(name):
    """The lab node `name` (node-a, ...) through testinfra: SSH as gpulab with sudo."""
    import testinfra  # pylint: disable=import-outside-toplevel

    return testinfra.get_host("ssh://" + name, ssh_config=SSH_CONFIG, sudo=True)
