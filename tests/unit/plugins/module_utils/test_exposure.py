"""The ports and the API a deployment would expose, on captured /proc/net/tcp{,6} tables: who
listens where, what the collection would take, and each collision named by its variable."""

from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.exposure import (
    ExposureError,
    api_exposure,
    clear_of_ssh,
    engine_apis,
    established_peers,
    is_loopback,
    listeners,
    listening_sockets,
    planned_ports,
    port_problems,
    socket_inode,
    ssh_ports,
)

from common_defaults import common_default, engine_ports

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
TCP = (FIXTURES / "net-tcp.txt").read_text()
TCP6 = (FIXTURES / "net-tcp6.txt").read_text()
PROCESSES = {1001: (41, "sshd"), 1002: (77, "nginx"), 1003: (90, "rpc-server"), 1005: (41, "sshd"), 1006: (120, "mysqld")}
USERS = {0: "root", 999: "www-data", 33: "gpulab-rpc", 105: "mysql"}
OWN = ["gpulab-rpc", "gpulab-llama", "gpulab-vllm"]
SETTINGS = {"llama_rpc_server_port_base": 50052, "llama_server_port": 8080, "vllm_server_port": 8000,
            "vllm_server_master_port": 29501, "vllm_server_dp_rpc_port": 13345, "vllm_server_ray_port": 6379,
            "model_serve_port": 18090, "vllm_server_distributed_backend": "mp"}
ENGINES = common_default("gpulab_engines")


def ports(*engines, **settings):
    """The engines' ports from role common's table, rendered from these settings as Ansible would."""
    values = dict(SETTINGS, **settings)
    return [port for name in engines for port in engine_ports(name, values)]


def planned(node, engines, settings=None):
    settings = settings or SETTINGS
    return planned_ports(node, settings, ports(*engines, **settings))


def node_listeners():
    return listeners(listening_sockets(TCP) + listening_sockets(TCP6, "/proc/net/tcp6"), PROCESSES, USERS)


def test_listening_sockets_of_both_families_and_only_listeners():
    assert listening_sockets(TCP) == [
        {"address": "0.0.0.0", "port": 22, "uid": 0, "inode": 1001},
        {"address": "127.0.0.1", "port": 8080, "uid": 999, "inode": 1002},
        {"address": "10.231.77.10", "port": 50052, "uid": 33, "inode": 1003},
    ]
    assert listening_sockets(TCP6) == [
        {"address": "::", "port": 22, "uid": 0, "inode": 1005},
        {"address": "::1", "port": 3306, "uid": 105, "inode": 1006},
    ]


def test_a_line_that_is_not_a_socket_table_line_is_named():
    with pytest.raises(ExposureError, match="line 2 is not a socket table line"):
        listening_sockets("header\n   0: nonsense\n", "/proc/net/tcp")


def test_socket_inode_only_for_sockets():
    assert socket_inode("socket:[1234]") == 1234
    assert socket_inode("pipe:[1234]") is None
    assert socket_inode("/dev/null") is None


def test_listeners_once_per_port_with_their_holder():
    found = node_listeners()
    assert [entry["port"] for entry in found] == [22, 3306, 8080, 50052]
    assert found[0] == {"port": 22, "addresses": ["0.0.0.0", "::"], "process": "sshd", "pid": 41, "user": "root"}
    assert found[2]["process"] == "nginx" and found[2]["user"] == "www-data"


def test_a_socket_whose_process_is_unknown_still_names_its_user():
    found = listeners([{"address": "0.0.0.0", "port": 9, "uid": 7, "inode": 5}], {}, {})
    assert found == [{"port": 9, "addresses": ["0.0.0.0"], "process": None, "pid": None, "user": "7"}]


def test_ssh_ports_from_ansible_port_and_sshd():
    assert ssh_ports(node_listeners()) == [22]
    assert ssh_ports(node_listeners(), "2222") == [22, 2222]
    assert ssh_ports([], None) == [22]
    with pytest.raises(ExposureError, match="ansible_port 'ssh' is not a port number"):
        ssh_ports([], "ssh")


