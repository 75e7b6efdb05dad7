"""Runs the collection's playbooks on the controller with ansible-runner (events, stats, facts)."""

import json
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# Linked to the repository by tests/conftest.py.
COLLECTIONS = REPO / ".build" / "collections"
LAB_FILES = REPO / "molecule" / "lab" / "files"


class PlaybookRun:
    """The outcome of one ansible-runner run: status, stats and the events of failed tasks."""

    def __init__(self, runner):
        self.status = runner.status
        self.rc = runner.rc
        self.stats = runner.stats or {}
        self.events = list(runner.events)

    @property
    def failures(self):
        """(host, task name, message) of every failed task, in order."""
        return [(data["host"], data["task"], data["res"].get("msg", "")) for data in self.failed_events()]

    def failed_events(self):
        """event_data of every failed task that does not ignore errors (host, role, task, task_path, res)."""
        return [
            event["event_data"]
            for event in self.events
            if event.get("event") == "runner_on_failed" and not event["event_data"].get("ignore_errors")
        ]

    def ok_results(self, task):
        """res of every successful run of the task with this name, in order."""
        return [
            e["event_data"]["res"]
            for e in self.events
            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == task
        ]

    def warnings(self):
        """Every warning line Ansible printed ([WARNING], [DEPRECATION WARNING]), in order."""
        return [line for event in self.events for line in event.get("stdout", "").splitlines()
                if "WARNING]" in line]

    def changed_tasks(self):
        return [
            (e["event_data"]["host"], e["event_data"]["task"])
            for e in self.events
            if e.get("event") == "runner_on_ok" and e["event_data"]["res"].get("changed")
        ]


def run_in(private, playbook, inventory, extravars=None, envvars=None, cmdline=None):
    """Run a playbook (relative to the repository, or an absolute path) against an inventory given
    as a dict or as the path of an inventory, with private as ansible-runner's private data
    directory; cmdline adds ansible-playbook options (e.g. --syntax-check)."""
    private.mkdir(parents=True, exist_ok=True)
    if isinstance(inventory, dict):
        (private / "inventory").mkdir(exist_ok=True)
        (private / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))
        inventory = str(private / "inventory" / "hosts.yml")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    env.update(envvars or {})
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(REPO / playbook),
        inventory=inventory,
        extravars=extravars or {},
        cmdline=cmdline,
        envvars=env,
        quiet=True,
        json_mode=False,
    )
    return PlaybookRun(runner)


@pytest.fixture()
def run_playbook(tmp_path):
    """Run a playbook with run_in, its runner data under tmp_path."""

    def _run(playbook, inventory, extravars=None, envvars=None):
        return run_in(tmp_path / "runner", playbook, inventory, extravars, envvars)

    return _run


def local_host(**hostvars):
    """An inventory host reached through the local connection with this interpreter."""
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hostvars}


def dump(obj):
    return json.dumps(obj, indent=1, default=str)
