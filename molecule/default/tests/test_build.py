"""Every lab node runs the same verified llama.cpp build after converge (side_effect_build.yml checks
what toolkit, driver and option changes do to it)."""

import json

import pytest

from lab_playbooks import lab_host, run_on_lab

INSTALL_DIR = "/opt/gpulab/llama.cpp"
EXPECTED_BINARIES = {"llama-server", "llama-bench", "llama-cli", "ggml-rpc-server"}


def build_info(host):
    return json.loads(host.file(f"{INSTALL_DIR}/current/BUILD_INFO.json").content_string)


@pytest.fixture(scope="module")
def head_info():
    return build_info(lab_host("node-a"))


def test_same_build_id_on_every_node(host, head_info):
    info = build_info(host)
    assert info["build_id"] == head_info["build_id"]
    assert host.file(f"{INSTALL_DIR}/current").is_symlink
    assert host.file(f"{INSTALL_DIR}/current").linked_to == f"{INSTALL_DIR}/{info['build_id']}"


def test_build_info_describes_the_lab_build(host):
    info = build_info(host)
    assert info["managed_by"] == "gpulab.inference"
    assert set(info["binaries"]) == EXPECTED_BINARIES
    assert info["rpc_server_binary"] == "ggml-rpc-server"
    assert info["cuda"] is False
    # inventory/demo: the sdist tree says its commit, not its build number.
    assert info["build_number"] == "0"
    assert info["commit"] == "0c1e570"
    assert info["source"]["kind"] == "archive"
    assert info["cmake_options"]["BUILD_SHARED_LIBS"] == "OFF"
    assert info["cmake_options"]["GGML_RPC"] == "ON"
    assert info["cmake_options"]["GGML_NATIVE"] == "OFF"
    # A CPU build: no toolkit recorded, none in the fingerprint.
    assert info["nvcc_version"] is None
    assert info["cuda_architectures"] == []
    assert info["fingerprint"]["nvcc_version"] == "none"


def test_binaries_match_their_checksums(host):
    info = build_info(host)
    for name, digest in info["binaries"].items():
        path = f"{INSTALL_DIR}/current/bin/{name}"
        assert host.file(path).mode & 0o111
        actual = host.check_output(f"sha256sum {path}").split()[0]
        assert actual == digest, name


@pytest.mark.parametrize("binary", ["llama-server", "llama-cli", "llama-bench"])
def test_binaries_run_and_report_the_commit(host, binary):
    result = host.run(f"{INSTALL_DIR}/current/bin/{binary} --version")
    assert result.rc == 0, result.stderr
    assert "(build 0, commit 0c1e570)" in result.stdout + result.stderr


def test_rpc_server_runs(host):
    result = host.run(f"{INSTALL_DIR}/current/bin/ggml-rpc-server --help")
    assert result.rc == 0, result.stderr


def test_binaries_need_only_libc(host):
    for name in EXPECTED_BINARIES:
        needed = host.check_output(f"ldd {INSTALL_DIR}/current/bin/{name}")
        for lib in ("libstdc++", "libgomp", "libssl", "libllama", "libggml"):
            assert lib not in needed, f"{name} needs {lib}"


def test_nothing_left_in_flight(host):
    leftovers = host.check_output(f"ls -1A {INSTALL_DIR}").split()
    assert not [name for name in leftovers if name.startswith((".staging-", ".incoming-", ".current-"))]


def test_build_playbook_alone_changes_nothing(tmp_path):
    """playbooks/build.yml on its own (its preflight first) on the converged lab: nothing to do."""
    run = run_on_lab(tmp_path / "build", "playbooks/build.yml")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
