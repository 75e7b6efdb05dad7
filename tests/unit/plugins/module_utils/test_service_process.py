"""Which unit or program a process runs under, from captured and hand-written /proc texts."""

from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.service_process import (
    supervisor_program_from_environ,
    systemd_unit_from_cgroup,
)

FIXTURES = Path(__file__).resolve().parents[4] / 'tests' / 'unit' / 'fixtures' / 'nvidia-smi'


def fixture(relative):
    return (FIXTURES / relative).read_text()


@pytest.mark.parametrize('name, unit', [
    ('cgroup-v2-system-service.txt', 'gpulab-rpc-server@0.service'),
    ('cgroup-v2-user-service.txt', 'llama-server.service'),
    ('cgroup-v1-hybrid-service.txt', 'gpulab-llama-server.service'),
    ('cgroup-v2-session-scope.txt', None),
])
def test_systemd_unit_from_cgroup(name, unit):
    assert systemd_unit_from_cgroup(fixture('synthetic/' + name)) == unit


def test_systemd_unit_from_captured_container_cgroup():
    assert systemd_unit_from_cgroup(fixture('h200-loaded/cgroup-container.txt')) is None


def test_systemd_unit_v1_only():
    assert systemd_unit_from_cgroup('4:memory:/x\n1:name=systemd:/system.slice/a.service\n') == 'a.service'


def test_supervisor_program_from_environ():
    environ = fixture('synthetic/environ-supervisord-rpc-server.txt')
    assert supervisor_program_from_environ(environ) == 'gpulab-rpc-server-0'
    # not the group's name, nor a variable that only ends in the name
    assert supervisor_program_from_environ('XSUPERVISOR_PROCESS_NAME=a\0SUPERVISOR_GROUP_NAME=g\0') is None
    assert supervisor_program_from_environ('SUPERVISOR_PROCESS_NAME=\0') is None
    assert supervisor_program_from_environ('') is None
