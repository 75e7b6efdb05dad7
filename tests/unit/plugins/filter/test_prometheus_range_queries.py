"""prometheus_range_queries: the filter over prometheus_series.range_queries, its errors as filter errors."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.filter.prometheus_range_queries import (
    FilterModule,
    prometheus_range_queries,
)


def test_queries_of_a_benchmark():
    built = prometheus_range_queries({'conditions': {'window_start_epoch': 10.0, 'window_end_epoch': 70.0}},
                                     'http://127.0.0.1:9090', '5')
    assert built['window'] == {'start_epoch': 10.0, 'end_epoch': 70.0, 'step_s': 5.0}
    assert built['queries'][1]['url'] == ('http://127.0.0.1:9090/api/v1/query_range?query=gpulab_gpu_power_watts'
                                          '&start=10.000&end=70.000&step=5')


def test_a_bad_step_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match='prometheus_range_queries: .*step must be above 0'):
        prometheus_range_queries({'conditions': {'window_start_epoch': 1, 'window_end_epoch': 2}}, 'http://p:9090', -1)
    with pytest.raises(AnsibleFilterError, match='prometheus_range_queries'):
        prometheus_range_queries({'conditions': {'window_start_epoch': 1, 'window_end_epoch': 2}}, 'http://p:9090', 'x')


def test_registered():
    assert FilterModule().filters() == {'prometheus_range_queries': prometheus_range_queries}
