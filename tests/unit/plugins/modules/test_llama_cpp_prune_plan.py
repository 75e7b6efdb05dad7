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


# --- never the build that serves ---------------------------------------------------------------------

IDS = ["bbbbbbbbbbb%d" % i for i in range(1, 6)]


def _install(tmp_path, current_target=IDS[4]):
    install = tmp_path / "install"
    for age, build in enumerate(IDS):
        (install / build / "bin").mkdir(parents=True)
        os.utime(install / build, (1000 + age, 1000 + age))
    if current_target is not None:
        (install / "current").symlink_to(current_target)
    return install


def _prune(install, current, previous="", proc=None, monkeypatch=None, **extra):
    if monkeypatch is not None:
        monkeypatch.setattr(llama_cpp_prune_plan, "PROC_ROOT", str(proc))
    args = dict({"install_dir": str(install), "current": current, "previous": previous, "keep": 2}, **extra)
    return run_module(llama_cpp_prune_plan.main, args, {}, None)


@pytest.mark.parametrize("current", ["bbbbbbbbbbbf", "", "  ", "current", "BBBBBBBBBBB5", "bbbbbbbbbbb5\nx", "../x"])
def test_prune_refuses_a_current_that_is_not_an_installed_build(tmp_path, current):
    install = _install(tmp_path)
    run = _prune(install, current)
    assert run.kind is FailJson, run.result
    assert "current build" in run.result["msg"]


def test_prune_refuses_when_nothing_is_installed(tmp_path):
    run = _prune(tmp_path / "missing", IDS[0])
    assert run.kind is FailJson
    assert "is not installed (installed: none)" in run.result["msg"]


def test_prune_never_offers_the_build_the_current_link_names(tmp_path, monkeypatch):
    # current passed as the newest build, but the link still points at the oldest: both kept.
    install = _install(tmp_path, current_target=IDS[0])
    run = _prune(install, IDS[4], proc=tmp_path / "noproc", monkeypatch=monkeypatch)
    assert run.kind is ExitJson, run.result
    assert run.result["linked"] == [IDS[0]]
    assert str(install / IDS[0]) not in run.result["prunable"]
    assert run.result["prunable"] == [str(install / IDS[i]) for i in (1, 2, 3)]


def test_prune_never_offers_a_running_build(tmp_path, monkeypatch):
    install = _install(tmp_path)
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "exe").symlink_to(install / IDS[1] / "bin" / "rpc-server")
    (proc / "self").mkdir()
    (proc / "77").mkdir()  # a process whose exe cannot be read (kernel thread, other user)
    run = _prune(install, IDS[4], IDS[3], proc=proc, monkeypatch=monkeypatch)
    assert run.kind is ExitJson, run.result
    assert run.result["running"] == [IDS[1]]
    assert run.result["prunable"] == [str(install / IDS[0]), str(install / IDS[2])]
