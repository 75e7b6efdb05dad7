# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A table of the collection in the nftables service's rule file.

nftables.service flushes the whole ruleset on restart and reload, then loads its rule file
(/etc/nftables.conf): an `include` of the table's own file there brings the table back in the
same transaction. The module `nftables_table` adds that line and asks nft whether the table is
loaded; the rules are these pure functions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# What nft accepts unquoted as a table name, and what the collection names its tables.
TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
FAMILIES = ("inet", "ip", "ip6", "arp", "bridge", "netdev")


class NftablesError(ValueError):
    """A value that cannot reach nft or its rule file; the message names it."""


def include_line(rules_file):
    """The include statement of rules_file, as the nftables service's rule file takes it."""
    if not rules_file.startswith("/") or any(c in rules_file for c in '"\n\r\\'):
        raise NftablesError("the rule file %r must be an absolute path without quotes, backslashes or line breaks"
                            % rules_file)
    return 'include "%s"' % rules_file


def with_include(text, line):
    """text with line appended at its end, or None when a line of text is already that line
    (spaces around it aside)."""
    if any(existing.strip() == line for existing in text.splitlines()):
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line + "\n"


def list_table_argv(nft, family, table):
    """nft's command that lists the table: exit status 0 when it is loaded."""
    if family not in FAMILIES:
        raise NftablesError("family %r is not one of %s" % (family, ", ".join(FAMILIES)))
    if not TABLE_NAME.match(table):
        raise NftablesError("table %r is not an nftables table name (a letter, then letters, digits, _ or -)" % table)
    return [nft, "list", "table", family, table]
