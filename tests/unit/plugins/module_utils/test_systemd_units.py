"""systemctl show's answer for several units, when systemd is reloaded and which verbs follow."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.systemd_units import (
    SystemdUnitsError,
    actions,
    missing_units,
    needs_daemon_reload,
    parse_show,
)

# Captured on the container lab's node-b (systemd 252): a running guard, an instance whose unit
# file changed, an instance that is not planned and a unit that does not exist.
SHOW = """Id=gpulab-rpc-guard.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
NeedDaemonReload=no

Id=gpulab-rpc-server@0.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
NeedDaemonReload=yes

Id=gpulab-rpc-server@7.service
LoadState=loaded
ActiveState=inactive
UnitFileState=disabled
NeedDaemonReload=no

Id=nonexist.service
LoadState=not-found
ActiveState=inactive
UnitFileState=
NeedDaemonReload=no
"""
NAMES = ['gpulab-rpc-guard', 'gpulab-rpc-server@0.service', 'gpulab-rpc-server@7.service', 'nonexist.service']


def unit(name, active='active', file_state='enabled', load='loaded', reload_=False):
    return {'name': name, 'load_state': load, 'active_state': active, 'unit_file_state': file_state,
            'need_daemon_reload': reload_}


def test_parse_show_names_each_block_by_the_name_asked():
    units = parse_show(SHOW, NAMES)
    assert units[0] == unit('gpulab-rpc-guard')
    assert units[1] == unit('gpulab-rpc-server@0.service', reload_=True)
    assert units[2] == unit('gpulab-rpc-server@7.service', active='inactive', file_state='disabled')
    assert units[3] == unit('nonexist.service', active='inactive', file_state=None, load='not-found')


def test_parse_show_refuses_an_answer_that_does_not_match_the_units():
    with pytest.raises(SystemdUnitsError, match='answered 4 blocks for 2 units'):
        parse_show(SHOW, NAMES[:2])
    with pytest.raises(SystemdUnitsError, match='line 1 is not a property'):
        parse_show('Failed to connect to bus\n', NAMES[:1])


def test_a_reload_only_where_a_unit_changed_or_is_not_loaded():
    units = parse_show(SHOW, NAMES)
    assert needs_daemon_reload(units[:1]) is False
    assert needs_daemon_reload(units[:2]) is True
    assert needs_daemon_reload([units[0], units[3]]) is True
    assert missing_units(units) == ['nonexist.service']


def test_started_and_enabled_touches_only_what_differs():
    units = [unit('a'), unit('b', active='inactive', file_state='disabled'), unit('c', active='failed', file_state='static')]
    assert actions(units, 'started', True) == [('enable', ['b']), ('start', ['b', 'c'])]
    assert actions([unit('a'), unit('s', file_state='static')], 'started', True) == []
    assert actions([unit('a', active='activating')], 'started', None) == []


def test_restarted_with_reenable_links_and_restarts_every_unit():
    units = [unit('a'), unit('b', active='inactive')]
    assert actions(units, 'restarted', True, reenable=True) == [('reenable', ['a', 'b']), ('restart', ['a', 'b'])]


def test_reloaded_starts_what_does_not_run():
    assert actions([unit('fw', active='active'), unit('x', active='inactive')], 'reloaded', True) == [
        ('reload', ['fw']), ('start', ['x'])]


def test_stopped_and_disabled():
    units = [unit('a'), unit('b', active='inactive', file_state='disabled'), unit('c', file_state='enabled-runtime')]
    assert actions(units, 'stopped', False) == [('disable', ['a', 'c']), ('stop', ['a', 'c'])]


def test_an_unknown_state_is_refused():
    with pytest.raises(SystemdUnitsError, match="state 'running' is not one of"):
        actions([unit('a')], 'running', None)
