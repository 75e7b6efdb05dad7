"""llama_build_info: the binaries' checksums against BUILD_INFO.json, the lockstep summary a worker's
servers.json carries and the one lockstep rule. BUILD_INFO.json's own checks are tested with the
build that writes it (test_llama_cpp.py)."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import llama_build_info as bi


def test_checksum_mismatches():
    assert bi.checksum_mismatches({"a": "1", "b": "2"}, {"a": "1", "b": "2"}) == []
    assert bi.checksum_mismatches({"a": "1", "b": "2", "c": "3"}, {"a": "9", "b": "2"}) == ["a", "c"]


# A BUILD_INFO.json's lockstep fields (and one it has beyond them).
REF = {"build_id": "0123456789ab", "source": {"kind": "archive", "id": "archive:sha256:00"}, "cuda": True,
       "nvcc_version": "12.8.93", "cpu_arch": "x86_64", "glibc_version": "2.36", "compiler": "gnu 12.2.0"}


@pytest.mark.parametrize("change, expected", [
    ({}, None),
    # Local builds that had to be: another CPU, an older glibc, an older CUDA major.
    ({"build_id": "bbbbbbbbbbbb", "cpu_arch": "aarch64"}, None),
    ({"build_id": "bbbbbbbbbbbb", "glibc_version": "2.31"}, None),
    ({"build_id": "bbbbbbbbbbbb", "nvcc_version": "11.8.89"}, None),
    # Another id that the node could have shared: not in lockstep.
    ({"build_id": "bbbbbbbbbbbb"}, "could run the cluster's build 0123456789ab"),
    ({"build_id": "bbbbbbbbbbbb", "glibc_version": "2.39"}, "could run the cluster's build"),
    # Another source: another RPC protocol.
    ({"build_id": "bbbbbbbbbbbb", "cpu_arch": "aarch64", "source": {"id": "git:x@1"}}, "same source on every node"),
])
def test_lockstep_rule(change, expected):
    problem = bi.lockstep_problem(REF, dict(REF, **change), "node-b")
    if expected is None:
        assert problem is None
    else:
        assert "node-b" in problem and expected in problem


def test_lockstep_without_a_build_names_the_node():
    assert "node-c has no valid llama.cpp build (expected 0123456789ab)" == bi.lockstep_problem(REF, {}, "node-c")


def test_lockstep_summary_is_enough_for_the_rule():
    summary = bi.lockstep_summary(dict(REF, build_id="bbbbbbbbbbbb", cpu_arch="aarch64"))
    assert sorted(summary) == sorted(bi.LOCKSTEP_FIELDS)
    assert bi.lockstep_problem(REF, summary, "node-b") is None
    # A manifest that carries only a build id: the same id passes, another one is refused.
    assert bi.lockstep_problem(REF, {"build_id": REF["build_id"]}, "node-b") is None
    assert "same source" in bi.lockstep_problem(REF, {"build_id": "bbbbbbbbbbbb"}, "node-b")
