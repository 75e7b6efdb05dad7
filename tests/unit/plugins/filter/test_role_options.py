"""The role_options filter reads every role's meta/argument_specs.yml under a roles directory on the
controller and hands them to serving_checks.role_options; a directory without specs, a spec that is
not YAML and two roles that disagree are filter errors."""

from pathlib import Path

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.role_options import FilterModule

role_options = FilterModule().filters()["role_options"]
ROLES = Path(__file__).resolve().parents[4] / "roles"


def write_spec(roles, role, text):
    (roles / role / "meta").mkdir(parents=True)
    (roles / role / "meta" / "argument_specs.yml").write_text(text)


def test_reads_the_collections_roles():
    options = role_options(str(ROLES))
    assert options["llama_server_log_verbosity"] == {"role": "llama_server", "spec": {"type": "int", "default": 4}}
    assert options["llama_server_flash_attn"]["spec"]["choices"] == ["on", "off", "auto"]
    assert options["gpu_preflight_show_table"]["role"] == "gpu_preflight"


def test_the_role_is_the_directory_above_meta(tmp_path):
    write_spec(tmp_path, "alpha", "argument_specs: {main: {options: {alpha_port: {type: int, description: x}}}}\n")
    (tmp_path / "beta" / "tasks").mkdir(parents=True)  # a role without a spec
    assert role_options(str(tmp_path)) == {"alpha_port": {"role": "alpha", "spec": {"type": "int"}}}


@pytest.mark.parametrize("specs, words", [
    ({}, "no <role>/meta/argument_specs.yml under"),
    ({"alpha": "argument_specs: [unclosed\n"}, "gpulab.inference.role_options: while parsing"),
    ({"alpha": "argument_specs: {main: {options: {x: {type: int}}}}\n",
      "beta": "argument_specs: {main: {options: {x: {type: str}}}}\n"}, "x is {'type': 'int'} in role alpha but"),
])
def test_wrong_input_is_a_filter_error(tmp_path, specs, words):
    for role, text in specs.items():
        write_spec(tmp_path, role, text)
    with pytest.raises(AnsibleFilterError) as raised:
        role_options(str(tmp_path))
    assert words in str(raised.value)


def test_a_roles_directory_that_is_not_text_is_a_filter_error():
    with pytest.raises(AnsibleFilterError) as raised:
        role_options(["roles"])
    assert "expects the roles directory, got list" in str(raised.value)
