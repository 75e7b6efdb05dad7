"""llama_cpp_prune_plan: what it decides and writes, and a table of bad inputs, each refused with a message naming the
option or field, no traceback, nothing written."""

import os

import pytest

from ansible_collections.gpulab.inference.plugins.modules import (
    llama_cpp_prune_plan,
)

from module_harness import ExitJson, FailJson, run_module


# --- llama_cpp_prune_plan ---------------------------------------------------------------------------

def test_prune_keeps_current_previous_and_referenced(tmp_path):
    install = tmp_path / "install"
    ids = ["aaaaaaaaaaa%d" % i for i in range(1, 6)]
    for age, build in enumerate(ids):
        (install / build).mkdir(parents=True)
        os.utime(install / build, (1000 + age, 1000 + age))
    (install / "current").symlink_to(ids[4])
    (install / ".staging-x").mkdir()
    units = tmp_path / "units"
    units.mkdir()
    (units / "gpulab-llama-server.service").write_text("ExecStart=%s/%s/bin/llama-server\n" % (install, ids[0]))
    run = run_module(llama_cpp_prune_plan.main, {"install_dir": str(install), "current": ids[4], "previous": ids[1],
                                                 "keep": 2, "reference_paths": [str(units), str(tmp_path / "none")]}, {}, None)
    assert run.kind is ExitJson, run.result
    assert run.result["referenced"] == [ids[0]]
    assert run.result["prunable"] == [str(install / ids[2]), str(install / ids[3])]
    assert all((install / build).exists() for build in ids)


@pytest.mark.parametrize("keep", [1, 0, -1])
def test_prune_refuses_keep_below_two(tmp_path, keep):
    run = run_module(llama_cpp_prune_plan.main, {"install_dir": str(tmp_path), "current": "aaaaaaaaaaa1", "keep": keep}, {}, None)
    assert run.kind is FailJson
    assert "llama_cpp_keep_builds is %d" % keep in run.result["msg"]
