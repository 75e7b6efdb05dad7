# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rules of the llama_server role, the head: workers' manifests, device order, split, shards, command line."""

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.llama_server import (
    LlamaServerError,
    access_problem,
    check_health_settings,
    gguf_magic_problem,
    lockstep_problems,
    sandbox_problem,
    worker_manifest,
    device_order,
    format_tensor_split,
    health_timeout_s,
    missing_shards,
    model_shards,
    rpc_endpoints,
    tensor_split,
)
from ansible_collections.gpulab.inference.plugins.module_utils import llama_server as ls

RTX_A = {"index": 0, "name": "RTX PRO 6000", "memory_total_mib": 97000}
RTX_B = {"index": 1, "name": "RTX PRO 6000", "memory_total_mib": 96000}


def worker(host, address, *ports, **kwargs):
    mem = kwargs.get("mem")
    return {"host": host, "address": address, "unit": "gpulab-rpc-server",
            "endpoints": [{"port": p, "device": "CUDA0", "memory_mib": mem, "instance": i}
                          for i, p in enumerate(ports)]}


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


# --- worker manifests ----------------------------------------------------------

MANIFEST = {"managed_by": "gpulab.inference", "host": "node-b", "address": "10.231.77.11", "build_id": "0123456789ab",
            "unit": "gpulab-rpc-server",
            "endpoints": [{"instance": 0, "device": "CPU", "gpu_index": None, "port": 50052, "memory_mib": 15990}]}


def test_manifest_as_llama_rpc_server_writes_it():
    assert worker_manifest(MANIFEST) == {
        "host": "node-b", "address": "10.231.77.11", "unit": "gpulab-rpc-server", "build_id": "0123456789ab",
        "build_info": None, "endpoints": [{"instance": 0, "port": 50052, "device": "CPU", "memory_mib": 15990}]}


def test_manifest_port_given_as_text_is_read():
    manifest = dict(MANIFEST, endpoints=[dict(MANIFEST["endpoints"][0], port="50053")])
    assert worker_manifest(manifest)["endpoints"][0]["port"] == 50053


def test_manifest_address_is_normalised():
    assert worker_manifest(dict(MANIFEST, address="FD00:0::11"))["address"] == "fd00::11"


@pytest.mark.parametrize("field, value, message", [
    ("address", "999.1.1.1", "address '999.1.1.1' is not an IP address"),
    ("address", "10.0.0.1 --rpc 6.6.6.6:1", "is not an IP address"),
    ("address", None, "address None is not an IP address"),
    ("unit", "x;reboot", "unit 'x;reboot' is not a systemd unit name"),
    ("build_id", "../../x", "build_id '../../x' is not a 12-digit hex build id"),
    ("endpoints", [], "exposes no RPC endpoint"),
    ("endpoints", "50052", "exposes no RPC endpoint"),
    ("endpoints", ["50052"], "endpoints entry 0 is not an object"),
])
def test_manifest_field_is_named(field, value, message):
    with pytest.raises(LlamaServerError, match=re.escape(message)):
        worker_manifest(dict(MANIFEST, **{field: value}))


@pytest.mark.parametrize("endpoint, message", [
    ({"device": "CPU"}, "endpoints entry 0 port None is not a port number"),
    ({"device": "CPU", "port": "abc"}, "endpoints entry 0 port 'abc' is not a port number"),
    ({"device": "CPU", "port": True}, "endpoints entry 0 port True is not a port number"),
    ({"device": "CPU", "port": 0}, "endpoints entry 0 port 0 is out of range"),
    ({"device": "CPU", "port": 65536}, "endpoints entry 0 port 65536 is out of range"),
    ({"device": "CPU $(id)", "port": 50052}, "endpoints entry 0 device 'CPU $(id)' is not a ggml device name"),
    ({"device": "CPU", "port": 50052, "memory_mib": "lots"}, "endpoints entry 0 memory_mib 'lots' is not a whole number"),
])
def test_manifest_endpoint_field_is_named(endpoint, message):
    with pytest.raises(LlamaServerError, match=re.escape("worker node-b: " + message)):
        worker_manifest(dict(MANIFEST, endpoints=[endpoint]))


