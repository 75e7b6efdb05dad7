"""The preload callback loads, in the process that runs it, every filter plugin of the collection and
the SSH connection plugin with its configuration, so that forked workers inherit them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.callback.preload import collection_filter_names

REPO_ROOT = Path(__file__).resolve().parents[4]
COLLECTIONS_DIR = REPO_ROOT / ".build" / "collections"

# Runs the callback in a fresh interpreter with Ansible's plugin loader set up as ansible-playbook
# sets it up, then says what that process holds.
PROBE = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
import ansible.constants as C
from ansible_collections.gpulab.inference.plugins.callback.preload import CallbackModule, collection_filter_names
before = sorted(m for m in sys.modules if '.plugins.filter.' in m and 'gpulab' in m)
CallbackModule().v2_playbook_on_start(None)
import gc, os
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, str(gc.get_freeze_count()).encode())
    os._exit(0)
os.waitpid(pid, 0)
child_frozen = int(os.read(read, 64))
print(json.dumps({
    "child_frozen": child_frozen,
    "parent_frozen": gc.get_freeze_count(),
    "before": before,
    "after": sorted(m for m in sys.modules if '.plugins.filter.' in m and 'gpulab' in m),
    "names": collection_filter_names(),
    "ssh_config": C.config.has_configuration_definition(
        'connection', 'ansible_collections.ansible.builtin.plugins.connection.ssh'),
    "sudo_config": C.config.has_configuration_definition(
        'become', 'ansible_collections.ansible.builtin.plugins.become.sudo'),
}))
"""


def test_names_every_filter_file_of_the_collection():
    files = sorted(p.stem for p in (REPO_ROOT / "plugins" / "filter").glob("*.py") if not p.name.startswith("_"))
    assert collection_filter_names() == ["gpulab.inference." + stem for stem in files]
    assert "gpulab.inference.engine" in collection_filter_names()


def test_a_missing_filter_directory_names_none(tmp_path):
    assert collection_filter_names(str(tmp_path / "absent")) == []
    (tmp_path / "a.py").write_text("")
    (tmp_path / "_private.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert collection_filter_names(str(tmp_path)) == ["gpulab.inference.a"]


@pytest.fixture(name="seen", scope="module")
def fixture_seen():
    """What the probe's process held after the callback ran, and what a fork of it froze."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_DIR), PYTHONPATH=str(COLLECTIONS_DIR))
    env.pop("ANSIBLE_CONFIG", None)
    out = subprocess.run([sys.executable, "-c", PROBE, str(COLLECTIONS_DIR)], env=env, cwd="/",
                         capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    return seen


def test_playbook_start_loads_the_filters_and_the_ssh_configuration(seen):
    assert seen["before"] == []
    stems = [name.split(".")[-1] for name in seen["names"]]
    assert seen["after"] == sorted("ansible_collections.gpulab.inference.plugins.filter." + s for s in stems)
    assert seen["ssh_config"] is True
    assert seen["sudo_config"] is True


def test_forked_workers_freeze_what_they_inherit_and_the_main_process_does_not(seen):
    # The child froze the parent's heap (tens of thousands of objects); the parent, which runs
    # the whole playbook, keeps collecting its own garbage.
    assert seen["child_frozen"] > 10000
    assert seen["parent_frozen"] == 0
