"""The service manager seam: only role `service` (with role `supervisor`, which installs
supervisord) knows systemd from supervisord, so a third manager is added there and nowhere else.

A file of the collection (roles, playbooks, plugins) that names supervisord, supervisorctl or
systemctl outside the places below fails this test, and so does a task file per manager
(`*_systemd.yml`, `*_supervisor.yml`) outside role `service`, and a unit template (`*.service.j2`,
`*.service`) in another role: every wrapper service's unit is role service's one template rendering
the calling role's `unit_file` (issue 50).
"""

import re
from pathlib import Path

from collection_tree import collection_files

REPO_ROOT = Path(__file__).resolve().parents[2]

MANAGER_WORDS = re.compile(r"supervisord|supervisorctl|systemctl", re.IGNORECASE)

# The owners: role service decides, role supervisor installs and runs supervisord itself.
OWNER_ROLES = ("roles/service/", "roles/supervisor/")

# The plugins role service runs (each `gpulab.inference.<name>` its task files name, as a module or
# a filter) are the role's own code, with the module_utils file of the same name behind each.
SERVICE_PLUGIN_DIRS = ("plugins/modules", "plugins/filter", "plugins/module_utils")

# Everything else allowed, each for a reason:
ALLOWED = {
    # The drain stops and restores foreign GPU consumers, whatever manager started them (a
    # systemd unit, a supervisord program or a container of another team), not the collection's.
    "roles/gpu_drain/": "stops and restores other people's services under any manager",
    "plugins/modules/gpu_drain.py": "the drain's module",
    "plugins/module_utils/gpu_drain.py": "the drain's rules and backends",
    # The RPC guard's program runs on the node, outside Ansible, and stops the servers itself
    # while their firewall table is gone; role service installs it (entry point guard).
    "plugins/module_utils/rpc_guard.py": "the RPC guard's program, run by role service's guard entry point",
    # The hung-worker watch runs inside that program (the guard loads it) and starts a killed server again.
    "plugins/module_utils/rpc_watch.py": "the RPC watch, run on the node by the guard's program",
    # The one rule for auto (module service_manager, which role common runs once per play) and the
    # names and values role service hands each manager, behind its filters.
    "plugins/modules/service_manager.py": "the one rule for gpulab_service_manager auto",
    "plugins/module_utils/service_manager.py": "that rule, and the unit and program names of role service's filters",
    # The node's process-to-service mapping, beside that rule: the unit or program a GPU process runs
    # under, from its /proc cgroup and environment (gpu_residency, gpu_facts and the metrics collector).
    "plugins/module_utils/service_process.py": "which unit or program a process runs under, read from /proc",
    # The option itself and supervisord's shared paths (its configuration, program directory and
    # control command), defined once where every role reads them: names and documentation, no rule.
    # gpulab_supervisorctl names the command in its own name and inventories set it, so it keeps it.
    "roles/common/defaults/main/service-manager.yml": "the option gpulab_service_manager and supervisord's shared paths",
    "roles/common/meta/argument_specs.yml": "their documentation, with every other shared option",
}


def service_role_plugins(root=REPO_ROOT):
    """The plugin files role service's tasks name (gpulab.inference.<name>)."""
    names = set()
    for path in sorted((root / "roles" / "service").rglob("*")):
        if path.suffix not in (".yml", ".j2"):
            continue
        names.update(re.findall(r"gpulab\.inference\.([a-z_]+)", path.read_text()))
    found = set()
    for name in names:
        for directory in SERVICE_PLUGIN_DIRS:
            candidate = "%s/%s.py" % (directory, name)
            if (root / candidate).is_file():
                found.add(candidate)
    return found


def allowed(path, service_plugins):
    return (path.startswith(OWNER_ROLES) or path in service_plugins
            or any(path == place or (place.endswith("/") and path.startswith(place)) for place in ALLOWED))


def files_naming_a_manager(root=REPO_ROOT):
    service_plugins = service_role_plugins(root)
    offenders = []
    for path in collection_files(root):
        if allowed(path, service_plugins):
            continue
        try:
            text = (root / path).read_text()
        except UnicodeDecodeError:
            continue
        if MANAGER_WORDS.search(text):
            offenders.append(path)
    return offenders


def per_manager_task_files(root=REPO_ROOT):
    return [path for path in collection_files(root)
            if not path.startswith("roles/service/") and re.search(r"/tasks/.*_(systemd|supervisor)\.ya?ml$", path)]


