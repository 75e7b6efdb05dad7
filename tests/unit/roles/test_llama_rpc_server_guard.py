# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC guard's files (role service's entry point guard: its unit, its program and the servers'
drop-in, with what roles/llama_rpc_server/tasks/main.yml passes it; the wrapper from the plan's
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
SERVICE = REPO / 'roles' / 'service'
WRAPPER = SERVICE / 'templates' / 'wrapper.sh.j2'
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
    for key in ('__llama_rpc_server_guard_name', '__llama_rpc_server_guard_code', '__llama_rpc_server_guard_interval_s', '__llama_rpc_server_guard_python'):
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


def guard_call(manager='systemd'):
    """Role service's guard templates, rendered with the vars tasks/main.yml passes its entry point guard."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(str(SERVICE / 'templates')))
    env.filters.update(FilterModule().filters())
    unused, values = render(WRAPPER, manager)
    call = next(task for task in yaml.safe_load((ROLE / 'tasks' / 'main.yml').read_text())
                if task.get('ansible.builtin.include_role', {}).get('tasks_from') == 'guard')
    values['llama_rpc_server_service_manager'] = manager
    service_defaults = yaml.safe_load((SERVICE / 'defaults' / 'main.yml').read_text())
    service_vars = yaml.safe_load((SERVICE / 'vars' / 'main.yml').read_text())
    scope = dict(service_defaults)
    scope.update({key: service_vars[key] for key in ('__service_restart_directive', '__service_program_autorestart')})
    for key, value in call['vars'].items():
        if key in ('service_guard_wrapper', 'service_guard_files'):
            continue  # the wrapper's template and the code's copy, not these templates
        if isinstance(value, str):
            value = env.from_string(value).render(**values)
            value = int(value) if value.isdigit() else value
        elif isinstance(value, list):
            value = [env.from_string(item).render(**values) for item in value]
        scope[key] = value
    scope.update(gpulab_log_dir='/var/log/gpulab', __service_program=scope['service_name'])
    return env, scope, call


def test_every_server_start_checks_the_table_as_root():
    env, scope, unused = guard_call()
    text = env.get_template('guard-check.conf.j2').render(**scope)
    lines = [line for line in text.splitlines() if line and not line.startswith('#')]
    assert lines == ['[Service]', 'ExecStartPre=+/opt/gpulab/bin/gpulab-rpc-guard --check']


def test_the_guard_restarts_for_ever_and_runs_the_wrapper():
    env, scope, unused = guard_call()
    text = env.get_template('guard.service.j2').render(**scope)
    for line in ('ExecStart=/opt/gpulab/bin/gpulab-rpc-guard', 'Restart=always', 'RestartSec=1', 'StartLimitIntervalSec=0',
                 'After=gpulab-rpc-server-firewall.service', 'WantedBy=multi-user.target'):
        assert line in text.splitlines()


def test_the_guard_s_program_is_not_one_of_the_servers_programs():
    # role service's supervisor.yml removes `gpulab-rpc-server-*.conf` programs beyond the plan
    env, scope, unused = guard_call('supervisor')
    text = env.get_template('program.conf.j2').render(**scope)
    lines = text.splitlines()
    assert '[program:gpulab-rpc-guard]' in lines
    assert 'command=/opt/gpulab/bin/gpulab-rpc-guard' in lines and 'autorestart=true' in lines
    assert 'startsecs=1' in lines and 'stdout_logfile_maxbytes=10MB' in lines
    # root: it reads the ruleset and stops the servers' programs
    assert not any(line.startswith('user=') for line in lines)
    assert not scope['service_name'].startswith('gpulab-rpc-server-')


def test_the_guard_runs_only_where_the_table_protects_the_servers():
    dummy_first, dummy_second, call = guard_call()
    assert call['when'] == ['llama_rpc_server_firewall_enabled | bool', 'service_firewall_result.protected | bool']
    assert call['vars']['service_guarded_name'] == '{{ llama_rpc_server_unit_name }}'
    assert call['vars']['service_guarded_instances'] is True
