"""systemd_units with systemctl answered from a table: one show, a reload only where a unit
changed, the verbs in order, check mode, and a unit that does not exist."""

import module_harness
from module_harness import ExitJson, FailJson

from ansible_collections.gpulab.inference.plugins.module_utils.systemd_units import SHOW_PROPERTIES
from ansible_collections.gpulab.inference.plugins.modules import systemd_units

SYSTEMCTL = '/usr/bin/systemctl'
PROPERTY = '--property=' + ','.join(SHOW_PROPERTIES)


def show(names):
    return (SYSTEMCTL, 'show', PROPERTY, '--') + tuple(names)


def block(name, active='active', file_state='enabled', load='loaded', reload_='no'):
    return 'Id=%s\nLoadState=%s\nActiveState=%s\nUnitFileState=%s\nNeedDaemonReload=%s\n' % (
        name, load, active, file_state, reload_)


class Answers(dict):
    """Answers each command once from a list of answers, in turn (a second show after a reload)."""

    def __getitem__(self, command):
        answers = dict.__getitem__(self, command)
        return answers.pop(0) if len(answers) > 1 else answers[0]


def ok(text=''):
    return (0, text, '')


def run(args, answers, check_mode=False):
    params = dict(args, _ansible_check_mode=True) if check_mode else args
    return module_harness.run_module(systemd_units.main, params, answers, {'systemctl': SYSTEMCTL})


def test_nothing_to_do_is_one_show_and_no_reload():
    names = ['gpulab-rpc-server@0.service', 'gpulab-rpc-server@1.service']
    answers = Answers({show(names): [ok(block(names[0]) + '\n' + block(names[1]))]})
    result = run({'names': names, 'enabled': True}, answers)
    assert result.kind is ExitJson, result.result
    assert (result.result['changed'], result.result['daemon_reloaded'], result.result['commands']) == (False, False, [])
    assert result.commands == [list(show(names))]


def test_a_changed_unit_reloads_systemd_once_then_starts_what_does_not_run():
    names = ['a.service', 'b.service']
    answers = Answers({
        show(names): [ok(block('a.service', reload_='yes') + '\n' + block('b.service', load='not-found', active='inactive', file_state='')),
                      ok(block('a.service') + '\n' + block('b.service', active='inactive', file_state='disabled'))],
        (SYSTEMCTL, 'daemon-reload'): [ok()],
        (SYSTEMCTL, 'enable', '--', 'b.service'): [ok()],
        (SYSTEMCTL, 'start', '--', 'b.service'): [ok()],
    })
    result = run({'names': names, 'enabled': True}, answers)
    assert result.kind is ExitJson, result.result
    assert result.result['changed'] is True and result.result['daemon_reloaded'] is True
    assert result.commands == [list(show(names)), [SYSTEMCTL, 'daemon-reload'], list(show(names)),
                               [SYSTEMCTL, 'enable', '--', 'b.service'], [SYSTEMCTL, 'start', '--', 'b.service']]


def test_a_restart_clears_the_failed_state_and_links_again_first():
    names = ['gpulab-rpc-guard.service']
    answers = Answers({
        show(names): [ok(block(names[0], active='failed'))],
        (SYSTEMCTL, 'reset-failed', '--', names[0]): [ok()],
        (SYSTEMCTL, 'reenable', '--', names[0]): [ok()],
        (SYSTEMCTL, 'restart', '--', names[0]): [ok()],
    })
    result = run({'names': names, 'state': 'restarted', 'enabled': True, 'reenable': True, 'reset_failed': True}, answers)
    assert result.commands[1:] == [[SYSTEMCTL, 'reset-failed', '--', names[0]], [SYSTEMCTL, 'reenable', '--', names[0]],
                                   [SYSTEMCTL, 'restart', '--', names[0]]]
    assert result.result['commands'] == [['reenable', names[0]], ['restart', names[0]]]


def test_check_mode_asks_and_says_what_it_would_do():
    names = ['new.service']
    answers = Answers({show(names): [ok(block('new.service', load='not-found', active='inactive', file_state=''))]})
    result = run({'names': names, 'enabled': True}, answers, check_mode=True)
    assert result.kind is ExitJson, result.result
    assert result.result['changed'] is True and result.result['daemon_reloaded'] is True
    assert result.result['commands'] == [['enable', 'new.service'], ['start', 'new.service']]
    assert result.commands == [list(show(names))]


def test_a_unit_that_does_not_exist_after_the_reload_is_named():
    names = ['gone.service']
    missing = ok(block('gone.service', load='not-found', active='inactive', file_state=''))
    answers = Answers({show(names): [missing, missing], (SYSTEMCTL, 'daemon-reload'): [ok()]})
    result = run({'names': names}, answers)
    assert result.kind is FailJson
    assert result.result['msg'] == 'systemd has no unit gone.service: write its unit file first'


def test_a_failing_start_is_reported_with_systemctl_s_words():
    names = ['a.service']
    answers = Answers({show(names): [ok(block('a.service', active='inactive'))],
                       (SYSTEMCTL, 'start', '--', 'a.service'): [(1, '', 'Job for a.service failed.')]})
    result = run({'names': names}, answers)
    assert result.kind is FailJson
    assert result.result['msg'] == '`%s start -- a.service` failed (rc 1): Job for a.service failed.' % SYSTEMCTL


def test_no_units_is_no_command():
    result = run({'names': []}, Answers())
    assert result.kind is ExitJson and result.result['changed'] is False and result.commands == []
