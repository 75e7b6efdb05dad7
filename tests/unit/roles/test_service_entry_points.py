# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role service's entry points that a serving role calls without naming a manager: install, firewall
and guard each run the task list of the manager they are given, and install's options are those of
the per-manager entry points it runs, so a value a serving role passes reaches either manager."""

from pathlib import Path

import yaml

SERVICE = Path(__file__).resolve().parents[3] / 'roles' / 'service'
SPECS = yaml.safe_load((SERVICE / 'meta' / 'argument_specs.yml').read_text())['argument_specs']
MANAGERS = ('systemd', 'supervisor')


def test_install_firewall_and_guard_run_the_task_list_of_the_manager_given():
    for entry, prefix in (('install', ''), ('firewall', 'firewall_'), ('guard', 'guard_')):
        tasks = yaml.safe_load((SERVICE / 'tasks' / (entry + '.yml')).read_text())
        included = [task['ansible.builtin.include_tasks'] for task in tasks if 'ansible.builtin.include_tasks' in task]
        assert included == ['{{ service_manager }}.yml' if not prefix else prefix + '{{ service_manager }}.yml']
        assert SPECS[entry]['options']['service_manager']['choices'] == list(MANAGERS)
        for manager in MANAGERS:
            assert (SERVICE / 'tasks' / (prefix + manager + '.yml')).is_file()


def test_install_takes_every_option_of_both_managers_with_the_same_meaning():
    install = SPECS['install']['options']
    for manager in MANAGERS:
        for name, spec in SPECS[manager]['options'].items():
            assert name in install, (manager, name)
            for key in ('type', 'elements', 'choices', 'default'):
                assert install[name].get(key) == spec.get(key), (manager, name, key)


def test_the_restart_policy_has_words_for_each_manager():
    variables = yaml.safe_load((SERVICE / 'vars' / 'main.yml').read_text())
    policies = SPECS['supervisor']['options']['service_restart_policy']['choices']
    assert sorted(variables['__service_restart_directive']) == sorted(policies)
    assert sorted(variables['__service_program_autorestart']) == sorted(policies)
    assert variables['__service_program_autorestart']['on-failure'] == {'autorestart': 'unexpected', 'exitcodes': '0'}
