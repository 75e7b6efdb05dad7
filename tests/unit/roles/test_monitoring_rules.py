# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role monitoring's alert rules and Prometheus configuration, rendered from the role's templates
with its defaults and checked by Prometheus's own promtool (Debian package prometheus, in the
Makefile's APT_PACKAGES): `check rules`, the unit tests of tests/unit/fixtures/monitoring/alerts-test.yml
(`test rules`) and `check config`. The dashboards' panels are parsed by promtool as rule expressions,
and every metric of ours they or the rules name is one the collector writes."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule

from ansible_collections.gpulab.inference.plugins.filter.endpoint import FilterModule as EndpointFilters
from ansible_collections.gpulab.inference.plugins.filter.server_url import FilterModule as ServerUrlFilters
from ansible_collections.gpulab.inference.plugins.module_utils import node_metrics

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / 'roles' / 'monitoring'
FIXTURES = REPO / 'tests' / 'unit' / 'fixtures' / 'monitoring'
PROMTOOL = shutil.which('promtool') or '/usr/bin/promtool'
OUR_METRIC = re.compile(r'\bgpulab_[a-z_]+\b')


def environment():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(str(ROLE / 'templates')))
    env.filters.update(FilterModule().filters())
    for filters in (EndpointFilters, ServerUrlFilters):
        env.filters.update(('gpulab.inference.' + name, function) for name, function in filters().filters().items())
    return env


def defaults():
    """The role's defaults that are plain values (the alert bounds, the intervals)."""
    values = yaml.safe_load((ROLE / 'defaults' / 'main.yml').read_text())
    return dict((key, value) for key, value in values.items() if '{{' not in str(value))


def render_rules():
    return environment().get_template('gpulab-alerts.yml.j2').render(**defaults())


def promtool(*args, cwd=None):
    done = subprocess.run([PROMTOOL] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)
    return done.returncode, done.stdout


def collector_metric_names():
    """Every metric family node_metrics writes (rendered from empty and sample inputs)."""
    families = (node_metrics.gpu_families([], {}, []) + node_metrics.collector_families('gpu', {}, 0)
                + node_metrics.build_families(None) + node_metrics.drain_families(None, None)
                + node_metrics.rpc_cache_families(None) + node_metrics.rpc_server_families(None, [])
                + node_metrics.firewall_families('t', None) + node_metrics.health_families(None, None)
                + node_metrics.bench_families(None))
    return set(item['name'] for item in families)


def write_unit_tests(tmp_path, rules_text):
    """The fixture's tests, each expected alert given its rule's annotations (promtool compares them)."""
    annotations = dict((rule['alert'], rule['annotations']) for rule in yaml.safe_load(rules_text)['groups'][0]['rules'])
    tests = yaml.safe_load((FIXTURES / 'alerts-test.yml').read_text())
    for case in tests['tests']:
        for check in case['alert_rule_test']:
            for alert in check['exp_alerts']:
                alert['exp_annotations'] = annotations[check['alertname']]
    (tmp_path / 'alerts-test.yml').write_text(yaml.safe_dump(tests))


def test_the_rules_pass_promtool_check_and_unit_tests(tmp_path):
    (tmp_path / 'gpulab-alerts.yml').write_text(render_rules())
    write_unit_tests(tmp_path, render_rules())
    rc, out = promtool('check', 'rules', 'gpulab-alerts.yml', cwd=str(tmp_path))
    assert rc == 0 and 'SUCCESS: 11 rules found' in out, out
    rc, out = promtool('test', 'rules', 'alerts-test.yml', cwd=str(tmp_path))
    assert rc == 0 and 'SUCCESS' in out, out


def test_promtool_unit_tests_can_fail(tmp_path):
    # The same tests against rules with the GPU memory bound raised above 1: the alert the tests expect never fires.
    values = dict(defaults(), monitoring_alert_gpu_memory_ratio=1.5)
    (tmp_path / 'gpulab-alerts.yml').write_text(environment().get_template('gpulab-alerts.yml.j2').render(**values))
    write_unit_tests(tmp_path, render_rules())
    rc, out = promtool('test', 'rules', 'alerts-test.yml', cwd=str(tmp_path))
    assert rc != 0 and 'GpulabGpuMemoryHigh' in out, out


def test_every_alert_is_tested_and_documented():
    rules = yaml.safe_load(render_rules())['groups'][0]['rules']
    alerts = [rule['alert'] for rule in rules]
    tested = set(check['alertname'] for case in yaml.safe_load((FIXTURES / 'alerts-test.yml').read_text())['tests']
                 for check in case['alert_rule_test'])
    assert len(alerts) == 11 and set(alerts) == tested
    readme = (REPO / 'README.md').read_text()
    assert [alert for alert in alerts if '`%s`' % alert not in readme] == []


def test_the_rules_name_only_metrics_the_collector_writes():
    names = set(OUR_METRIC.findall(render_rules()))
    assert 'gpulab_rpc_server_up' in names and names <= collector_metric_names(), names - collector_metric_names()


