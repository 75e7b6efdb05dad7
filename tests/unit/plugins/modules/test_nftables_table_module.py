"""nftables_table with nft answered from a table: the include added once and checked first, the
table's state, check mode, and a node without nft."""

import module_harness
from module_harness import ExitJson, FailJson

from ansible_collections.gpulab.inference.plugins.modules import nftables_table

NFT = '/usr/sbin/nft'
LIST = (NFT, 'list', 'table', 'inet', 'gpulab_rpc')
LINE = 'include "/etc/nftables.d/gpulab-rpc.nft"'
CONF = '#!/usr/sbin/nft -f\nflush ruleset\n'


class CheckAnswers(dict):
    """Answers `nft --check -f <temporary file>` with check_rc, whatever the file's name."""

    def __init__(self, listed_rc, check_rc=0):
        super().__init__({LIST: (listed_rc, 'table inet gpulab_rpc {\n}\n' if listed_rc == 0 else '',
                                 '' if listed_rc == 0 else 'Error: No such file or directory')})
        self.check_rc = check_rc
        self.checked = []

    def __getitem__(self, command):
        if command[:3] == (NFT, '--check', '-f'):
            with open(command[3]) as stream:
                self.checked.append(stream.read())
            return (self.check_rc, '', '' if self.check_rc == 0 else 'Error: syntax error')
        return dict.__getitem__(self, command)


def run(args, answers, nft=NFT, check_mode=False):
    params = dict({'table': 'gpulab_rpc', 'rules_file': '/etc/nftables.d/gpulab-rpc.nft'}, **args)
    if check_mode:
        params['_ansible_check_mode'] = True
    return module_harness.run_module(nftables_table.main, params, answers, {'nft': nft} if nft else {})


def test_the_include_is_added_after_nft_checked_it_and_the_table_is_reported(tmp_path):
    conf = tmp_path / 'nftables.conf'
    conf.write_text(CONF)
    conf.chmod(0o750)
    answers = CheckAnswers(listed_rc=0)
    result = run({'include_in': str(conf)}, answers)
    assert result.kind is ExitJson, result.result
    assert (result.result['changed'], result.result['included'], result.result['loaded']) == (True, True, True)
    assert answers.checked == [CONF + LINE + '\n']
    assert conf.read_text() == CONF + LINE + '\n'
    assert conf.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ['nftables.conf']
    again = run({'include_in': str(conf)}, CheckAnswers(listed_rc=1))
    assert (again.result['changed'], again.result['included'], again.result['loaded']) == (False, True, False)
    assert again.commands == [list(LIST)]


def test_a_conf_nft_refuses_is_left_as_it_was(tmp_path):
    conf = tmp_path / 'nftables.conf'
    conf.write_text(CONF)
    result = run({'include_in': str(conf)}, CheckAnswers(listed_rc=0, check_rc=1))
    assert result.kind is FailJson
    assert result.result['msg'] == ('%s with %s added does not pass `nft --check -f` (rc 1): Error: syntax error; '
                                    'fix that file' % (conf, LINE))
    assert conf.read_text() == CONF
    assert sorted(p.name for p in tmp_path.iterdir()) == ['nftables.conf']


def test_check_mode_says_it_would_add_the_include_and_writes_nothing(tmp_path):
    conf = tmp_path / 'nftables.conf'
    conf.write_text(CONF)
    answers = CheckAnswers(listed_rc=1)
    result = run({'include_in': str(conf)}, answers, check_mode=True)
    assert (result.result['changed'], result.result['included'], result.result['loaded']) == (True, True, False)
    assert answers.checked == []
    assert conf.read_text() == CONF


def test_without_the_service_s_rule_file_nothing_is_included(tmp_path):
    result = run({'include_in': str(tmp_path / 'absent.conf')}, CheckAnswers(listed_rc=0))
    assert (result.result['changed'], result.result['included'], result.result['loaded']) == (False, False, True)
    plain = run({}, CheckAnswers(listed_rc=0))
    assert (plain.result['changed'], plain.result['included']) == (False, False)
    assert plain.commands == [list(LIST)]


def test_a_node_without_nft_asks_nothing():
    result = run({'include_in': '/etc/nftables.conf'}, {}, nft=None)
    assert result.kind is ExitJson
    assert result.result == {'changed': False, 'nft': None, 'loaded': False, 'included': False}
    assert result.commands == []


def test_a_bad_table_name_is_refused_before_any_command():
    result = run({'table': 'x; flush ruleset'}, {})
    assert result.kind is FailJson
    assert "table 'x; flush ruleset' is not an nftables table name" in result.result['msg']
    assert result.commands == []
