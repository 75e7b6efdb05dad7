"""The supervisor scenario's node after converge and idempotence: every service under supervisord."""

import json
import os

LAB = os.environ.get("GPULAB_LAB_NAME", "gpulab")
PREFIX = os.environ.get("GPULAB_LAB_FABRIC_PREFIX", "10.231.77")
CTL = "/opt/gpulab/supervisor/bin/supervisorctl -c /etc/gpulab/supervisord.conf"


def test_supervisord_runs_both_programs_and_the_rpc_guard(host):
    status = host.run(CTL + " status")
    assert status.rc == 0, status.stdout + status.stderr
    lines = {line.split()[0]: line.split()[1] for line in status.stdout.splitlines() if line.strip()}
    assert lines == {"gpulab-llama-server": "RUNNING", "gpulab-rpc-server-0": "RUNNING", "gpulab-rpc-guard": "RUNNING"}


def test_the_rpc_guard_runs_as_root_and_passes_its_check(host):
    guard_pid = host.check_output(CTL + " pid gpulab-rpc-guard")
    assert host.check_output("ps -o user= -p %s" % guard_pid).strip() == "root"
    check = host.run("/opt/gpulab/bin/gpulab-rpc-guard --check")
    assert check.rc == 0, check.stderr


def test_programs_run_as_their_accounts(host):
    rpc_pid = host.check_output(CTL + " pid gpulab-rpc-server-0")
    assert host.check_output("ps -o user= -p %s" % rpc_pid).strip() == "gpulab-rpc"
    head_pid = host.check_output(CTL + " pid gpulab-llama-server")
    assert host.check_output("ps -o user= -p %s" % head_pid).strip() == "gpulab-llama"


def test_no_systemd_units_were_installed(host):
    assert not host.file("/etc/systemd/system/gpulab-llama-server.service").exists
    assert not host.file("/etc/systemd/system/gpulab-rpc-server@.service").exists


def test_rpc_server_binds_to_the_fabric_address_only(host):
    listening = host.check_output("ss -Hltn sport = :50052")
    assert listening.split()[3] == "%s.10:50052" % PREFIX, listening


def test_rpc_port_is_protected_by_the_nft_table(host):
    table = host.check_output("nft list table inet gpulab_rpc")
    assert "tcp dport { 50052 }" in table or "tcp dport 50052" in table, table
    assert "drop" in table


def test_logs_are_files(host):
    for name in ("supervisord", "gpulab-llama-server", "gpulab-rpc-server-0"):
        log = host.file("/var/log/gpulab/%s.log" % name)
        assert log.exists and log.size > 0, name
    assert "model loaded" in host.file("/var/log/gpulab/gpulab-llama-server.log").content_string


def test_head_answers(host):
    raw = host.check_output(
        "curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' "
        "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 4}'")
    assert json.loads(raw)["usage"]["completion_tokens"] > 0
