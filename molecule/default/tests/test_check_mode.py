"""deploy.yml --check --diff on the converged lab, through ansible-runner: the dry run completes and,
the lab being deployed already, reports no change; a model_path that is not on the head fails the
dry run as it would fail the real one."""


from lab_playbooks import run_on_lab


def test_dry_run_of_the_converged_lab_changes_nothing(tmp_path):
    run = run_on_lab(tmp_path / "check", "deploy.yml", cmdline="--check --diff")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    assert run.ok_results("Say that a dry run does not benchmark")
    assert run.warnings() == []


def test_dry_run_fails_on_a_missing_model(tmp_path):
    run = run_on_lab(tmp_path / "missing", "deploy.yml",
                     extravars={"model_path": "/var/lib/gpulab/models/absent.gguf"},
                     cmdline="--check --tags serving")
    assert run.status == "failed"
    (failure,) = run.failures
    assert failure[1] == "The model file exists on the head"
    assert "model_path=/var/lib/gpulab/models/absent.gguf is missing on node-a" in failure[2]
