"""The commands that make a service's account: all of it on a new node, the differences on an old
one, none when it is right; names that useradd would misread are refused."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.service_account import (
    ServiceAccountError, account_commands)

RIGHT = {'group': 'gpulab-rpc', 'home': '/nonexistent', 'shell': '/usr/sbin/nologin'}


def commands(current=None, group_exists=True, member_of=(), device_groups=('video', 'render')):
    return account_commands('gpulab-rpc', 'gpulab-rpc', list(device_groups), '/nonexistent', '/usr/sbin/nologin',
                            group_exists, current, set(member_of))


def test_a_new_node_gets_the_group_and_the_user_in_its_device_groups():
    assert commands(group_exists=False) == [
        ['groupadd', '--system', 'gpulab-rpc'],
        ['useradd', '--system', '--gid', 'gpulab-rpc', '--shell', '/usr/sbin/nologin', '--home-dir', '/nonexistent',
         '--no-create-home', '--groups', 'video,render', 'gpulab-rpc']]


def test_a_node_without_device_groups_gets_the_user_without_groups():
    assert commands(device_groups=()) == [
        ['useradd', '--system', '--gid', 'gpulab-rpc', '--shell', '/usr/sbin/nologin', '--home-dir', '/nonexistent',
         '--no-create-home', 'gpulab-rpc']]


def test_a_right_account_needs_nothing_and_keeps_its_other_groups():
    assert commands(RIGHT, member_of=('video', 'render', 'adm')) == []


def test_an_old_account_is_changed_where_it_differs():
    assert commands(dict(RIGHT, shell='/bin/bash', group='users'), member_of=('video',)) == [
        ['usermod', '--gid', 'gpulab-rpc', '--shell', '/usr/sbin/nologin', '--append', '--groups', 'render', 'gpulab-rpc']]
    assert commands(dict(RIGHT, home='/home/gpulab-rpc'), member_of=('video', 'render')) == [
        ['usermod', '--home', '/nonexistent', 'gpulab-rpc']]


@pytest.mark.parametrize('user, group', [('-rf', 'x'), ('a:b', 'x'), ('x', 'a,b'), ('', 'x'), ('x', 'y' * 33), ('a b', 'x')])
def test_names_useradd_would_misread_are_refused(user, group):
    with pytest.raises(ServiceAccountError) as error:
        account_commands(user, group, [], '/nonexistent', '/usr/sbin/nologin', True, None, set())
    assert 'is not a valid account name' in str(error.value)
