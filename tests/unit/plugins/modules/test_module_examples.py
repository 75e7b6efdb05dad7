"""Every module's EXAMPLES block is YAML, and each task's options pass that module's argument spec.

The spec is taken from the module itself: AnsibleModule is stopped in its constructor, which gets
the argument_spec and the rules between options (required_if, mutually_exclusive, ...). Values
that are Jinja templates are replaced by a value of the option's type (the first choice where it
has choices), so what is checked is the names, the types of literal values, the choices and the
rules between options, as ansible-core checks them when the task runs.
"""

import importlib
from pathlib import Path
from unittest import mock

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[4]
MODULES = sorted(path.stem for path in (REPO / 'plugins' / 'modules').glob('*.py') if path.stem != '__init__')
PREFIX = 'gpulab.inference.'
RULES = ('mutually_exclusive', 'required_together', 'required_one_of', 'required_if', 'required_by')
# Keywords of a task, not options of its module.
TASK_KEYWORDS = {'name', 'register', 'when', 'async', 'poll', 'loop', 'loop_control', 'become', 'become_user',
                 'delegate_to', 'run_once', 'changed_when', 'failed_when', 'check_mode', 'no_log', 'tags',
                 'vars', 'environment', 'until', 'retries', 'delay', 'ignore_errors', 'notify', 'args'}
PLACEHOLDERS = {'str': 'x', 'path': '/x', 'raw': 'x', 'int': 1, 'float': 1.0, 'bool': True, 'list': [], 'dict': {},
                'bytes': '1', 'bits': '1', 'jsonarg': '{}', 'json': '{}'}


class Captured(Exception):
    pass


def module_spec(name):
    """{argument_spec, mutually_exclusive, ...} as the module hands them to AnsibleModule."""
    module = importlib.import_module('ansible_collections.gpulab.inference.plugins.modules.' + name)

    def capture(self, argument_spec, **kwargs):
        raise Captured(dict(kwargs, argument_spec=argument_spec))

    with patch_module_args({}), mock.patch.object(basic.AnsibleModule, '__init__', capture):
        with pytest.raises(Captured) as raised:
            module.main()
    return module, raised.value.args[0]


def templated(value):
    if isinstance(value, str):
        return '{{' in value or '{%' in value
    if isinstance(value, list):
        return any(templated(item) for item in value)
    if isinstance(value, dict):
        return any(templated(item) for item in value.values())
    return False


def concrete(options, spec):
    """options with each templated value replaced by a value of the option's type."""
    names = {}
    for option, details in spec.items():
        names[option] = details
        for alias in details.get('aliases') or []:
            names[alias] = details
    result = {}
    for key, value in options.items():
        details = names.get(key)
        if details is not None and templated(value):
            if details.get('choices'):
                value = details['choices'][0]
            else:
                value = PLACEHOLDERS[details.get('type') or 'str']
        result[key] = value
    return result


def example_tasks(name, module):
    """(task name, module called, options) of every EXAMPLES task that calls a module of this collection."""
    tasks = yaml.safe_load(module.EXAMPLES)
    assert isinstance(tasks, list) and tasks, '%s: EXAMPLES is not a list of tasks' % name
    found = []
    for task in tasks:
        assert isinstance(task, dict), '%s: an EXAMPLES entry is not a task: %r' % (name, task)
        keys = [key for key in task if key not in TASK_KEYWORDS]
        assert len(keys) == 1, '%s: task %r names %s: one module per task' % (name, task.get('name'), keys)
        if keys[0].startswith(PREFIX):
            found.append((task.get('name'), keys[0][len(PREFIX):], task[keys[0]] or {}))
    assert any(called == name for _task, called, _options in found), '%s: no EXAMPLES task calls it' % name
    return found


SPECS = {}


@pytest.mark.parametrize('name', MODULES)
def test_every_example_task_passes_the_argument_spec(name):
    module = importlib.import_module('ansible_collections.gpulab.inference.plugins.modules.' + name)
    for task_name, called, options in example_tasks(name, module):
        assert called in MODULES, '%s: example %r calls %s%s, which does not exist' % (name, task_name, PREFIX, called)
        if called not in SPECS:
            SPECS[called] = module_spec(called)[1]
        captured = SPECS[called]
        spec = dict(captured['argument_spec'])
        if captured.get('add_file_common_args'):
            spec.update(basic.FILE_COMMON_ARGUMENTS)
        rules = dict((rule, captured[rule]) for rule in RULES if captured.get(rule))
        assert isinstance(options, dict), '%s: example %r gives its options as %r' % (name, task_name, options)
        result = ArgumentSpecValidator(spec, **rules).validate(concrete(options, spec))
        assert result.error_messages == [], '%s: example %r: %s' % (name, task_name, '; '.join(result.error_messages))


def test_the_examples_of_every_module_are_checked():
    assert len(MODULES) >= 24


def test_the_check_sees_an_example_that_omits_a_required_option():
    spec = {'address': {'type': 'str', 'required': True}, 'firewall_enabled': {'type': 'bool', 'default': True},
            'allowed_sources': {'type': 'list', 'elements': 'str'}}
    rules = {'required_if': [('firewall_enabled', True, ('allowed_sources',))]}
    result = ArgumentSpecValidator(spec, **rules).validate(concrete({'address': '{{ a }}'}, spec))
    assert result.error_messages == ['firewall_enabled is True but all of the following are missing: allowed_sources']
