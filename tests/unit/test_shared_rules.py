"""Rules and lists every part of the collection shares are written once: the endpoint rule
(host:port, IPv6 in brackets) in module_utils, the list of the collection's own units in role
common. A copy elsewhere drifts (two copies of the endpoint rule once dropped the brackets, one
copy of the unit list forgot vLLM)."""

import re
from pathlib import Path

import common_defaults as common_defaults_module
import pytest
from common_defaults import COMMON_DEFAULTS_DIR, common_defaults, common_defaults_files

REPO_ROOT = Path(__file__).resolve().parents[2]
ENDPOINT_RULE = REPO_ROOT / 'plugins' / 'module_utils' / 'endpoint_rule.py'


def sources(suffixes=('.yml', '.yaml', '.j2', '.py', '.sh')):
    for top in ('roles', 'playbooks', 'plugins'):
        for path in sorted((REPO_ROOT / top).rglob('*')):
            if path.suffix in suffixes and path.is_file():
                yield path
    yield REPO_ROOT / 'deploy.yml'


def hits(pattern, skip=()):
    found = []
    for path in sources():
        if path in skip:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append('%s:%d: %s' % (path.relative_to(REPO_ROOT), number, line.strip()))
    return found


# host:port put together by hand: "[%s]", or "%s:%s"/"%s:%d" beside a port or an address in
# Python; "}}:{{" or ~ ':' ~ port in Jinja. Image:tag and volume strings have no port on the line.
HAND_MADE_ENDPOINT = re.compile(
    r"""["']\[%s\]|["']%s:%[sd]["'].*(port|address|host|groups\(\))|\}\}:\{\{|~\s*['"]:['"]\s*~[^\n]*port""")


def test_the_endpoint_rule_is_written_once():
    assert HAND_MADE_ENDPOINT.search('return "%s:%s" % ("[%s]" % address')
    assert HAND_MADE_ENDPOINT.search("{{ a }}:{{ b.port }}")
    assert HAND_MADE_ENDPOINT.search("(addr ~ ':' ~ vllm_server_ray_port)")
    assert not HAND_MADE_ENDPOINT.search("image ~ ':' ~ tag")
    found = hits(HAND_MADE_ENDPOINT, skip=(ENDPOINT_RULE,))
    assert not found, 'use gpulab.inference.endpoint / server_url or format_endpoint:\n' + '\n'.join(found)
    assert len(hits(re.compile(r'"\[%s\]"'))) == 1


def test_the_endpoint_rule_lives_in_its_own_module_utils_file():
    # The functions that make up the rule are defined in endpoint_rule.py only; everything else
    # imports them (vLLM's plan and the filters too), so the brackets cannot drift between copies.
    definition = re.compile(r'^def (format_endpoint|endpoint|client_url|listen_address|port_number)\(')
    assert definition.search('def client_url(host, port, scheme="http"):')
    assert not definition.search('def endpoint_list(items):')
    found = [hit for hit in hits(definition) if not hit.startswith('plugins/filter/')]
    assert found and all(hit.startswith('plugins/module_utils/endpoint_rule.py:') for hit in found), '\n'.join(found)
    assert len(found) == 5


def test_each_common_name_is_defined_in_one_file_of_its_topic(tmp_path, monkeypatch):
    # Ansible merges defaults/main/*.yml and keeps the later of two definitions without a word;
    # common_defaults() refuses one (shown on a copy with a name added twice).
    assert not (COMMON_DEFAULTS_DIR.parent / 'main.yml').exists()
    files = [path.name for path in common_defaults_files()]
    assert 'groups-and-paths.yml' in files and 'files.yml' in files and len(files) >= 8
    defaults = common_defaults()
    assert defaults['gpulab_nodes_group'] == 'gpu_nodes' and 'gpulab_drain_state_file' in defaults
    for path in common_defaults_files():
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / 'zz-late.yml').write_text('gpulab_nodes_group: other\n')
    monkeypatch.setattr(common_defaults_module, 'COMMON_DEFAULTS_DIR', tmp_path)
    with pytest.raises(ValueError, match='gpulab_nodes_group is defined in groups-and-paths.yml and in zz-late.yml'):
        common_defaults()


def test_the_own_units_are_listed_once():
    defaults = common_defaults()
    assert dict((name, entry['units']) for name, entry in defaults['gpulab_engines'].items()) == {
        'llama_cpp': ['{{ gpulab_llama_server_unit }}.service', '{{ gpulab_rpc_server_unit }}@[0-9]*.service'],
        'vllm': ['{{ gpulab_vllm_unit }}.service']}
    assert defaults['gpulab_own_unit_patterns'] == '{{ gpulab_engines | gpulab.inference.engine_units }}'
    # A list of units of its own: a list or tuple of the collection's unit names (a module's
    # default), a *_own_units variable, or a unit name turned into a pattern by hand.
    own_list = re.compile(r"""^\s*\w+_own_units\s*:|(own_units|default)\s*[=:]\s*[\[(]\s*['"]?gpulab-(llama-server|rpc-server|vllm)"""
                          r"""|gpulab_\w+_unit\s*\|\s*regex_escape|gpulab_\w+_unit\s*~\s*'\.service'\s+in""")
    assert own_list.search("memory_plan_own_units:")
    assert own_list.search("own_units=('gpulab-rpc-server', 'gpulab-llama-server')")
    assert own_list.search("default=['gpulab-llama-server.service', 'gpulab-rpc-server@*.service']")
    assert own_list.search("default: [gpulab-llama-server.service, gpulab-rpc-server@*.service]")
    assert own_list.search("select('match', (gpulab_rpc_server_unit | regex_escape) ~ '@[0-9]+[.]service$')")
    assert own_list.search("when: gpulab_vllm_unit ~ '.service' in ansible_facts.services")
    found = [hit for hit in hits(own_list, skip=tuple(common_defaults_files())) if 'gpulab_own_unit' not in hit and 'engine_units' not in hit]
    assert not found, 'name gpulab_engines[...].units / gpulab_own_unit_patterns instead:\n' + '\n'.join(found)


def test_no_role_reads_the_gpu_facts_of_an_earlier_play():
    # The preflight's facts (gpulab_gpus, gpulab_gpu_driver, gpulab_gpu_count) stay in its play; later
    # plays read gpu-inventory.json (module gpu_inventory). A task's own registered result is fine.
    fact = re.compile(r"""(?<![\w.\]])ansible_facts\.gpulab_gpu(s|_driver|_count)\b"""
                      r"""|hostvars\[[^\]]*\][.\w\[\]'"]*\bgpulab_gpu(s|_driver|_count)\b""")
    assert fact.search("{% if ansible_facts.gpulab_gpus | default([]) %}")
    assert fact.search("hostvars[node].ansible_facts.gpulab_gpus")
    assert not fact.search("__llama_cpp_build_node_gpus.results[i].ansible_facts.gpulab_gpus")
    found = [hit for hit in hits(fact) if '/gpu_preflight/' not in hit and not hit.startswith('plugins/')]
    assert not found, 'read the node\'s gpu-inventory.json with gpulab.inference.gpu_inventory:\n' + '\n'.join(found)
