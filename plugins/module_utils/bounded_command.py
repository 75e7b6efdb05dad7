# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every external command a module runs ends within a limit (coreutils timeout), and one that
does not is reported by name with what to check, instead of holding the play for ever.

A wedged service manager (PID 1 busy, D-Bus gone, a socket nobody answers) or a container runtime
whose storage hangs make their control commands wait without end; AnsibleModule.run_command has no
limit of its own. What to check for a service manager's commands is module_utils/service_manager.py's. nvidia-smi has its own runner
(nvidia_smi_runner.py) because a hang there is answered by probing each GPU.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import CONTROL_CHECKS

# seconds a control command (a service manager's, podman, ip, ss) may take
DEFAULT_LIMIT_S = 30
# coreutils timeout sends SIGTERM, then SIGKILL this many seconds later
KILL_AFTER_S = 5
# exit statuses of coreutils timeout: 124 the command timed out; when it has to send SIGKILL it
# sends it to its own process group, itself included, so the caller sees -9 (137 through a shell)
TIMEOUT_RCS = (124, 137, -9)

# what to check when a tool does not answer, by the tool's base name
CHECKS = dict(CONTROL_CHECKS, **{
    'ip': 'the kernel\'s netlink does not answer: check the interface and its driver (dmesg)',
    'ss': 'the kernel\'s socket table does not answer: check the host\'s load and dmesg',
})
CONTAINER_CHECK = 'the container runtime does not answer: check its storage and `%s info`'


def bounded_argv(timeout_bin, limit_s, argv, kill_after_s=KILL_AFTER_S, signal=None):
    """argv run under coreutils timeout: stopped after limit_s (with SIGTERM, or signal, e.g.
    'INT' for a tool that prints what it has on SIGINT), killed kill_after_s later."""
    if isinstance(limit_s, bool) or not isinstance(limit_s, int) or limit_s < 1:
        raise ValueError('limit_s=%r must be a whole number of seconds, 1 or more' % (limit_s,))
    prefix = [timeout_bin] + (['--signal=%s' % signal] if signal else [])
    return prefix + ['--kill-after=%ds' % kill_after_s, '%ds' % limit_s] + list(argv)


def timed_out(rc):
    """Whether a command run by bounded_argv was stopped by its limit."""
    return rc in TIMEOUT_RCS


def what_to_check(argv):
    """The operator's next step when argv[0] did not answer."""
    tool = str(argv[0]).rsplit('/', 1)[-1]
    if tool in ('podman', 'docker'):
        return CONTAINER_CHECK % tool
    return CHECKS.get(tool, 'check why %s hangs on this host' % tool)


def timeout_message(argv, limit_s, check=None):
    """The error for a command stopped by its limit: the command, the limit and what to check."""
    return '`%s` did not finish within %d s and was stopped: %s' % (
        ' '.join(str(a) for a in argv), limit_s, check or what_to_check(argv))


class BoundedRunner:
    """Runs commands for a module under a limit; a command that times out ends the module in
    fail_json with timeout_message (plus partial_result(), the result so far, where given)."""

    def __init__(self, module, limit_s=None, partial_result=None):
        self.module = module
        self.limit_s = DEFAULT_LIMIT_S if limit_s is None else limit_s
        self.partial_result = partial_result
        self.timeout_bin = None

    def run(self, argv, limit_s=None, check=None, fail=True):
        """(rc, stdout, stderr) of argv, which finished within its limit. With fail=False a
        timeout is returned instead, its message as stderr (for a command whose answer only
        adds detail to a failure being reported already)."""
        limit_s = self.limit_s if limit_s is None else limit_s
        if self.timeout_bin is None:
            self.timeout_bin = self.module.get_bin_path('timeout', required=True)
        rc, stdout, stderr = self.module.run_command(bounded_argv(self.timeout_bin, limit_s, argv))
        if timed_out(rc) and not fail:
            return rc, stdout, timeout_message(argv, limit_s, check)
        if timed_out(rc):
            extra = dict(self.partial_result()) if self.partial_result else {}
            extra.update(rc=rc, cmd=list(argv), stdout=stdout, stderr=stderr)
            self.module.fail_json(msg=timeout_message(argv, limit_s, check), **extra)
        return rc, stdout, stderr
