"""llama_rpc_server_plan with run_command and get_bin_path patched and a deployed build under tmp_path."""

import json
import time

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import bounded_command
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import meminfo_total_mib
from ansible_collections.gpulab.inference.plugins.modules import llama_rpc_server_plan
import module_harness
import test_node_exposure
from module_harness import ExitJson, FailJson

SYSTEMCTL = "/usr/bin/systemctl"
IS_ACTIVE = (SYSTEMCTL, "is-active", "firewalld.service", "ufw.service")


@pytest.fixture()
def build(tmp_path):
    """/opt/gpulab/llama.cpp/current -> <build id>/ with BUILD_INFO.json and an executable ggml-rpc-server."""
    target = tmp_path / "0123456789ab"
    (target / "bin").mkdir(parents=True)
    (target / "BUILD_INFO.json").write_text(json.dumps(
        {"build_id": "0123456789ab", "cuda": False, "rpc_server_binary": "ggml-rpc-server"}))
    binary = target / "bin" / "ggml-rpc-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    link = tmp_path / "current"
    link.symlink_to(target)
    return link


def run(args, firewalls="inactive\ninactive\n", systemctl=True, answers=None):
    table = {IS_ACTIVE: (3 if "inactive" in firewalls else 0, firewalls, "")}
    table.update(answers or {})
    base = {"address": "10.231.77.11", "allowed_sources": ["10.231.77.10"], "memory_mib": 16000, "ssh_ports": [22],
            "unit_names": []}
    base.update(args)
    # None leaves the option out, as omit does.
    base = dict((key, value) for key, value in base.items() if value is not None)
    return module_harness.run_module(llama_rpc_server_plan.main, base, table,
                                     {"systemctl": SYSTEMCTL} if systemctl else {})


def test_cpu_worker_plan(build):
    result = run({"build_link": str(build), "unit_names": ["gpulab-rpc-server@0.service", "gpulab-rpc-server@1.service"]})
    assert result.kind is ExitJson
    plan = result.result
    assert plan["build"] == {"build_id": "0123456789ab", "build_dir": str(build.resolve()), "cuda": False,
                             "rpc_server_binary": str(build.resolve() / "bin" / "ggml-rpc-server"),
                             "lockstep": {"build_id": "0123456789ab", "source": None, "cpu_arch": None,
                                          "glibc_version": None, "cuda": False, "nvcc_version": None}}
    assert plan["servers"] == [{"instance": 0, "device": "CPU", "gpu_index": None, "memory_mib": 16000, "port": 50052}]
    assert plan["firewall"] == {"ipv4": ["10.231.77.10"], "ipv6": [], "admit_loopback": False,
                                "ip_address_allow": ["10.231.77.10"], "ssh_ports": [22]}
    assert plan["stale_units"] == ["gpulab-rpc-server@1.service"]
    assert plan["unit_directives"] == [["StartLimitIntervalSec", "0"]]
    assert plan["service_directives"] == [["Restart", "always"], ["RestartSec", "5"]]
    # the manager's version comes from role common (manager_version), not from systemctl here
    assert result.commands == [[SYSTEMCTL, "is-active", "firewalld.service", "ufw.service"]]
    binary = str(build.resolve() / "bin" / "ggml-rpc-server")
    assert [w["name"] for w in plan["wrappers"]] == ["gpulab-rpc-server-0"]
    assert plan["wrappers"][0]["comments"][0] == "ggml RPC server 0 of this node, build 0123456789ab:"
    assert plan["wrappers"][0]["argv"] == [binary, "--host", "10.231.77.11", "--port", "50052", "--device", "CPU"]
    assert plan["unit_file"]["unit"][3:6] == ["# No rules, no server: the instance does not start unless the firewall "
                                              "unit loaded its table.", "Requires=gpulab-rpc-server-firewall.service",
                                              "After=gpulab-rpc-server-firewall.service"]
    assert plan["unit_file"]["install"][-1] == "WantedBy=multi-user.target gpulab-rpc-server-firewall.service"


