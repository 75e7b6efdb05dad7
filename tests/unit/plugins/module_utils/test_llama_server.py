# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rules of the llama_rpc_server and llama_server roles: devices, endpoints, split, shards."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    LlamaServerError,
    check_bind_address,
    device_order,
    format_tensor_split,
    health_timeout_s,
    missing_shards,
    model_shards,
    rpc_devices,
    rpc_endpoints,
    tensor_split,
)

H200 = {"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143156}
RTX_A = {"index": 0, "name": "RTX PRO 6000", "memory_total_mib": 97000}
RTX_B = {"index": 1, "name": "RTX PRO 6000", "memory_total_mib": 96000}


def worker(host, address, *ports, **kwargs):
    mem = kwargs.get("mem")
    return {"host": host, "address": address, "unit": "gpulab-rpc-server",
            "endpoints": [{"port": p, "device": "CUDA0", "memory_mib": mem, "instance": i}
                          for i, p in enumerate(ports)]}


# --- worker devices ----------------------------------------------------------

def test_cpu_build_exposes_one_cpu_device_even_with_gpus():
    assert rpc_devices(False, [H200]) == [
        {"instance": 0, "device": "CPU", "gpu_index": None, "memory_mib": None}]


def test_cuda_build_exposes_one_server_per_gpu_each_seeing_cuda0():
    devices = rpc_devices(True, [RTX_B, RTX_A])
    assert [(d["instance"], d["device"], d["gpu_index"]) for d in devices] == [
        (0, "CUDA0", 0), (1, "CUDA0", 1)]
    assert devices[1]["memory_mib"] == 96000


def test_cuda_build_with_selected_indices():
    devices = rpc_devices(True, [RTX_A, RTX_B], [1])
    assert [(d["instance"], d["gpu_index"]) for d in devices] == [(0, 1)]


def test_cuda_build_with_absent_index_names_it():
    with pytest.raises(LlamaServerError, match=r"\[3\] are not present.*\[0, 1\]"):
        rpc_devices(True, [RTX_A, RTX_B], [3])


def test_cuda_build_without_gpus_fails():
    with pytest.raises(LlamaServerError, match="no GPU was found"):
        rpc_devices(True, [])


@pytest.mark.parametrize("address", ["0.0.0.0", "::"])
def test_wildcard_bind_refused_unless_allowed(address):
    with pytest.raises(LlamaServerError, match="no authentication"):
        check_bind_address(address)
    assert check_bind_address(address, allow_any=True) == address


def test_bind_address_must_be_an_ip():
    with pytest.raises(LlamaServerError, match="'node-b' is not an IP address"):
        check_bind_address("node-b")
    assert check_bind_address("10.231.77.11") == "10.231.77.11"


# --- endpoints ---------------------------------------------------------------

def test_endpoints_in_inventory_order():
    endpoints = rpc_endpoints([worker("node-b", "10.231.77.11", 50052),
                               worker("node-c", "10.231.77.12", 50052, 50053)])
    assert [e["endpoint"] for e in endpoints] == [
        "10.231.77.11:50052", "10.231.77.12:50052", "10.231.77.12:50053"]
    assert [e["host"] for e in endpoints] == ["node-b", "node-c", "node-c"]
    assert [e["instance"] for e in endpoints] == [0, 0, 1]
    assert endpoints[2]["unit"] == "gpulab-rpc-server"


def test_ipv6_endpoint_in_brackets():
    assert rpc_endpoints([worker("w", "fd00::11", 50052)])[0]["endpoint"] == "[fd00::11]:50052"


def test_duplicate_address_and_port_names_both_workers():
    with pytest.raises(LlamaServerError, match=r"node-b and node-c both use 10\.0\.0\.1:50052"):
        rpc_endpoints([worker("node-b", "10.0.0.1", 50052), worker("node-c", "10.0.0.1", 50052)])


def test_same_address_other_port_is_fine():
    assert len(rpc_endpoints([worker("a", "10.0.0.1", 50052), worker("b", "10.0.0.1", 50053)])) == 2


def test_worker_without_endpoints_fails():
    with pytest.raises(LlamaServerError, match="node-b exposes no RPC endpoint"):
        rpc_endpoints([{"host": "node-b", "address": "10.0.0.1", "endpoints": []}])


# --- device order ------------------------------------------------------------

def test_rpc_devices_come_before_local_gpus():
    endpoints = rpc_endpoints([worker("node-b", "192.168.100.11", 50052, mem=95000)])
    devices = device_order(endpoints, [RTX_A, RTX_B])
    assert [d["name"] for d in devices] == ["RPC0", "CUDA0", "CUDA1"]
    assert devices[0]["endpoint"] == "192.168.100.11:50052"
    assert [d["memory_mib"] for d in devices] == [95000, 97000, 96000]


def test_cpu_head_has_only_rpc_devices():
    endpoints = rpc_endpoints([worker("b", "10.0.0.11", 50052), worker("c", "10.0.0.12", 50052)])
    assert [d["name"] for d in device_order(endpoints, [])] == ["RPC0", "RPC1"]


# --- tensor split ------------------------------------------------------------

def seed_devices():
    endpoints = rpc_endpoints([worker("node-b", "192.168.100.11", 50052, mem=95000)])
    return device_order(endpoints, [RTX_A, RTX_B])


def test_equal_split_is_one_per_device():
    split = tensor_split("equal", seed_devices())
    assert split == [1, 1, 1]
    assert format_tensor_split(split) == "1,1,1"


def test_proportional_split_uses_memory_size():
    assert tensor_split("proportional", seed_devices()) == [95000, 97000, 96000]


def test_proportional_split_needs_every_memory_size():
    devices = device_order(rpc_endpoints([worker("b", "10.0.0.1", 50052)]), [RTX_A])
    with pytest.raises(LlamaServerError, match="memory size is unknown for RPC0"):
        tensor_split("proportional", devices)


def test_list_split_kept_and_formatted():
    split = tensor_split([2, 1.5, "1"], seed_devices())
    assert split == [2, 1.5, 1]
    assert format_tensor_split(split) == "2,1.5,1"


def test_string_list_split_accepted():
    assert tensor_split("3/1,1", seed_devices()) == [3, 1, 1]


def test_list_split_length_mismatch_names_both_lengths_and_devices():
    with pytest.raises(LlamaServerError,
                       match=r"has 2 entries but there are 3 devices .*\(RPC0, CUDA0, CUDA1\)"):
        tensor_split([1, 1], seed_devices())


def test_list_split_rejects_negative_and_all_zero():
    with pytest.raises(LlamaServerError, match="finite number >= 0"):
        tensor_split([1, -1, 1], seed_devices())
    with pytest.raises(LlamaServerError, match="puts nothing"):
        tensor_split([0, 0, 0], seed_devices())


def test_unknown_split_mode():
    with pytest.raises(LlamaServerError, match="'even' is not equal, proportional"):
        tensor_split("even", seed_devices())


def test_no_device_at_all():
    with pytest.raises(LlamaServerError, match="no device to split"):
        tensor_split("equal", [])


def test_too_many_devices_for_llama_cpp():
    workers = [worker("w%d" % i, "10.0.0.%d" % i, 50052) for i in range(1, 17)]
    with pytest.raises(LlamaServerError, match="16 devices .* at most 15"):
        tensor_split("equal", device_order(rpc_endpoints(workers), []))


# --- model shards ------------------------------------------------------------

def test_split_model_lists_every_shard():
    shards = model_shards("/srv/models/M/MiniMax-M2.7-Q8_0-00001-of-00006.gguf")
    assert len(shards) == 6
    assert shards[0] == "/srv/models/M/MiniMax-M2.7-Q8_0-00001-of-00006.gguf"
    assert shards[5] == "/srv/models/M/MiniMax-M2.7-Q8_0-00006-of-00006.gguf"


def test_single_file_model():
    assert model_shards("/m/model.gguf") == ["/m/model.gguf"]
    assert model_shards("model.gguf") == ["model.gguf"]


def test_not_first_shard_is_refused():
    with pytest.raises(LlamaServerError, match="shard 3 of 6; give llama-server the first shard"):
        model_shards("/m/X-00003-of-00006.gguf")


def test_not_gguf_is_refused():
    with pytest.raises(LlamaServerError, match="does not end with .gguf"):
        model_shards("/m/X.bin")


def test_missing_shards_in_order():
    shards = model_shards("/m/X-00001-of-00003.gguf")
    assert missing_shards(shards, {"/m/X-00001-of-00003.gguf"}) == [
        "/m/X-00002-of-00003.gguf", "/m/X-00003-of-00003.gguf"]


# --- health timeout ----------------------------------------------------------

def test_health_timeout_floor_for_small_models():
    assert health_timeout_s(10 * 1024 * 1024) == 121
    assert health_timeout_s(0) == 120


def test_health_timeout_scales_with_model_size():
    # 226 GiB at 100 MiB/s: 2315 s plus the floor.
    assert health_timeout_s(226 * 1024 ** 3) == 120 + 2315
    assert health_timeout_s(226 * 1024 ** 3, floor_s=60, load_rate_mib_s=1000) == 60 + 232


def test_health_timeout_rejects_zero_rate():
    with pytest.raises(LlamaServerError, match="must be > 0"):
        health_timeout_s(1, load_rate_mib_s=0)