def test_planned_ports_of_a_worker_with_three_gpus_and_of_a_head():
    worker = planned({"worker": True, "rpc_servers": 3}, ["llama_cpp"])
    assert worker == [{"variable": "llama_rpc_server_port_base", "ports": [50052, 50053, 50054], "what": "the RPC servers"}]
    head = planned({"head": True}, ["llama_cpp"])
    assert [item["variable"] for item in head] == ["llama_server_port", "model_serve_port"]


def test_planned_ports_of_multi_node_vllm_by_backend_and_of_both_engines():
    mp = planned({"vllm_node": True, "vllm_multi_node": True}, ["vllm"])
    assert [item["variable"] for item in mp] == ["vllm_server_master_port", "vllm_server_dp_rpc_port"]
    ray = planned({"vllm_node": True, "vllm_multi_node": True}, ["vllm"], dict(SETTINGS, vllm_server_distributed_backend="ray"))
    assert [item["ports"] for item in ray] == [[6379]]
    both = planned({"head": True, "worker": True}, ["llama_cpp", "vllm"])
    assert [item["variable"] for item in both] == [
        "llama_rpc_server_port_base", "llama_server_port", "vllm_server_port", "model_serve_port"]


def test_a_port_of_an_unknown_place_is_named():
    with pytest.raises(ExposureError, match="a port's at is 'everywhere'"):
        planned_ports({"head": True}, SETTINGS, [{"variable": "llama_server_port", "at": "everywhere", "what": "x"}])


@pytest.mark.parametrize("value", ["http", 0, 65536, True, None])
def test_a_value_that_is_not_a_port_is_named(value):
    with pytest.raises(ExposureError, match=r"llama_server_port .*(not a port number|out of range) \(1-65535\)"):
        planned({"head": True}, ["llama_cpp"], dict(SETTINGS, llama_server_port=value))


def test_a_range_past_the_last_port_is_refused_with_the_highest_base():
    with pytest.raises(ExposureError, match="leaves no room for 4 ports .* set it to 65532 or below"):
        planned({"worker": True, "rpc_servers": 4}, ["llama_cpp"], dict(SETTINGS, llama_rpc_server_port_base=65535))


def problems_of(node, **settings):
    return port_problems("node-b", planned(node, ["llama_cpp"], dict(SETTINGS, **settings)), node_listeners(),
                         ssh_ports(node_listeners(), settings.pop("ansible_port", None)), OWN)


def test_the_rpc_range_on_the_ssh_port_is_refused_naming_the_variable_and_ssh():
    problems = problems_of({"worker": True, "rpc_servers": 2}, llama_rpc_server_port_base=21)
    assert len(problems) == 1
    assert problems[0].startswith("llama_rpc_server_port_base=21 on node-b: the RPC servers would listen on 21-22")
    assert "SSH, the controller's way into the node, uses 22" in problems[0]
    assert "cut SSH" in problems[0]


def test_a_port_another_service_holds_is_refused_naming_it():
    problems = problems_of({"head": True}, llama_server_port=3306)
    assert problems == [
        "llama_server_port=3306 on node-b: llama-server's API would listen on 3306, but port 3306 is taken by "
        "mysqld (pid 120, user mysql) on ::1. Set llama_server_port to a free port, or stop that service."]


def test_the_collections_own_listener_is_not_a_conflict():
    assert problems_of({"worker": True, "rpc_servers": 1}) == []


def test_the_collections_ports_may_not_overlap_on_one_node():
    problems = problems_of({"head": True, "worker": True, "rpc_servers": 4},
                           llama_server_port=50054)
    assert problems == [
        "llama_rpc_server_port_base=50052 and llama_server_port=50054 on node-b overlap at 50054 "
        "(the RPC servers and llama-server's API): give each its own port."]


@pytest.mark.parametrize("bind,loopback", [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("[::1]", True),
                                           ("localhost", True), ("0.0.0.0", False), ("10.231.77.10", False),
                                           ("::", False), ("", False)])
def test_loopback(bind, loopback):
    assert is_loopback(bind) is loopback


