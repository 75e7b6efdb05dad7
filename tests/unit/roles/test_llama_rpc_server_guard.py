# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC guard's files (roles/llama_rpc_server/templates/gpulab-rpc-guard*, the wrapper from the plan's
guard_wrapper through roles/service/templates/wrapper.sh.j2): the wrapper passes
the table, every server's port and unit to module_utils/rpc_guard.py, the servers' drop-in checks
the table as root before each start, and the names stay clear of the servers' prefix (whose
supervisord programs beyond the plan are removed). molecule default's side effect proves the
behaviour on a live lab; these tests guard the rendering."""

import shlex
import subprocess
from pathlib import Path

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule

from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import rpc_guard_wrapper
from ansible_collections.gpulab.inference.plugins.module_utils.rpc_guard import parse_args

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / 'roles' / 'llama_rpc_server'
WRAPPER = REPO / 'roles' / 'service' / 'templates' / 'wrapper.sh.j2'
VARS = yaml.safe_load((ROLE / 'vars' / 'main.yml').read_text())


def render(name, manager='systemd'):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(str(ROLE / 'templates')))
    env.filters.update(FilterModule().filters())
    values = {
        '__llama_rpc_server_plan': {'servers': [{'instance': 0, 'port': 50052}, {'instance': 1, 'port': 50053}]},
        'llama_rpc_server_unit_name': 'gpulab-rpc-server',
        'llama_rpc_server_bin_dir': '/opt/gpulab/bin',
        'llama_rpc_server_nft_table': 'gpulab_rpc',
        'llama_rpc_server_service_manager': manager,
        'gpulab_supervisor_config': '/etc/gpulab/supervisord.conf',
        'gpulab_log_dir': '/var/log/gpulab',
        '__llama_rpc_server_firewall_unit': 'gpulab-rpc-server-firewall.service',
        'discovered_interpreter_python': '/usr/bin/python3',
    }
    for key in ('__llama_rpc_server_guard_name', '__llama_rpc_server_guard_unit', '__llama_rpc_server_guard_program',
                '__llama_rpc_server_guard_code', '__llama_rpc_server_guard_interval_s', '__llama_rpc_server_guard_python'):
        value = VARS[key]
        values[key] = env.from_string(value).render(**values).strip() if isinstance(value, str) else value
    if name == WRAPPER:
        # What validate.yml passes the plan for the guard, rendered by the wrapper template of role service.
        guard = {'name': values['__llama_rpc_server_guard_name'], 'python': values['__llama_rpc_server_guard_python'],
                 'code': values['__llama_rpc_server_guard_code'], 'table': values['llama_rpc_server_nft_table'],
                 'service_manager': manager, 'supervisor_config': values['gpulab_supervisor_config'],
                 'interval_s': values['__llama_rpc_server_guard_interval_s']}
        values['__service_wrapper'] = rpc_guard_wrapper(guard, values['__llama_rpc_server_plan']['servers'],
                                                        'gpulab-rpc-server', values['__llama_rpc_server_firewall_unit'])
        return env.from_string(WRAPPER.read_text()).render(**values), values
    return env.get_template(name).render(**values), values


def wrapper_args(text):
    """The arguments the wrapper's exec line passes to the guard's code."""
    line = ' '.join(part.rstrip('\\').strip() for part in text.split('exec ', 1)[1].splitlines())
    words = shlex.split(line)
    assert words[:2] == ['/usr/bin/python3', '/opt/gpulab/bin/gpulab-rpc-guard.py'] and words[-1] == '$@'
    return words[2:-1]


def test_the_wrapper_guards_every_server_unit_and_port():
    text, unused = render(WRAPPER)
    subprocess.run(['sh', '-n'], input=text, universal_newlines=True, check=True)
    args = parse_args(wrapper_args(text) + ['--check'])
    assert (args.table, args.ports, args.manager, args.check) == ('gpulab_rpc', [50052, 50053], 'systemd', True)
    assert args.units == ['gpulab-rpc-server@0.service', 'gpulab-rpc-server@1.service']
    assert args.firewall_unit == 'gpulab-rpc-server-firewall.service'


def test_under_supervisord_the_wrapper_guards_the_programs():
    text, unused = render(WRAPPER, 'supervisor')
    args = parse_args(wrapper_args(text))
    assert (args.manager, args.supervisor_config) == ('supervisor', '/etc/gpulab/supervisord.conf')
    assert args.units == ['gpulab-rpc-server-0', 'gpulab-rpc-server-1']


def test_every_server_start_checks_the_table_as_root():
    text, unused = render('gpulab-rpc-guard.conf.j2')
    lines = [line for line in text.splitlines() if line and not line.startswith('#')]
    assert lines == ['[Service]', 'ExecStartPre=+/opt/gpulab/bin/gpulab-rpc-guard --check']


def test_the_guard_restarts_for_ever_and_runs_the_wrapper():
    text, values = render('gpulab-rpc-guard.service.j2')
    assert values['__llama_rpc_server_guard_unit'] == 'gpulab-rpc-guard.service'
    for line in ('ExecStart=/opt/gpulab/bin/gpulab-rpc-guard', 'Restart=always', 'StartLimitIntervalSec=0',
                 'After=gpulab-rpc-server-firewall.service', 'WantedBy=multi-user.target'):
        assert line in text.splitlines()


def test_the_guard_s_program_is_not_one_of_the_servers_programs():
    # service_supervisor.yml removes `gpulab-rpc-server-*.conf` programs beyond the plan
    text, values = render('gpulab-rpc-guard.supervisor.conf.j2', 'supervisor')
    assert '[program:gpulab-rpc-guard]' in text.splitlines()
    assert not values['__llama_rpc_server_guard_name'].startswith('gpulab-rpc-server-')
