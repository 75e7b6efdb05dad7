"""prometheus_series: the dashboard's GPU series over a benchmark's minutes, asked of Prometheus and
reduced to the report's fingerprint. The answers are Prometheus 2.42's own (Debian bookworm), to
query_range over a TSDB backfilled with promtool from known samples: two GPUs, seven points 15 s apart."""

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import prometheus_series

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / 'tests' / 'unit' / 'fixtures' / 'prometheus'
DASHBOARD = REPO / 'roles' / 'monitoring' / 'files' / 'dashboards' / 'gpulab-lab.json'
START = 1796644800.0
BENCH = {'conditions': {'window_start_epoch': START, 'window_end_epoch': START + 90.25}}


def answer(name, status=200):
    """What ansible.builtin.uri registers for a JSON answer."""
    return {'status': status, 'json': json.loads((FIXTURES / ('query_range-%s.json' % name)).read_text())}


def queries():
    return prometheus_series.range_queries(BENCH, 'http://127.0.0.1:9090/', 15)['queries']


def test_the_expressions_are_the_dashboards():
    exprs = [target['expr'] for panel in json.loads(DASHBOARD.read_text())['panels'] for target in panel.get('targets', [])]
    for _figure, expr, _factor in prometheus_series.SERIES:
        assert expr in exprs


def test_range_queries_cover_the_sweep_and_the_endpoints_compared_after_it():
    bench = dict(BENCH, compare=[{'window_end_epoch': START + 200.5}, {'window_end_epoch': None}])
    built = prometheus_series.range_queries(bench, 'http://127.0.0.1:9090/', 15)
    assert built['window'] == {'start_epoch': START, 'end_epoch': START + 200.5, 'step_s': 15.0}
    assert [q['figure'] for q in built['queries']] == ['utilisation', 'power', 'memory']
    url = urlsplit(built['queries'][2]['url'])
    assert (url.scheme, url.netloc, url.path) == ('http', '127.0.0.1:9090', '/api/v1/query_range')
    assert parse_qs(url.query) == {'query': ['gpulab_gpu_memory_used_bytes / 1024^3'], 'start': ['1796644800.000'],
                                   'end': ['1796645000.500'], 'step': ['15']}


def test_a_long_run_keeps_under_prometheus_point_limit():
    bench = {'conditions': {'window_start_epoch': 0.0, 'window_end_epoch': 220000.0}}
    built = prometheus_series.range_queries(bench, 'http://p:9090', 15)
    assert built['window']['step_s'] == 20.0
    assert parse_qs(urlsplit(built['queries'][0]['url']).query)['step'] == ['20']


def test_no_window_no_queries():
    assert prometheus_series.range_queries({'conditions': {}}, 'http://p:9090', 15) == {'window': None, 'queries': []}
    with pytest.raises(ValueError, match='step must be above 0'):
        prometheus_series.range_queries(BENCH, 'http://p:9090', 0)


def test_real_answers_reduce_to_the_samplers_fingerprint_per_gpu():
    section = prometheus_series.series_section(queries(), [answer('utilisation'), answer('power'), answer('memory')])
    assert section['errors'] == []
    node_a, node_b = section['gpus']
    assert (node_a['node'], node_a['gpu'], node_a['points']) == ('node-a', '0', 7)
    assert node_a['name'] == 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition'
    # utilisation 0, 31, 22, 0, 18, 0, 20 %: three of seven points at 0
    assert node_a['utilisation_peak'] == 31.0 and node_a['utilisation_median'] == 18.0
    assert node_a['utilisation_zero_fraction'] == round(3 / 7.0, 4)
    assert (node_a['power_peak'], node_a['power_median']) == (301.25, 240.5)
    assert (node_a['memory_peak'], node_a['memory_median']) == (20480.0, 20480.0)  # MiB, as the sampler's
    assert (node_b['node'], node_b['utilisation_peak'], node_b['utilisation_zero_fraction']) == ('node-b', 25.0, round(3 / 7.0, 4))
    assert node_b['memory_peak'] == 61440.0


def test_a_failed_query_is_said_and_the_others_still_count():
    refused = {'status': -1, 'msg': 'Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>'}
    section = prometheus_series.series_section(queries(), [answer('utilisation'), answer('bad-data', 400), refused])
    assert section['errors'] == [
        'power (gpulab_gpu_power_watts): HTTP 400, bad_data: 1:24: parse error: unexpected end of input inside braces',
        'memory (gpulab_gpu_memory_used_bytes / 1024^3): Status code was -1 and not [200]: Request failed: '
        '<urlopen error [Errno 111] Connection refused>']
    assert [row['utilisation_peak'] for row in section['gpus']] == [31.0, 25.0]
    assert 'power_peak' not in section['gpus'][0]


def test_no_series_in_the_window_is_said():
    section = prometheus_series.series_section(queries()[:1], [answer('empty')])
    assert section == {'gpus': [], 'errors': ['utilisation (gpulab_gpu_utilization_ratio): Prometheus holds no series '
                                              'for these minutes']}


def test_an_answer_missing_or_not_json_is_an_error():
    section = prometheus_series.series_section(queries()[:2], [{'status': 502, 'msg': ''}])
    assert section['errors'] == ['utilisation (gpulab_gpu_utilization_ratio): HTTP 502 without a Prometheus answer',
                                 'power (gpulab_gpu_power_watts): no answer']


def test_the_report_section_puts_the_samplers_figures_beside():
    built = prometheus_series.range_queries(BENCH, 'http://127.0.0.1:9090', 15)
    sampler = [{'host': 'node-a', 'index': 0, 'samples': 450, 'utilization_peak': 34, 'utilization_median': 19.0,
                'zero_fraction': 0.41, 'memory_used_peak_mib': 20480}]
    section = prometheus_series.report_section(
        dict(built, source='http://127.0.0.1:9090 on node-a',
             results=[answer('utilisation'), answer('power'), answer('memory')]), sampler)
    assert section['source'] == 'http://127.0.0.1:9090 on node-a'
    assert section['window']['step_s'] == 15.0
    assert section['expressions']['power'] == 'gpulab_gpu_power_watts'
    assert section['gpus'][0]['sampler'] == {'samples': 450, 'utilisation_peak': 34, 'utilisation_median': 19.0,
                                             'utilisation_zero_fraction': 0.41, 'memory_peak': 20480}
    assert section['gpus'][1]['sampler'] is None
    assert prometheus_series.report_section(None, sampler) is None
    assert prometheus_series.report_section({'window': None, 'queries': [], 'results': []}, [])['errors'] == [
        'the benchmark holds no window to ask for']
