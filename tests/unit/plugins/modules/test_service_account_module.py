"""Module service_account with the group and passwd databases and its commands answered by the test:
the commands for a new node, none for a right account, none run in check mode, a failed command
named."""

import grp
import pwd
from types import SimpleNamespace
from unittest import mock

from ansible_collections.gpulab.inference.plugins.modules import service_account
from module_harness import ExitJson, FailJson, run_module

# Plain entries with the attributes the module reads: with grp.struct_group and pwd.struct_passwd built from
# tuples here, CPython 3.11 printed a SystemError at interpreter exit once a playbook test had run in the same process.
GROUPS = [SimpleNamespace(gr_name='video', gr_gid=44, gr_mem=['gpulab-llama']),
          SimpleNamespace(gr_name='gpulab-llama', gr_gid=998, gr_mem=[])]
LLAMA = SimpleNamespace(pw_name='gpulab-llama', pw_uid=998, pw_gid=998, pw_dir='/nonexistent', pw_shell='/usr/sbin/nologin')


def run(args, answers, users=()):
    known = dict((entry.pw_name, entry) for entry in users)

    def getpwnam(name):
        if name not in known:
            raise KeyError(name)
        return known[name]

    with mock.patch.object(grp, 'getgrall', return_value=GROUPS), mock.patch.object(pwd, 'getpwnam', side_effect=getpwnam):
        return run_module(service_account.main, args, answers,
                          dict((name, '/usr/sbin/' + name) for name in ('groupadd', 'useradd', 'usermod')))


def test_a_new_account_joins_the_device_groups_the_node_has():
    useradd = ('/usr/sbin/useradd', '--system', '--gid', 'gpulab-rpc', '--shell', '/usr/sbin/nologin', '--home-dir',
               '/nonexistent', '--no-create-home', '--groups', 'video', 'gpulab-rpc')
    result = run({'user': 'gpulab-rpc', 'group': 'gpulab-rpc', 'device_groups': ['video', 'render']},
                 {('/usr/sbin/groupadd', '--system', 'gpulab-rpc'): (0, '', ''), useradd: (0, '', '')})
    assert result.kind is ExitJson and result.result['changed'] is True
    assert result.result['device_groups'] == ['video']
    assert result.commands == [['/usr/sbin/groupadd', '--system', 'gpulab-rpc'], list(useradd)]


def test_a_right_account_runs_nothing():
    result = run({'user': 'gpulab-llama', 'group': 'gpulab-llama', 'device_groups': ['video', 'render']}, {}, [LLAMA])
    assert result.kind is ExitJson and result.result == {'changed': False, 'commands': [], 'device_groups': ['video']}


def test_check_mode_runs_nothing_and_says_what_it_would():
    result = run({'user': 'gpulab-rpc', 'group': 'gpulab-rpc', '_ansible_check_mode': True}, {})
    assert result.kind is ExitJson and result.result['changed'] is True and result.commands == []
    assert result.result['commands'][0] == ['groupadd', '--system', 'gpulab-rpc']


def test_a_failed_command_and_a_bad_name_are_named():
    failed = run({'user': 'gpulab-rpc', 'group': 'video'},
                 {('/usr/sbin/useradd', '--system', '--gid', 'video', '--shell', '/usr/sbin/nologin', '--home-dir',
                   '/nonexistent', '--no-create-home', 'gpulab-rpc'): (9, '', "useradd: user 'gpulab-rpc' already exists\n")})
    assert failed.kind is FailJson
    assert failed.result['msg'] == ("service_account: useradd --system --gid video --shell /usr/sbin/nologin --home-dir "
                                    "/nonexistent --no-create-home gpulab-rpc failed: useradd: user 'gpulab-rpc' already exists")
    bad = run({'user': '-o', 'group': 'gpulab-rpc'}, {})
    assert bad.kind is FailJson and "service_user '-o' is not a valid account name" in bad.result['msg']
