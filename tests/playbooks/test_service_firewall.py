"""Role service's entry point firewall without systemd (the supervisor branch), called from a role as
llama_rpc_server calls it: the calling role's rule template is found and rendered with its variables,
checked and loaded with nft, and loaded again only when the table is missing; the answer
(service_firewall_result) says the table protects the services. nft is a stand-in first on PATH that
keeps its table in a file: the host's own ruleset is never touched."""

import os
import stat
import sys

import yaml
from playbook_runner import REPO, local_host, run_in

FAKE_NFT = r'''#!%s
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "nft-calls.log"), "a") as log:
    log.write(" ".join(args) + "\n")
loaded = os.path.join(here, "nft-loaded")
if args[:2] == ["--check", "-f"]:
    sys.exit(0 if "table inet" in open(args[2]).read() else 1)
if args[:1] == ["list"]:
    sys.exit(0 if os.path.exists(loaded) and open(loaded).read() == args[-1] else 1)
if args[:1] == ["-f"]:
    open(loaded, "w").write(open(args[1]).read().split()[2])
    sys.exit(0)
sys.exit(2)
''' % sys.executable

RULES = "table inet {{ caller_table }}\ndelete table inet {{ caller_table }}\ntable inet {{ caller_table }} {\n}\n"


def caller_role(roles):
    """A role that calls the entry point as llama_rpc_server does, with a rule template of its own."""
    role = roles / "firewall_caller"
    (role / "tasks").mkdir(parents=True)
    (role / "templates").mkdir()
    (role / "templates" / "caller.nft.j2").write_text(RULES)
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([{
        "name": "Load the caller's table",
        "ansible.builtin.include_role": {"name": "gpulab.inference.service", "tasks_from": "firewall"},
        "vars": {"service_manager": "supervisor", "service_firewall_table": "{{ caller_table }}",
                 "service_firewall_rules_file": "{{ caller_rules_file }}",
                 "service_firewall_rules_template": "caller.nft.j2",
                 "service_firewall_unit": "gpulab-caller-firewall.service",
                 "service_firewall_description": "the caller's table"},
    }, {
        "name": "Publish the answer",
        "ansible.builtin.debug": {"var": "service_firewall_result"},
    }], sort_keys=False))


def run(tmp_path, name, path):
    roles = tmp_path / "roles"
    if not roles.exists():
        caller_role(roles)
    book = tmp_path / "firewall.yml"
    book.write_text(yaml.safe_dump([{"name": "Caller", "hosts": "all", "gather_facts": False,
                                     "roles": ["firewall_caller"]}], sort_keys=False))
    rules = tmp_path / "nftables.d" / "caller.nft"
    inventory = {"all": {"hosts": {"node": local_host(caller_table="gpulab_caller", caller_rules_file=str(rules))}}}
    envvars = {"ANSIBLE_ROLES_PATH": "%s:%s" % (roles, REPO / "roles"), "PATH": path}
    result = run_in(tmp_path / name, book, inventory, envvars=envvars)
    answers = [event["event_data"]["res"]["service_firewall_result"] for event in result.events
               if event.get("event") == "runner_on_ok" and event["event_data"]["task"] == "Publish the answer"]
    return result, answers, rules


def fake_nft(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nft = bin_dir / "nft"
    nft.write_text(FAKE_NFT)
    nft.chmod(nft.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def nft_calls(bin_dir):
    return [line.split() for line in (bin_dir / "nft-calls.log").read_text().splitlines()]


def test_the_table_is_written_from_the_caller_s_template_loaded_and_left_alone_once_loaded(tmp_path):
    bin_dir = fake_nft(tmp_path)
    path = "%s:%s" % (bin_dir, os.environ["PATH"])
    first, answers, rules = run(tmp_path, "first", path)
    assert first.failed_events() == []
    assert answers == [{"protected": True, "problem": ""}]
    assert rules.read_text() == RULES.replace("{{ caller_table }}", "gpulab_caller")
    loads = [call for call in nft_calls(bin_dir) if call[0] == "-f"]
    assert loads == [["-f", str(rules)]]
    assert (bin_dir / "nft-loaded").read_text() == "gpulab_caller"

    second, answers, unused = run(tmp_path, "second", path)
    assert answers == [{"protected": True, "problem": ""}]
    # the table is loaded and the rules did not change: no second load, no change
    assert [call for call in nft_calls(bin_dir) if call[0] == "-f"] == loads
    assert second.changed_tasks() == []

    (bin_dir / "nft-loaded").unlink()  # `nft flush ruleset` by hand
    dummy_first, answers, dummy_last = run(tmp_path, "flushed", path)
    assert answers == [{"protected": True, "problem": ""}]
    assert len([call for call in nft_calls(bin_dir) if call[0] == "-f"]) == 2
