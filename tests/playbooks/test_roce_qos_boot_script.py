"""The roce role's QoS boot script as its template renders it, run for real: a recording
stand-in for mlnx_qos (TEST DOUBLE: the lab's NICs have no QoS tool) gets the trust and PFC
arguments, and without ECN files in sysfs the script says so and still ends well."""

import subprocess

import yaml
from playbook_runner import REPO, local_host, run_in

TEMPLATE = REPO / "roles" / "roce" / "templates" / "gpulab-roce-qos.sh.j2"
HOSTS = {
    "ecn-on": {"roce_qos_trust": "dscp", "roce_pfc_priority": 3, "roce_ecn_enabled": True},
    "ecn-off": {"roce_qos_trust": "pcp", "roce_pfc_priority": "5", "roce_ecn_enabled": "false"},
    "bad-trust": {"roce_qos_trust": "none", "roce_pfc_priority": 3, "roce_ecn_enabled": True},
}


def test_the_rendered_qos_script_runs_the_tool_with_the_plan(tmp_path):
    tool = tmp_path / "mlnx_qos"
    tool.write_text('#!/bin/sh\necho "$@" >> "%s/calls"\n' % tmp_path)
    tool.chmod(0o755)
    book = tmp_path / "qos.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Render the QoS script", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "Render", "ansible.builtin.template": {
            "src": str(TEMPLATE), "dest": str(tmp_path) + "/{{ inventory_hostname }}.sh", "mode": "0755"}}],
    }], sort_keys=False))
    # The interface does not exist here, so the ECN files are missing: the script must say so.
    inventory = {"all": {"hosts": {name: local_host(roce_fabric_interface="gpulabnone0",
                                                    roce_qos_tool_path=str(tool), **values)
                                   for name, values in HOSTS.items()}}}
    result = run_in(tmp_path / "runner", book, inventory)

    failed = {event["host"]: event["res"]["msg"] for event in result.failed_events()}
    assert list(failed) == ["bad-trust"]
    assert "gpulab.inference.roce_qos_script: roce_qos_trust 'none' is not one of dscp, pcp" in failed["bad-trust"]
    assert not (tmp_path / "bad-trust.sh").exists()

    on = subprocess.run(["/bin/sh", str(tmp_path / "ecn-on.sh")], capture_output=True, text=True, check=False)
    assert (on.returncode, on.stdout) == (0, "")
    assert on.stderr.splitlines() == [
        "gpulab-roce-qos: /sys/class/net/gpulabnone0/ecn/%s/enable/3 is missing: ECN left as it is" % point
        for point in ("roce_np", "roce_rp")]
    off = subprocess.run(["/bin/sh", str(tmp_path / "ecn-off.sh")], capture_output=True, text=True, check=False)
    assert (off.returncode, off.stdout, off.stderr) == (0, "", "")
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-i gpulabnone0 --trust dscp --pfc 0,0,0,1,0,0,0,0",
        "-i gpulabnone0 --trust pcp --pfc 0,0,0,0,0,1,0,0",
    ]
    assert (tmp_path / "ecn-on.sh").read_text().startswith(
        "#!/bin/sh\n# managed by gpulab.inference (role roce)\n# Lossless RoCE on gpulabnone0: trust dscp, PFC on priority 3 only, ECN")
