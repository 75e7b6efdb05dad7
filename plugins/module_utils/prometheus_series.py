# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark's minutes as Prometheus recorded them (role monitoring): the range queries of the
dashboard's GPU panels over the run's window, and their answers reduced to the fingerprint the
report's own sampler gives (peak, median, share of samples at zero), so that the report and the
dashboards can be compared. Pure functions; the bench role asks Prometheus on its host.
"""

from __future__ import annotations

import math
from urllib.parse import urlencode

from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import percentile

# figure -> the dashboard's expression (roles/monitoring/files/dashboards/gpulab-lab.json, the
# panels GPU utilisation, GPU power (W), GPU memory used (GiB)) and the factor to the sampler's unit.
SERIES = (
    ('utilisation', 'gpulab_gpu_utilization_ratio', 100.0),  # ratio -> %
    ('power', 'gpulab_gpu_power_watts', 1.0),  # W
    ('memory', 'gpulab_gpu_memory_used_bytes / 1024^3', 1024.0),  # GiB -> MiB
)
# Prometheus refuses a range of more than 11,000 points.
MAX_POINTS = 11000


def run_window(benchmark):
    """(start, end) in epoch seconds of the whole sweep, the endpoints compared after it included;
    None when the benchmark holds no window (nothing was swept)."""
    bench = benchmark or {}
    conditions = bench.get('conditions') or {}
    start, end = conditions.get('window_start_epoch'), conditions.get('window_end_epoch')
    if start is None or end is None:
        return None
    ends = [end] + [entry.get('window_end_epoch') for entry in bench.get('compare') or []
                    if entry.get('window_end_epoch') is not None]
    return float(start), float(max(ends))


def range_queries(benchmark, base_url, step_s):
    """{'window': {start_epoch, end_epoch, step_s}, 'queries': [{figure, expr, url}]} for Prometheus's
    /api/v1/query_range at base_url; queries [] (and window None) without a window."""
    window = run_window(benchmark)
    if window is None:
        return {'window': None, 'queries': []}
    step = float(step_s)
    if step <= 0:
        raise ValueError('the step must be above 0 s, got %r' % (step_s,))
    start, end = window
    step = max(step, (end - start) / MAX_POINTS)
    queries = []
    for figure, expr, _factor in SERIES:
        params = urlencode([('query', expr), ('start', '%.3f' % start), ('end', '%.3f' % end), ('step', '%g' % step)])
        queries.append({'figure': figure, 'expr': expr, 'url': '%s/api/v1/query_range?%s' % (base_url.rstrip('/'), params)})
    return {'window': {'start_epoch': start, 'end_epoch': end, 'step_s': step}, 'queries': queries}


def _matrix(result):
    """(series, None) of one ansible.builtin.uri answer to query_range, or (None, why not)."""
    answer = result.get('json') if isinstance(result, dict) else None
    if isinstance(answer, dict) and answer.get('status') == 'success':
        data = answer.get('data') or {}
        if data.get('resultType') == 'matrix' and isinstance(data.get('result'), list):
            return data['result'], None
        return None, 'the answer is not a matrix (resultType %r)' % data.get('resultType')
    if isinstance(answer, dict) and answer.get('error'):
        return None, 'HTTP %s, %s: %s' % (result.get('status'), answer.get('errorType', 'error'), answer['error'])
    if not isinstance(result, dict):
        return None, 'no answer'
    return None, result.get('msg') or 'HTTP %s without a Prometheus answer' % result.get('status')


def _values(series, factor):
    numbers = []
    for point in series.get('values') or []:
        try:
            number = float(point[1]) * factor
        except (TypeError, ValueError, IndexError):
            continue
        if not math.isnan(number) and not math.isinf(number):
            numbers.append(number)
    return numbers


def _rounded(value, digits=2):
    return None if value is None else round(value, digits)


def series_section(queries, results):
    """The report's section: per GPU (node, gpu) the points read and, per figure, peak and median
    (utilisation also the share of points at 0), in the sampler's units (%, W, MiB); 'errors' says
    each figure Prometheus did not answer or held no series for. queries: range_queries()'s;
    results: ansible.builtin.uri's results for them, in the same order."""
    factors = dict((figure, factor) for figure, _expr, factor in SERIES)
    gpus, errors = {}, []
    results = list(results or [])
    for number, query in enumerate(queries or []):
        figure = query['figure']
        found, why = _matrix(results[number] if number < len(results) else None)
        if found is None:
            errors.append('%s (%s): %s' % (figure, query['expr'], why))
            continue
        if not found:
            errors.append('%s (%s): Prometheus holds no series for these minutes' % (figure, query['expr']))
        for series in found:
            labels = series.get('metric') or {}
            values = _values(series, factors[figure])
            if not values:
                continue
            key = (labels.get('node', labels.get('instance', '?')), labels.get('gpu', '?'))
            row = gpus.setdefault(key, {'node': key[0], 'gpu': key[1], 'name': labels.get('name'), 'points': 0})
            row['points'] = max(row['points'], len(values))
            row['%s_peak' % figure] = _rounded(max(values))
            row['%s_median' % figure] = _rounded(percentile(values, 50))
            if figure == 'utilisation':
                row['utilisation_zero_fraction'] = round(sum(1 for value in values if value == 0) / float(len(values)), 4)
    return {'gpus': [gpus[key] for key in sorted(gpus, key=lambda k: (k[0], _index(k[1])))], 'errors': errors}


def _index(gpu):
    return int(gpu) if str(gpu).isdigit() else -1


def beside_sampler(gpus, utilisation_rows):
    """Each GPU row with the report's own sampler's fingerprint of the same GPU (host and index),
    None where the sampler has none."""
    sampled = dict(((row.get('host'), str(row.get('index'))), row) for row in utilisation_rows or [])
    out = []
    for row in gpus:
        mine = sampled.get((row['node'], row['gpu']))
        out.append(dict(row, sampler=None if mine is None else {
            'samples': mine.get('samples'), 'utilisation_peak': mine.get('utilization_peak'),
            'utilisation_median': mine.get('utilization_median'), 'utilisation_zero_fraction': mine.get('zero_fraction'),
            'memory_peak': mine.get('memory_used_peak_mib')}))
    return out


def report_section(prometheus, utilisation_rows):
    """report.json's 'prometheus': None where Prometheus is not deployed (no input), else where it was
    asked, the window, the expressions, the GPUs beside the sampler's, and the errors."""
    if not prometheus:
        return None
    found = series_section(prometheus.get('queries'), prometheus.get('results'))
    return {
        'source': prometheus.get('source'),
        'window': prometheus.get('window'),
        'expressions': dict((query['figure'], query['expr']) for query in prometheus.get('queries') or []),
        'gpus': beside_sampler(found['gpus'], utilisation_rows),
        'errors': found['errors'] if prometheus.get('queries') else ['the benchmark holds no window to ask for'],
    }
