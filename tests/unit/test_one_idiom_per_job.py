"""One idiom per job (docs/CONTRACTS.md, "Idioms"): the modules that write a file, read a file and
move a unit across roles/ and playbooks/. A task file that does one of these jobs with a module other
than the job's idiom fails the test unless EXCEPTIONS records why; an exception no file needs any more
fails it too, so the list only shrinks. And plugins use ansible-core's public plugin API only (nothing from
ansible._internal), so the next ansible-core can run them."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

JOBS = {
    "write a file": {
        "idiom": {"ansible.builtin.template", "ansible.builtin.copy"},
        "others": {"gpulab.inference.file_set", "ansible.builtin.lineinfile", "ansible.builtin.blockinfile",
                   "community.general.ini_file"},
    },
    "read a file": {
        "idiom": {"ansible.builtin.slurp"},
        "others": {"gpulab.inference.slurp_files"},
    },
    "move a unit": {
        "idiom": {"ansible.builtin.systemd_service"},
        "others": {"gpulab.inference.systemd_units", "ansible.builtin.systemd", "ansible.builtin.service",
                   "community.general.supervisorctl"},
    },
}

DAEMON_RELOAD = ("correctness: reloads systemd only where systemd says a unit's files changed (NeedDaemonReload), "
                 "also after an earlier run failed before its reload; systemd_service reloads when told to")
SUPERVISOR = "correctness: a supervisord program is not a systemd unit; no builtin moves it (role service only)"
ONE_LINE = ("stop turns off one line (autostart=) of a program file deploy rendered from the plan; stop has no plan "
            "to render the whole file from, and the next deploy renders it again")
EXCEPTIONS = {
    ("roles/service/tasks/stop.yml", "ansible.builtin.lineinfile"): ONE_LINE,
    ("roles/service/tasks/firewall_systemd.yml", "gpulab.inference.systemd_units"): DAEMON_RELOAD,
    ("roles/service/tasks/restart_systemd.yml", "gpulab.inference.systemd_units"): DAEMON_RELOAD,
    ("roles/service/tasks/systemd.yml", "gpulab.inference.systemd_units"): DAEMON_RELOAD,
    ("roles/service/tasks/restart_supervisor.yml", "community.general.supervisorctl"): SUPERVISOR,
    ("roles/service/tasks/retire.yml", "community.general.supervisorctl"): SUPERVISOR,
    ("roles/service/tasks/stop.yml", "community.general.supervisorctl"): SUPERVISOR,
    ("roles/service/tasks/supervisor.yml", "community.general.supervisorctl"): SUPERVISOR,
}


def task_files():
    for pattern in ("roles/*/tasks/**/*.yml", "roles/*/handlers/*.yml", "playbooks/**/*.yml"):
        yield from sorted(REPO.glob(pattern))


def _modules(entries):
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _modules(entry.get(key))
        yield from (key for key in entry if "." in key)


def uses():
    """{(path, module)} for every module of JOBS used in a task file."""
    known = set().union(*(job["idiom"] | job["others"] for job in JOBS.values()))
    found = set()
    for path in task_files():
        for module in _modules(yaml.safe_load(path.read_text())):
            if module in known:
                found.add((path.relative_to(REPO).as_posix(), module))
    return found


def test_each_job_uses_its_idiom_or_a_recorded_reason():
    unexplained = sorted((path, module, job) for path, module in uses() for job, spec in JOBS.items()
                         if module in spec["others"] and (path, module) not in EXCEPTIONS)
    assert unexplained == []


def test_every_exception_is_still_needed():
    assert sorted(set(EXCEPTIONS) - uses()) == []


def test_the_idioms_are_in_use():
    used = {module for _path, module in uses()}
    for job in JOBS.values():
        assert job["idiom"] <= used


def test_the_walk_sees_modules_inside_blocks():
    assert set(_modules([{"name": "x", "block": [{"name": "y", "gpulab.inference.file_set": {}}],
                          "always": [{"ansible.builtin.slurp": {}}]}])) == {"gpulab.inference.file_set",
                                                                            "ansible.builtin.slurp"}


def private_ansible_imports(root=REPO / "plugins"):
    """[(path, line)] of plugin lines that import ansible-core's private packages (ansible._internal and the
    like): the next ansible-core may move them without notice."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(from|import)\s+ansible\._", line):
                found.append("%s:%d: %s" % (path.name, number, line.strip()))
    return found


def test_plugins_use_only_the_public_plugin_api():
    assert private_ansible_imports() == []


def test_the_import_check_sees_a_private_import(tmp_path):
    (tmp_path / "p.py").write_text("from ansible._internal._templating import _engine\n")
    assert len(private_ansible_imports(tmp_path)) == 1
