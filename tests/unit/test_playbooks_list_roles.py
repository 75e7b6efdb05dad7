"""Playbooks list roles: behaviour lives in role entry points, the playbooks read as tables of
contents. Counts the tasks written inline in playbooks/ (role and task imports and includes aside,
a block counted by the tasks in it) and fails above the bound; and the inventory group names are
literal only in plays' `hosts:` lines (a play's `hosts:` cannot read role defaults), every other
reference goes through role common's gpulab_*_group names."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
# The one inline task left: build.yml run alone gathers the facts its preflight reads, only when
# it runs that preflight (a play's gather_facts cannot depend on a variable of the inventory).
MAX_INLINE = 1
DELEGATING = {"ansible.builtin.include_role", "ansible.builtin.import_role", "ansible.builtin.include_tasks",
              "ansible.builtin.import_tasks", "ansible.builtin.import_playbook"}
SECTIONS = ("pre_tasks", "tasks", "post_tasks", "handlers")
GROUPS = ("gpu_nodes", "inference_head", "rpc_workers", "vllm_nodes")
# Not a `hosts:` line, with the reason: deploy.yml imports monitoring.yml with the play's hosts as a
# variable read from the head's inventory (no play of its own to hold a hosts: line).
GROUP_NAME_EXCEPTIONS = {("deploy.yml", "gpulab_monitoring_enabled")}
# Roles name a group through role common's gpulab_*_group; files still to convert to
# gpulab_vllm_group (being edited elsewhere now), with the count of their literal references.
ROLE_GROUP_NAMES_TO_CONVERT = {
    "roles/vllm_server/tasks/serve.yml": 2,
    "roles/vllm_server/tasks/model.yml": 1,
}


def _inline(tasks):
    for task in tasks or []:
        if any(key in task for key in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from _inline(task.get(key))
        elif not DELEGATING & set(task):
            yield task.get("name")


def inline_tasks():
    found = []
    for path in sorted(PLAYBOOKS.rglob("*.yml")):
        document = yaml.safe_load(path.read_text()) or []
        plays_or_tasks = document if isinstance(document, list) else [document]
        for entry in plays_or_tasks:
            if "hosts" in entry or "import_playbook" in entry or "ansible.builtin.import_playbook" in entry:
                for section in SECTIONS:
                    found += [(path.relative_to(REPO).as_posix(), name) for name in _inline(entry.get(section))]
            else:  # a task file
                found += [(path.relative_to(REPO).as_posix(), name) for name in _inline([entry])]
    return found


def test_playbooks_hold_at_most_the_bound_of_inline_tasks():
    found = inline_tasks()
    assert len(found) <= MAX_INLINE, found


def test_the_counter_sees_a_task_inside_a_block():
    assert list(_inline([{"block": [{"name": "a", "ansible.builtin.debug": None},
                                    {"name": "b", "ansible.builtin.include_role": {"name": "r"}}],
                          "rescue": [{"name": "c", "ansible.builtin.fail": None}]}])) == ["a", "c"]


def test_group_names_are_literal_only_in_hosts_lines():
    pattern = re.compile(r"\b(" + "|".join(GROUPS) + r")\b")
    found = []
    for path in sorted(PLAYBOOKS.rglob("*.yml")) + [REPO / "deploy.yml"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if not pattern.search(code) or re.match(r"\s*(- )?hosts:", code):
                continue
            if any(path.name == name and marker in line for name, marker in GROUP_NAME_EXCEPTIONS):
                continue
            found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


def test_roles_name_groups_only_through_role_common():
    quoted = re.compile(r"""['"](""" + "|".join(GROUPS) + r""")['"]""")
    found = {}
    for path in sorted((REPO / "roles").glob("*/*/**/*")):
        if path.is_file() and path.parts[-3] != "common" and "meta" not in path.parts:
            count = sum(len(quoted.findall(line.split("#", 1)[0])) for line in path.read_text().splitlines())
            if count:
                found[path.relative_to(REPO).as_posix()] = count
    assert found == ROLE_GROUP_NAMES_TO_CONVERT
