# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A service's system account in one module run (module service_account).

The account is a system group and a system user in it, with no login shell and no home made, also
in the GPU device groups the node has. ansible.builtin.group, getent (to learn which device groups
exist) and ansible.builtin.user took three module runs per service and deploy; account_commands()
gives the shadow-utils commands that make the account what it should be, from what the node's
group and passwd databases say, and none when it already is.
"""

from __future__ import annotations

import re

# What useradd and groupadd take everywhere: no separator of the passwd and group files, no
# leading '-' (it would read as an option), at most 32 characters.
_NAME = re.compile(r'^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,30}[A-Za-z0-9_.$-]?$')


class ServiceAccountError(ValueError):
    """An account that cannot be made as asked."""


def check_names(user, group):
    for kind, name in (('service_user', user), ('service_group', group)):
        if not isinstance(name, str) or not _NAME.match(name):
            raise ServiceAccountError('%s %r is not a valid account name (letters, digits, _, . and -, not - first, '
                                      'at most 32 characters)' % (kind, name))


def account_commands(user, group, device_groups, home, shell, group_exists, current_user, member_of):
    """argv lists that make the account, in order; [] when it is already right.

    device_groups: the wanted device groups that exist on the node (service_manager.device_groups).
    group_exists: whether the primary group exists. current_user: None when the user does not exist,
    else {'group': its primary group's name, 'home', 'shell'}. member_of: the supplementary groups the
    user is in now. A user already in more groups keeps them (ansible.builtin.user's append).
    """
    check_names(user, group)
    commands = []
    if not group_exists:
        commands.append(['groupadd', '--system', group])
    if current_user is None:
        command = ['useradd', '--system', '--gid', group, '--shell', shell, '--home-dir', home, '--no-create-home']
        if device_groups:
            command += ['--groups', ','.join(device_groups)]
        commands.append(command + [user])
        return commands
    command = ['usermod']
    if current_user.get('group') != group:
        command += ['--gid', group]
    if current_user.get('shell') != shell:
        command += ['--shell', shell]
    if current_user.get('home') != home:
        command += ['--home', home]
    missing = [name for name in device_groups if name not in member_of]
    if missing:
        command += ['--append', '--groups', ','.join(missing)]
    if len(command) > 1:
        commands.append(command + [user])
    return commands
