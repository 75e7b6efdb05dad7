"""active_service_manager filter: the module_utils rule, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.active_service_manager import FilterModule


def test_filter_resolves_auto_from_the_fact():
    active = FilterModule().filters()["active_service_manager"]
    assert active("auto", "systemd") == "systemd"
    assert active("auto", "service") == "supervisor"
    assert active("supervisor", "systemd") == "supervisor"
    assert active("auto") == "systemd"


def test_filter_error_names_the_variable():
    active = FilterModule().filters()["active_service_manager"]
    with pytest.raises(AnsibleFilterError, match=r"active_service_manager: gpulab_service_manager is 'runit'"):
        active("runit", "systemd")