def test_the_role_settings_reach_the_wrapper_and_the_unit(build):
    plan = run({"build_link": str(build), "node_name": "node-b", "threads": 6, "cache_dir": "/var/cache/gpulab/rpc",
                "firewall_unit": "rpc-fw.service", "user": "rpc", "group": "rpc", "bin_dir": "/usr/local/bin",
                "hardening": {"NoNewPrivileges": "yes", "ProtectHome": None}}).result
    wrapper = plan["wrappers"][0]
    assert wrapper["comments"][0] == "ggml RPC server 0 of node-b, build 0123456789ab:"
    assert wrapper["argv_lines"][-2:] == [["--threads", "6"], ["--cache"]]
    assert wrapper["environment"][-1]["name"] == "LLAMA_CACHE"
    service = plan["unit_file"]["service"]
    assert service[:4] == ["Type=simple", "User=rpc", "Group=rpc", "ExecStart=/usr/local/bin/gpulab-rpc-server-%i"]
    assert "ReadWritePaths=/var/cache/gpulab/rpc" in service and "IPAddressAllow=10.231.77.10" in service
    assert service[-1] == "NoNewPrivileges=yes"
    assert plan["unit_file"]["unit"][4] == "Requires=rpc-fw.service"


def test_the_guard_s_wrapper_comes_with_the_plan(build):
    guard = {"name": "gpulab-rpc-guard", "python": "/usr/bin/python3", "code": "/opt/gpulab/bin/gpulab-rpc-guard.py",
             "table": "gpulab_rpc", "service_manager": "supervisor", "supervisor_config": "/etc/gpulab/supervisord.conf"}
    plan = run({"build_link": str(build), "guard": guard}).result
    assert plan["guard_wrapper"]["argv"] == [
        "/usr/bin/python3", "/opt/gpulab/bin/gpulab-rpc-guard.py", "--table", "gpulab_rpc", "--ports", "50052",
        "--manager", "supervisor", "--supervisor-config", "/etc/gpulab/supervisord.conf",
        "--firewall-unit", "gpulab-rpc-server-firewall.service", "--interval-s", "0.5", "--units", "gpulab-rpc-server-0"]
    assert run({"build_link": str(build)}).result["guard_wrapper"] is None
    # the daemon's configuration has no default here: role common's gpulab_supervisor_config is passed
    unconfigured = run({"build_link": str(build), "guard": dict(guard, supervisor_config=None)})
    assert unconfigured.kind is FailJson
    assert unconfigured.result["msg"].startswith("gpulab_supervisor_config is empty")


def test_a_newline_in_a_role_setting_is_refused(build):
    result = run({"build_link": str(build), "cache_dir": "/var/cache\nExecStartPre=/bin/sh"})
    assert result.kind is FailJson
    assert result.result["msg"].startswith("llama_rpc_server_cache_dir '/var/cache\\nExecStartPre=/bin/sh' holds a newline")


def test_head_on_the_node_admits_loopback():
    plan = run({"head_is_local": True}).result
    assert plan["firewall"]["admit_loopback"] is True
    assert plan["firewall"]["ip_address_allow"] == ["10.231.77.10", "localhost"]
    assert "IPAddressAllow=10.231.77.10 localhost" in plan["unit_file"]["service"]
    assert plan["wrappers"] == []


def test_backoff_from_systemd_254():
    # role common's gpulab_service_manager_version: systemd 255 backs restarts off in steps
    plan = run({"restart_sec": 5, "restart_max_delay_s": 60, "manager_version": 255}).result
    assert plan["service_directives"] == [["Restart", "always"], ["RestartSec", "5"], ["RestartSteps", "5"],
                                          ["RestartMaxDelaySec", "60"]]


