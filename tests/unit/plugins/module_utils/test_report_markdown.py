"""report.md from the report's document: the warnings first, tables and numbers as printed, and
absent figures said as n/a, never guessed."""

from ansible_collections.gpulab.inference.plugins.module_utils import report, report_markdown

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
