"""node_exposure on a procfs tree built from captured socket tables: the listeners with their
holders, the SSH ports, and the problems and warnings it returns without changing anything."""

import os
from pathlib import Path

import module_harness
from module_harness import ExitJson, FailJson

from ansible_collections.gpulab.inference.plugins.modules import node_exposure
from common_defaults import common_default, engine_ports

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
SETTINGS = {"llama_rpc_server_port_base": 50052, "llama_server_port": 8081, "vllm_server_port": 8000, "model_serve_port": 18090}
ENGINES = common_default("gpulab_engines")
# an engine's ports and API as the preflight passes them (gpulab_engine_spec), rendered from the settings
LLAMA_CPP = {"api_prefix": ENGINES["llama_cpp"]["api"]["prefix"]}
VLLM = {"api_prefix": ENGINES["vllm"]["api"]["prefix"], "engine": "vllm"}


def proc_tree(root):
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text((FIXTURES / "net-tcp.txt").read_text())
    (root / "net" / "tcp6").write_text((FIXTURES / "net-tcp6.txt").read_text())
    for pid, name, inodes in ((41, "sshd", (1001, 1005)), (77, "nginx", (1002,)), (120, "mysqld", (1006,))):
        fd_dir = root / str(pid) / "fd"
        fd_dir.mkdir(parents=True)
        (root / str(pid) / "comm").write_text(name + "\n")
        os.symlink("/dev/null", str(fd_dir / "0"))
        for number, inode in enumerate(inodes, 3):
            os.symlink("socket:[%d]" % inode, str(fd_dir / str(number)))
    return root


def run(tmp_path, **args):
    params = dict(LLAMA_CPP, settings=SETTINGS, node_name="node-a", proc_root=str(proc_tree(tmp_path / "proc")))
    params.update(args)
    values = dict({"vllm_server_distributed_backend": "mp", "vllm_server_master_port": 29501,
                   "vllm_server_dp_rpc_port": 13345, "vllm_server_ray_port": 6379}, **params["settings"])
    params["engine_ports"] = engine_ports(params.pop("engine", "llama_cpp"), values)
    return module_harness.run_module(node_exposure.main, params, {}, {})


def test_a_free_node_has_no_problems_and_its_listeners_are_named(tmp_path):
    result = run(tmp_path, head=True)
    assert result.kind is ExitJson
    assert result.result["changed"] is False
    assert result.result["problems"] == []
    assert result.result["ssh_ports"] == [22]
    ssh = result.result["listeners"][0]
    assert (ssh["port"], ssh["process"], ssh["pid"], ssh["addresses"]) == (22, "sshd", 41, ["0.0.0.0", "::"])
    assert [item["variable"] for item in result.result["planned"]] == ["llama_server_port", "model_serve_port"]


def test_the_head_on_a_port_nginx_holds_and_an_open_api(tmp_path):
    result = run(tmp_path, head=True, settings=dict(SETTINGS, llama_server_port="8080"),
                 apis=[{"prefix": "llama_server", "bind": "0.0.0.0", "api_key_set": False, "allow_unauthenticated": False}])
    problems = result.result["problems"]
    assert len(problems) == 2
    assert problems[0].startswith("llama_server_port=8080 on node-a") and "nginx (pid 77" in problems[0]
    assert problems[1].startswith("llama_server_host=0.0.0.0 on node-a")


def test_a_worker_on_the_ssh_port_of_ansible_port(tmp_path):
    result = run(tmp_path, worker=True, ansible_port=2222, settings=dict(SETTINGS, llama_rpc_server_port_base=2222))
    assert result.result["ssh_ports"] == [22, 2222]
    assert result.result["problems"][0].startswith("llama_rpc_server_port_base=2222 on node-a: the RPC servers")


def test_an_opted_in_open_api_is_a_warning(tmp_path):
    result = run(tmp_path, head=True, **dict(VLLM,
                 apis=[{"prefix": "vllm_server", "bind": "10.0.0.1", "allow_unauthenticated": True}]))
    assert result.result["problems"] == []
    assert result.result["warnings_found"][0].startswith("node-a serves its API without a key on 10.0.0.1")


def test_a_bad_port_fails_naming_the_variable(tmp_path):
    result = run(tmp_path, head=True, settings=dict(SETTINGS, llama_server_port="http"))
    assert result.kind is FailJson
    assert result.result["msg"].startswith("llama_server_port 'http' is not a port number")


def test_the_other_engines_open_bind_address_is_not_checked(tmp_path):
    result = run(tmp_path, head=True,
                 apis=[{"prefix": "vllm_server", "bind": "0.0.0.0", "api_key_set": False, "allow_unauthenticated": False}])
    assert result.result["problems"] == []
