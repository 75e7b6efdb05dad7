"""Each file plays hand each other (docs/CONTRACTS.md) has its path written once, in role common's
defaults; roles and playbooks name the common variable. A path restated elsewhere drifts the day
one side moves."""

import re
from pathlib import Path

import pytest
from common_defaults import common_defaults, common_defaults_files

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = {
    'gpulab_gpu_inventory_file': 'gpu-inventory.json',
    'gpulab_model_manifest': 'model.json',
    'gpulab_memory_plan_file': 'memory-plan.json',
    'gpulab_drain_state_file': 'drain-state.json',
    'gpulab_kept_history_file': 'kept-room.json',
    'gpulab_rpc_manifest': 'servers.json',
    'gpulab_rpc_cache_file': 'rpc-cache.json',
    'gpulab_fabric_file': 'fabric.json',
    'gpulab_rdma_env_file': 'rdma.env',
    'gpulab_vllm_plan_file': 'plan.json',
}


def sources():
    for top in ('roles', 'playbooks'):
        for path in sorted((REPO_ROOT / top).rglob('*')):
            if path.suffix in ('.yml', '.yaml', '.j2') and path.is_file():
                yield path
    yield REPO_ROOT / 'deploy.yml'


@pytest.mark.parametrize('variable, name', sorted(CONTRACTS.items()))
def test_common_defines_the_contract(variable, name):
    defaults = common_defaults()
    assert defaults[variable].endswith('/' + name)


@pytest.mark.parametrize('name', sorted(CONTRACTS.values()))
def test_path_is_written_only_in_common(name):
    # A path is the name after a slash; a bare file name in a task title or description is not.
    pattern = re.compile(r'/%s\b' % re.escape(name))
    found = []
    for path in sources():
        if path in common_defaults_files() or path == REPO_ROOT / 'roles' / 'common' / 'meta' / 'argument_specs.yml':
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append('%s:%d: %s' % (path.relative_to(REPO_ROOT), number, line.strip()))
    assert not found, 'restate the common variable instead of the path:\n' + '\n'.join(found)
