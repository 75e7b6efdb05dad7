"""stale_programs filter: the module_utils rule, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.stale_programs import FilterModule


def test_filter_lists_programs_no_longer_planned():
    stale_programs = FilterModule().filters()["stale_programs"]
    assert stale_programs(["/d/gpulab-rpc-server-1.conf", "/d/gpulab-rpc-server-0.conf"], ["gpulab-rpc-server-0"]) == [
        "gpulab-rpc-server-1"]
    assert stale_programs(None, ["gpulab-rpc-server-0"]) == []


def test_filter_error_names_the_filter():
    stale_programs = FilterModule().filters()["stale_programs"]
    with pytest.raises(AnsibleFilterError, match=r"gpulab.inference.stale_programs: program file '/d/x' is not named"):
        stale_programs(["/d/x"], [])