# A worker controls its servers.json; every field lands in the head's wrapper script or its systemctl
# calls. A trailing newline is the case `^...$` let through.
@pytest.mark.parametrize("field, value", [
    ("host", "w1\ntouch /tmp/x\n#"),
    ("host", "node-b\n"),
    ("host", "node b"),
    ("host", "node-b;id"),
    ("host", "$(id)"),
    ("host", ["node-b"]),
    ("host", 7),
    ("unit", "gpulab-rpc-server\n"),
    ("build_id", "0123456789ab\n"),
    ("build_id", 123456789012),
    ("address", "10.0.0.1\nx"),
])
def test_manifest_field_from_a_worker_is_refused_before_use(field, value):
    with pytest.raises(LlamaServerError, match=re.escape(field)):
        worker_manifest(dict(MANIFEST, **{field: value}), "workers entry 0")


@pytest.mark.parametrize("device", ["CUDA0\n", "CUDA0\nrm -rf /", 0, ["CPU"]])
def test_manifest_device_with_a_newline_or_not_text_is_refused(device):
    with pytest.raises(LlamaServerError, match="endpoints entry 0 device"):
        worker_manifest(dict(MANIFEST, endpoints=[{"device": device, "port": 50052}]))


def test_manifest_host_error_names_the_file_and_the_worker():
    with pytest.raises(LlamaServerError, match=r"workers entry 3: servers.json field host 'w1\\ntouch"):
        worker_manifest(dict(MANIFEST, host="w1\ntouch /tmp/x\n#"), "workers entry 3")


@pytest.mark.parametrize("host", ["node-b", "node-b.lab.example", "10.0.0.2", "fd00::2", "fe80::1%eth0", "node_b"])
def test_manifest_host_names_that_inventories_use_are_accepted(host):
    assert worker_manifest(dict(MANIFEST, host=host))["host"] == host


def test_manifest_that_is_not_an_object():
    with pytest.raises(LlamaServerError, match="workers entry 2: servers.json must hold a JSON object, not list"):
        worker_manifest([], "workers entry 2")


# What lockstep_summary keeps of a BUILD_INFO.json (the fields of the lab's CPU build).
HEAD_SUMMARY = {"build_id": "0123456789ab", "source": {"kind": "archive", "id": "cbd906bf6d4f"}, "cpu_arch": "x86_64",
                "glibc_version": "2.36", "cuda": False, "nvcc_version": None}
HEAD_BUILD = {"build_id": "0123456789ab", "lockstep": HEAD_SUMMARY}


def test_lockstep_same_build_passes():
    assert lockstep_problems(HEAD_BUILD, [dict(MANIFEST, build_info=HEAD_SUMMARY)]) == []
    assert lockstep_problems(HEAD_BUILD, [MANIFEST]) == []


def test_lockstep_other_source_is_named_by_the_shared_rule():
    other = dict(HEAD_SUMMARY, build_id="ba9876543210", source={"kind": "archive", "id": "000000000000"})
    problems = lockstep_problems(HEAD_BUILD, [dict(MANIFEST, build_info=other)])
    assert len(problems) == 1
    assert problems[0].startswith("worker node-b runs llama.cpp build ba9876543210 from source 000000000000")


def test_lockstep_local_build_that_could_share_is_named():
    local = dict(HEAD_SUMMARY, build_id="ba9876543210")
    problems = lockstep_problems(HEAD_BUILD, [dict(MANIFEST, build_info=local)])
    assert len(problems) == 1
    assert "could run the cluster's build 0123456789ab" in problems[0]


def test_lockstep_local_build_that_had_to_be_passes():
    arm = dict(HEAD_SUMMARY, build_id="ba9876543210", cpu_arch="aarch64")
    assert lockstep_problems(HEAD_BUILD, [dict(MANIFEST, build_info=arm)]) == []


def test_lockstep_without_build_info_needs_the_same_id():
    problems = lockstep_problems(HEAD_BUILD, [dict(MANIFEST, host="node-c", build_id="ba9876543210")])
    assert problems == [
        "worker node-c runs llama.cpp build ba9876543210 but the head has build 0123456789ab, and its servers.json has "
        "no build_info to judge whether that build may serve beside it: deploy one build to every node "
        "(playbooks/build.yml) and run llama_rpc_server again"]


SUMMARY = {"build_id": "0123456789ab", "source": {"kind": "git", "id": "git:https://github.com/ggml-org/llama.cpp@0c1e570"}, "cpu_arch": "x86_64",
           "glibc_version": "2.36", "cuda": True, "nvcc_version": "12.8.93"}


