# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC firewall unit (role service's firewall.service.j2, with what roles/llama_rpc_server/tasks/main.yml
passes its entry point firewall) and the server unit, rendered with the plan's directives: a stop or
restart of nftables.service (both flush the ruleset, the RPC table with it) stops the firewall unit
and so every server that requires it, and a start of nftables.service starts them again. molecule
proves the same on a live systemd; these tests guard the rendering."""

from pathlib import Path

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule

from ansible_collections.gpulab.inference.plugins.module_utils.rpc_worker import rpc_server_unit

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / 'roles' / 'llama_rpc_server'
TEMPLATES = ROLE / 'templates'
# The servers' unit: role service's one unit template, rendering the plan's unit_file.
UNIT_TEMPLATES = REPO / 'roles' / 'service' / 'templates'
FIREWALL_UNIT = 'gpulab-rpc-server-firewall.service'


def render(name, firewall_enabled=True):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader([str(TEMPLATES), str(UNIT_TEMPLATES)]))
    env.filters.update(FilterModule().filters())
    servers = [{'instance': 0, 'gpu_index': None, 'port': 50052}]
    firewall = {'ip_address_allow': ['10.231.77.10']}
    settings = {'user': 'gpulab-rpc', 'group': 'gpulab-rpc', 'unit': 'gpulab-rpc-server', 'bin_dir': '/opt/gpulab/bin',
                'cache_dir': '', 'firewall_unit': FIREWALL_UNIT if firewall_enabled else '',
                'hardening': {'NoNewPrivileges': 'yes', 'PrivateTmp': None}, 'cuda_devices': []}
    plan = {
        'unit_file': rpc_server_unit(settings, servers, firewall, [['StartLimitIntervalSec', '0']],
                                     [['Restart', 'always'], ['RestartSec', '5']]),
        'servers': servers,
    }
    values = {
        '__llama_rpc_server_plan': plan,
        'llama_rpc_server_nft_file': '/etc/nftables.d/gpulab-rpc.nft',
        'llama_rpc_server_nft_table': 'gpulab_rpc',
        '__llama_rpc_server_firewall_unit': FIREWALL_UNIT,
        'llama_rpc_server_service_manager': 'systemd',
        'service_unit_file': plan['unit_file'],
    }
    # What tasks/main.yml passes role service's entry point firewall.
    call = next(task for task in yaml.safe_load((ROLE / 'tasks' / 'main.yml').read_text())
                if task.get('ansible.builtin.include_role', {}).get('tasks_from') == 'firewall')
    for key, value in call['vars'].items():
        if key != 'service_firewall_include_in':
            values[key] = env.from_string(value).render(**values)
    return env.get_template(name).render(**values)


def sections(text):
    """{section: [(key, value)]} of a unit file, comments and blank lines left out."""
    found = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        if line.startswith('['):
            current = line.strip('[]')
            found[current] = []
            continue
        key, sep, value = line.partition('=')
        assert sep, 'not a key=value line: %r' % line
        found[current].append((key, value))
    return found


def test_a_stop_or_restart_of_nftables_stops_the_firewall_unit_first():
    # nftables.service flushes the ruleset on stop and on restart: PartOf= passes both on, and
    # After= orders this unit's stop (and the servers', which are After= it) before the flush.
    unit = sections(render('firewall.service.j2'))
    assert ('PartOf', 'nftables.service') in unit['Unit']
    assert ('After', 'nftables.service') in unit['Unit']


def test_a_start_of_nftables_starts_the_firewall_unit_again():
    unit = sections(render('firewall.service.j2'))
    assert ('WantedBy', 'sysinit.target nftables.service') in unit['Install']


def test_every_server_requires_the_firewall_unit_and_comes_back_with_it():
    unit = sections(render('unit.service.j2'))
    assert ('Requires', FIREWALL_UNIT) in unit['Unit']
    assert ('After', FIREWALL_UNIT) in unit['Unit']
    assert ('WantedBy', 'multi-user.target ' + FIREWALL_UNIT) in unit['Install']
    assert ('IPAddressDeny', 'any') in unit['Service']
    assert ('IPAddressAllow', '10.231.77.10') in unit['Service']
    assert ('NoNewPrivileges', 'yes') in unit['Service'] and 'PrivateTmp' not in dict(unit['Service'])


def test_without_the_firewall_the_server_unit_names_no_firewall_unit():
    text = render('unit.service.j2', firewall_enabled=False)
    assert FIREWALL_UNIT not in text
    assert ('WantedBy', 'multi-user.target') in sections(text)['Install']
    assert 'IPAddress' not in text


def test_the_firewall_unit_loads_the_rpc_rule_file_and_names_its_table():
    text = render('firewall.service.j2')
    unit = sections(text)
    assert ('ExecStart', '/usr/sbin/nft -f /etc/nftables.d/gpulab-rpc.nft') in unit['Service']
    assert ('ExecReload', '/usr/sbin/nft -f /etc/nftables.d/gpulab-rpc.nft') in unit['Service']
    assert ('Description', 'nftables table for the ggml RPC servers (gpulab.inference)') in unit['Unit']
    assert 'table inet gpulab_rpc' in text
