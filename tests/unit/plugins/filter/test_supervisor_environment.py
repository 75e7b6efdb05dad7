"""supervisor_environment filter: the module_utils rule, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.supervisor_environment import FilterModule


def test_filter_renders_the_environment_value():
    supervisor_environment = FilterModule().filters()["supervisor_environment"]
    assert supervisor_environment({"CUDA_VISIBLE_DEVICES": "0", "A": "5%"}) == 'A="5%%",CUDA_VISIBLE_DEVICES="0"'


def test_filter_error_names_the_filter():
    supervisor_environment = FilterModule().filters()["supervisor_environment"]
    with pytest.raises(AnsibleFilterError, match=r"gpulab.inference.supervisor_environment: environment variable name 'A B'"):
        supervisor_environment({"A B": "x"})