def test_an_api_off_loopback_without_a_key_is_refused_unless_allowed():
    problem, warning = api_exposure("node-a", "llama_server", "0.0.0.0", False, False)
    assert warning is None
    assert problem.startswith("llama_server_host=0.0.0.0 on node-a serves the API to every host")
    assert "llama_server_api_key" in problem and "llama_server_allow_unauthenticated: true" in problem
    problem, warning = api_exposure("node-a", "vllm_server", "10.0.0.1", False, True)
    assert problem is None
    assert warning == ("node-a serves its API without a key on 10.0.0.1 (vllm_server_allow_unauthenticated is true): "
                       "every host that reaches that address can use it.")
    assert api_exposure("node-a", "llama_server", "0.0.0.0", True, False) == (None, None)
    assert api_exposure("node-a", "llama_server", "127.0.0.1", False, False) == (None, None)


def test_the_firewall_never_drops_an_ssh_port():
    assert clear_of_ssh([50052, 50053], [22, 2222], "llama_rpc_server_port_base") == [22, 2222]
    with pytest.raises(ExposureError, match="llama_rpc_server_port_base puts the RPC servers on 22, which SSH uses"):
        clear_of_ssh([22], [22], "llama_rpc_server_port_base")


def test_only_the_engines_apis_are_checked():
    apis = [{"prefix": "llama_server"}, {"prefix": "vllm_server"}]
    assert engine_apis(ENGINES["llama_cpp"]["api"]["prefix"], apis) == [{"prefix": "llama_server"}]
    assert engine_apis(ENGINES["vllm"]["api"]["prefix"], apis) == [{"prefix": "vllm_server"}]
    assert engine_apis("", apis) == []


PORT_VARIABLES = ("llama_rpc_server_port_base", "llama_server_port", "vllm_server_port", "vllm_server_master_port",
                  "vllm_server_dp_rpc_port", "model_serve_port")
EVERY_PORT = {"head": True, "worker": True, "vllm_node": True, "vllm_multi_node": True, "rpc_servers": 1}


@pytest.mark.parametrize("variable", PORT_VARIABLES + ("vllm_server_ray_port",))
def test_every_port_variable_on_the_ssh_port_is_refused_by_name(variable):
    settings = dict(SETTINGS, **{variable: 22})
    if variable == "vllm_server_ray_port":
        settings["vllm_server_distributed_backend"] = "ray"
    problems = port_problems("node-a", planned(EVERY_PORT, ["llama_cpp", "vllm"], settings), node_listeners(), [22], OWN)
    assert [p for p in problems if p.startswith("%s=22 on node-a: " % variable) and "and SSH" in p], problems


@pytest.mark.parametrize("variable", PORT_VARIABLES)
def test_every_port_variable_on_another_services_port_is_refused_naming_it(variable):
    settings = dict(SETTINGS, **{variable: 3306})
    problems = port_problems("node-a", planned(EVERY_PORT, ["llama_cpp", "vllm"], settings), node_listeners(), [22], OWN)
    assert [p for p in problems if p.startswith("%s=3306 on node-a: " % variable)
            and "taken by mysqld (pid 120, user mysql)" in p], problems


# `ss -Htn state established` of iproute2 6.1 (Debian 12): the two first lines as a lab head prints
# them while llama-server holds both workers; the last two in ss's form for IPv4-mapped and IPv6 peers.
SS_ESTABLISHED = """\
0      0          10.231.77.10:41862    10.231.77.11:50052
0      0          10.231.77.10:57120    10.231.77.12:50052
0      0     [::ffff:127.0.0.1]:8080  [::ffff:127.0.0.1]:40312
0      0              [fd00::10]:40000        [fd00::11]:50052
"""


def test_established_peers():
    assert established_peers(SS_ESTABLISHED) == [
        "10.231.77.11:50052", "10.231.77.12:50052", "127.0.0.1:40312", "[fd00::11]:50052"]
    assert established_peers("") == []


def test_established_peers_short_line_is_named():
    with pytest.raises(ExposureError, match="ss line 2 has 2 columns"):
        established_peers("0 0 a:1 b:2\n0 0\n")
