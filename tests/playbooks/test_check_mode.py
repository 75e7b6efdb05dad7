"""Dry runs (--check) of steps whose read-only probes would otherwise be skipped: the RoCE QoS step
takes the branch the real run takes, and the fabric check's bandwidth measurement is not started."""

import yaml
from playbook_runner import local_host, run_in


def write_playbook(path, plays):
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


def test_qos_probe_runs_in_check_mode(tmp_path):
    book = write_playbook(tmp_path / "qos.yml", [{
        "name": "QoS step", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Run the roce role's QoS step", "ansible.builtin.include_role": {
            "name": "gpulab.inference.roce", "tasks_from": "qos.yml"}}],
    }])
    # a tool that is not there: the probe's answer decides the branch, in check mode too
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"node-a": local_host(
        roce_qos_tool="gpulab-no-such-qos-tool", roce_fabric_interface="fabric0", roce_pfc_priority=3)}}}}}
    result = run_in(tmp_path / "runner", book, inventory, cmdline="--check")
    assert result.status == "successful", result.failures
    assert result.ok_results("Look for the NIC QoS tool")[0]["rc"] != 0
    (warned,) = result.ok_results("Warn that DSCP trust, PFC and ECN are left alone")
    assert "gpulab-no-such-qos-tool not found" in warned["msg"]


def test_fabric_check_measures_no_bandwidth_in_check_mode(tmp_path):
    inventory = {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": local_host()}},
        "rpc_workers": {"hosts": {"node-b": local_host()}}}}}}}
    # without --check this run would go on to read fabric.json, which these hosts lack, and fail
    result = run_in(tmp_path / "runner", "playbooks/fabric-check.yml", inventory,
                    extravars={"roce_bandwidth_check": True}, cmdline="--check")
    assert result.status == "successful", result.failures
    started = [e for e in result.events if e.get("event_data", {}).get("task") == "Start ib_write_bw on the head"]
    assert started == []
