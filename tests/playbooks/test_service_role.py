"""Role service is internal: a play that lists it, or includes one of its entry points itself,
stops with a message saying how the serving roles call it, before any change. The play runs in
check mode, so a regressed refusal (the account entry point creates a group and a user) reports
the changes it would make on the controller instead of making them. One playbook, one host per case."""

import yaml
from playbook_runner import local_host, run_in

CASES = {
    # roles: [service] runs tasks/main.yml.
    "direct": {"ansible.builtin.include_role": {"name": "gpulab.inference.service"}},
    # An entry point included from a play, not from a role.
    "entry-point": {
        "ansible.builtin.include_role": {"name": "gpulab.inference.service", "tasks_from": "account"},
        "vars": {"service_user": "gpulab-test-never-created", "service_group": "gpulab-test-never-created"},
    },
}


def test_direct_use_and_an_entry_point_from_a_play_are_refused(tmp_path):
    tasks = [dict(task, name="Case " + case, when="inventory_hostname == '%s'" % case) for case, task in CASES.items()]
    book = tmp_path / "service-cases.yml"
    book.write_text(yaml.safe_dump([{"name": "Service role used from a play", "hosts": "all",
                                     "gather_facts": False, "check_mode": True, "tasks": tasks}], sort_keys=False))
    inventory = {"all": {"hosts": {case: local_host() for case in CASES}}}
    result = run_in(tmp_path / "runner", book, inventory)

    failed = {event["host"]: event for event in result.failed_events()}
    assert sorted(failed) == sorted(CASES), result.failures
    direct = failed["direct"]
    assert direct["task"] == "Refuse direct use"
    assert "gpulab.inference.service is internal to the collection's serving roles" in direct["res"]["msg"]
    assert "ansible.builtin.include_role and tasks_from" in direct["res"]["msg"]
    entry = failed["entry-point"]
    assert entry["task"] == "Refuse a call from outside a role"
    assert entry["res"]["msg"].startswith("gpulab.inference.service is internal: include it from a role")
    # Nothing ran after the refusals: no task would have changed anything on either host.
    assert result.changed_tasks() == []
