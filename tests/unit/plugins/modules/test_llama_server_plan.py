"""llama_server_plan with run_command and get_bin_path patched, a build and a model under tmp_path."""

import json

import pytest

from llama_server_plan_case import head_files, run
from module_harness import ExitJson, FailJson


def manifest(host, address, build_id="0123456789ab"):
    """servers.json as llama_rpc_server writes it."""
    return {"managed_by": "gpulab.inference", "host": host, "address": address, "build_id": build_id,
            "unit": "gpulab-rpc-server",
            "endpoints": [{"instance": 0, "device": "CPU", "gpu_index": None, "port": 50052, "memory_mib": 15990}]}


@pytest.fixture()
def head(tmp_path):
    return head_files(tmp_path)


def test_plan_over_two_workers(head):
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11"), manifest("node-c", "10.231.77.12")],
                      local_gpus=[{"index": 0, "memory_total_mib": 97887}]))
    assert result.kind is ExitJson
    plan = result.result
    assert plan["rpc"] == "10.231.77.11:50052,10.231.77.12:50052"
    # A CPU build uses no local GPU.
    assert [d["name"] for d in plan["devices"]] == ["RPC0", "RPC1"]
    assert plan["build"]["build_id"] == "0123456789ab"
    assert plan["build"]["build_dir"] == head["build_link"]
    assert plan["build"]["cuda"] is False
    # nor opens the NVIDIA devices, though the node has a GPU
    assert plan["cuda_device_access"] is False
    assert plan["unit_sandbox"] == []
    assert plan["wrapper"]["sampling"] == []
    assert plan["model_bytes"] == 1024
    assert plan["unit_directives"] == [["StartLimitIntervalSec", "0"]]
    assert plan["service_directives"] == [["Restart", "always"], ["RestartSec", "5"]]
    # the unit as role service's one template renders it, with the module's default names
    assert plan["unit_file"]["comments"][0] == "llama-server: runs /opt/gpulab/bin/gpulab-llama-server; layers on RPC0, RPC1."
    assert plan["unit_file"]["unit"][-1] == "StartLimitIntervalSec=0"
    assert "ExecStart=/opt/gpulab/bin/gpulab-llama-server" in plan["unit_file"]["service"]
    assert not [line for line in plan["unit_file"]["service"] if line.startswith("User=")]


def test_lockstep_names_the_worker(head):
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11", build_id="ba9876543210")]))
    assert result.kind is FailJson
    assert result.result["msg"].startswith("worker node-b runs llama.cpp build ba9876543210 but the head has build 0123456789ab")


def test_lockstep_from_build_info_uses_the_shared_rule(head):
    worker = manifest("node-b", "10.231.77.11", build_id="ba9876543210")
    worker["build_info"] = {"build_id": "ba9876543210", "source": {"kind": "archive", "id": "000000000000"}}
    result = run(dict(head, workers=[worker]))
    assert result.kind is FailJson
    assert "worker node-b runs llama.cpp build ba9876543210 from source 000000000000" in result.result["msg"]


def test_manifest_checked_before_use(head):
    bad = manifest("node-b", "10.231.77.11")
    bad["endpoints"][0]["port"] = "50052 --api-key x"
    result = run(dict(head, workers=[bad]))
    assert result.kind is FailJson
    assert result.result["msg"] == "worker node-b: endpoints entry 0 port '50052 --api-key x' is not a port number (1-65535)"


def test_model_that_is_not_gguf(head, tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"PK\x03\x04")
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11")]))
    assert result.kind is FailJson
    assert "m.gguf is not a GGUF file" in result.result["msg"]


def test_model_under_private_tmp(head):
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], hardening={"PrivateTmp": "yes"}))
    assert result.kind is FailJson
    assert "PrivateTmp=yes hides from the service" in result.result["msg"]


def test_rdma_fabric_reaches_the_head_too(head):
    fabric = {"rdma": {"found": True, "env": {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"},
                       "service_directives": [["DeviceAllow", "char-infiniband_verbs rw"],
                                              ["RestrictAddressFamilies", "AF_NETLINK"], ["LimitMEMLOCK", "infinity"]]}}
    plan = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], fabric=fabric)).result
    assert plan["rdma"]["environment"] == {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"}
    assert ["LimitMEMLOCK", "infinity"] in plan["service_directives"]
    assert [(e["name"], e["value"]) for e in plan["wrapper"]["environment"]] == [
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("GGML_RDMA_DEV", "mlx5_0"), ("GGML_RDMA_GID", "3")]


def test_the_unit_file_names_the_role_s_unit_and_carries_the_fabric_directives(head):
    fabric = {"rdma": {"found": True, "env": {"GGML_RDMA_DEV": "mlx5_0"},
                       "service_directives": [["DeviceAllow", "char-infiniband_verbs rw"],
                                              ["RestrictAddressFamilies", "AF_NETLINK"], ["LimitMEMLOCK", "infinity"]]}}
    plan = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], fabric=fabric, unit="lab-head",
                    bin_dir="/srv/bin", manager_version=255, hardening={"NoNewPrivileges": "yes", "PrivateTmp": None,
                                                                        "ProtectHome": None})).result
    service = plan["unit_file"]["service"]
    assert plan["unit_file"]["comments"][0] == "llama-server: runs /srv/bin/lab-head; layers on RPC0."
    assert service[:6] == ["Type=simple", "ExecStart=/srv/bin/lab-head", "Restart=always", "RestartSec=5",
                           "RestartSteps=5", "RestartMaxDelaySec=30"]
    assert service[6:9] == ["DeviceAllow=char-infiniband_verbs rw", "RestrictAddressFamilies=AF_NETLINK", "LimitMEMLOCK=infinity"]
    assert service[-1] == "NoNewPrivileges=yes"
    assert plan["unit_file"]["install"] == ["WantedBy=multi-user.target"]


