"""llama_cpp_build_verify: what it decides and writes, and a table of bad inputs, each refused with a message naming the
option or field, no traceback, nothing written."""

import json

import pytest

from ansible_collections.gpulab.inference.plugins.modules import (
    llama_cpp_build_verify,
)

from module_harness import ExitJson, FailJson, run_module


# --- llama_cpp_build_verify -------------------------------------------------------------------------

REFERENCE = {"build_id": "0123456789ab", "source": {"id": "archive:sha256:00"}, "cpu_arch": "x86_64",
             "glibc_version": "2.36", "cuda": False, "nvcc_version": None}


def installed_build(tmp_path, info_bytes=None, binary=b"llama\n"):
    build = tmp_path / "0123456789ab"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "llama-server").write_bytes(binary)
    if info_bytes is None:
        import hashlib
        info = dict(REFERENCE, cmake_options={}, cuda_architectures=[], compiler="gnu 12.2.0",
                    rpc_server_binary="ggml-rpc-server",
                    binaries={"llama-server": hashlib.sha256(b"llama\n").hexdigest()})
        info_bytes = json.dumps(info).encode()
    (build / "BUILD_INFO.json").write_bytes(info_bytes)
    return build


def verify(path, **args):
    return run_module(llama_cpp_build_verify.main, dict({"path": str(path)}, **args), {}, None)


def test_verify_valid_build_in_lockstep(tmp_path):
    run = verify(installed_build(tmp_path), reference=REFERENCE)
    assert run.kind is ExitJson, run.result
    assert (run.result["valid"], run.result["lockstep_problem"]) == (True, None)


def test_verify_names_a_node_out_of_lockstep(tmp_path):
    run = verify(installed_build(tmp_path), reference=dict(REFERENCE, build_id="bbbbbbbbbbbb"))
    assert "could run the cluster's build bbbbbbbbbbbb" in run.result["lockstep_problem"]


FULL = dict(REFERENCE, cmake_options={}, cuda_architectures=[], compiler="gnu 12.2.0", rpc_server_binary="ggml-rpc-server",
            binaries={"llama-server": "a" * 64})

VERIFY_BAD = [
    (b"\xff\xfe{", None, "is not UTF-8"),
    (b"{", None, "is not valid JSON"),
    (b"[]", None, "must hold a JSON object"),
    (b'{"build_id": "0123456789ab"}', None, "lacks source"),
    (None, b"tampered\n", "checksum differs or file missing"),
    (json.dumps(dict(FULL, binaries={"../../../bin/sh": "a" * 64})).encode(), None, "is not a plain file name"),
    (json.dumps(dict(FULL, binaries={"llama-server": "x"})).encode(), None, "checksum 'x', not a sha256"),
    (json.dumps(dict(FULL, build_id=123456789012)).encode(), None, "build_id 123456789012 is not"),
    (json.dumps(dict(FULL, source="git")).encode(), None, "source is 'git', expected an object"),
    (json.dumps(dict(FULL, cuda="no")).encode(), None, "cuda is 'no', expected true or false"),
]


@pytest.mark.parametrize("info_bytes, binary, fragment", VERIFY_BAD)
def test_verify_bad_build_info(tmp_path, info_bytes, binary, fragment):
    build = installed_build(tmp_path, info_bytes, binary or b"llama\n")
    run = verify(build)
    assert run.kind is FailJson, run.result
    assert fragment in run.result["msg"]
    assert "Traceback" not in run.result["msg"]
    lenient = verify(build, fail_on_mismatch=False, reference=REFERENCE)
    assert lenient.kind is ExitJson
    assert lenient.result["valid"] is False
    assert "has no valid llama.cpp build" in lenient.result["lockstep_problem"]


@pytest.mark.parametrize("change, fragment", [
    ({"source": "archive"}, "reference (the build host's BUILD_INFO.json): source is 'archive', expected an object"),
    ({"source": {"id": 7}}, "source id is 7"),
    ({"build_id": None}, "build_id is None"),
    ({"cpu_arch": ["x86_64"]}, "cpu_arch is ['x86_64']"),
    ({"glibc_version": "2.36; id"}, "glibc_version is '2.36; id'"),
    ({"cuda": 1}, "cuda is 1, expected true or false"),
])
def test_verify_refuses_a_reference_it_cannot_compare(tmp_path, change, fragment):
    run = verify(installed_build(tmp_path), reference=dict(REFERENCE, **change))
    assert run.kind is FailJson, run.result
    assert fragment in run.result["msg"]


def test_current_pointing_at_the_build_is_read_in_the_same_run_and_hashed_once(tmp_path, monkeypatch):
    build = installed_build(tmp_path)
    (tmp_path / "current").symlink_to(build.name)
    hashed = []
    real_digest = llama_cpp_build_verify.AnsibleModule.digest_from_file

    def counting_digest(self, filename, algorithm):
        hashed.append(filename)
        return real_digest(self, filename, algorithm)
    monkeypatch.setattr(llama_cpp_build_verify.AnsibleModule, "digest_from_file", counting_digest)
    run = verify(build, reference=REFERENCE, current=str(tmp_path / "current"))
    assert run.kind is ExitJson, run.result
    current = run.result["current"]
    assert (current["valid"], current["build_id"], current["lockstep_problem"], current["link_target"]) == (
        True, "0123456789ab", None, "0123456789ab")
    assert hashed == [str(build / "bin" / "llama-server")]


def test_current_elsewhere_or_missing_is_judged_on_its_own(tmp_path):
    build = installed_build(tmp_path)
    other = tmp_path / "other"
    (other / "bin").mkdir(parents=True)
    (other / "BUILD_INFO.json").write_text(json.dumps(dict(FULL, build_id="bbbbbbbbbbbb")))
    (tmp_path / "current").symlink_to("other")
    run = verify(build, reference=REFERENCE, current=str(tmp_path / "current"), fail_on_mismatch=False)
    assert run.result["valid"] is True
    assert run.result["current"]["valid"] is False and run.result["current"]["link_target"] == "other"
    assert "checksum differs or file missing" in run.result["current"]["reason"]
    missing = verify(build, current=str(tmp_path / "none"))
    assert missing.result["current"]["link_target"] is None and missing.result["current"]["valid"] is False
    assert missing.result["current"]["reason"] == "%s does not exist" % (tmp_path / "none" / "BUILD_INFO.json")
