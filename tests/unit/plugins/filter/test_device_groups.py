"""device_groups filter: the module_utils rule on getent's group database, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.device_groups import FilterModule

# ansible.builtin.getent database=group: name -> [password, gid, members].
GETENT_GROUP = {"video": ["x", "44", ""], "render": ["x", "105", "gpulab"], "root": ["x", "0", ""]}


def test_filter_keeps_the_groups_getent_lists():
    device_groups = FilterModule().filters()["device_groups"]
    assert device_groups(["render", "video", "char-nvidia"], GETENT_GROUP) == ["render", "video"]
    assert device_groups(None, GETENT_GROUP) == []


def test_filter_error_names_the_filter():
    device_groups = FilterModule().filters()["device_groups"]
    with pytest.raises(AnsibleFilterError, match=r"gpulab.inference.device_groups: device group 'a,b' is not a group name"):
        device_groups(["a,b"], GETENT_GROUP)
