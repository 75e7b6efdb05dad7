"""The build shipped over the fabric on the deployed lab: node-b loses its copy of the build, then
playbooks/build.yml brings it back from node-a's file server on the fabric (model_serve), one
model_fetch run on node-b. A corrupted tarball (what an interrupted fetch of other bytes left) is
refused before anything is unpacked, and node-a's file server is stopped all the same; the next
run fetches and verifies the build. node-b's running RPC servers keep the binaries they opened;
the build returns under the same path with the same bytes.
"""

import json

import pytest

from lab_playbooks import lab_host, run_on_lab

INSTALL_DIR = "/opt/gpulab/llama.cpp"
DIST_DIR = "/var/cache/gpulab/llama.cpp/dist"
ASIDE = "/var/tmp/gpulab-build-fabric-test"
PID_FILE = "/run/gpulab-build-serve.pid"
SERVE_PORT = 18090
FETCH_TASK = "Fetch the tarball and check its sha256 before it gets its name"


def build_id(host):
    return json.loads(host.file(f"{INSTALL_DIR}/current/BUILD_INFO.json").content_string)["build_id"]


def run_build(tmp_path, name):
    # deploy.yml's way: its preflight ran already.
    return run_on_lab(tmp_path / name, "playbooks/build.yml", extravars={"gpulab_build_preflight": False})


def assert_not_serving(head):
    assert not head.file(PID_FILE).exists
    listening = head.check_output("ss -Hltn")
    assert f":{SERVE_PORT} " not in listening, listening


@pytest.fixture(scope="module")
def peer():
    """node-b without its copy of the build (kept aside and put back if a test left it missing)."""
    head, node = lab_host("node-a"), lab_host("node-b")
    ident = build_id(node)
    assert ident == build_id(head)
    node.check_output(f"rm -rf {ASIDE} && mkdir -p {ASIDE} && mv -T {INSTALL_DIR}/{ident} {ASIDE}/{ident}")
    yield head, node, ident
    node.check_output(f"test -d {INSTALL_DIR}/{ident} || mv -T {ASIDE}/{ident} {INSTALL_DIR}/{ident}")
    node.check_output(f"rm -rf {ASIDE} {DIST_DIR}/{ident}.tar.gz.part")


def test_a_corrupted_tarball_is_refused_before_anything_is_unpacked(peer, tmp_path):
    head, node, ident = peer
    part = f"{DIST_DIR}/{ident}.tar.gz.part"
    node.check_output(f"mkdir -p {DIST_DIR} && printf 'not the build host tarball' > {part}")
    run = run_build(tmp_path, "corrupt")
    assert run.status == "failed"
    (failure,) = run.failures
    assert failure[:2] == ("node-b", FETCH_TASK)
    assert f"{ident}.tar.gz has sha256" in failure[2]
    assert "the source says" in failure[2]
    # Refused before the unpack: no build, nothing incoming, the wrong bytes gone.
    assert not node.file(f"{INSTALL_DIR}/{ident}").exists
    leftovers = node.check_output(f"ls -1A {INSTALL_DIR}").split()
    assert not [name for name in leftovers if name.startswith(".incoming-")]
    assert not node.file(part).exists
    assert not node.file(f"{DIST_DIR}/{ident}.tar.gz").exists
    assert_not_serving(head)


def test_the_peer_fetches_the_build_from_the_build_host_over_the_fabric(peer, tmp_path):
    head, node, ident = peer
    node.check_output(f"rm -f {DIST_DIR}/{ident}.tar.gz.part")
    run = run_build(tmp_path, "fetch")
    assert run.status == "successful", run.failures
    (fetched,) = run.ok_results(FETCH_TASK)
    (entry,) = fetched["files"]
    assert entry["name"] == f"{ident}.tar.gz"
    assert fetched["fetched_bytes"] == entry["size_bytes"] > 0
    assert fetched["rate_bytes_s"] > 0
    # Only node-b lacked the build: one fetch, from node-a's fabric address.
    assert [host for host, task in run.changed_tasks() if task == FETCH_TASK] == ["node-b"]
    info = json.loads(node.file(f"{INSTALL_DIR}/{ident}/BUILD_INFO.json").content_string)
    for name, digest in info["binaries"].items():
        assert node.check_output(f"sha256sum {INSTALL_DIR}/{ident}/bin/{name}").split()[0] == digest, name
    assert node.file(f"{INSTALL_DIR}/current").linked_to == f"{INSTALL_DIR}/{ident}"
    # Nothing left behind on either side, and the file server stopped.
    for host in (head, node):
        assert host.check_output(f"ls -1A {DIST_DIR} 2>/dev/null || true").split() == []
    assert_not_serving(head)


def test_a_second_run_changes_nothing(tmp_path):
    run = run_build(tmp_path, "again")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    assert run.ok_results(FETCH_TASK) == []
