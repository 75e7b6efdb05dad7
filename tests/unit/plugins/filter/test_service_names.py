"""service_names filter: the module_utils rule, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.service_names import FilterModule


def test_filter_names_units_and_programs():
    service_names = FilterModule().filters()["service_names"]
    assert service_names([0, 1], "gpulab-rpc-server", "systemd") == ["gpulab-rpc-server@0.service", "gpulab-rpc-server@1.service"]
    assert service_names(None, "gpulab-vllm", "supervisor") == ["gpulab-vllm"]


def test_filter_error_names_the_filter():
    service_names = FilterModule().filters()["service_names"]
    with pytest.raises(AnsibleFilterError, match=r"gpulab.inference.service_names: service manager 'runit'"):
        service_names([0], "gpulab-rpc-server", "runit")