@pytest.mark.parametrize("change, message", [
    ({"source": "git"}, "source is 'git', expected an object"),
    ({"source": {"id": ["x"]}}, "source id is ['x']"),
    ({"source": {"id": "git:https://x@1\nid"}}, "source id is"),
    ({"build_id": None}, "build_id is None"),
    ({"cpu_arch": {"x": 1}}, "cpu_arch is {'x': 1}"),
    ({"glibc_version": "2.36\n#"}, "glibc_version is"),
    ({"cuda": "true"}, "cuda is 'true', expected true or false"),
    ({"nvcc_version": 12.8}, "nvcc_version is 12.8"),
])
def test_manifest_build_info_fields_are_checked_before_lockstep(change, message):
    with pytest.raises(LlamaServerError) as raised:
        worker_manifest(dict(MANIFEST, build_info=dict(SUMMARY, **change)))
    assert "worker node-b: servers.json build_info: " in str(raised.value)
    assert message in str(raised.value)


def test_manifest_build_info_as_llama_rpc_server_writes_it_passes():
    assert worker_manifest(dict(MANIFEST, build_info=SUMMARY))["build_info"] == SUMMARY


def test_manifest_build_info_must_be_an_object():
    with pytest.raises(LlamaServerError, match="build_info must be an object"):
        worker_manifest(dict(MANIFEST, build_info="0123456789ab"))


# --- fail fast -------------------------------------------------------------------

def test_health_settings_refused():
    check_health_settings(0, 120, 100, 5)
    with pytest.raises(LlamaServerError, match="llama_server_health_timeout_s is -5"):
        check_health_settings(-5, 120, 100)
    with pytest.raises(LlamaServerError, match="llama_server_health_load_rate_mib_s is 0"):
        check_health_settings(0, 120, 0)
    with pytest.raises(LlamaServerError, match="llama_server_health_poll_s is 0"):
        check_health_settings(0, 120, 100, 0)


def test_gguf_magic():
    assert gguf_magic_problem("/m.gguf", b"GGUF\x03\x00") is None
    assert "is not a GGUF file (it starts with b'<htm'" in gguf_magic_problem("/m.gguf", b"<html>")
    assert "is not a GGUF file" in gguf_magic_problem("/m.gguf", b"")


HARDENING = {"ProtectHome": "yes", "PrivateTmp": "yes", "ProtectSystem": "strict"}


@pytest.mark.parametrize("path, directive", [
    ("/home/ops/model.gguf", "ProtectHome=yes"), ("/root/m.gguf", "ProtectHome=yes"),
    ("/tmp/m.gguf", "PrivateTmp=yes"), ("/var/tmp/x/m.gguf", "PrivateTmp=yes"),
])
def test_sandbox_hides_home_and_tmp(path, directive):
    assert "which %s hides from the service" % directive in sandbox_problem(path, HARDENING)


def test_sandbox_leaves_other_paths_and_overrides():
    assert sandbox_problem("/var/lib/gpulab/models/m.gguf", HARDENING) is None
    assert sandbox_problem("/homework/m.gguf", HARDENING) is None
    assert sandbox_problem("/tmp/m.gguf", dict(HARDENING, PrivateTmp=None)) is None


CHAIN = [("/", 0o40755, 0, 0), ("/srv", 0o40750, 0, 1000), ("/srv/m.gguf", 0o100640, 0, 1000)]


def test_access_through_group():
    assert access_problem(CHAIN, 999, {1000}, "gpulab-llama") is None


def test_access_denied_names_the_directory():
    message = access_problem(CHAIN, 999, {999}, "gpulab-llama")
    assert message.startswith("gpulab-llama cannot enter /srv (mode 0750, owner 0, group 1000)")


def test_access_of_an_account_to_be_created_uses_other_bits():
    assert "cannot enter /srv" in access_problem(CHAIN, None, (), "gpulab-llama")
    readable = [("/", 0o40755, 0, 0), ("/srv/m.gguf", 0o100644, 0, 0)]
    assert access_problem(readable, None, (), "gpulab-llama") is None


def test_access_of_the_owner_and_of_root():
    private = [("/", 0o40755, 0, 0), ("/m.gguf", 0o100600, 5, 5)]
    assert access_problem(private, 5, {5}, "owner") is None
    assert access_problem(private, 0, {0}, "root") is None
    assert "cannot read /m.gguf" in access_problem(private, 6, {6}, "other")


# --- llama-server's command line and backend sampling ------------------------------------------

