# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC table (roles/llama_rpc_server/templates/gpulab-rpc.nft.j2): where the head is elsewhere,
loopback reaches the RPC ports only for root's connections (the guard's watch and its HELLO
probe), marked in chain output; where the head is local, loopback is admitted as before. The
guard still finds the table protecting the ports."""

from pathlib import Path

import jinja2
import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.rpc_guard import table_protects

TEMPLATES = Path(__file__).resolve().parents[3] / 'roles' / 'llama_rpc_server' / 'templates'


def render(admit_loopback):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(str(TEMPLATES)))
    return env.get_template('gpulab-rpc.nft.j2').render(
        __llama_rpc_server_plan={'servers': [{'port': 50052}, {'port': 50053}],
                                 'firewall': {'ssh_ports': [22], 'admit_loopback': admit_loopback,
                                              'ipv4': ['10.231.78.10'], 'ipv6': []}},
        inventory_hostname='node-b', llama_rpc_server_nftables_conf='/etc/nftables.conf',
        llama_rpc_server_nft_table='gpulab_rpc')


def test_a_worker_admits_only_root_s_loopback_connections():
    text = render(False)
    assert '\t\tiif "lo" meta mark 0x67706c62 tcp dport { 50052, 50053 } accept\n' in text
    assert '\t\toif "lo" meta skuid 0 tcp dport { 50052, 50053 } meta mark set 0x67706c62\n' in text
    assert 'iif "lo" accept' not in text
    assert table_protects(text, [50052, 50053]) == (True, '')


@pytest.mark.parametrize('admit_loopback', [True, False])
def test_the_drop_rule_comes_after_every_accept(admit_loopback):
    lines = [line.strip() for line in render(admit_loopback).splitlines()]
    drop = lines.index('tcp dport { 50052, 50053 } counter drop')
    accepts = [i for i, line in enumerate(lines) if line.endswith(' accept')]
    assert accepts and max(accepts) < drop
    assert ('iif "lo" accept' in lines) is admit_loopback
    assert any('chain output' in line for line in lines) is not admit_loopback