def test_the_words_are_found():
    assert MANAGER_WORDS.search("systemctl show")
    assert MANAGER_WORDS.search("under Supervisord")
    assert MANAGER_WORDS.search("/opt/gpulab/supervisor/bin/supervisorctl")
    assert not MANAGER_WORDS.search("role gpulab.inference.supervisor; a systemd unit")


def test_role_service_runs_the_plugins_it_owns():
    plugins = service_role_plugins()
    # what role service runs today: its status module and the unit module among them
    assert {"plugins/modules/service_status.py", "plugins/modules/systemd_units.py"} <= plugins
    assert all(path.startswith(SERVICE_PLUGIN_DIRS) for path in plugins)


# Still to move behind role service (issue 50), each a file that names a manager today; the list
# only shrinks: a file not listed here fails the test. 32 files at bc3595e by this test's rule, 22
# before role service's entry points firewall and guard and its neutral restart policy, 10 before the
# process-to-service mapping moved to module_utils/service_process.py and the serving roles' options
# and vllm_plan's result were described in role service's terms, 2 before role common's option and
# shared paths were listed above with their reason, none now.
STILL_TO_MOVE = frozenset()
# Task files per manager outside role service: none left (the RPC firewall and guard pair moved to
# role service's entry points firewall and guard).
PER_MANAGER_STILL_TO_MOVE = frozenset()


def test_the_lists_only_hold_files_that_still_name_a_manager():
    # a file moved behind role service leaves the list, so the count above stays true
    assert sorted(STILL_TO_MOVE - set(files_naming_a_manager())) == []
    assert sorted(PER_MANAGER_STILL_TO_MOVE - set(per_manager_task_files())) == []


def test_no_other_file_outside_role_service_names_a_manager():
    offenders = [path for path in files_naming_a_manager() if path not in STILL_TO_MOVE]
    assert offenders == [], (
        "%d file(s) name supervisord, supervisorctl or systemctl outside role service; call an entry point of "
        "role gpulab.inference.service instead (docs/CONTRACTS.md, Adding a service manager):\n  %s"
        % (len(offenders), "\n  ".join(offenders)))


def test_no_other_task_file_per_manager_outside_role_service():
    assert [path for path in per_manager_task_files() if path not in PER_MANAGER_STILL_TO_MOVE] == []


def test_the_rule_finds_a_new_offender(tmp_path):
    (tmp_path / "roles" / "x" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "x" / "tasks" / "main.yml").write_text("- ansible.builtin.command: systemctl daemon-reload\n")
    (tmp_path / "roles" / "x" / "tasks" / "start_systemd.yml").write_text("---\n")
    (tmp_path / "roles" / "service" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "service" / "tasks" / "stop.yml").write_text("- community.general.supervisorctl: {}\n")
    assert files_naming_a_manager(tmp_path) == ["roles/x/tasks/main.yml"]
    assert per_manager_task_files(tmp_path) == ["roles/x/tasks/start_systemd.yml"]


# Role service's one unit template (unit.service.j2) renders every wrapper service's unit from the
# calling role's unit_file; a unit template of another role would be a second place deciding a unit.
UNIT_TEMPLATE = re.compile(r"\.service(\.j2)?$")
# Other units, each for a reason:
OTHER_UNIT_TEMPLATES = {
    "roles/roce/templates/gpulab-roce-oneshot.service.j2":
        "a boot-time oneshot of role roce (the fabric's setup scripts), not a wrapper service under a manager",
}


def unit_templates(root=REPO_ROOT):
    """Unit files and templates under roles/ outside role service."""
    return [path for path in collection_files(root)
            if path.startswith("roles/") and not path.startswith("roles/service/") and UNIT_TEMPLATE.search(path)]


def test_the_unit_exceptions_still_exist():
    assert sorted(set(OTHER_UNIT_TEMPLATES) - set(unit_templates())) == []


def test_no_other_role_has_a_unit_template():
    offenders = [path for path in unit_templates() if path not in OTHER_UNIT_TEMPLATES]
    assert offenders == [], (
        "unit template(s) outside role service: return the unit's lines as the plan's unit_file (module_utils, "
        "service_files.unit_file) and pass it as service_unit_file to role service (docs/CONTRACTS.md):\n  %s"
        % "\n  ".join(offenders))


def test_the_rule_finds_a_second_unit_template(tmp_path):
    for path in ("roles/x/templates/gpulab-x.service.j2", "roles/x/files/gpulab-y.service", "roles/x/templates/x.sh.j2",
                 "roles/service/templates/unit.service.j2", "roles/x/templates/x.service.conf.j2"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("[Unit]\n")
    assert unit_templates(tmp_path) == ["roles/x/files/gpulab-y.service", "roles/x/templates/gpulab-x.service.j2"]
