"""`make help` lists every target the documentation names and every .PHONY target, each with a
description: a target left out of the list is one a newcomer never finds."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = [REPO_ROOT / 'README.md', *sorted((REPO_ROOT / 'docs').glob('*.md'))]


@pytest.fixture(scope='module')
def help_lines():
    make = shutil.which('make')
    assert make, 'make is not installed: apt-get install make'
    out = subprocess.run([make, '-s', '--no-print-directory', 'help'], cwd=str(REPO_ROOT),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                         check=True).stdout
    listed = {}
    for line in out.splitlines():
        name, description = (line.strip().split(None, 1) + [''])[:2]
        listed[name] = description.strip()
    return listed


def documented_targets():
    targets = set()
    for doc in DOCS:
        # `make demo`, `make facts INVENTORY=...`: the first word after make, in code spans only.
        targets.update(re.findall(r'`make ([a-zA-Z0-9][a-zA-Z0-9_-]*)[^`]*`', doc.read_text()))
    return targets


def phony_targets():
    targets = set()
    for line in (REPO_ROOT / 'Makefile').read_text().splitlines():
        if line.startswith('.PHONY:'):
            targets.update(line.split(':', 1)[1].split())
    return targets


def test_documentation_names_targets():
    # Guards the regular expression: an empty set would make the next test vacuous.
    assert {'demo', 'test', 'lint', 'gpu-e2e', 'integration-llama'} <= documented_targets()


@pytest.mark.parametrize('target', sorted(documented_targets() | phony_targets()))
def test_target_listed_with_description(help_lines, target):
    assert target in help_lines, f'make help does not list {target}'
    assert help_lines[target], f'make help lists {target} without a description'


def test_help_lists_no_unknown_target(help_lines):
    makefile = (REPO_ROOT / 'Makefile').read_text()
    for name in help_lines:
        assert re.search(rf'^{re.escape(name)}:', makefile, re.M), f'{name} is not a target'
