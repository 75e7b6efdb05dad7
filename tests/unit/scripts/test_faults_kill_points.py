"""scripts/faults.py's controller-kill points: each names words that stand in the banner of exactly one
play of deploy.yml (its imports followed), so the kill waits for that play and no later one of a like
name (fault_matrix.task_in_play looks in the last play whose banner holds the words)."""

import importlib.util
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location('faults', REPO / 'scripts' / 'faults.py')
faults = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(faults)


def play_names(path):
    names = []
    for play in yaml.safe_load(path.read_text()):
        imported = play.get('ansible.builtin.import_playbook', play.get('import_playbook'))
        if imported:
            names += play_names(path.parent / imported)
        else:
            names.append(play['name'])
    return names


@pytest.mark.parametrize('phase', sorted(faults.PLAY_KILL_POINTS))
def test_each_kill_point_names_one_play_of_deploy_yml(phase):
    words = faults.PLAY_KILL_POINTS[phase][0]
    matching = [name for name in play_names(REPO / 'deploy.yml') if words in name]
    assert len(matching) == 1, (phase, matching)
