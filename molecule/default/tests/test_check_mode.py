"""deploy.yml --check --diff on the converged lab, through ansible-runner: the dry run completes and,
the lab being deployed already, reports no change; a model_path that is not on the head fails the
dry run as it would fail the real one."""

import os
import sys
from pathlib import Path

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(REPO / "tests" / "playbooks"))
from playbook_runner import run_in  # noqa: E402 pylint: disable=wrong-import-position

ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}


def test_dry_run_of_the_converged_lab_changes_nothing(tmp_path):
    run = run_in(tmp_path / "check", "deploy.yml", str(REPO / "inventory" / "demo"), envvars=ENV, cmdline="--check --diff")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    assert run.ok_results("Say that a dry run does not benchmark")


def test_dry_run_fails_on_a_missing_model(tmp_path):
    run = run_in(tmp_path / "missing", "deploy.yml", str(REPO / "inventory" / "demo"), envvars=ENV,
                 extravars={"model_path": "/var/lib/gpulab/models/absent.gguf"},
                 cmdline="--check --tags serving")
    assert run.status == "failed"
    (failure,) = run.failures
    assert failure[1] == "The model file exists on the head"
    assert "model_path=/var/lib/gpulab/models/absent.gguf is missing on node-a" in failure[2]
