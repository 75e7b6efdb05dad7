"""Generated from the roles' argument specs: for every option of every role, a value of the wrong type,
a value outside its choices, a null where its description gives null no meaning, and for a path a
relative one, and for text a list given as text (`-e name=[1,2]`) are each refused by gpu_preflight's
validation, under that option's name, in one playbook run.

One local host per role and kind of fault sets every option of that role to its faulty value (the
validation is per host, its sentences name the hosts); a first host sets nothing and runs the
closing check, so no faulty shared name (role common's gpulab_nodes_group) gets in the check's way.
Role common's options are refused by common's own check of the shared names where Ansible's validation
refuses them (it runs first wherever the preflight runs: common is its dependency), else, as every other
role's, by the preflight's.
"""

import pytest
import yaml
from playbook_runner import REPO, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import serving_checks

OPTIONS = serving_checks.role_options(dict(
    (path.parent.parent.name, yaml.safe_load(path.read_text())) for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml"))))
CLEAN = "a-clean"
CHECK = "The serving variables are usable"

# A value of the wrong type for each type. Ansible's validation converts text to a number, a bool,
# a list or a mapping, and anything to a string: what stays wrong is a mapping where a list is
# wanted, a list where a mapping or a string is, words where a number or a bool is.
WRONG_TYPE = {
    "int": "not-a-number",
    "float": "not-a-number",
    "bool": "maybe",
    "list": {"not": "a list"},
    "dict": ["not", "a", "mapping"],
    "str": ["not", "a", "string"],
    "path": ["not", "a", "path"],
}


def faults():
    """[(host, option, value)]: each option's wrong type, a value outside its choices, null without a meaning,
    a relative path, a list as text."""
    cases = []
    for name, entry in OPTIONS.items():
        spec, role = entry["spec"], entry["role"]
        kind = spec.get("type", "str")
        # raw takes any value: no type can be wrong (its forms are the rules' own, unit-tested).
        if kind in WRONG_TYPE:
            cases.append(("%s-type" % role, name, WRONG_TYPE[kind]))
        if spec.get("choices"):
            cases.append(("%s-choice" % role, name, ["not-a-choice"] if kind == "list" else "not-a-choice"))
        if not entry.get("null"):
            cases.append(("%s-null" % role, name, None))
        if kind == "path":
            cases.append(("%s-path" % role, name, "relative/dir"))
        if kind in ("str", "path") and not spec.get("choices"):
            cases.append(("%s-text" % role, name, "[1,2]"))
    return cases


FAULTS = faults()


def inventory():
    hosts = {CLEAN: local_host()}
    for host, name, value in FAULTS:
        hosts.setdefault(host, local_host())[name] = value
    return {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("every-option")
    book = tmp_path / "every-option.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Validate every role option", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Run gpu_preflight's variable checks", "ansible.builtin.include_role": {
            "name": "gpulab.inference.gpu_preflight", "tasks_from": "variables.yml"}}]}], sort_keys=False))
    result = run_in(tmp_path / "runner", book, inventory())
    refused = {}
    for data in result.failed_events():
        refused.setdefault(data["host"], []).append((data["task"], data["res"]))
    return result, refused


def shown(name, value):
    if OPTIONS[name]["spec"].get("no_log"):
        return "%s (its value hidden)" % name
    return "%s=%s" % (name, "null" if value is None else repr(value))


def test_the_cases_cover_every_option_and_every_role():
    assert {name for host, name, value in FAULTS} >= {
        name for name, entry in OPTIONS.items() if entry["spec"].get("type", "str") != "raw"}
    assert {OPTIONS[name]["role"] for host, name, value in FAULTS} == {entry["role"] for entry in OPTIONS.values()}
    assert len(FAULTS) > 500


def test_only_the_check_fails_on_the_first_host_and_common_on_its_own(checked):
    result, refused = checked
    assert [task for task, res in refused[CLEAN]] == [CHECK]
    assert "common-type" in refused
    assert set(refused) <= {CLEAN} | {host for host, name, value in FAULTS if host.startswith("common-")}
    assert result.changed_tasks() == []


@pytest.mark.parametrize("host, name, value", FAULTS, ids=["%s:%s" % case[:2] for case in FAULTS])
def test_each_fault_is_refused_under_the_options_name(checked, host, name, value):
    unused_result, refused = checked
    sentences = refused[CLEAN][0][1]["msg"].splitlines()
    if host in refused:
        # role common's own validation, in Ansible's words, where it ran before the preflight's check
        (task, res), = refused[host]
        errors = res.get("argument_errors") or []
        if any("'%s'" % name in error or "of %s must" % name in error for error in errors):
            return
    # what common's validation converts (a list or null to a string) or accepts (a relative path) the check reads
    mine = [line for line in sentences if line.startswith("%s on %s" % (shown(name, value), host))]
    assert len(mine) == 1, [line for line in sentences if line.startswith(name)]
    (sentence,) = mine
    # Ansible's error names the option again, or the check says what to set
    assert ": set " in sentence or ": remove " in sentence or "; role %s takes " % OPTIONS[name]["role"] in sentence


def test_every_sentence_is_about_one_of_the_faults(checked):
    unused_result, refused = checked
    subjects = {"%s on %s" % (shown(name, value), host) for host, name, value in FAULTS}
    for line in refused[CLEAN][0][1]["msg"].splitlines():
        assert any(line.startswith(subject) for subject in subjects), line
        assert CLEAN not in line
