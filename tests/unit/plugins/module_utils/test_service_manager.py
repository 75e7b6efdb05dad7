"""service_manager: unit and program names, device groups, stale programs, supervisord's environment= value."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (
    ServiceManagerError,
    device_groups,
    service_names,
    stale_programs,
    supervisor_environment,
)


@pytest.mark.parametrize("instances, manager, expected", [
    ([0, 1], "systemd", ["gpulab-rpc-server@0.service", "gpulab-rpc-server@1.service"]),
    ([0, 1], "supervisor", ["gpulab-rpc-server-0", "gpulab-rpc-server-1"]),
    ([2, 0], "systemd", ["gpulab-rpc-server@2.service", "gpulab-rpc-server@0.service"]),
    ([], "systemd", []),
    (None, "systemd", ["gpulab-rpc-server.service"]),
    (None, "supervisor", ["gpulab-rpc-server"]),
])
def test_names_of_instances(instances, manager, expected):
    assert service_names(instances, "gpulab-rpc-server", manager) == expected


@pytest.mark.parametrize("instances, base, manager, message", [
    ([0], "gpulab-rpc-server", "runit", "service manager 'runit' is neither systemd nor supervisor"),
    ([-1], "gpulab-rpc-server", "systemd", "instance -1 of gpulab-rpc-server is not a whole number >= 0"),
    (["0"], "gpulab-rpc-server", "systemd", "instance '0' of gpulab-rpc-server is not a whole number >= 0"),
    ([True], "gpulab-rpc-server", "systemd", "instance True of gpulab-rpc-server is not a whole number >= 0"),
    ([0], "bad name", "systemd", "service name 'bad name' is not a unit or program name"),
    ([0], "", "systemd", "service name '' is not a unit or program name"),
    (None, "x/../y", "supervisor", "service name 'x/../y' is not a unit or program name"),
])
def test_names_that_cannot_be_used_are_refused(instances, base, manager, message):
    with pytest.raises(ServiceManagerError) as raised:
        service_names(instances, base, manager)
    assert message in str(raised.value)


def test_stale_programs_are_the_files_not_planned():
    files = ["/etc/gpulab/supervisor.d/gpulab-rpc-server-0.conf", "/etc/gpulab/supervisor.d/gpulab-rpc-server-3.conf",
             "/etc/gpulab/supervisor.d/gpulab-rpc-server-1.conf"]
    assert stale_programs(files, ["gpulab-rpc-server-0"]) == ["gpulab-rpc-server-1", "gpulab-rpc-server-3"]


def test_no_stale_program_when_every_file_is_planned():
    assert stale_programs(["/d/gpulab-rpc-server-0.conf"], ["gpulab-rpc-server-0", "gpulab-rpc-server-1"]) == []
    assert stale_programs([], ["gpulab-rpc-server-0"]) == []


@pytest.mark.parametrize("files, planned, message", [
    (["/d/gpulab-rpc-server-0.ini"], [], "is not named <program>.conf"),
    (["/d/.conf"], [], "is not named <program>.conf"),
    ([], ["bad name"], "planned program 'bad name' is not a unit or program name"),
])
def test_stale_programs_refuse_what_they_cannot_read(files, planned, message):
    with pytest.raises(ServiceManagerError) as raised:
        stale_programs(files, planned)
    assert message in str(raised.value)


def test_environment_is_sorted_quoted_and_escaped():
    environment = {"VLLM_HOST_IP": "10.0.0.1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "RATE": "50%", "Q": 'a"b', "N": 1}
    assert supervisor_environment(environment) == (
        'CUDA_DEVICE_ORDER="PCI_BUS_ID",N="1",Q="ab",RATE="50%%",VLLM_HOST_IP="10.0.0.1"')


def test_no_environment_is_empty():
    assert supervisor_environment({}) == ""
    assert supervisor_environment(None) == ""


@pytest.mark.parametrize("environment, message", [
    ({"1X": "a"}, "environment variable name '1X' is not a shell name"),
    ({"A-B": "a"}, "environment variable name 'A-B' is not a shell name"),
    ({"A": None}, "environment variable A has no single value (None)"),
    ({"A": [1]}, "environment variable A has no single value ([1])"),
    ({"A": "x\ny"}, "environment variable A holds a newline"),
])
def test_environment_that_supervisord_cannot_take_is_refused(environment, message):
    with pytest.raises(ServiceManagerError) as raised:
        supervisor_environment(environment)
    assert message in str(raised.value)


@pytest.mark.parametrize("wanted, present, expected", [
    (["video", "render"], {"video": ["x", "44", ""], "render": ["x", "105", ""]}, ["video", "render"]),
    (["render", "video"], {"video": ["x", "44", ""], "render": ["x", "105", ""]}, ["render", "video"]),
    # A container or a host without a DRM device has no render group: the account is created anyway.
    (["video", "render"], {"video": ["x", "44", ""]}, ["video"]),
    (["video", "render"], {}, []),
    (["video", "render"], None, []),
    (["video", "video"], ["video"], ["video"]),
    ([], {"video": ["x", "44", ""]}, []),
    (None, {"video": ["x", "44", ""]}, []),
])
def test_device_groups_present_on_the_node(wanted, present, expected):
    assert device_groups(wanted, present) == expected


@pytest.mark.parametrize("group", ["", "video render", "video,render", "a:b", None, 44])
def test_device_group_that_is_no_group_name(group):
    with pytest.raises(ServiceManagerError, match=r"device group .* is not a group name"):
        device_groups([group], {"video": ["x", "44", ""]})


# --- which manager, which services, what supervisorctl says ---------------------------------------

from pathlib import Path  # noqa: E402

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (  # noqa: E402
    active_manager,
    active_programs,
    parse_supervisorctl_states,
    program_units,
    programs_matching,
    services_matching,
    supervisorctl_argv,
    systemd_booted,
    units_matching,
)

# Captured from supervisor 4.3.0 (tests/unit/fixtures/supervisorctl/README.md).
SUPERVISORCTL = Path(__file__).resolve().parents[3] / "unit" / "fixtures" / "supervisorctl"
OWN = ["gpulab-llama-server.service", "gpulab-rpc-server@[0-9]*.service", "gpulab-vllm.service"]


@pytest.mark.parametrize("requested, booted, expected", [
    ("auto", True, "systemd"),
    ("auto", False, "supervisor"),
    ("systemd", False, "systemd"),
    ("supervisor", True, "supervisor"),
])
def test_the_manager_in_use(requested, booted, expected):
    assert active_manager(requested, booted) == expected


def test_systemd_booted_asks_for_the_runtime_directory_only():
    asked = []
    assert systemd_booted(lambda path: asked.append(path) or True) is True
    assert systemd_booted(lambda path: False) is False
    assert asked == ["/run/systemd/system"]


@pytest.mark.parametrize("requested", ["runit", "", None, "Systemd"])
def test_an_unknown_manager_is_refused_naming_the_variable(requested):
    with pytest.raises(ServiceManagerError) as raised:
        active_manager(requested, True)
    assert str(raised.value) == "gpulab_service_manager is %r: set auto, systemd or supervisor" % (requested,)


def test_a_program_stands_for_its_unit_and_an_instance_for_the_template_instance():
    assert program_units("gpulab-rpc-server-1") == ["gpulab-rpc-server-1.service", "gpulab-rpc-server@1.service"]
    assert program_units("gpulab-vllm") == ["gpulab-vllm.service"]


def test_own_services_in_the_patterns_order_under_each_manager():
    units = ["gpulab-rpc-server@1.service", "ssh.service", "gpulab-rpc-server@.service",
             "gpulab-llama-server.service", "gpulab-rpc-server@0.service"]
    assert units_matching(units, OWN) == [
        "gpulab-llama-server.service", "gpulab-rpc-server@1.service", "gpulab-rpc-server@0.service"]
    assert services_matching(units, OWN, "systemd") == units_matching(units, OWN)
    programs = ["gpu-embed", "gpulab-rpc-server-0", "gpulab-vllm", "gpulab-llama-server", "asr:whisper"]
    assert programs_matching(programs, OWN) == ["gpulab-llama-server", "gpulab-rpc-server-0", "gpulab-vllm"]
    assert services_matching(programs, OWN[2:], "supervisor") == ["gpulab-vllm"]
    with pytest.raises(ServiceManagerError):
        services_matching(programs, OWN, "runit")


def test_supervisorctl_argv_names_the_configuration_when_given():
    assert supervisorctl_argv("/opt/gpulab/supervisor/bin/supervisorctl", "/etc/gpulab/supervisord.conf", "stop", "x") == [
        "/opt/gpulab/supervisor/bin/supervisorctl", "-c", "/etc/gpulab/supervisord.conf", "stop", "x"]
    assert supervisorctl_argv("/usr/bin/supervisorctl", None, "status") == ["/usr/bin/supervisorctl", "status"]


def test_supervisorctl_status_of_every_state():
    states = parse_supervisorctl_states((SUPERVISORCTL / "status-mixed.txt").read_text())
    assert dict((name, (program["state"], program["pid"])) for name, program in states.items()) == {
        "asr:whisper": ("RUNNING", 18225),
        "crashy": ("FATAL", None),
        "flappy": ("BACKOFF", None),
        "gpu-embed": ("RUNNING", 18228),
        "gpu-notebook": ("STOPPED", None),
        "gpulab-llama-server": ("RUNNING", 18229),
        "gpulab-rpc-server-0": ("RUNNING", 18230),
        "slowstart": ("STARTING", None),
    }
    assert states["gpu-notebook"]["description"] == "Not started"
    assert active_programs(states) == ["asr:whisper", "flappy", "gpu-embed", "gpulab-llama-server",
                                       "gpulab-rpc-server-0", "slowstart"]


def test_supervisorctl_status_after_a_stop_and_when_supervisord_is_down():
    states = parse_supervisorctl_states((SUPERVISORCTL / "status-own-stopped.txt").read_text())
    assert states["gpulab-llama-server"]["state"] == "STOPPED"
    assert active_programs(states) == ["gpu-embed", "gpu-notebook"]
    assert parse_supervisorctl_states((SUPERVISORCTL / "status-down.txt").read_text()) == {}
    assert parse_supervisorctl_states("") == {}


@pytest.mark.parametrize("state, pid_before, expected", [
    ({"state": "RUNNING", "pid": 42, "description": "pid 42, uptime 0:00:10"}, 42, None),
    ({"state": "STARTING", "pid": None, "description": ""}, None, None),
    ({"state": "RUNNING", "pid": 77, "description": "pid 77, uptime 0:00:01"}, 42,
     "the program was restarted while loading (pid 77, was 42)"),
    ({"state": "FATAL", "pid": None, "description": "Exited too quickly"}, None,
     "the program gave up starting (Exited too quickly)"),
    ({"state": "BACKOFF", "pid": None, "description": "Exited too quickly"}, 42,
     "the program exited and waits to be started again (Exited too quickly)"),
    ({"state": "EXITED", "pid": None, "description": "Dec 07 04:00 AM"}, None, "the program is exited (Dec 07 04:00 AM)"),
    (None, None, "supervisord does not know the program"),
])
def test_why_a_program_that_should_be_loading_is_not(state, pid_before, expected):
    from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import program_failure
    assert program_failure(state, pid_before) == expected
