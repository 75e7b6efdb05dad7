"""bounded_command: the timeout prefix, the message, and a runner that ends a real hanging
command within its limit (coreutils timeout, a limit of 1 s)."""

import shutil
import subprocess
import time

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import (
    BoundedRunner,
    bounded_argv,
    timed_out,
    timeout_message,
    what_to_check,
)


class Failed(Exception):
    pass


class Module:
    """What BoundedRunner uses of AnsibleModule, with commands really run."""

    def get_bin_path(self, name, required=False):
        return shutil.which(name)

    def run_command(self, argv):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    def fail_json(self, **kwargs):
        raise Failed(kwargs)


def program(tmp_path, body):
    path = tmp_path / 'systemctl'
    path.write_text('#!/bin/sh\n' + body)
    path.chmod(0o755)
    return str(path)


def test_bounded_argv_puts_the_limit_before_the_command():
    assert bounded_argv('/usr/bin/timeout', 30, ['/usr/bin/systemctl', 'show', 'x']) == [
        '/usr/bin/timeout', '--kill-after=5s', '30s', '/usr/bin/systemctl', 'show', 'x']


def test_bounded_argv_sends_the_signal_asked_for():
    assert bounded_argv('/usr/bin/timeout', 2, ['nvidia-smi', '-lms', '200'], signal='INT') == [
        '/usr/bin/timeout', '--signal=INT', '--kill-after=5s', '2s', 'nvidia-smi', '-lms', '200']


def test_a_command_stopped_with_sigint_prints_what_it_has(tmp_path):
    loop = program(tmp_path, "trap 'echo stopped; exit 0' INT\necho first\nwhile :; do sleep 0.1; done\n")
    done = subprocess.run(bounded_argv(shutil.which('timeout'), 1, [loop], signal='INT'),
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (124, 'first\nstopped\n')


@pytest.mark.parametrize('limit_s', [0, -1, True, 1.5, '30', None])
def test_a_limit_that_is_not_whole_seconds_is_refused(limit_s):
    with pytest.raises(ValueError, match='limit_s=.* must be a whole number of seconds'):
        bounded_argv('/usr/bin/timeout', limit_s, ['true'])


@pytest.mark.parametrize('rc, expected', [(124, True), (137, True), (-9, True), (0, False), (1, False), (3, False), (-15, False)])
def test_timed_out_only_for_the_exit_statuses_of_timeout(rc, expected):
    assert timed_out(rc) is expected


@pytest.mark.parametrize('tool, words', [
    ('/usr/bin/systemctl', 'systemctl is-system-running'),
    ('/bin/journalctl', 'systemd-journald'),
    ('/usr/bin/supervisorctl', 'supervisord'),
    ('/usr/bin/podman', '`podman info`'),
    ('/usr/bin/docker', '`docker info`'),
    ('/sbin/ip', 'netlink'),
    ('/usr/bin/ss', 'socket table'),
    ('/opt/x/unknown-tool', 'check why unknown-tool hangs'),
])
def test_what_to_check_names_the_next_step_per_tool(tool, words):
    assert words in what_to_check([tool, 'arg'])


def test_timeout_message_names_the_command_the_limit_and_the_check():
    assert timeout_message(['/usr/bin/systemctl', 'stop', 'a.service'], 300, 'look at a') == (
        '`/usr/bin/systemctl stop a.service` did not finish within 300 s and was stopped: look at a')


def test_a_hanging_command_fails_within_its_limit_naming_it(tmp_path):
    hang = program(tmp_path, 'exec sleep 60\n')
    started = time.monotonic()
    with pytest.raises(Failed) as failed:
        BoundedRunner(Module(), limit_s=1, partial_result=lambda: {'stopped': ['a']}).run([hang, 'show', 'x'])
    assert time.monotonic() - started < 5
    result = failed.value.args[0]
    assert result['msg'] == ('`%s show x` did not finish within 1 s and was stopped: systemd does not answer: '
                             'check `systemctl is-system-running` and the journal of PID 1 on this host' % hang)
    assert (result['rc'], result['cmd'], result['stopped']) == (124, [hang, 'show', 'x'], ['a'])


def test_a_command_that_ignores_sigterm_is_killed(tmp_path):
    stubborn = program(tmp_path, "trap '' TERM\nsleep 60 & wait\nsleep 60\n")
    started = time.monotonic()
    done = subprocess.run(bounded_argv(shutil.which('timeout'), 1, [stubborn], kill_after_s=1), check=False)
    assert time.monotonic() - started < 5
    assert timed_out(done.returncode)


def test_a_hang_can_be_returned_instead_of_failing(tmp_path):
    hang = program(tmp_path, 'exec sleep 60\n')
    rc, out, err = BoundedRunner(Module(), limit_s=1).run([hang], fail=False)
    assert (rc, out) == (124, '')
    assert err.startswith('`%s` did not finish within 1 s' % hang)


def test_an_answer_within_the_limit_is_returned_as_it_is(tmp_path):
    answers = program(tmp_path, 'echo active; echo oops >&2; exit 3\n')
    assert BoundedRunner(Module(), limit_s=5).run([answers]) == (3, 'active\n', 'oops\n')
