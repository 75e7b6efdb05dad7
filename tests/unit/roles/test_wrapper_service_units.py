# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The units of llama-server's head and of role monitoring's services, rendered by role service's one
unit template (unit.service.j2) from what each role passes it (tasks/service.yml): the expected texts
are byte for byte what the roles' own unit templates rendered before they were removed (issue 50), so
a deployed node sees no change and restarts nothing on upgrade."""

from pathlib import Path

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.gpulab.inference.plugins.filter.monitoring_unit import FilterModule as MonitoringFilters
from ansible_collections.gpulab.inference.plugins.module_utils.llama_service import (
    head_unit,
    head_unit_sandbox,
    restart_directives,
)

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / 'roles'
HARDENING = {'NoNewPrivileges': 'yes', 'ProtectHome': 'yes', 'PrivateTmp': None,
             'RestrictAddressFamilies': 'AF_INET AF_INET6 AF_UNIX', 'CapabilityBoundingSet': ''}
RDMA = [['DeviceAllow', 'char-infiniband_verbs rw'], ['RestrictAddressFamilies', 'AF_INET AF_INET6 AF_UNIX AF_NETLINK'],
        ['LimitMEMLOCK', 'infinity']]

HEAD_UNIT = '''# managed by gpulab.inference
# llama-server: runs /opt/gpulab/bin/gpulab-llama-server; layers on RPC0, RPC1, CUDA0.
# It restarts forever with no start limit: the wrapper waits for the workers before each start and
# exits when a worker connection is lost, so the head comes back by itself after a worker outage or a
# cluster reboot in any order.
[Unit]
Description=llama-server inference head (gpulab.inference)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
User=gpulab-llama
Group=gpulab-llama
ExecStart=/opt/gpulab/bin/gpulab-llama-server
Restart=always
RestartSec=5
RestartSteps=5
RestartMaxDelaySec=30
DeviceAllow=char-infiniband_verbs rw
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK
LimitMEMLOCK=infinity
# The wrapper stops llama-server and its own probes and sleeps on SIGTERM, waits for them and exits
# 0, so a stop ends inactive within seconds (cgroup v1 too) instead of at TimeoutStopSec.
KillMode=mixed
# Hardening: gpulab_service_hardening, with llama_server_hardening_overrides applied.
NoNewPrivileges=yes
ProtectHome=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
CapabilityBoundingSet=
DeviceAllow=char-nvidia rw
DeviceAllow=char-nvidia-uvm rw

[Install]
WantedBy=multi-user.target
'''

EXPORTER_UNIT = '''# managed by gpulab.inference
# Runs /opt/gpulab/bin/gpulab-node-exporter (role monitoring); restarts forever, without a start limit.
[Unit]
Description=Prometheus node exporter with the GPU and state textfiles (gpulab.inference)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
# The table that admits only the Prometheus host is loaded (replaced whole) before every start, as
# root: without it the exporter does not start.
ExecStartPre=+/usr/sbin/nft -f /etc/nftables.d/gpulab-monitoring.nft
ExecStart=/opt/gpulab/bin/gpulab-node-exporter
User=gpulab-metrics
Group=gpulab-metrics
Restart=always
RestartSec=5
NoNewPrivileges=yes
ProtectHome=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK
CapabilityBoundingSet=

[Install]
WantedBy=multi-user.target
'''

COLLECTOR_UNIT = '''# managed by gpulab.inference
# Runs /opt/gpulab/bin/gpulab-metrics (role monitoring); restarts forever, without a start limit.
[Unit]
Description=GPU and gpulab.inference state metrics for the node exporter (gpulab.inference)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart=/opt/gpulab/bin/gpulab-metrics
Restart=always
RestartSec=5
NoNewPrivileges=yes
ProtectHome=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK
CapabilityBoundingSet=CAP_NET_ADMIN
DeviceAllow=char-nvidia rw
DeviceAllow=char-nvidia-uvm rw
ReadWritePaths=/var/lib/gpulab/metrics

[Install]
WantedBy=multi-user.target
'''


def unit_template():
    # as the template module renders it: trim_blocks on, the trailing newline kept
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(str(ROLES / 'service' / 'templates')))
    return env.get_template('unit.service.j2')


def service_call(role):
    """The vars tasks/service.yml of role passes role service for the service."""
    tasks = yaml.safe_load((ROLES / role / 'tasks' / 'service.yml').read_text())
    return next(task['vars'] for task in tasks
                if task.get('ansible.builtin.include_role', {}).get('name') == 'gpulab.inference.service'
                and 'service_unit_file' in task['vars'])


def test_the_head_unit_is_the_one_its_own_template_rendered():
    assert service_call('llama_server')['service_unit_file'] == '{{ __llama_server_plan.unit_file }}'
    unit_directives, service_directives = restart_directives(255, 5, 30)
    sandbox = head_unit_sandbox(HARDENING, True, ['char-nvidia', 'char-nvidia-uvm'])
    devices = [{'name': 'RPC0'}, {'name': 'RPC1'}, {'name': 'CUDA0'}]
    settings = {'user': 'gpulab-llama', 'group': 'gpulab-llama', 'unit': 'gpulab-llama-server',
                'bin_dir': '/opt/gpulab/bin'}
    unit_file = head_unit(settings, devices, unit_directives, [list(d) for d in service_directives] + RDMA, sandbox)
    assert unit_template().render(service_unit_file=unit_file) == HEAD_UNIT


def test_the_head_plan_is_given_the_unit_s_names():
    tasks = yaml.safe_load((ROLES / 'llama_server' / 'tasks' / 'validate.yml').read_text())
    plan = next(task['gpulab.inference.llama_server_plan'] for task in tasks if 'gpulab.inference.llama_server_plan' in task)
    assert {key: plan[key] for key in ('service_user', 'service_group', 'unit', 'bin_dir')} == {
        'service_user': '{{ llama_server_user }}', 'service_group': '{{ llama_server_group }}',
        'unit': '{{ llama_server_unit_name }}', 'bin_dir': '{{ llama_server_bin_dir }}'}


def monitoring_unit_text(key):
    """The unit of role monitoring's service key, from the role's vars and its call of role service."""
    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    env.filters.update(FilterModule().filters())
    env.filters.update(('gpulab.inference.' + name, function) for name, function in MonitoringFilters().filters().items())
    values = {'monitoring_node_exporter_user': 'gpulab-metrics', 'monitoring_prometheus_user': 'gpulab-prometheus',
              'monitoring_firewall_enabled': True, 'monitoring_textfile_dir': '/var/lib/gpulab/metrics',
              'monitoring_data_dir': '/var/lib/gpulab/prometheus', 'gpulab_cuda_device_groups': ['char-nvidia', 'char-nvidia-uvm']}

    def resolve(value):
        if isinstance(value, dict):
            return dict((name, resolve(item)) for name, item in value.items())
        if isinstance(value, list):
            return [resolve(item) for item in value]
        return env.from_string(value).render(**values) if isinstance(value, str) and '{{' in value else value

    services = yaml.safe_load((ROLES / 'monitoring' / 'vars' / 'main.yml').read_text())['__monitoring_services']
    call = service_call('monitoring')
    unit_file = env.from_string(call['service_unit_file']).render(
        __monitoring_service=resolve(services[key]), monitoring_bin_dir='/opt/gpulab/bin',
        monitoring_nft_file='/etc/nftables.d/gpulab-monitoring.nft', gpulab_service_hardening=HARDENING)
    return unit_template().render(service_unit_file=unit_file)


def test_the_monitoring_units_are_the_ones_their_own_template_rendered():
    assert monitoring_unit_text('node_exporter') == EXPORTER_UNIT
    assert monitoring_unit_text('collector') == COLLECTOR_UNIT
    prometheus = monitoring_unit_text('prometheus')
    assert 'User=gpulab-prometheus\n' in prometheus and 'ReadWritePaths=/var/lib/gpulab/prometheus\n' in prometheus
    assert 'nft' not in prometheus
