"""Role gpu_drain's entry point would_stop through ansible-runner: run on one host, it asks each
given node's drain in check mode with that node's own settings (its inventory value, else the
role's default), never the settings of the host running it, and returns the answers by node."""

import os
import shutil

from playbook_runner import LAB_FILES, local_host, run_in

from ansible_collections.gpulab.inference.plugins.module_utils import nvidia_smi

ASKED = "Ask the drain what it would stop on each node that drains (check mode, nothing is stopped)"
HELD_MIB = 2048


def fake_smi(tmp_path):
    """A directory holding an nvidia-smi (the lab's double) whose first GPU has one consumer: this
    test's own process, which no service manager runs (an unmanaged process to the drain)."""
    answers = tmp_path / "answers"
    shutil.copytree(LAB_FILES / "nvidia-smi" / "rtx-pro-6000-x2", answers)
    pid_file = tmp_path / "consumer.pid"
    pid_file.write_text("%d\n" % os.getpid())
    first = nvidia_smi.parse_gpu_query((answers / "query-gpu.csv").read_text())[0]
    (answers / "consumers").write_text("%s,%s,%d\n" % (pid_file, first["uuid"], HELD_MIB))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\nGPULAB_FAKE_NVIDIA_SMI_DIR=%s exec %s "$@"\n' % (answers, LAB_FILES / "fake-nvidia-smi"))
    smi.chmod(0o755)
    return bin_dir, first["uuid"]


def test_each_node_is_asked_with_its_own_settings(tmp_path):
    bin_dir, uuid = fake_smi(tmp_path)
    inventory = {"all": {
        "vars": {"gpulab_drain_state_file": str(tmp_path / "state" / "drain-state.json")},
        "hosts": {
            # the host running the entry point: every drain setting differs from the defaults, and
            # its nvidia-smi does not exist, so a node that took any of them would show it
            "head": local_host(gpu_drain_enabled=False, gpu_drain_kill_unmanaged=True, gpu_drain_keep=["head-*"],
                               gpu_drain_nvidia_smi_path=str(tmp_path / "no-nvidia-smi")),
            # nothing set: the role's defaults (nvidia-smi from PATH, which holds the double)
            "node-a": local_host(),
            "node-b": local_host(gpu_drain_kill_unmanaged=True, gpu_drain_keep=["whisper-asr"],
                                 gpu_drain_state_file=str(tmp_path / "node-b.json"),
                                 gpu_drain_nvidia_smi_path=str(bin_dir / "nvidia-smi")),
            "node-c": local_host(gpu_drain_enabled=False),
        }}}
    playbook = tmp_path / "would_stop.yml"
    playbook.write_text("""
- name: Ask from the head
  hosts: head
  gather_facts: false
  tasks:
    - name: What the drain would stop
      ansible.builtin.include_role:
        name: gpulab.inference.gpu_drain
        tasks_from: would_stop
      vars:
        gpu_drain_would_stop_nodes: [node-a, node-b, node-c]
    - name: Show the answers
      ansible.builtin.debug:
        var: gpu_drain_would_stop
""")
    run = run_in(tmp_path / "runner", str(playbook), inventory,
                 envvars={"PATH": "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"])})
    assert run.status == "successful", run.failures
    asked = dict((e["event_data"]["res"]["__gpu_drain_node"], e["event_data"]["res"]["invocation"]["module_args"])
                 for e in run.events if e.get("event") == "runner_item_on_ok" and e["event_data"].get("task") == ASKED)
    assert sorted(asked) == ["node-a", "node-b"]
    assert [asked["node-a"][key] for key in ("keep", "kill_unmanaged", "state_file", "nvidia_smi_path")] == \
        [[], False, str(tmp_path / "state" / "drain-state.json"), "nvidia-smi"]
    assert [asked["node-b"][key] for key in ("keep", "kill_unmanaged", "state_file", "nvidia_smi_path")] == \
        [["whisper-asr"], True, str(tmp_path / "node-b.json"), str(bin_dir / "nvidia-smi")]
    assert asked["node-a"]["state"] == "drained" and "gpulab-vllm.service" in asked["node-a"]["own_units"]
    answers = run.ok_results("Show the answers")[0]["gpu_drain_would_stop"]
    assert sorted(answers) == ["node-a", "node-b"]
    # this process is a consumer nothing can start again: reported on node-a, killed on node-b
    assert [(c["pids"], c["action"], c["gpus"]) for c in answers["node-a"]] == [([os.getpid()], "report", {uuid: HELD_MIB})]
    assert [(c["pids"], c["action"], c["gpus"]) for c in answers["node-b"]] == [([os.getpid()], "kill", {uuid: HELD_MIB})]
    assert not (tmp_path / "state").exists() and not (tmp_path / "node-b.json").exists()