def test_argv_turns_backend_sampling_on_for_a_local_output_layer(head, tmp_path):
    """The rule, through the module: CUDA build, the head's GPU last in llama.cpp's order."""
    build = tmp_path / "0123456789ab"
    (build / "BUILD_INFO.json").write_text(json.dumps({"build_id": "0123456789ab", "cuda": True}))
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11")],
                      local_gpus=[{"index": 0, "memory_total_mib": 97887}],
                      server={"port": 8080, "backend_sampling": "auto"},
                      hardening={"NoNewPrivileges": "yes", "ProtectHome": None}, cuda_devices=["char-nvidia"]))
    assert result.kind is ExitJson, result.result
    assert result.result["backend_sampling"]["enabled"] is True
    assert result.result["cuda_device_access"] is True
    assert result.result["unit_sandbox"] == ["NoNewPrivileges=yes", "DeviceAllow=char-nvidia rw"]
    assert result.result["argv"][-1] == "--backend-sampling"
    assert result.result["wrapper"]["sampling"] == [
        "Backend sampling: on (auto: the output layer is on CUDA0 (a GPU of the head))."]
    assert result.result["wrapper"]["devices"] == ["  RPC0: 10.231.77.11:50052 (node-b), split 1", "  CUDA0: local GPU, split 1"]
    assert result.result["argv"][1:3] == ["--model", head["model_path"]]


def test_argv_keeps_backend_sampling_off_for_an_output_layer_on_a_worker(head):
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11"), manifest("node-c", "10.231.77.12")],
                      server={"backend_sampling": "auto"}))
    assert result.kind is ExitJson, result.result
    assert result.result["backend_sampling"]["enabled"] is False
    assert "RPC 10.231.77.12:50052" in result.result["backend_sampling"]["reason"]
    assert "--backend-sampling" not in result.result["argv"]
    assert result.result["argv"][result.result["argv"].index("--rpc") + 1] == "10.231.77.11:50052,10.231.77.12:50052"


def test_a_cuda_build_on_a_node_without_gpus_opens_no_device(head, tmp_path):
    build = tmp_path / "0123456789ab"
    (build / "BUILD_INFO.json").write_text(json.dumps({"build_id": "0123456789ab", "cuda": True}))
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], local_gpus=[]))
    assert result.kind is ExitJson, result.result
    assert result.result["cuda_device_access"] is False


def test_auto_split_and_context_come_from_the_memory_plan(head):
    record = {"model_path": head["model_path"], "tensor_split": [3.0, 2.0], "options": {"ctx_size": 12288}}
    args = dict(head, workers=[manifest("node-b", "10.231.77.11"), manifest("node-c", "10.231.77.12")],
                tensor_split="auto", memory_plan=record, server={"ctx_size": "auto", "parallel": 2})
    result = run(args)
    assert result.kind is ExitJson, result.result
    plan = result.result
    assert plan["tensor_split"] == [3, 2] and plan["tensor_split_arg"] == "3,2"
    argv = plan["argv"]
    assert argv[argv.index("--ctx-size") + 1] == "12288" and argv[argv.index("--tensor-split") + 1] == "3,2"
    assert argv[argv.index("--fit") + 1] == "off"
    # the same record gives the same command line
    assert run(args).result["argv"] == argv


def test_auto_without_a_memory_plan_is_named(head):
    result = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], tensor_split="auto",
                      memory_plan_path="/var/lib/gpulab/memory-plan.json"))
    assert result.kind is FailJson
    assert result.result["msg"].startswith("llama_server_tensor_split is auto: the memory plan resolves it (role "
                                           "memory_plan writes /var/lib/gpulab/memory-plan.json")


def test_the_head_s_gpus_from_the_inventory_file_in_the_same_run(head, tmp_path):
    path = tmp_path / "gpu-inventory.json"
    gpu = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA RTX PRO 6000", "pci_bus_id": "00000000:01:00.0",
           "compute_cap": "12.0", "cuda_arch": "120", "memory_total_mib": 97887}
    path.write_text(json.dumps({"managed_by": "gpulab.inference", "driver_version": "580.159.04",
                                "kernel_module_version": "580.159.04", "cuda_version": "13.0", "gpu_count": 1, "gpus": [gpu]}))
    from_file = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], gpu_inventory={"path": str(path)}))
    given = run(dict(head, workers=[manifest("node-b", "10.231.77.11")], local_gpus=[gpu]))
    assert from_file.kind is ExitJson and given.kind is ExitJson, (from_file.result, given.result)
    assert from_file.result == given.result


def test_the_restart_backoff_follows_the_manager_version_given(head):
    # systemd 254 on backs restarts off in steps (RestartSteps=); the version is role common's, not asked here
    workers = [manifest("node-b", "10.231.77.11")]
    old = run(dict(head, workers=workers, manager_version=252, restart_sec=5, restart_max_delay_s=30))
    new = run(dict(head, workers=workers, manager_version=255, restart_sec=5, restart_max_delay_s=30))
    assert old.kind is ExitJson and new.kind is ExitJson
    assert old.commands == [] and new.commands == []
    assert old.result["service_directives"] == [["Restart", "always"], ["RestartSec", "5"]]
    assert new.result["service_directives"] == [["Restart", "always"], ["RestartSec", "5"], ["RestartSteps", "5"],
                                                ["RestartMaxDelaySec", "30"]]
