"""Verify, after every node restarted, that the fabric interface came back with its address and MTU,
persisted by systemd-networkd, and that the RDMA-only steps left nothing behind on a host without RDMA."""

import json

ADDRESS = {"node-a": "192.0.2.10", "node-b": "192.0.2.11", "node-c": "192.0.2.12"}
NETWORK_FILE = "/etc/systemd/network/60-gpulab-fabric.network"


def node(host):
    return host.check_output("hostname")


def test_address_and_mtu_are_live(host):
    links = json.loads(host.check_output("ip -j addr show dev fabric0"))
    assert len(links) == 1
    link = links[0]
    assert link["mtu"] == 9000
    inet = [(info["local"], info["prefixlen"]) for info in link["addr_info"] if info["family"] == "inet"]
    assert inet == [(ADDRESS[node(host)], 24)]
    assert link["operstate"] == "UP"


def test_eth0_is_left_alone(host):
    link = json.loads(host.check_output("ip -j addr show dev eth0"))[0]
    assert link["mtu"] == 1500
    assert not any(info["local"].startswith("192.0.2.") for info in link["addr_info"])


def test_settings_are_persisted_by_networkd(host):
    network = host.file(NETWORK_FILE)
    assert network.user == "root" and network.mode == 0o644
    lines = network.content_string.splitlines()
    assert lines[0] == "# managed by gpulab.inference (role roce)"
    assert "Name=fabric0" in lines
    assert "MTUBytes=9000" in lines
    assert "Address=%s/24" % ADDRESS[node(host)] in lines
    assert host.service("systemd-networkd").is_enabled
    assert host.service("systemd-networkd").is_running


def test_modules_are_persisted(host):
    content = host.file("/etc/modules-load.d/gpulab-roce.conf").content_string
    assert [line for line in content.splitlines() if not line.startswith("#")] == ["ib_uverbs", "rdma_ucm"]


def test_fabric_description_is_published(host):
    fabric = json.loads(host.file("/etc/gpulab/roce/fabric.json").content_string)
    assert fabric["interface"] == "fabric0"
    assert fabric["cidr"] == "%s/24" % ADDRESS[node(host)]
    assert fabric["mtu"] == 9000
    assert fabric["network_manager"] == "networkd"
    assert fabric["rdma"]["found"] is False
    assert fabric["rdma"]["env"] == {}
    assert fabric["rdma"]["service_directives"] == []
    assert "no RDMA devices" in fabric["rdma"]["message"]


def test_rdma_env_has_no_settings_without_rdma(host):
    env = host.file("/etc/gpulab/roce/rdma.env")
    assert env.mode == 0o644
    assert [line for line in env.content_string.splitlines() if line and not line.startswith("#")] == []


def test_rdma_and_nic_tool_steps_left_nothing(host):
    for unit in ("gpulab-roce-cm-mode", "gpulab-roce-qos"):
        assert not host.file("/etc/systemd/system/%s.service" % unit).exists
        assert not host.file("/opt/gpulab/bin/%s" % unit).exists
