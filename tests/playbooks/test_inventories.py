"""The shipped inventories: every playbook parses against them, and they pass gpu_preflight's
inventory and serving variable checks (which run on the controller, so no node is contacted)."""

import pytest
import yaml
from playbook_runner import REPO, run_in

PLAYBOOKS = ["deploy.yml"] + sorted("playbooks/" + p.name for p in (REPO / "playbooks").glob("*.yml"))
INVENTORIES = ["inventory/lab", "inventory/demo"]
# Role common resolves each node's service manager on the node (module service_manager) unless the
# run already knows it: given to the checks that run on the controller, so that no node is contacted.
KNOWN_MANAGER = {"gpulab_service_manager_resolved": {"requested": "auto", "manager": "systemd", "version": 252}}


def write_playbook(path, plays):
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_playbook_parses(tmp_path, inventory):
    book = write_playbook(tmp_path / "all.yml", [{"ansible.builtin.import_playbook": str(REPO / p)} for p in PLAYBOOKS])
    result = run_in(tmp_path / "runner", book, str(REPO / inventory), cmdline="--syntax-check")
    assert result.rc == 0, [e.get("stdout") for e in result.events][-5:]


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_inventory_passes_preflight_checks(tmp_path, inventory):
    book = write_playbook(tmp_path / "check.yml", [{
        "name": "Inventory checks", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Run gpu_preflight's inventory checks", "ansible.builtin.include_role": {
            "name": "gpulab.inference.gpu_preflight", "tasks_from": "inventory.yml"}},
            {"name": "Run gpu_preflight's serving variable checks", "ansible.builtin.include_role": {
                "name": "gpulab.inference.gpu_preflight", "tasks_from": "variables.yml"}}],
    }])
    result = run_in(tmp_path / "runner", book, str(REPO / inventory), extravars=KNOWN_MANAGER)
    assert result.status == "successful", result.failures
    passed = {e["event_data"]["task"] for e in result.events if e.get("event") == "runner_on_ok"}
    assert passed >= {"Exactly one host is the inference head", "The head and the workers are GPU nodes",
                      "Every worker and the head have a fabric address", "Fabric addresses are unique",
                      "The serving variables are usable"}


@pytest.mark.parametrize("extravars, synthetic", [({}, True), ({"model_path": "/srv/models/real-00001-of-00002.gguf"}, False)],
                         ids=["synthetic", "model_path"])
def test_demo_inventory_switches_to_a_real_model_with_model_path(tmp_path, extravars, synthetic):
    book = write_playbook(tmp_path / "model.yml", [{
        "name": "Model checks", "hosts": "inference_head", "gather_facts": False,
        "tasks": [{"name": "Run the model role's checks", "ansible.builtin.include_role": {
            "name": "gpulab.inference.model", "tasks_from": "validate.yml"}},
            {"name": "Show the model source", "ansible.builtin.debug": {
                "msg": "{{ [model_synthetic | length > 0, model_vocab_archive | length > 0] }}"}}],
    }])
    result = run_in(tmp_path / "runner", book, str(REPO / "inventory" / "demo"), extravars=dict(KNOWN_MANAGER, **extravars))
    assert result.status == "successful", result.failures
    (shown,) = result.ok_results("Show the model source")
    assert shown["msg"] == [synthetic, synthetic]
