"""serving_checks: each serving variable refused with a sentence that names it, its value, the hosts
and what to set; the values -e gives (strings) accepted where Ansible's types accept them; the
table agrees with the roles' argument specs and defaults."""

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks as sc

REPO = Path(__file__).resolve().parents[4]
ROLES = ("llama_server", "llama_rpc_server", "memory_plan", "bench")


def role_of(name):
    # llama_cpp_* are llama_cpp_build's options (shared with llama_cpp_distribute)
    if name.startswith("llama_cpp_"):
        return "llama_cpp_build"
    # the longest prefix first: llama_rpc_server_* is not llama_server's
    return next(role for role in sorted(ROLES, key=len, reverse=True) if name.startswith(role + "_"))


def role_file(role, *path):
    return yaml.safe_load((REPO / "roles" / role / Path(*path)).read_text())


def role_default(name):
    """A variable's default: its role's, or role common's for the llama-server options the memory
    plan shares (every role depends on common)."""
    defaults = role_file(role_of(name), "defaults", "main.yml")
    return defaults if name in defaults else role_file("common", "defaults", "main.yml")


def one(values, host="node-a"):
    return sc.serving_problems({host: values}, [host])


@pytest.mark.parametrize("name", sorted(sc.RULES))
def test_every_rule_names_an_option_of_its_role(name):
    role = role_of(name)
    options = role_file(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert name in options, "%s is not in roles/%s/meta/argument_specs.yml" % (name, role)


@pytest.mark.parametrize("name", sorted(sc.RULES))
def test_role_defaults_pass(name):
    defaults = role_default(name)
    value = defaults[name]
    profile = re.match(r"^\{\{ bench_profiles\[bench_profile\]\.(\w+) \}\}$", str(value))
    if profile:
        # the benchmark's sizes come from its profiles: every profile's value must pass
        for entry in defaults["bench_profiles"].values():
            assert sc.value_problem(name, entry[profile.group(1)]) is None
        return
    if isinstance(value, str) and "{{" in value:
        pytest.fail("%s defaults to a template; give the rule's test a literal" % name)
    assert sc.value_problem(name, value) is None


@pytest.mark.parametrize("name", sorted(sc.DEFAULTS))
def test_combination_defaults_are_the_roles(name):
    assert role_default(name)[name] == sc.DEFAULTS[name]


def test_nothing_set_nothing_wrong():
    assert sc.serving_problems({"node-a": {}, "node-b": {}}) == []


def test_values_as_extra_vars_give_them():
    assert one({"llama_server_ctx_size": "4096", "llama_server_parallel": "2", "llama_server_port": " 8081 ",
                "llama_server_jinja": "no", "llama_server_metrics": "True", "llama_server_gpu_layers": "99",
                "llama_server_reasoning_budget": "-1", "llama_server_backend_sampling": "false",
                "llama_rpc_server_gpu_indices": ["0", 1], "llama_server_tensor_split": ["1", 2.5]}) == []


BAD = [
    ("llama_server_ctx_size", "abc", "is not a whole number: set the context in tokens shared by all slots"),
    ("llama_server_ctx_size", -1, "is below 0"),
    ("llama_server_ctx_size", True, "is not a whole number"),
    ("llama_server_ctx_size", "1.5", "is not a whole number"),
    ("llama_server_parallel", "0", "is below 1: set the number of requests served at once"),
    ("llama_server_port", 0, "is below 1: set a TCP port from 1 to 65535"),
    ("llama_server_port", "70000", "is above 65535"),
    ("llama_server_flash_attn", True, "is a boolean (YAML reads an unquoted on or off as true or false)"),
    ("llama_server_flash_attn", "yes", "is not one of on, off, auto"),
    ("llama_server_gpu_layers", "most", "is not a number of layers, all or auto"),
    ("llama_server_tensor_split", "fastest", "is not equal, proportional or a list of numbers"),
    ("llama_server_tensor_split", [1, "x"], "has an entry 'x' that is not a number"),
    ("llama_server_tensor_split", [0, 0], "needs non-negative shares, one above 0"),
    ("llama_server_jinja", "maybe", "is not true or false"),
    ("llama_server_backend_sampling", "sometimes", "is not auto, true or false"),
    ("llama_server_reasoning_budget", -2, "is below -1"),
    ("llama_server_host", "", "is not a non-empty string"),
    ("llama_server_extra_args", "--no-mmap", "is not a list"),
    ("llama_server_health_load_rate_mib_s", 0, "is below 1"),
    ("llama_rpc_server_port_base", "rpc", "is not a whole number: set the first RPC port"),
    ("llama_rpc_server_gpu_indices", [0, -1], "has an entry -1 that is not a GPU index"),
    ("llama_rpc_server_gpu_indices", "0,1", "is not a list"),
    ("llama_rpc_server_other_firewall", "ignore", "is not one of fail, opened"),
    ("memory_plan_margin_mib", "lots", "is not a whole number"),
    ("llama_cpp_cuda", False, "is a boolean (YAML reads an unquoted on or off as true or false)"),
    ("llama_cpp_keep_builds", 1, "is below 2: set builds to keep, 2 or more"),
    ("bench_concurrency", [1, 0], "has an entry 0 that is not a concurrency of 1 or more"),
    ("bench_concurrency", [], "is not a non-empty list"),
    ("bench_concurrency", "1,2,4", "is a string, not a list (on the command line give JSON"),
    ("bench_max_tokens", "1", "is below 2"),
    ("bench_sampler_method", "dcgm", "is not one of auto, nvml, nvidia-smi-loop, nvidia-smi-poll"),
]


@pytest.mark.parametrize("name, value, words", BAD, ids=["%s=%r" % case[:2] for case in BAD])
def test_a_bad_value_is_named_with_what_to_set(name, value, words):
    (problem,) = one({name: value})
    assert problem.startswith("%s=%r on node-a " % (name, value))
    assert words in problem
    assert ": set " in problem


def test_a_problem_several_hosts_share_is_one_sentence():
    values = {"llama_server_parallel": "0"}
    problems = sc.serving_problems({"node-a": values, "node-b": values, "node-c": {"llama_server_parallel": 0}},
                                   ["node-a", "node-b", "node-c"])
    assert problems == [
        "llama_server_parallel='0' on node-a, node-b is below 1: set the number of requests served at once, 1 or more, e.g. 4.",
        "llama_server_parallel=0 on node-c is below 1: set the number of requests served at once, 1 or more, e.g. 4."]
    (everywhere,) = sc.serving_problems({"node-a": values, "node-b": values}, ["node-a", "node-b"])
    assert " on every node is below 1" in everywhere


def test_problems_keep_the_table_order():
    problems = one({"llama_server_parallel": "0", "llama_server_ctx_size": "abc"})
    assert [p.split("=")[0] for p in problems] == ["llama_server_ctx_size", "llama_server_parallel"]


def test_restart_delays_against_the_default_of_the_other():
    (problem,) = one({"llama_server_restart_sec": "60"})
    assert problem == ("llama_server_restart_max_delay_s=30 (the default) on node-a is below llama_server_restart_sec=60: "
                       "the longest restart delay cannot be below the first; raise llama_server_restart_max_delay_s "
                       "or lower llama_server_restart_sec.")
    assert one({"llama_server_restart_sec": "60", "llama_server_restart_max_delay_s": 60}) == []
    (rpc,) = one({"llama_rpc_server_restart_max_delay_s": 2})
    assert rpc.startswith("llama_rpc_server_restart_max_delay_s=2 on node-a is below llama_rpc_server_restart_sec=5 (the default)")


def test_context_below_one_token_per_slot():
    (problem,) = one({"llama_server_ctx_size": 2})
    assert problem.startswith("llama_server_ctx_size=2 on node-a over llama_server_parallel=4 (the default) "
                              "leaves less than one token per slot")
    assert one({"llama_server_ctx_size": 0, "llama_server_parallel": 64}) == []  # 0: the model's context
    assert one({"llama_server_ctx_size": 64, "llama_server_parallel": 64}) == []


def test_an_invalid_value_is_not_also_a_combination_problem():
    (problem,) = one({"llama_server_restart_sec": "soon"})
    assert "is not a whole number" in problem


def test_wrong_input():
    with pytest.raises(TypeError):
        sc.serving_problems([("node-a", {})])
    with pytest.raises(KeyError):
        one({"llama_server_ctx": 1})
