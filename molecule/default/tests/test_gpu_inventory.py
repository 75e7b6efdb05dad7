"""The GPU inventory snapshots that gpu_preflight wrote from the fake nvidia-smi profiles
(molecule/lab/files/nvidia-smi/<profile>/query-gpu.csv; node-c's is a real H200 capture), after
converge.yml's driver upgrade and reboot; and playbooks/facts.yml on the converged lab."""

import json

import pytest

from lab_playbooks import run_on_lab
# converge.yml upgrades every node's driver to this one and reboots; idempotence ran deploy.yml under it.
UPGRADED_DRIVER = "590.44.01"

# Per node: the GPUs its profile lists (uuid, PCI bus id) and the driver it reported before the upgrade.
EXPECTED = {
    "node-a": {"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "compute_cap": "12.0", "cuda_arch": "120",
               "memory_total_mib": 97887, "driver_version": "580.95.05",
               "gpus": [("GPU-5b0e6f3a-91c2-4e8d-a7f4-0c3d2b1e9a60", "00000000:21:00.0"),
                        ("GPU-c84d1a97-2f6b-4b35-8e0a-7d91f5c2e3b4", "00000000:C1:00.0")]},
    "node-b": {"name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "compute_cap": "12.0",
               "cuda_arch": "120", "memory_total_mib": 97887, "driver_version": "580.95.05",
               "gpus": [("GPU-e2a7c90d-4b18-4f63-b5d2-98a1c6f07e35", "00000000:01:00.0")]},
    "node-c": {"name": "NVIDIA H200", "compute_cap": "9.0", "cuda_arch": "90", "memory_total_mib": 143771,
               "driver_version": "580.159.04",
               "gpus": [("GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd", "00000000:00:06.0")]},
}


@pytest.fixture()
def expected(host):
    return EXPECTED[host.check_output("hostname")]


@pytest.fixture()
def snapshot(host):
    content = host.file("/var/lib/gpulab/gpu-inventory.json").content_string
    return json.loads(content)


def test_snapshot_matches_node_profile(snapshot, expected):
    count = len(expected["gpus"])
    assert int(snapshot["gpu_count"]) == count
    assert [gpu["index"] for gpu in snapshot["gpus"]] == list(range(count))
    assert [(gpu["uuid"], gpu["pci_bus_id"]) for gpu in snapshot["gpus"]] == expected["gpus"]
    for gpu in snapshot["gpus"]:
        assert gpu["name"] == expected["name"]
        assert gpu["compute_cap"] == expected["compute_cap"]
        assert gpu["cuda_arch"] == expected["cuda_arch"]
        assert gpu["memory_total_mib"] == expected["memory_total_mib"]


def test_driver_versions_agree_after_the_upgrade(snapshot, expected):
    # The profile's own driver is gone: preflight rewrote the snapshot under the upgraded one.
    assert expected["driver_version"] != UPGRADED_DRIVER
    assert snapshot["driver_version"] == UPGRADED_DRIVER
    assert snapshot["kernel_module_version"] == UPGRADED_DRIVER
    assert snapshot["cuda_version"] == "13.0"


def test_snapshot_holds_identity_not_live_values(snapshot):
    # live values (memory used, utilisation) would make every run a change
    for gpu in snapshot["gpus"]:
        assert set(gpu) == {"index", "uuid", "name", "pci_bus_id", "compute_cap", "cuda_arch", "memory_total_mib"}


def test_snapshot_is_root_owned_and_readable(host):
    snapshot_file = host.file("/var/lib/gpulab/gpu-inventory.json")
    assert snapshot_file.user == "root"
    assert snapshot_file.mode == 0o644


def test_facts_playbook_prints_every_node_and_changes_nothing(tmp_path):
    """make facts on a deployed lab: every node's table printed, the snapshot already current."""
    run = run_on_lab(tmp_path / "facts", "playbooks/facts.yml")
    assert run.status == "successful", run.failures
    assert run.changed_tasks() == []
    printed = dict((e["event_data"]["host"], e["event_data"]["res"]["msg"]) for e in run.events
                   if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Print the GPU table of this node")
    assert sorted(printed) == sorted(EXPECTED)
    for node, table in printed.items():
        assert table.startswith(node + ": ")
        assert EXPECTED[node]["name"] in table
        assert UPGRADED_DRIVER in table