def test_without_systemctl_nothing_is_asked():
    result = run({}, systemctl=False)
    assert result.kind is ExitJson
    assert result.commands == []
    assert result.result["service_directives"] == [["Restart", "always"], ["RestartSec", "5"]]


def test_active_firewalld_stops_with_the_commands():
    result = run({}, firewalls="active\ninactive\n")
    assert result.kind is FailJson
    assert result.result["msg"].startswith("firewalld.service is active on this node")
    assert "firewall-cmd --reload" in result.result["msg"]


def test_active_firewalld_when_opened():
    assert run({"other_firewall": "opened"}, firewalls="active\ninactive\n").kind is ExitJson


def test_firewall_disabled_needs_no_sources():
    result = run({"firewall_enabled": False, "allowed_sources": []}, firewalls="active\nactive\n")
    assert result.kind is ExitJson
    assert result.result["firewall"]["ip_address_allow"] == []
    assert result.result["unit_file"]["install"] == ["WantedBy=multi-user.target"]
    assert not [line for line in result.result["unit_file"]["service"] if line.startswith("IPAddress")]


def test_cuda_build_without_gpus(build):
    info = build / "BUILD_INFO.json"
    info.write_text(json.dumps({"build_id": "0123456789ab", "cuda": True, "rpc_server_binary": "ggml-rpc-server"}))
    result = run({"build_link": str(build)})
    assert result.kind is FailJson
    assert "no GPU was found" in result.result["msg"]


def test_missing_build_is_named(tmp_path):
    result = run({"build_link": str(tmp_path / "current")})
    assert result.kind is FailJson
    assert result.result["msg"] == ("%s does not exist: deploy a llama.cpp build first (roles llama_cpp_build and "
                                    "llama_cpp_distribute)" % (tmp_path / "current"))