def _devices(rpc=0, local=0):
    return ls.device_order(
        [{"endpoint": "10.0.0.%d:50052" % (i + 2), "host": "w%d" % i, "device": "CUDA0", "memory_mib": 1000}
         for i in range(rpc)],
        [{"index": i, "memory_total_mib": 1000} for i in range(local)])


@pytest.mark.parametrize("rpc, local, split, n_layer, expected", [
    (0, 1, [1], 62, True),            # all local: the output layer is on CUDA0
    (2, 1, [1, 1, 1], 62, True),      # the reference lab: RPC0, RPC1, then the head's CUDA0 last
    (2, 0, [1, 1], 62, False),        # a head without GPUs: the output layer is on RPC1
    (1, 1, [1, 0], 62, False),        # nothing on the head's GPU: the output follows the last share
    (1, 1, [1, 1], None, True),       # layer count unknown: the last device with a share
    (1, 1, [1, 0], None, False),
    (1, 1, [62, 0.5], 62, False),     # a share smaller than one layer: the output stays on RPC0
])
def test_backend_sampling_follows_the_output_layer(rpc, local, split, n_layer, expected):
    choice = ls.backend_sampling_choice("auto", _devices(rpc, local), split, n_layer)
    assert choice["enabled"] is expected
    assert ("a GPU of the head" in choice["output_device"]) is expected


def test_backend_sampling_forced_either_way_or_given_as_an_extra_argument():
    devices = _devices(2, 0)
    assert ls.backend_sampling_choice(True, devices, [1, 1])["enabled"] is True
    assert ls.backend_sampling_choice(False, _devices(0, 1), [1])["enabled"] is False
    extra = ls.backend_sampling_choice("auto", devices, [1, 1], extra_args=["-bs"])
    assert extra["enabled"] is True and "extra_args" in extra["reason"]
    with pytest.raises(ls.LlamaServerError, match="llama_server_backend_sampling is 'sometimes'"):
        ls.backend_sampling_choice("sometimes", devices, [1, 1])


def test_server_argv_is_the_whole_command_line():
    argv = ls.server_argv("/opt/b/bin/llama-server", "/m/x-00001-of-00002.gguf",
                          {"port": "8081", "log_verbosity": 4, "api_key_file": "/etc/gpulab/llama-server/api-keys",
                           "threads": 8, "reasoning_budget": 0, "extra_args": ["--no-warmup"]},
                          "10.0.0.2:50052", "1,1", True)
    assert argv == [
        "/opt/b/bin/llama-server", "--model", "/m/x-00001-of-00002.gguf", "--host", "127.0.0.1", "--port", "8081",
        "--rpc", "10.0.0.2:50052", "--n-gpu-layers", "all", "--tensor-split", "1,1", "--ctx-size", "8192",
        "--parallel", "4", "--flash-attn", "auto", "--cache-type-k", "f16", "--cache-type-v", "f16",
        "--batch-size", "2048", "--ubatch-size", "512", "--fit", "off", "--jinja", "--reasoning-budget", "0", "--metrics",
        "--threads", "8", "--verbosity", "4", "--api-key-file", "/etc/gpulab/llama-server/api-keys",
        "--backend-sampling", "--no-warmup"]


def test_server_argv_without_rpc_or_backend_sampling_and_no_duplicate_flag():
    argv = ls.server_argv("ls", "m.gguf", {"jinja": False, "metrics": False, "extra_args": ["--backend-sampling"]},
                          "", "1", True)
    assert "--rpc" not in argv and "--jinja" not in argv and "--metrics" not in argv
    assert argv.count("--backend-sampling") == 1


def test_memory_options_are_the_options_the_head_runs():
    assert ls.memory_options({}) == {
        "n_gpu_layers": "all", "ctx_size": 8192, "parallel": 4, "flash_attn": "auto", "cache_type_k": "f16",
        "cache_type_v": "f16", "ubatch": 512, "kv_unified": False, "offload_kqv": True}
    options = {"ctx_size": "16384", "parallel": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0",
               "gpu_layers": 40, "batch_size": 1024, "ubatch_size": 256}
    assert ls.memory_options(options) == {
        "n_gpu_layers": 40, "ctx_size": 16384, "parallel": 2, "flash_attn": "auto", "cache_type_k": "q8_0",
        "cache_type_v": "q8_0", "ubatch": 256, "kv_unified": False, "offload_kqv": True}
    argv = ls.server_argv("ls", "m.gguf", options, "", "1", False)
    assert argv[argv.index("--cache-type-k"):argv.index("--cache-type-k") + 8] == [
        "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--batch-size", "1024", "--ubatch-size", "256"]


