"""Every module, module_utils file, filter, callback and lookup plugin has its unit test file, and no two test
files share a basename.

The layout mirrors the tree: plugins/<kind>/<name>.py is tested by
tests/unit/plugins/<kind>/test_<name>.py. A module may use test_<name>_module.py instead: pytest
imports test files by basename (the test directories are not packages), so a module whose
module_utils file has the same name (synthetic_hf, vllm_plan, ...) cannot also use
test_<name>.py. An action plugin runs on the controller inside a play, so its test is a playbook
test: tests/playbooks/test_<name>_action.py.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# plugin directory -> the test directory that mirrors it, and the accepted test file names
KINDS = {
    'modules': ('test_{}.py', 'test_{}_module.py'),
    'module_utils': ('test_{}.py',),
    'filter': ('test_{}.py',),
    'callback': ('test_{}.py',),
    'lookup': ('test_{}.py',),
    'action': ('test_{}_action.py',),
}
# Kinds whose tests are not under tests/unit/plugins/<kind>.
TEST_DIRS = {'action': ('tests', 'playbooks')}

# Directories whose test files pytest collects in one run (make unit, make test).
COLLECTED_TOGETHER = ('tests/unit', 'tests/playbooks', 'tests/integration_llama')


def plugin_names(root, kind):
    directory = root / 'plugins' / kind
    if not directory.is_dir():
        return []
    return sorted(path.stem for path in directory.glob('*.py') if path.name != '__init__.py')


def missing_test_files(root):
    """['plugins/<kind>/<name>.py: no tests/unit/plugins/<kind>/test_<name>.py', ...] for every
    plugin without its test file; [] when all have one."""
    missing = []
    for kind, patterns in KINDS.items():
        test_dir = root.joinpath(*TEST_DIRS.get(kind, ('tests', 'unit', 'plugins', kind)))
        for name in plugin_names(root, kind):
            candidates = [pattern.format(name) for pattern in patterns]
            if not any((test_dir / candidate).is_file() for candidate in candidates):
                missing.append('plugins/%s/%s.py: no %s/%s' % (
                    kind, name, test_dir.relative_to(root), ' or '.join(candidates)))
    return missing


def shared_basenames(root, directories=COLLECTED_TOGETHER):
    """{basename: [paths]} for test files that share a basename (pytest refuses to collect the
    second one); {} when all differ."""
    seen = {}
    for directory in directories:
        base = root / directory
        if not base.is_dir():
            continue
        for path in sorted(base.rglob('test_*.py')):
            if '__pycache__' not in path.parts:
                seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    return dict((name, paths) for name, paths in sorted(seen.items()) if len(paths) > 1)


def _touch(root, relative):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('')


# --- the checks on this tree -----------------------------------------------------------------

def test_every_plugin_has_its_test_file():
    missing = missing_test_files(REPO_ROOT)
    assert missing == [], '%d plugin file(s) without a unit test file:\n  %s' % (len(missing), '\n  '.join(missing))


def test_no_two_test_files_share_a_basename():
    shared = shared_basenames(REPO_ROOT)
    assert shared == {}, 'test files sharing a basename (pytest collects only one; rename the module test to '\
        'test_<name>_module.py):\n  %s' % '\n  '.join('%s: %s' % (name, ', '.join(paths)) for name, paths in shared.items())


def test_this_tree_has_plugins_to_check():
    # the checks above pass vacuously if the paths are wrong
    assert 'gpu_facts' in plugin_names(REPO_ROOT, 'modules')
    assert 'nvidia_smi' in plugin_names(REPO_ROOT, 'module_utils')
    assert 'inventory_problems' in plugin_names(REPO_ROOT, 'filter')


# --- the checks themselves, on made-up trees -------------------------------------------------

def test_lists_each_missing_test_file_by_name(tmp_path):
    for relative in ('plugins/modules/alpha.py', 'plugins/modules/beta.py', 'plugins/modules/__init__.py',
                     'plugins/module_utils/alpha.py', 'plugins/filter/gamma.py',
                     'tests/unit/plugins/modules/test_beta.py'):
        _touch(tmp_path, relative)
    assert missing_test_files(tmp_path) == [
        'plugins/modules/alpha.py: no tests/unit/plugins/modules/test_alpha.py or test_alpha_module.py',
        'plugins/module_utils/alpha.py: no tests/unit/plugins/module_utils/test_alpha.py',
        'plugins/filter/gamma.py: no tests/unit/plugins/filter/test_gamma.py',
    ]


def test_module_suffix_counts_for_modules_only(tmp_path):
    for relative in ('plugins/modules/alpha.py', 'plugins/module_utils/alpha.py',
                     'tests/unit/plugins/modules/test_alpha_module.py',
                     'tests/unit/plugins/module_utils/test_alpha_module.py'):
        _touch(tmp_path, relative)
    assert missing_test_files(tmp_path) == [
        'plugins/module_utils/alpha.py: no tests/unit/plugins/module_utils/test_alpha.py']
    _touch(tmp_path, 'tests/unit/plugins/module_utils/test_alpha.py')
    assert missing_test_files(tmp_path) == []


def test_an_action_plugin_is_tested_by_a_playbook_test(tmp_path):
    _touch(tmp_path, 'plugins/action/alpha.py')
    _touch(tmp_path, 'tests/unit/plugins/action/test_alpha.py')
    assert missing_test_files(tmp_path) == ['plugins/action/alpha.py: no tests/playbooks/test_alpha_action.py']
    _touch(tmp_path, 'tests/playbooks/test_alpha_action.py')
    assert missing_test_files(tmp_path) == []


def test_a_test_in_the_wrong_directory_does_not_count(tmp_path):
    _touch(tmp_path, 'plugins/module_utils/alpha.py')
    _touch(tmp_path, 'tests/unit/plugins/modules/test_alpha.py')
    assert missing_test_files(tmp_path) == [
        'plugins/module_utils/alpha.py: no tests/unit/plugins/module_utils/test_alpha.py']


def test_shared_basenames_are_found(tmp_path):
    for relative in ('tests/unit/plugins/modules/test_alpha.py', 'tests/unit/plugins/module_utils/test_alpha.py',
                     'tests/unit/plugins/modules/test_alpha_module.py', 'tests/playbooks/test_beta.py',
                     'tests/unit/test_beta.py', 'tests/unit/plugins/modules/module_harness.py'):
        _touch(tmp_path, relative)
    assert shared_basenames(tmp_path) == {
        'test_alpha.py': ['tests/unit/plugins/module_utils/test_alpha.py', 'tests/unit/plugins/modules/test_alpha.py'],
        'test_beta.py': ['tests/unit/test_beta.py', 'tests/playbooks/test_beta.py'],
    }
