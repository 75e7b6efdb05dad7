"""roce_qos_script: the RoCE QoS boot script's lines, with and without ECN; bad values named."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.roce_qos_script import FilterModule, roce_qos_script

ECN_LOOP = [
    'for point in roce_np roce_rp; do',
    '  file="/sys/class/net/$interface/ecn/$point/enable/$priority"',
    '  if [ -w "$file" ]; then',
    '    echo 1 > "$file"',
    '  else',
    '    echo "gpulab-roce-qos: $file is missing: ECN left as it is" >&2',
    '  fi',
    'done',
]


def test_dscp_trust_pfc_on_one_priority_and_ecn_on_it():
    assert roce_qos_script("enp65s0f0np0", "/usr/bin/mlnx_qos", "dscp", 3, True) == [
        "# Lossless RoCE on enp65s0f0np0: trust dscp, PFC on priority 3 only, ECN (notification and reaction points) on it.",
        "set -eu",
        "interface=enp65s0f0np0",
        "priority=3",
        '/usr/bin/mlnx_qos -i "$interface" --trust dscp --pfc 0,0,0,1,0,0,0,0',
    ] + ECN_LOOP


def test_without_ecn_the_script_sets_trust_and_pfc_only():
    assert roce_qos_script("fabric0", "/opt/mellanox/bin/mlnx qos", "pcp", 0, False) == [
        "# Lossless RoCE on fabric0: trust pcp, PFC on priority 0 only.",
        "set -eu",
        "interface=fabric0",
        "priority=0",
        "'/opt/mellanox/bin/mlnx qos' -i \"$interface\" --trust pcp --pfc 1,0,0,0,0,0,0,0",
    ]


@pytest.mark.parametrize("args, message", [
    (("fabric0; reboot", "/usr/bin/mlnx_qos", "dscp", 3, True), "gpulab_fabric_interface 'fabric0; reboot' is not an interface name"),
    (("fabric0", "/usr/bin/mlnx_qos", "both", 3, True), "roce_qos_trust 'both' is not one of dscp, pcp"),
    (("fabric0", "/usr/bin/mlnx_qos", "dscp", 8, True), "roce_pfc_priority 8 is not a priority from 0 to 7"),
    (("fabric0", "/usr/bin/mlnx_qos", "dscp", "3", True), "roce_pfc_priority '3' is not a priority from 0 to 7"),
    (("fabric0", "mlnx_qos", "dscp", 3, True), "the QoS tool was found at 'mlnx_qos', not an absolute path: check roce_qos_tool"),
    (("fabric0", "/usr/bin/mlnx_qos\nreboot", "dscp", 3, True), "not an absolute path: check roce_qos_tool"),
    (("fabric0", "/usr/bin/mlnx_qos", "dscp", 3, "yes"), "roce_ecn_enabled 'yes' is not a boolean"),
])
def test_a_bad_value_is_named(args, message):
    with pytest.raises(AnsibleFilterError, match="gpulab.inference.roce_qos_script: .*") as failed:
        roce_qos_script(*args)
    assert message in str(failed.value)


def test_the_filter_is_registered_under_its_name():
    assert FilterModule().filters() == {"roce_qos_script": roce_qos_script}
