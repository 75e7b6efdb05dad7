"""The include line of a table's rule file and nft's command that lists the table."""

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.nftables import (
    NftablesError,
    include_line,
    list_table_argv,
    with_include,
)

DEBIAN_CONF = '#!/usr/sbin/nft -f\n\nflush ruleset\n\ntable inet filter {\n}\n'
LINE = 'include "/etc/nftables.d/gpulab-rpc.nft"'


def test_the_include_is_appended_once():
    added = with_include(DEBIAN_CONF, LINE)
    assert added == DEBIAN_CONF + LINE + '\n'
    assert with_include(added, LINE) is None
    assert with_include('  %s  \n# after\n' % LINE, LINE) is None


def test_a_file_without_a_last_newline_and_an_empty_file():
    assert with_include('flush ruleset', LINE) == 'flush ruleset\n' + LINE + '\n'
    assert with_include('', LINE) == LINE + '\n'


def test_a_commented_include_is_not_the_include():
    assert with_include('# ' + LINE + '\n', LINE) == '# ' + LINE + '\n' + LINE + '\n'


def test_include_line_of_a_plain_path():
    assert include_line('/etc/nftables.d/gpulab-rpc.nft') == LINE


@pytest.mark.parametrize('path', ['relative.nft', '/etc/a"b.nft', '/etc/a\nflush ruleset', '/etc/a\\b'])
def test_include_line_refuses_what_would_break_the_statement(path):
    with pytest.raises(NftablesError, match='must be an absolute path without quotes'):
        include_line(path)


def test_list_table_argv_checks_family_and_name():
    assert list_table_argv('/usr/sbin/nft', 'inet', 'gpulab_rpc') == ['/usr/sbin/nft', 'list', 'table', 'inet', 'gpulab_rpc']
    with pytest.raises(NftablesError, match="family 'inet6' is not one of"):
        list_table_argv('/usr/sbin/nft', 'inet6', 'gpulab_rpc')
    with pytest.raises(NftablesError, match="table 'x; flush ruleset' is not an nftables table name"):
        list_table_argv('/usr/sbin/nft', 'inet', 'x; flush ruleset')
