"""The deployed lab: services, binding, firewall, a chat completion and the layer placement."""

import json
import os
import re

import pytest

from lab_playbooks import lab_host

FABRIC = os.environ.get("GPULAB_LAB_FABRIC_PREFIX", "10.231.77")
ADDRESS = {"node-a": f"{FABRIC}.10", "node-b": f"{FABRIC}.11", "node-c": f"{FABRIC}.12"}
WORKERS = ("node-b", "node-c")
RPC_PORT = 50052
BUILD_INFO = "/opt/gpulab/llama.cpp/current/BUILD_INFO.json"


# Tests that concern one kind of node address it by name (not through testinfra's `host`, which
# runs a test on every node): nothing is skipped.
@pytest.fixture(scope="module")
def head():
    return lab_host("node-a")


@pytest.fixture(scope="module", params=WORKERS)
def worker(request):
    return request.param, lab_host(request.param)


@pytest.fixture()
def node(host):
    return host.check_output("hostname")


def test_rpc_server_runs_unprivileged_on_workers(worker):
    host = worker[1]
    service = host.service("gpulab-rpc-server@0")
    assert service.is_running
    assert service.is_enabled
    user = host.check_output("systemctl show --property=User --value gpulab-rpc-server@0.service")
    assert user == "gpulab-rpc"
    main_pid = host.check_output("systemctl show --property=MainPID --value gpulab-rpc-server@0.service")
    assert host.check_output(f"ps -o user= -p {main_pid}") == "gpulab-rpc"
    # The RPC account is not in llama-server's group, which alone may read the API key file.
    assert "gpulab-llama" not in host.check_output("id -nG gpulab-rpc").split()


def test_head_runs_as_its_own_account(head):
    host = head
    assert host.check_output("systemctl show --property=User --value gpulab-llama-server.service") == "gpulab-llama"
    config = host.file("/etc/gpulab/llama-server")
    assert (config.user, config.group, config.mode) == ("root", "gpulab-llama", 0o750)


def test_rpc_servers_require_their_firewall(worker):
    host = worker[1]
    props = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show --property=Requires --property=After --property=IPAddressDeny --property=IPAddressAllow"
        " --property=Restart --property=StartLimitIntervalUSec gpulab-rpc-server@0.service").splitlines())
    assert "gpulab-rpc-server-firewall.service" in props["Requires"].split()
    assert "gpulab-rpc-server-firewall.service" in props["After"].split()
    assert props["Restart"] == "always"
    assert props["StartLimitIntervalUSec"] == "0"
    # Second layer: only the head's fabric address; no loopback, as the head runs elsewhere.
    assert props["IPAddressAllow"].split() == [f"{ADDRESS['node-a']}/32"]
    assert sorted(props["IPAddressDeny"].split()) == ["0.0.0.0/0", "::/0"]


def test_head_restarts_forever(head):
    host = head
    props = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show --property=Restart --property=StartLimitIntervalUSec gpulab-llama-server.service").splitlines())
    assert props == {"Restart": "always", "StartLimitIntervalUSec": "0"}


def installed_units(node):
    if node == "node-a":
        return ["gpulab-llama-server.service"]
    return ["gpulab-rpc-server@0.service", "gpulab-rpc-server-firewall.service"]


def test_systemd_analyze_verify_is_clean(host, node):
    units = " ".join(installed_units(node))
    result = host.run(f"systemd-analyze verify {units}")
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_rpc_port_bound_to_fabric_address_only(worker):
    node, host = worker
    listening = host.check_output(f"ss -Hltn 'sport = :{RPC_PORT}'").splitlines()
    local_addresses = [line.split()[3] for line in listening]
    assert local_addresses == [f"{ADDRESS[node]}:{RPC_PORT}"]


def test_firewall_admits_only_the_head(worker):
    host = worker[1]
    ruleset = host.check_output("nft list table inet gpulab_rpc")
    assert f"ip saddr {ADDRESS['node-a']}" in ruleset or f"ip saddr {{ {ADDRESS['node-a']} }}" in ruleset
    assert str(RPC_PORT) in ruleset
    assert "drop" in ruleset
    # Loopback is admitted only where the head runs on the node; here only the RPC guard's own HELLO
    # probe (root's connections, marked in the table's output chain) comes in over it.
    assert 'iif "lo" accept' not in ruleset
    assert [line for line in ruleset.splitlines() if 'iif "lo"' in line and "meta mark" not in line] == []
    assert "meta skuid 0" in ruleset
    # nftables.service loads the table again after its own flush.
    assert 'include "/etc/nftables.d/gpulab-rpc.nft"' in host.file("/etc/nftables.conf").content_string


def test_node_c_cannot_reach_node_b_rpc():
    """One probe only: an RPC server serves one client at a time with a backlog of one."""
    host = lab_host("node-c")
    probe = host.run(f"timeout 5 bash -c '</dev/tcp/{ADDRESS['node-b']}/{RPC_PORT}'")
    assert probe.rc != 0


def test_head_serves_a_chat_completion(head):
    host = head
    assert host.service("gpulab-llama-server").is_running
    body = json.dumps({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8})
    answer = json.loads(host.check_output(
        f"curl -sf --max-time 120 -H 'Content-Type: application/json' -d '{body}' "
        "http://127.0.0.1:8080/v1/chat/completions"))
    assert answer["usage"]["completion_tokens"] > 0
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_head_log_shows_layers_on_rpc_devices(head):
    host = head
    invocation = host.check_output("systemctl show --property=InvocationID --value gpulab-llama-server.service")
    log = host.check_output(f"journalctl --no-pager --output=cat _SYSTEMD_INVOCATION_ID={invocation}")
    # llama.cpp names each RPC buffer after its endpoint: "RPC0[10.231.77.11:50052] model buffer size".
    for worker in WORKERS:
        assert re.search(rf"RPC[0-9]+\[{re.escape(ADDRESS[worker])}:{RPC_PORT}\] model buffer size = +[0-9.]+ MiB", log)
    assert "offloaded 5/5 layers to GPU" in log


@pytest.fixture(scope="module")
def head_build_id(head):
    return json.loads(head.file(BUILD_INFO).content_string)["build_id"]


def test_same_build_everywhere(host, head_build_id):
    assert json.loads(host.file(BUILD_INFO).content_string)["build_id"] == head_build_id