def test_extra_args_that_change_the_memory_count_the_last_one_winning():
    extra = ["--no-mmap", "-ctk", "q8_0", "--cache-type-v=q4_0", "-c", "32768", "-np", "8", "-fa", "on",
             "-ub", "4096", "-b", "1024", "-kvu", "-nkvo", "-ngl", "30", "-ctk", "q5_1"]
    assert ls.memory_options({"extra_args": extra}) == {
        "n_gpu_layers": 30, "ctx_size": 32768, "parallel": 8, "flash_attn": "on", "cache_type_k": "q5_1",
        "cache_type_v": "q4_0", "ubatch": 1024, "kv_unified": True, "offload_kqv": False}
    # the argv keeps the options first and the extra arguments last, so llama.cpp takes the latter
    argv = ls.server_argv("ls", "m.gguf", {"extra_args": extra}, "", "1", False)
    assert argv[-len(extra):] == extra and argv[argv.index("--cache-type-k") + 1] == "f16"


@pytest.mark.parametrize("options, message", [
    ({"cache_type_k": "q8"}, "llama_server_cache_type_k 'q8' is not a KV cache type llama.cpp accepts; use one of: "
                             "bf16, f16, f32, iq4_nl, q4_0"),
    ({"extra_args": ["-ctv", "fp8"]}, "-ctv in llama_server_extra_args 'fp8' is not a KV cache type"),
    ({"extra_args": ["--ctx-size"]}, "llama_server_extra_args ends with --ctx-size but not its value"),
    ({"extra_args": ["-c", "8k"]}, "-c in llama_server_extra_args '8k' is not a whole number"),
    ({"parallel": 0}, "llama_server_parallel 0 is below 1"),
    ({"ubatch_size": True}, "llama_server_ubatch_size True is not a whole number"),
    ({"flash_attn": True}, "llama_server_flash_attn True is not on, off or auto"),
    ({"gpu_layers": "most"}, "llama_server_gpu_layers 'most' is not a whole number"),
    ({"extra_args": "--no-mmap"}, "llama_server_extra_args '--no-mmap' is not a list"),
])
def test_memory_options_refuse_what_llama_server_would(options, message):
    with pytest.raises(ls.LlamaServerError, match=re.escape(message)):
        ls.memory_options(options)
    with pytest.raises(ls.LlamaServerError, match=re.escape(message)):
        ls.server_argv("ls", "m.gguf", options, "", "1", False)


@pytest.mark.parametrize("options, message", [
    ({"port": 70000}, "llama_server_port 70000 is out of range"),
    ({"port": "abc"}, "llama_server_port 'abc' is not a port number"),
    ({"ctxsize": 1}, "unknown llama-server option"),
])
def test_server_argv_refuses_bad_options(options, message):
    with pytest.raises(ls.LlamaServerError, match=message):
        ls.server_argv("ls", "m.gguf", options, "", "1", False)


def test_backend_sampling_off_by_default_and_strings_from_the_command_line():
    # The role's default: off even with the output layer on the head's GPU (docs/benchmarks.md).
    assert ls.SERVER_OPTION_DEFAULTS["backend_sampling"] is False
    assert ls.backend_sampling_choice(False, _devices(0, 1), [1])["enabled"] is False
    # -e llama_server_backend_sampling=true arrives as a string
    assert ls.backend_sampling_choice("true", _devices(2, 0), [1, 1])["enabled"] is True
    assert ls.backend_sampling_choice("off", _devices(0, 1), [1])["enabled"] is False


def test_cuda_device_access_needs_a_cuda_build_and_a_gpu():
    gpu = [{"index": 0, "memory_total_mib": 97887}]
    assert ls.cuda_device_access({"cuda": True}, gpu) is True
    assert ls.cuda_device_access({"cuda": True}, []) is False
    assert ls.cuda_device_access({"cuda": False}, gpu) is False
    assert ls.cuda_device_access({}, gpu) is False
    assert ls.cuda_device_access(None, gpu) is False


def test_an_auto_context_is_the_memory_plans_to_resolve():
    assert ls.memory_options({"ctx_size": "auto"})["ctx_size"] == "auto"
    with pytest.raises(ls.LlamaServerError, match="llama_server_ctx_size is auto but nothing resolved it"):
        ls.server_argv("ls", "m.gguf", {"ctx_size": "auto"}, "", "1", False)
