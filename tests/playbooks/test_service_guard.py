"""Role service's entry point guard without systemd (the supervisor branch), called from a role as
llama_rpc_server calls it: the guard's code and wrapper are written, its program file comes from the
one program template (root, the restart policy given), supervisord adds it, a run that changes
nothing restarts nothing, and a changed code file restarts it. supervisorctl is the stand-in of
supervisor_double; supervisord itself is taken as made sure of in the play."""

import yaml
from playbook_runner import REPO, run_in
from supervisor_double import calls, programs, supervisord_node

PLAY = "Guard"


def caller_role(roles):
    role = roles / "guard_caller"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([{
        "name": "Run the caller's guard",
        "ansible.builtin.include_role": {"name": "gpulab.inference.service", "tasks_from": "guard"},
        "vars": {"service_manager": "supervisor", "service_name": "gpulab-test-guard",
                 "service_description": "Stops the test servers while their table is gone",
                 "service_bin_dir": "{{ caller_bin_dir }}",
                 "service_guard_wrapper": {"comments": ["the test guard"], "environment": [], "file_environment": [],
                                           "preludes": [], "argv_lines": [["/usr/bin/python3", "{{ caller_bin_dir }}/guard.py"]]},
                 "service_guard_files": [{"path": "{{ caller_bin_dir }}/guard.py", "content": "{{ caller_code }}\n",
                                          "owner": "root", "group": "root", "mode": "0644"}],
                 "service_guarded_name": "gpulab-test-server", "service_guarded_instances": True,
                 "service_restart_sec": 1, "service_log_max_size": "10MB"},
    }], sort_keys=False))


def run(tmp_path, name, code):
    roles = tmp_path / "roles"
    if not roles.exists():
        caller_role(roles)
        (tmp_path / "bin").mkdir()
        (tmp_path / "node").mkdir()
        host = supervisord_node(tmp_path / "node", {}, caller_bin_dir=str(tmp_path / "bin"),
                                __supervisor_ensured_in_play=PLAY)
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node": host}}}))
    book = tmp_path / "guard.yml"
    book.write_text(yaml.safe_dump([{"name": PLAY, "hosts": "all", "gather_facts": False,
                                     "roles": ["guard_caller"]}], sort_keys=False))
    envvars = {"ANSIBLE_ROLES_PATH": "%s:%s" % (roles, REPO / "roles")}
    return run_in(tmp_path / name, book, str(tmp_path / "inventory.yml"), extravars={"caller_code": code},
                  envvars=envvars)


def test_the_guard_runs_as_a_root_program_and_restarts_only_when_its_files_change(tmp_path):
    node = tmp_path / "node"
    first = run(tmp_path, "first", "print('guard 1')")
    assert first.failed_events() == []
    assert programs(node) == {"gpulab-test-guard": "RUNNING"}
    assert calls(node, "add") == [["add", "gpulab-test-guard"]]
    program = (node / "etc" / "supervisor.d" / "gpulab-test-guard.conf").read_text().splitlines()
    assert "[program:gpulab-test-guard]" in program
    assert "command=%s/gpulab-test-guard" % (tmp_path / "bin") in program
    assert "startsecs=1" in program and "autorestart=true" in program and "stdout_logfile_maxbytes=10MB" in program
    assert not any(line.startswith("user=") for line in program)  # root: it reads the ruleset and stops programs
    wrapper = (tmp_path / "bin" / "gpulab-test-guard").read_text()
    assert "exec /usr/bin/python3 %s/guard.py" % (tmp_path / "bin") in wrapper
    assert (tmp_path / "bin" / "guard.py").read_text() == "print('guard 1')\n"

    second = run(tmp_path, "second", "print('guard 1')")
    assert second.failed_events() == [] and second.changed_tasks() == []
    assert calls(node, "restart") == []

    third = run(tmp_path, "third", "print('guard 2')")
    assert third.failed_events() == []
    assert calls(node, "restart") == [["restart", "gpulab-test-guard"]]
    assert programs(node) == {"gpulab-test-guard": "RUNNING"}