def prometheus_values(tmp_path, api_key=''):
    hostvars = {
        'node-a': {'inventory_hostname': 'node-a', 'gpulab_monitoring_address': '10.231.78.10'},
        'node-b': {'inventory_hostname': 'node-b', 'gpulab_monitoring_address': '10.231.78.11'},
        'node-c': {'inventory_hostname': 'node-c', 'gpulab_monitoring_address': 'fd00::12'},
    }
    return dict(defaults(), hostvars=hostvars, monitoring_host='node-a', gpulab_head_group='inference_head',
                gpulab_nodes_group='gpu_nodes', gpulab_workers_group='rpc_workers',
                groups={'inference_head': ['node-a'], 'gpu_nodes': ['node-a', 'node-b', 'node-c'],
                        'rpc_workers': ['node-b', 'node-c']},
                __monitoring_rules_file=str(tmp_path / 'gpulab-alerts.yml'),
                __monitoring_prometheus_url='http://127.0.0.1:9090', __monitoring_node_targets=['node-a', 'node-b', 'node-c'],
                __monitoring_head='node-a', __monitoring_head_job='llama_cpp', __monitoring_head_target='127.0.0.1:8080', __monitoring_metrics_path='/metrics',
                __monitoring_head_api_key=api_key, __monitoring_api_key_file=str(tmp_path / 'llama-server.key'),
                __monitoring_alertmanager_enabled=False, __monitoring_alertmanager_listen='127.0.0.1:9093',
                monitoring_node_exporter_port=9100)


def test_the_rendered_configuration_passes_promtool_check_config(tmp_path):
    (tmp_path / 'gpulab-alerts.yml').write_text(render_rules())
    (tmp_path / 'llama-server.key').write_text('secret')
    for api_key in ('', 'secret'):
        text = environment().get_template('prometheus.yml.j2').render(**prometheus_values(tmp_path, api_key))
        (tmp_path / 'prometheus.yml').write_text(text)
        rc, out = promtool('check', 'config', str(tmp_path / 'prometheus.yml'))
        assert rc == 0 and 'SUCCESS: 1 rule files found' in out, out
        config = yaml.safe_load(text)
        jobs = dict((job['job_name'], job) for job in config['scrape_configs'])
        assert [group['targets'] for group in jobs['node']['static_configs']] == [
            ['10.231.78.10:9100'], ['10.231.78.11:9100'], ['[fd00::12]:9100']]
        assert [group['labels']['part'] for group in jobs['node']['static_configs']] == ['head', 'worker', 'worker']
        assert jobs['llama_cpp']['static_configs'][0]['targets'] == ['127.0.0.1:8080']
        assert jobs['llama_cpp']['metrics_path'] == '/metrics'
        assert ('authorization' in jobs['llama_cpp']) == bool(api_key)


def test_alertmanager_only_with_a_receiver(tmp_path):
    # Prometheus sends alerts to Alertmanager only when a receiver is given, and promtool accepts both;
    # Alertmanager routes every alert to that one receiver.
    (tmp_path / 'gpulab-alerts.yml').write_text(render_rules())
    for enabled in (False, True):
        values = dict(prometheus_values(tmp_path), __monitoring_alertmanager_enabled=enabled)
        text = environment().get_template('prometheus.yml.j2').render(**values)
        (tmp_path / 'prometheus.yml').write_text(text)
        rc, out = promtool('check', 'config', str(tmp_path / 'prometheus.yml'))
        assert rc == 0, out
        alerting = yaml.safe_load(text).get('alerting')
        assert alerting == ({'alertmanagers': [{'static_configs': [{'targets': ['127.0.0.1:9093']}]}]} if enabled else None)
    receiver = {'name': 'ops', 'webhook_configs': [{'url': 'http://127.0.0.1:5001/hook'}]}
    config = yaml.safe_load(environment().get_template('alertmanager.yml.j2').render(
        dict(defaults(), monitoring_host='node-a', monitoring_alertmanager_receiver=receiver)))
    assert config['route']['receiver'] == 'ops' and config['receivers'] == [receiver]
    assert config['route']['repeat_interval'] == '4h'


def dashboard_panels():
    for path in sorted((ROLE / 'files' / 'dashboards').glob('*.json')):
        dashboard = json.loads(path.read_text())
        for panel in dashboard['panels']:
            for target in panel.get('targets', []):
                yield path.name, panel['title'], target['expr']


def test_every_dashboard_panel_query_parses(tmp_path):
    panels = list(dashboard_panels())
    assert len(panels) >= 10
    rules = {'groups': [{'name': 'dashboards', 'rules': [
        {'record': 'panel:%d' % number, 'expr': expr} for number, (dummy_title, dummy_kind, expr) in enumerate(panels)]}]}
    (tmp_path / 'panels.yml').write_text(yaml.safe_dump(rules))
    rc, out = promtool('check', 'rules', str(tmp_path / 'panels.yml'))
    assert rc == 0, out
    # a panel with a typo is caught
    (tmp_path / 'bad.yml').write_text(yaml.safe_dump(
        {'groups': [{'name': 'd', 'rules': [{'record': 'p:0', 'expr': 'sum(rate(x[5m])'}]}]}))
    assert promtool('check', 'rules', str(tmp_path / 'bad.yml'))[0] != 0
    names = set(name for dummy_title, dummy_kind, expr in panels for name in OUR_METRIC.findall(expr))
    assert names <= collector_metric_names(), names - collector_metric_names()
