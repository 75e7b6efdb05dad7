"""Dry runs (--check) of steps whose read-only probes would otherwise be skipped: the RoCE QoS step
takes the branch the real run takes, and the fabric check's bandwidth measurement is not started."""

import yaml
from playbook_runner import LAB_FILES, local_host, run_in


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


def test_dry_run_of_a_lab_never_deployed_stops_after_the_checks_with_the_reason(tmp_path):
    smi = LAB_FILES / "nvidia-smi" / "rtx-pro-6000-x2"

    def node(name, address):
        return local_host(gpulab_fabric_address=address, gpulab_gpu_inventory_file=str(tmp_path / name / "gpu-inventory.json"),
                          gpu_preflight_nvidia_smi_path=str(LAB_FILES / "fake-nvidia-smi"),
                          gpu_preflight_driver_version_file=str(smi / "proc-driver-nvidia-version"),
                          gpulab_llama_cpp_current_link=str(tmp_path / "llama.cpp" / "current"))

    inventory = {"all": {"children": {"gpu_nodes": {"children": {
        "inference_head": {"hosts": {"node-a": node("node-a", "10.0.0.1")}},
        "rpc_workers": {"hosts": {"node-b": node("node-b", "10.0.0.2")}}}}}}}
    result = run_in(tmp_path / "runner", "deploy.yml", inventory, envvars={"GPULAB_FAKE_NVIDIA_SMI_DIR": str(smi)},
                    cmdline="--check --diff")
    assert result.status == "failed"
    (failure,) = result.failures
    assert failure[1] == "Stop the dry run where nothing more can be planned"
    assert "check mode stops here: node-a has no llama.cpp build yet" in failure[2]
    ran = {e["event_data"].get("task") for e in result.events if e.get("event") == "runner_on_ok"}
    assert "The serving variables are usable" in ran
    assert not any("llama_cpp_build" in (e["event_data"].get("role") or "") for e in result.events
                   if e.get("event") in ("runner_on_ok", "runner_on_failed"))
    assert not (tmp_path / "node-a").exists() and not (tmp_path / "llama.cpp").exists()