FABRIC = {"interface": "ens1f0np0", "rdma": {
    "found": True, "env": {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_GID_INDEX": "3", "GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"},
    "service_directives": [["DeviceAllow", "char-infiniband_verbs rw"], ["RestrictAddressFamilies", "AF_NETLINK"],
                           ["LimitMEMLOCK", "infinity"]]}}


def test_rdma_fabric_adds_the_environment_and_the_verbs_device(build):
    plan = run({"build_link": str(build), "fabric": FABRIC}).result
    assert plan["rdma"]["expected"] is True
    assert plan["rdma"]["environment"] == {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"}
    assert plan["service_directives"] == [["Restart", "always"], ["RestartSec", "5"],
                                          ["DeviceAllow", "char-infiniband_verbs rw"],
                                          ["RestrictAddressFamilies", "AF_NETLINK"], ["LimitMEMLOCK", "infinity"]]
    plain = run({"build_link": str(build)}).result
    assert plain["rdma"] == {"expected": False, "environment": {}, "service_directives": []}


def test_the_fabric_file_is_read_in_the_same_run(build, tmp_path):
    fabric_file = tmp_path / "fabric.json"
    fabric_file.write_text(json.dumps(FABRIC))
    plan = run({"build_link": str(build), "fabric_file": str(fabric_file)}).result
    assert plan["rdma"]["environment"] == {"GGML_RDMA_DEV": "mlx5_0", "GGML_RDMA_GID": "3"}
    absent = run({"build_link": str(build), "fabric_file": str(tmp_path / "absent.json")}).result
    assert absent["rdma"] == {"expected": False, "environment": {}, "service_directives": []}
    fabric_file.write_text("{not json")
    broken = run({"build_link": str(build), "fabric_file": str(fabric_file)})
    assert broken.kind is FailJson
    assert broken.result["msg"].startswith("%s cannot be read (" % fabric_file)
    assert broken.result["msg"].endswith("run role gpulab.inference.roce again, or remove it on a node without a RoCE fabric")


def test_ssh_ports_read_on_the_node_when_not_given(build, tmp_path):
    proc = test_node_exposure.proc_tree(tmp_path / "proc")
    plan = run({"build_link": str(build), "ssh_ports": None, "proc_root": str(proc), "ansible_port": 2222}).result
    assert plan["firewall"]["ssh_ports"] == [22, 2222]
    on_ssh = run({"build_link": str(build), "ssh_ports": None, "proc_root": str(proc), "port_base": 22})
    assert on_ssh.kind is FailJson
    assert "llama_rpc_server_port_base" in on_ssh.result["msg"]


LIST_UNITS = (SYSTEMCTL, "list-units", "--all", "--plain", "--no-legend", "--type=service", "--", "gpulab-rpc-server@*.service")


def test_the_unit_instances_are_asked_of_systemd_where_it_is_init(build, tmp_path, monkeypatch):
    monkeypatch.setattr(llama_rpc_server_plan, "systemd_booted", lambda: True)
    listed = ("gpulab-rpc-server@0.service loaded active running ggml RPC server 0\n"
              "\u25cf gpulab-rpc-server@3.service loaded failed failed ggml RPC server 3\n")
    result = run({"build_link": str(build), "unit_names": None}, answers={LIST_UNITS: (0, listed, "")})
    assert result.kind is ExitJson, result.result
    assert result.result["stale_units"] == ["gpulab-rpc-server@3.service"]
    assert list(LIST_UNITS) in result.commands
    failing = run({"build_link": str(build), "unit_names": None}, answers={LIST_UNITS: (1, "", "Failed to connect to bus")})
    assert failing.kind is FailJson
    assert failing.result["msg"] == "systemctl list-units failed (rc 1): check `systemctl is-system-running`"
    monkeypatch.setattr(llama_rpc_server_plan, "systemd_booted", lambda: False)
    elsewhere = run({"build_link": str(build), "unit_names": None})
    assert elsewhere.result["stale_units"] == []
    assert list(LIST_UNITS) not in elsewhere.commands


def test_fabric_value_that_is_not_a_device_is_refused(build):
    fabric = {"rdma": dict(FABRIC["rdma"], env={"GGML_RDMA_DEV": "$(reboot)"})}
    result = run({"build_link": str(build), "fabric": fabric})
    assert result.kind is FailJson
    assert "fabric.json names GGML_RDMA_DEV='$(reboot)'" in result.result["msg"]


GPU = {"index": 0, "memory_total_mib": 97000}


# Bad input, each refused with the value named, before any change (the plan changes nothing anyway).
@pytest.mark.parametrize("args, message", [
    ({"memory_mib": -1}, "memory_mib -1 is negative"),
    ({"cuda": True, "gpus": [dict(GPU, memory_total_mib=-97000)]}, "memory_total_mib -97000 is negative"),
    ({"cuda": True, "gpus": [dict(GPU, memory_total_mib="lots")]}, "memory_total_mib 'lots' is not a whole number"),
    ({"cuda": True, "gpus": [{"memory_total_mib": 1}]}, "gpus entry 0"),
    ({"cuda": True, "gpus": [GPU, GPU]}, "list GPU index 0 twice"),
    ({"cuda": True, "gpus": [GPU], "gpu_indices": [3]}, "GPU indices [3] are not present"),
    ({"address": "255.255.255.255"}, "is a multicast, broadcast or reserved address"),
    ({"address": "224.0.0.1"}, "is a multicast, broadcast or reserved address"),
    ({"address": "10.231.77.11; id"}, "bind address '10.231.77.11; id' is not an IP address"),
    ({"address": "$(hostname -I)"}, "is not an IP address"),
    ({"address": "10.231.77.11\n"}, "is not an IP address"),
    ({"address": "0.0.0.0"}, "refusing to bind the RPC server to 0.0.0.0"),
    ({"address": "::"}, "refusing to bind the RPC server to ::"),
    ({"address": ""}, "no bind address"),
    ({"port_base": 0}, "ports 0..0 are out of range"),
    ({"port_base": 65536}, "ports 65536..65536 are out of range"),
    ({"allowed_sources": []}, "llama_rpc_server_allowed_sources is empty"),
    ({"allowed_sources": ["10.231.77.10; id"]}, "entry '10.231.77.10; id' is not an IP address or prefix"),
    ({"allowed_sources": ["999.1.1.1"]}, "entry '999.1.1.1' is not an IP address or prefix"),
    ({"restart_sec": 0}, "restart_sec is 0"),
    ({"restart_max_delay_s": 1}, "restart_max_delay_s (1 s) is below restart_sec (5 s)"),
])
def test_bad_input_is_refused_naming_the_value(args, message):
    result = run(args)
    assert result.kind is FailJson, result.result
    assert message in result.result["msg"]


def test_allowed_sources_left_out_while_the_firewall_is_on_is_refused():
    result = module_harness.run_module(llama_rpc_server_plan.main, {"address": "10.231.77.11"}, {}, {})
    assert result.kind is FailJson
    assert "firewall_enabled is True but all of the following are missing: allowed_sources" in result.result["msg"]


def test_a_hanging_systemctl_fails_within_its_limit_naming_the_command(build, tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_command, "DEFAULT_LIMIT_S", 1)
    systemctl = module_harness.hanging_program(tmp_path, "systemctl")
    started = time.monotonic()
    result = module_harness.run_module_live(
        llama_rpc_server_plan.main, {"address": "10.231.77.11", "allowed_sources": ["10.231.77.10"],
                                     "memory_mib": 16000, "build_link": str(build)}, {"systemctl": systemctl})
    assert time.monotonic() - started < 10
    assert result.kind is FailJson
    assert result.result["msg"] == ("`%s is-active firewalld.service ufw.service` did not finish within 1 s and was "
                                    "stopped: systemd does not answer: check `systemctl is-system-running` and the "
                                    "journal of PID 1 on this host" % systemctl)


def test_cpu_memory_read_from_the_node_without_memory_mib(build, tmp_path):
    result = run({"build_link": str(build), "memory_mib": None})
    assert result.kind is ExitJson, result.result
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        expected = meminfo_total_mib(meminfo.read())
    assert expected > 0
    assert result.result["servers"][0]["memory_mib"] == expected
    (tmp_path / "meminfo").write_text("MemFree: 1 kB\n")
    assert llama_rpc_server_plan.host_memory_mib(str(tmp_path / "meminfo")) is None
    assert llama_rpc_server_plan.host_memory_mib(str(tmp_path / "absent")) is None


def test_the_gpus_of_the_inventory_file_in_the_same_run(tmp_path):
    gpus = [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA RTX PRO 6000", "pci_bus_id": "00000000:01:00.0",
             "compute_cap": "12.0", "cuda_arch": "120", "memory_total_mib": 97887},
            {"index": 1, "uuid": "GPU-1", "name": "NVIDIA RTX PRO 6000", "pci_bus_id": "00000000:02:00.0",
             "compute_cap": "12.0", "cuda_arch": "120", "memory_total_mib": 97887}]
    path = tmp_path / "gpu-inventory.json"
    path.write_text(json.dumps({"managed_by": "gpulab.inference", "driver_version": "580.159.04",
                                "kernel_module_version": "580.159.04", "cuda_version": "13.0", "gpu_count": 2, "gpus": gpus}))
    result = run({"cuda": True, "gpu_inventory": {"path": str(path)}})
    assert result.kind is ExitJson, result.result
    assert [(server["device"], server["gpu_index"], server["port"]) for server in result.result["servers"]] == [
        ("CUDA0", 0, 50052), ("CUDA0", 1, 50053)]  # each server sees its one GPU as CUDA0
    missing = run({"cuda": True, "gpu_inventory": {"path": str(tmp_path / "none.json")}})
    assert missing.kind is FailJson and "none.json is missing: role gpulab.inference.gpu_preflight" in missing.result["msg"]
