"""Verify the GPU inventory snapshots that gpu_preflight wrote from the fake nvidia-smi profiles."""

import json

import pytest

EXPECTED = {
    "node-a": {"count": 2, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
               "compute_cap": "12.0", "cuda_arch": "120", "memory_total_mib": 97887},
    "node-b": {"count": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
               "compute_cap": "12.0", "cuda_arch": "120", "memory_total_mib": 97887},
    "node-c": {"count": 1, "name": "NVIDIA H200",
               "compute_cap": "9.0", "cuda_arch": "90", "memory_total_mib": 143771},
}


@pytest.fixture()
def snapshot(host):
    content = host.file("/var/lib/gpulab/gpu-inventory.json").content_string
    return json.loads(content)


def test_snapshot_matches_node_profile(host, snapshot):
    expected = EXPECTED[host.check_output("hostname")]
    assert int(snapshot["gpu_count"]) == expected["count"]
    assert len(snapshot["gpus"]) == expected["count"]
    assert [gpu["index"] for gpu in snapshot["gpus"]] == list(range(expected["count"]))
    for gpu in snapshot["gpus"]:
        assert gpu["name"] == expected["name"]
        assert gpu["compute_cap"] == expected["compute_cap"]
        assert gpu["cuda_arch"] == expected["cuda_arch"]
        assert gpu["memory_total_mib"] == expected["memory_total_mib"]
        assert gpu["uuid"].startswith("GPU-")
    assert len({gpu["uuid"] for gpu in snapshot["gpus"]}) == expected["count"]


def test_driver_versions_agree(snapshot):
    assert snapshot["driver_version"]
    assert snapshot["driver_version"] == snapshot["kernel_module_version"]
    assert snapshot["cuda_version"] == "13.0"


def test_h200_snapshot_replays_the_real_capture(host, snapshot):
    if host.check_output("hostname") != "node-c":
        pytest.skip("only node-c carries the H200 capture")
    gpu = snapshot["gpus"][0]
    assert gpu["uuid"] == "GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd"
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert snapshot["driver_version"] == "580.159.04"


def test_snapshot_is_root_owned_and_readable(host):
    snapshot_file = host.file("/var/lib/gpulab/gpu-inventory.json")
    assert snapshot_file.user == "root"
    assert snapshot_file.mode == 0o644
