"""serving_checks: the roles' argument specs read as one table; each option set validated alone against
its spec, and what a spec says in words (null only where its description gives it a meaning, paths
absolute) or cannot say (values it converts but the role uses as given, ranges, combinations), each
refused with a sentence that names the variable, its value, the hosts and what to set; the values -e
gives (strings) accepted where the argument specs accept them; no rule restates a spec's type or choices."""

import re
from pathlib import Path

import pytest
import yaml
from common_defaults import common_defaults

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks as sc
from ansible_collections.gpulab.inference.plugins.module_utils.gguf_plan import CACHE_TYPES

REPO = Path(__file__).resolve().parents[4]
SPEC_FILES = dict((path.parent.parent.name, yaml.safe_load(path.read_text()))
                  for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")))
OPTIONS = sc.role_options(SPEC_FILES)


def role_file(role, *path):
    return yaml.safe_load((REPO / "roles" / role / Path(*path)).read_text())


def role_default(name):
    """A variable's default: its role's, or role common's (every role depends on common)."""
    role = OPTIONS[name]["role"]
    defaults = (role_file(role, "defaults", "main.yml") or {}) if role != "common" else {}
    return defaults if name in defaults else common_defaults()


def one(values, host="node-a"):
    return sc.serving_problems({host: values}, OPTIONS, [host])


def test_every_role_is_read():
    main_options = [(role, name) for role, doc in SPEC_FILES.items()
                    for name in doc["argument_specs"].get("main", {}).get("options") or {}]
    assert len(SPEC_FILES) >= 14 and len(main_options) > 300
    assert all(name in OPTIONS for role, name in main_options)
    assert OPTIONS["llama_server_port"] == {"role": "llama_server", "spec": {"type": "int", "default": 8080}}
    assert OPTIONS["gpu_drain_keep"] == {"role": "gpu_drain", "spec": {"type": "list", "elements": "str", "default": []}}
    assert all("description" not in entry["spec"] for entry in OPTIONS.values())


def test_an_option_two_roles_describe_differently_is_refused():
    files = {"one": {"argument_specs": {"main": {"options": {"x": {"type": "int", "description": "a"}}}}},
             "two": {"argument_specs": {"main": {"options": {"x": {"type": "str", "description": "b"}}}}}}
    with pytest.raises(ValueError) as raised:
        sc.role_options(files)
    assert "x is {'type': 'int'} in role one but {'type': 'str'} in role two" in str(raised.value)
    # Descriptions and `required` may differ: validation does not use them.
    files["two"]["argument_specs"]["main"]["options"]["x"] = {"type": "int", "required": True}
    assert sc.role_options(files) == {"x": {"role": "one", "spec": {"type": "int"}}}


def test_only_the_main_entry_points_are_read():
    # Other entry points take parameters from the role that includes them, not from the inventory.
    files = {"one": {"argument_specs": {"main": {"options": {"x": {"type": "int"}}},
                                        "stop": {"options": {"x": {"type": "str"}, "y": {"type": "int"}}}}}}
    assert sc.role_options(files) == {"x": {"role": "one", "spec": {"type": "int"}}}


@pytest.mark.parametrize("name", sorted(sc.RULES))
def test_every_rule_names_an_option_the_spec_cannot_fully_describe(name):
    assert name in OPTIONS, "%s is in no role's meta/argument_specs.yml" % name
    spec = OPTIONS[name]["spec"]
    # A bool or a choice is the spec's alone: a rule for it would restate the spec.
    assert spec.get("type") != "bool" and "choices" not in spec, spec


def test_the_cache_type_choices_are_the_memory_plans():
    for name in ("llama_server_cache_type_k", "llama_server_cache_type_v"):
        assert sorted(OPTIONS[name]["spec"]["choices"]) == sorted(CACHE_TYPES)


def literal_default(name):
    """The role's default of an option as the role sees it, or None when it is a template."""
    if name not in role_default(name):
        return None
    defaults = role_default(name)
    value = defaults[name]
    profile = re.match(r"^\{\{ bench_profiles\[bench_profile\]\.(\w+) \}\}$", str(value))
    if profile:
        return [entry[profile.group(1)] for entry in defaults["bench_profiles"].values()]
    if isinstance(value, str) and "{{" in value:
        return None
    return [value]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_role_defaults_pass(name):
    """Every literal default in a role's defaults passes the spec and the rules, so that only what
    the operator sets needs checking."""
    values = literal_default(name) if OPTIONS[name]["role"] != "service" else None
    for value in values or []:
        assert one({name: value}) == [], (name, value)


@pytest.mark.parametrize("name", ["llama_server_ctx_size", "llama_server_parallel", "llama_server_restart_sec",
                                  "llama_server_restart_max_delay_s", "llama_rpc_server_restart_sec",
                                  "llama_rpc_server_restart_max_delay_s"])
def test_combination_defaults_are_the_specs_and_the_roles(name):
    # what a combination reads for the side the operator did not set
    assert OPTIONS[name]["spec"]["default"] == role_default(name)[name]


def test_nothing_set_nothing_wrong():
    assert sc.serving_problems({"node-a": {}, "node-b": None}, OPTIONS) == []


def test_values_as_extra_vars_give_them():
    assert one({"llama_server_ctx_size": "4096", "llama_server_parallel": "2", "llama_server_port": " 8081 ",
                "llama_server_jinja": "no", "llama_server_metrics": "True", "llama_server_gpu_layers": "99",
                "llama_server_reasoning_budget": "-1", "llama_server_backend_sampling": "false",
                "llama_server_reasoning_format": None, "llama_rpc_server_gpu_indices": ["0", 1],
                "llama_server_tensor_split": ["1", 2.5], "llama_server_flash_attn": "on",
                "gpu_drain_keep": ["docker-*"], "gpulab_engine": "vllm"}) == []


SPEC_REFUSED = [
    # Ansible's words, the spec's hint
    ("llama_server_log_verbosity", "abc", "argument 'llama_server_log_verbosity' is of type str and we were unable "
     "to convert to int", "role llama_server takes a whole number; remove the setting for the default 4."),
    ("llama_server_log_verbosity", "1.5", "unable to convert to int", "the default 4"),
    ("llama_server_flash_attn", "yes", "value of llama_server_flash_attn must be one of: on, off, auto, got: yes",
     "takes one of on, off, auto; remove the setting for the default 'auto'."),
    ("llama_server_cache_type_k", "q3_k", "must be one of: f32, f16", "takes one of f32, f16, bf16"),
    ("llama_server_jinja", "maybe", "argument 'llama_server_jinja' is of type str and we were unable to convert to bool",
     "takes true or false; remove the setting for the default True."),
    ("llama_rpc_server_gpu_indices", ["x"], "Elements value for option 'llama_rpc_server_gpu_indices'", "a list of int values"),
    ("llama_rpc_server_other_firewall", "ignore", "must be one of: fail, opened", "the default 'fail'"),
    ("gpu_drain_keep", {"a": 1}, "argument 'gpu_drain_keep' is of type dict", "takes a list of str values; remove the setting for the default []."),
    ("bench_sampler_method", "dcgm", "must be one of: auto, nvml", "role bench"),
    ("llama_server_supervisor_environment", [1], "argument 'llama_server_supervisor_environment' is of type list", "a mapping"),
]


@pytest.mark.parametrize("name, value, error, hint", SPEC_REFUSED, ids=["%s=%r" % case[:2] for case in SPEC_REFUSED])
def test_the_spec_refuses_under_the_name_with_a_hint(name, value, error, hint):
    (problem,) = one({name: value})
    assert problem.startswith("%s=%s on node-a: " % (name, "null" if value is None else repr(value))), problem
    assert error in problem
    assert problem.endswith(hint) or hint in problem, problem


RULE_REFUSED = [
    # what the spec accepts by converting it, while the role uses the value as given
    ("gpu_drain_keep", "notalist", "is text, which Ansible would take as a list of its comma-separated parts: set a list "
     "of str values, in YAML in the inventory or as JSON on the command line (-e '{\"gpu_drain_keep\": [...]}')"),
    ("bench_concurrency", "1,2,4", "is text, which Ansible would take as a list"),
    ("llama_server_supervisor_environment", "A=1", "is text, which Ansible would take as a dict"),
    ("llama_server_flash_attn", True, "is a boolean (YAML reads an unquoted yes, no, on, off, true or false as one): "
     "set one of on, off, auto"),
    ("llama_cpp_cuda", False, "is a boolean"),
    ("llama_server_port", True, "is a boolean"),
    ("llama_server_host", ["127.0.0.1"], "is a list: set a string"),
    # null where the spec's description gives it no meaning
    ("llama_server_host", None, "is null, which role llama_server gives no meaning: remove the setting for the "
     "default '127.0.0.1', or set a string"),
    ("llama_server_tensor_split", None, "is null, which role llama_server gives no meaning: remove the setting for the default 'auto'"),
    ("llama_server_log_verbosity", None, "is null, which role llama_server gives no meaning: remove the setting for the "
     "default 4, or set a whole number"),
    ("bench_profiles", None, "is null, which role bench gives no meaning: remove the setting for the role's default, or set a mapping"),
    ("gpulab_service_hardening", None, "is null, which role common gives no meaning"),
    ("gpulab_state_dir", None, "is null, which role common gives no meaning: remove the setting for the default "
     "'/var/lib/gpulab', or set a path"),
    # paths: absolute, and one value (-e name=value hands over text)
    ("gpulab_state_dir", "relative/dir", "is a relative path, which a task would take from wherever it runs (the deploy "
     "user's home on a node): set an absolute path"),
    ("gpulab_state_dir", "~/gpulab", "is a relative path"),
    ("gpulab_state_dir", "", "is empty, which a task would take from wherever it runs"),
    ("bench_report_dir", "reports", "is a relative path"),
    ("gpulab_state_dir", "[1,2]", "is text that reads as a list (-e name=value gives text): set a path, one value"),
    ("llama_server_model_path", " {a: 1} ", "is text that reads as a mapping"),
    ("llama_server_host", "[127.0.0.1]", "is text that reads as a list"),
    # ranges and forms
    ("llama_server_ctx_size", -1, "is below 0: set the context in tokens shared by all slots"),
    # a whole number or the word auto (the spec takes any value)
    ("llama_server_ctx_size", "abc", "is not a whole number or auto: set the context in tokens shared by all slots"),
    ("llama_server_ctx_size", "1.5", "is not a whole number or auto"),
    ("llama_server_ctx_size", "Auto", "is not a whole number or auto"),
    ("llama_server_parallel", "0", "is below 1: set the number of requests served at once"),
    ("llama_server_parallel", "abc", "is not a whole number or auto: set the number of requests served at once"),
    ("llama_server_port", 0, "is below 1: set a TCP port from 1 to 65535"),
    ("llama_server_port", "70000", "is above 65535"),
    ("llama_server_gpu_layers", "most", "is not a number of layers, all or auto"),
    ("llama_server_tensor_split", "fastest", "is not auto, equal, proportional or a list of numbers"),
    ("llama_server_tensor_split", [1, "x"], "has an entry 'x' that is not a number"),
    ("llama_server_tensor_split", [0, 0], "needs non-negative shares, one above 0"),
    ("llama_server_backend_sampling", "sometimes", "is not auto, true or false"),
    ("llama_server_reasoning_budget", -2, "is below -1"),
    ("llama_server_log_verbosity", "-1", "is below 0: set a verbosity level from 0"),
    ("llama_server_host", " ", "is empty"),
    ("llama_server_health_load_rate_mib_s", 0, "is below 1"),
    ("llama_rpc_server_port_base", 65536, "is above 65535: set the first RPC port"),
    ("llama_rpc_server_gpu_indices", [0, -1], "has an entry -1 that is not a GPU index"),
    ("llama_cpp_keep_builds", 1, "is below 2: set builds to keep, 2 or more"),
    ("memory_plan_cuda_idle_context_mib", -1, "is below 0: set MiB per process and GPU without layers"),
    ("bench_concurrency", [1, 0], "has an entry 0 that is not a concurrency of 1 or more"),
    ("bench_concurrency", [], "is an empty list"),
    ("bench_max_tokens", "1", "is below 2"),
]


@pytest.mark.parametrize("name, value, words", RULE_REFUSED, ids=["%s=%r" % case[:2] for case in RULE_REFUSED])
def test_what_the_spec_cannot_say_is_named_with_what_to_set(name, value, words):
    (problem,) = one({name: value})
    assert problem.startswith("%s=%s on node-a " % (name, "null" if value is None else repr(value))), problem
    assert words in problem
    assert ": set " in problem or ": remove " in problem


def test_a_refused_value_is_not_checked_again():
    # "minus five" is no int for the spec; the range rule does not add "is below 1" to Ansible's error
    (problem,) = one({"llama_server_batch_size": "minus five"})
    assert "is below" not in problem and "unable to convert to int" in problem
    (problem,) = one({"llama_server_restart_sec": "soon"})
    assert "restart delay" not in problem


def test_a_hidden_value_is_not_shown():
    (problem,) = one({"llama_server_api_key": ["sk-secret"]})
    assert problem.startswith("llama_server_api_key (its value hidden) on node-a is a list")
    assert "sk-secret" not in problem


def test_the_errors_of_one_option_are_one_sentence():
    (problem,) = one({"model_synthetic": ["layers"]})
    assert problem.startswith("model_synthetic=['layers'] on node-a: dictionary requested, could not parse JSON or "
                              "key=value; argument 'model_synthetic' is of type list")
    assert problem.count("must be of type dict or list of dicts") == 1
    assert problem.endswith("; role model takes a mapping; remove the setting for the default {}.")


def test_what_the_specs_give_a_meaning_is_taken():
    # null where the description says what it means, empty where a path's description or default does
    assert one({"llama_server_reasoning_budget": None, "vllm_server_max_model_len": None, "bench_prompt_seed": None,
                "bench_slo_ttft_s": None, "llama_rpc_server_cache_max_gib": None, "llama_server_model_path": "",
                "model_vocab_src": "", "llama_cpp_nvcc_path": "", "gpulab_state_dir": "/srv/gpulab",
                "llama_server_host": "127.0.0.1"}) == []


def test_null_and_empty_meanings_are_read_from_the_descriptions():
    assert sc.role_options({"r": {"argument_specs": {"main": {"options": {
        "a": {"type": "int", "description": "C(--x); null keeps the default."},
        "b": {"type": "dict", "description": "Directives (null drops one)."},
        "c": {"type": "path", "description": ["A file.", "Empty takes the manifest's."]},
        "d": {"type": "str", "description": "Unset (null) - all of it; empty is none."},
    }}}}}) == {"a": {"role": "r", "spec": {"type": "int"}, "null": True}, "b": {"role": "r", "spec": {"type": "dict"}},
               "c": {"role": "r", "spec": {"type": "path"}, "empty": True}, "d": {"role": "r", "spec": {"type": "str"}, "null": True}}


def test_two_roles_giving_null_different_meanings_are_refused():
    files = {"one": {"argument_specs": {"main": {"options": {"x": {"type": "int", "description": "null keeps it"}}}}},
             "two": {"argument_specs": {"main": {"options": {"x": {"type": "int", "description": "a number"}}}}}}
    with pytest.raises(ValueError) as raised:
        sc.role_options(files)
    assert "meaning of null" in str(raised.value)


# The suffixes of an option that names a file or directory; each such text option is `type: path`, so
# the preflight requires it absolute, but a command looked up in PATH.
PATH_SUFFIXES = ("_dir", "_file", "_path", "_link", "_manifest", "_src", "_archive", "_cache", "_record", "_socket",
                 "_pidfile", "_config", "_supervisorctl", "_python")


def command(name):
    return name.endswith("_nvidia_smi_path") or name == "vllm_server_python"


@pytest.mark.parametrize("name", sorted(name for name, entry in OPTIONS.items() if name.endswith(PATH_SUFFIXES)
                                        and entry["spec"].get("type", "str") in ("str", "path")))
def test_every_option_that_names_a_path_is_a_path(name):
    kind = OPTIONS[name]["spec"].get("type", "str")
    assert (kind == "path") != command(name), "%s: make it type: path (an absolute path is required) or name it a command" % name
    if kind == "path":
        # relative paths have no base here: an absolute default shows what to give
        default = OPTIONS[name]["spec"].get("default")
        assert default is None or default == "" or default.startswith(("/", "{{")), default


def test_a_problem_several_hosts_share_is_one_sentence():
    values = {"llama_server_parallel": "0"}
    checked = {"node-a": values, "node-b": values, "node-c": {"llama_server_parallel": 0}}
    assert sc.serving_problems(checked, OPTIONS, ["node-a", "node-b", "node-c"]) == [
        "llama_server_parallel='0' on node-a, node-b is below 1: set the number of requests served at once, 1 or more, e.g. 4, "
        "or auto (from gpulab_serving_intent, set by the memory plan).",
        "llama_server_parallel=0 on node-c is below 1: set the number of requests served at once, 1 or more, e.g. 4, "
        "or auto (from gpulab_serving_intent, set by the memory plan)."]
    null = {"llama_server_log_verbosity": None}
    (everywhere,) = sc.serving_problems({"node-a": null, "node-b": null}, OPTIONS, ["node-a", "node-b"])
    assert everywhere.startswith("llama_server_log_verbosity=null on every node is null, which role llama_server")


def test_spec_errors_come_first_then_the_table_order():
    problems = one({"llama_server_parallel": "0", "llama_server_port": 0, "llama_server_batch_size": "abc"})
    assert [p.split("=")[0] for p in problems] == ["llama_server_batch_size", "llama_server_port", "llama_server_parallel"]


def test_restart_delays_against_the_default_of_the_other():
    (problem,) = one({"llama_server_restart_sec": "60"})
    assert problem == ("llama_server_restart_max_delay_s=30 (the default) on node-a is below llama_server_restart_sec=60: "
                       "the longest restart delay cannot be below the first; raise llama_server_restart_max_delay_s "
                       "or lower llama_server_restart_sec.")
    assert one({"llama_server_restart_sec": "60", "llama_server_restart_max_delay_s": 60}) == []
    (rpc,) = one({"llama_rpc_server_restart_max_delay_s": 2})
    assert rpc.startswith("llama_rpc_server_restart_max_delay_s=2 on node-a is below llama_rpc_server_restart_sec=5 (the default)")


def test_context_below_one_token_per_slot():
    (problem,) = one({"llama_server_ctx_size": 2, "llama_server_parallel": 4})
    assert problem.startswith("llama_server_ctx_size=2 on node-a over llama_server_parallel=4 "
                              "leaves less than one token per slot")
    # the default slots, auto, are the memory plan's: no number to compare before it runs
    assert one({"llama_server_ctx_size": 2}) == []
    assert one({"llama_server_ctx_size": 0, "llama_server_parallel": 64}) == []  # 0: the model's context
    assert one({"llama_server_ctx_size": 64, "llama_server_parallel": 64}) == []


def test_kept_figures_name_kept_services_with_whole_mib():
    assert one({"gpu_drain_keep": ["whisper-asr"], "gpulab_kept_mib": {"whisper-asr": 6144}}) == []
    (problem,) = one({"gpu_drain_keep": ["whisper-asr"], "gpulab_kept_mib": {"whisper": 6144}})
    assert problem == ("gpulab_kept_mib on node-a names whisper, which gpu_drain_keep (whisper-asr) does not keep: a "
                       "figure for no kept service; add the pattern to gpu_drain_keep or remove it.")
    # gpu_drain_keep left at its default keeps nothing
    (problem,) = one({"gpulab_kept_mib": {"whisper-asr": 6144}})
    assert problem.startswith("gpulab_kept_mib on node-a names whisper-asr, which gpu_drain_keep (empty) does not keep")
    (problem,) = one({"gpu_drain_keep": ["whisper-asr"], "gpulab_kept_mib": {"whisper-asr": -1}})
    assert problem == ("gpulab_kept_mib={'whisper-asr': -1} on node-a gives whisper-asr -1: set the MiB each kept "
                       "service holds, a whole number >= 0 per keep pattern of gpu_drain_keep, e.g. "
                       "{\"whisper-asr\": 6144}.")
    (problem,) = one({"gpulab_kept_mib": [6144]})
    assert problem.startswith("gpulab_kept_mib=[6144] on node-a: argument 'gpulab_kept_mib' is of type list")


def test_a_combination_with_a_word_has_no_order():
    # a spec may allow a word (auto) where a number is usual: no combination can be judged then
    checked = {"node-a": {"llama_server_ctx_size": "auto", "llama_server_parallel": 8}}
    assert sc.serving_problems(checked, {"llama_server_ctx_size": {"role": "llama_server", "spec": {"type": "raw"}},
                                         "llama_server_parallel": {"role": "llama_server", "spec": {"type": "int"}}}) == []


def test_wanted_reads_the_spec():
    assert sc.wanted({"type": "list", "elements": "str", "choices": ["a", "b"]}) == "a list of one of a, b"
    assert sc.wanted({"type": "float"}) == "a number"
    assert sc.wanted({}) == "a string"


def test_wrong_input():
    with pytest.raises(TypeError):
        sc.serving_problems([("node-a", {})], OPTIONS)
    with pytest.raises(KeyError):
        sc.serving_problems({"node-a": {"llama_server_ctx": 1}}, OPTIONS)
