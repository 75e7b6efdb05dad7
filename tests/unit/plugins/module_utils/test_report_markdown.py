"""report.md from the report's document: the warnings first, tables and numbers as printed, and
absent figures said as n/a, never guessed."""

import json
from pathlib import Path

from ansible_collections.gpulab.inference.plugins.module_utils import prometheus_series, report, report_markdown

IMAGES = {'residency': 'r.png', 'utilisation': 'u.png', 'throughput': 't.png', 'latency': 'l.png', 'pareto': 'p.png',
          'requests': 'requests.jsonl'}


def test_numbers_and_tables_as_printed():
    assert report_markdown._fmt(None) == 'n/a'  # pylint: disable=protected-access
    assert report_markdown._fmt(3.14159, 2, ' s') == '3.14 s'  # pylint: disable=protected-access
    assert report_markdown._fmt(7) == '7'  # pylint: disable=protected-access
    assert report_markdown._table(('a', 'b'), [(1, 2)]) == ['| a | b |', '| --- | --- |', '| 1 | 2 |']  # pylint: disable=protected-access


def test_warnings_come_before_the_summary_table_and_nothing_is_guessed():
    doc = report.build_document('lab', '2026-12-02 05:00:00 UTC', warnings=['first', 'second'])
    text = report_markdown.render_markdown(doc, IMAGES)
    assert text.startswith('# Inference report: lab\n')
    assert text.index('**Warning:** first') < text.index('**Warning:** second') < text.index('| decode tok/s')
    assert 'No residency was read.' in text
    assert 'No benchmark was run.' in text


def test_the_summary_lines_of_an_empty_run_say_not_available():
    summary = report_markdown.summary_lines(report.build_document('lab', 'now'))
    assert '| decode tok/s (concurrency 1, spread) | n/a (n/a %) |' in summary


def _prometheus_input():
    """The bench role's input: the run's range queries and Prometheus 2.42's real answers to them
    (tests/unit/fixtures/prometheus), as ansible.builtin.uri registers them."""
    fixtures = Path(__file__).resolve().parents[2] / 'fixtures' / 'prometheus'
    built = prometheus_series.range_queries({'conditions': {'window_start_epoch': 1796644800.0,
                                                            'window_end_epoch': 1796644890.0}}, 'http://127.0.0.1:9090', 15)
    answers = [{'status': 200, 'json': json.loads((fixtures / ('query_range-%s.json' % figure)).read_text())}
               for figure in ('utilisation', 'power', 'memory')]
    answers[1] = {'status': -1, 'msg': 'Connection refused'}
    return dict(built, source='http://127.0.0.1:9090 on node-a', results=answers)


def test_from_prometheus_beside_the_samplers_fingerprint():
    sampler = {'node-a': {'method': 'nvml', 'gpus': [
        {'index': 0, 'name': 'RTX', 'samples': 450, 'utilization_peak': 34, 'utilization_median': 19.0, 'utilization_p10': 0.0,
         'utilization_mean': 15.2, 'zero_fraction': 0.41, 'memory_used_peak_mib': 20480}]}}
    doc = report.build_document('lab', 'now', sampler=sampler, prometheus=_prometheus_input())
    assert doc['prometheus']['gpus'][0]['memory_peak'] == 20480.0
    text = report_markdown.render_markdown(doc, IMAGES)
    section = text[text.index('## From Prometheus'):text.index('## Energy')]
    assert 'http://127.0.0.1:9090 on node-a' in section and 'over the run\'s 90.0 s, a point every 15.0 s' in section
    assert '**Prometheus did not give a series:** power (gpulab_gpu_power_watts): Connection refused' in section
    assert ('| node-a | 0 | NVIDIA RTX PRO 6000 Blackwell Workstation Edition | 7 | 31 | 18.0 | 42.9 % | 34 / 19.0 / 41.0 % '
            '| n/a | n/a | 20.00 | 20.00 |') in section
    assert '| node-b | 0 |' in section and 'not deployed' not in text
    assert text.index('![utilisation](u.png)') < text.index('## From Prometheus')


def test_without_prometheus_the_section_is_absent_and_says_nothing_is_lost():
    text = report_markdown.render_markdown(report.build_document('lab', 'now'), IMAGES)
    assert '## From Prometheus' not in text
    assert 'Prometheus is not deployed (gpulab_monitoring_enabled is off)' in text and 'nothing is lost' in text
