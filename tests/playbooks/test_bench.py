"""playbooks/bench.yml on localhost against the OpenAI-style test double (tests/doubles), with the
lab's fake nvidia-smi: residency, sampler, benchmark with progress, and the report's files."""

import json
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playbook_runner import LAB_FILES, REPO, local_host, run_in

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from doubles.openai_stream_server import OpenAIDouble  # noqa: E402 pylint: disable=wrong-import-position


def inventory():
    return {'all': {'children': {'gpu_nodes': {'children': {'inference_head': {'hosts': {'localhost': local_host()}}}}}}}


def fake_smi(tmp_path):
    wrapper = tmp_path / 'nvidia-smi'
    wrapper.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, LAB_FILES / 'fake-nvidia-smi'))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def bench_vars(tmp_path, base_url, **extra):
    values = {'bench_base_url': base_url, 'bench_nvidia_smi_path': fake_smi(tmp_path),
              'bench_work_dir': str(tmp_path / 'work'), 'bench_report_dir': str(tmp_path / 'reports'),
              # the record of the last run, role common's path (role monitoring reads it too)
              'gpulab_bench_last_run_file': str(tmp_path / 'work' / 'last-run.json'),
              'bench_report_inventory_name': 'local', 'bench_progress_interval_s': 1, 'gpulab_bench_profile': 'short',
              'bench_build_info': str(tmp_path / 'BUILD_INFO.json'), 'bench_memory_plan_file': str(tmp_path / 'none.json'),
              'bench_concurrency': [1, 4], 'bench_max_tokens': 24}
    values.update(extra)
    return values


ENV = {'GPULAB_FAKE_NVIDIA_SMI_DIR': str(LAB_FILES / 'nvidia-smi' / 'h200')}


def test_bench_playbook_writes_the_report(tmp_path):
    (tmp_path / 'BUILD_INFO.json').write_text(json.dumps({'build_id': 'b8070-test', 'cuda': False}))
    with OpenAIDouble(ttft_s=0.05, itl_s=0.02) as server, OpenAIDouble(ttft_s=0.02, itl_s=0.01, model='other') as other:
        compare = [{'label': 'other', 'base_url': other.base_url}]
        run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                     bench_vars(tmp_path, server.base_url, bench_compare=compare), envvars=ENV)
        max_active = server.max_active
        sent = sorted(body['messages'][0]['content'] for body in server.requests)
        sent_other = sorted(body['messages'][0]['content'] for body in other.requests)
    assert run.status == 'successful', run.failures
    assert sent == sent_other
    (report_dir,) = list((tmp_path / 'reports').iterdir())
    assert report_dir.name.startswith('local-')
    assert sorted(p.name for p in report_dir.iterdir()) == [
        'bench-summary.json', 'latency.png', 'pareto.png', 'report.json', 'report.md', 'requests.jsonl', 'residency.png',
        'throughput.png', 'trace-localhost.json', 'utilisation.png']
    doc = json.loads((report_dir / 'report.json').read_text())
    assert doc['build']['build_id'] == 'b8070-test'
    assert doc['residency']['devices'][0]['name'] == 'NVIDIA H200'
    assert doc['utilisation'][0]['method'] == 'nvidia-smi-poll' and doc['utilisation'][0]['samples'] >= 2
    levels = doc['benchmark']['levels']
    assert [lv['concurrency'] for lv in levels] == [1, 4] and max_active == 4
    assert levels[0]['decode_tok_s'] == __import__('pytest').approx(50.0, rel=0.2)
    assert abs(levels[0]['server']['decode_ratio'] - 1.0) < 0.05
    assert doc['headline']['aggregate_rises'] is True
    assert doc['memory_plan'] is None
    # no Prometheus in this lab (gpulab_monitoring_enabled off): no section, and the report says why
    assert doc['prometheus'] is None and '## From Prometheus' not in (report_dir / 'report.md').read_text()
    assert doc['rpc_cache'] == {'workers': [], 'note': "No RPC worker's weight cache was read: this run has no RPC workers."}
    # fresh prompts, sized on the text sent; the double's prompt cache finds the template's head only
    prompt = doc['benchmark']['prompt']
    assert prompt['seed_source'] == 'fresh' and prompt['max_error_tokens'] <= 1
    assert all(lv['cached_prompt_fraction'] < 0.1 for lv in levels)
    lines = [json.loads(line) for line in (report_dir / 'requests.jsonl').read_text().splitlines()]
    assert len(lines) == 2 * sum(lv['requests'] for lv in levels) and all(line['ok'] for line in lines)
    summary_file = json.loads((report_dir / 'bench-summary.json').read_text())
    assert [(lv['endpoint'], lv['max_concurrency']) for lv in summary_file['levels']] == [
        ('llama.cpp', 1), ('llama.cpp', 4), ('other', 1), ('other', 4)]
    assert [e['label'] for e in doc['side_by_side']] == ['llama.cpp', 'other']
    assert '### Endpoints side by side' in (report_dir / 'report.md').read_text()
    assert summary_file['levels'][0]['completed'] == levels[0]['requests_ok']
    assert doc['conditions']['profile'] == 'short' and doc['benchmark']['objective'] == {'slo_ttft_s': 2.0, 'slo_tpot_ms': 100.0}
    # the lab's fake nvidia-smi answers one-shot queries only: no power, and the report says so
    assert doc['energy'] is None and doc['energy_omitted'].startswith('no power draw was sampled (sampler nvidia-smi-poll)')
    progress = [res['msg'] for res in run.ok_results("Show the benchmark's progress")]
    assert progress and all(line.startswith(('sizing', 'warm-up', 'level', 'done', 'starting')) for line in progress), progress
    # measurements only: a deploy that ends with the bench step stays idempotent
    assert run.changed_tasks() == [('localhost', 'Create the working directory')]
    summary = run.ok_results("Show the report's summary")[0]['msg']
    assert summary[0] == 'report: %s/report.md' % report_dir
    assert '| build | b8070-test |' in summary


def test_a_deploy_that_changed_nothing_does_not_measure_again(deploy_runs):
    """The bench step as deploy.yml runs it (bench_again_unchanged false): the first run measures and
    records on the head what it measured; the second, with nothing restarted and the same settings, sends
    no request and names the report that stands; a changed setting, or the report removed, measures again."""
    tmp_path = deploy_runs['tmp_path']
    (first, sent_first), (again, sent_again), (tokens, sent_tokens), (gone, unused) = deploy_runs['runs']
    first_reports = deploy_runs['reports']
    assert 'no earlier benchmark' in first and sent_first > 0
    record = json.loads((tmp_path / 'work' / 'last-run.json').read_text())
    assert len(record['identity']) == 64 and record['finished'].endswith('Z')
    assert sent_again == 0
    assert 'its report stands (%s/report.md)' % first_reports[0] in again and 'bench_again_unchanged' in again
    assert 'benchmark settings changed' in tokens and sent_tokens > 0
    assert 'is gone' in gone
    assert len(first_reports) == 2


class PrometheusDouble:
    """Prometheus's /api/v1/query_range with its own answers (tests/unit/fixtures/prometheus, from Prometheus
    2.42), each query's parameters recorded; the power query gets Prometheus's real bad_data answer (HTTP 400)."""

    ANSWERS = {'gpulab_gpu_utilization_ratio': (200, 'utilisation'), 'gpulab_gpu_power_watts': (400, 'bad-data'),
               'gpulab_gpu_memory_used_bytes / 1024^3': (200, 'memory')}

    def __init__(self):
        self.queries = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                params = dict((key, values[0]) for key, values in parse_qs(url.query).items())
                double.queries.append(dict(params, path=url.path))
                status, name = double.ANSWERS.get(params.get('query'), (400, 'bad-data'))
                body = (REPO / 'tests' / 'unit' / 'fixtures' / 'prometheus' / ('query_range-%s.json' % name)).read_bytes()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.base_url = 'http://127.0.0.1:%d' % self.server.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope='module')
def deploy_runs(tmp_path_factory):
    """Four runs of the bench step as deploy.yml runs it, on a lab whose head runs Prometheus (the
    double): first (measures, and its report asks Prometheus), again (nothing changed), tokens (a
    setting changed), gone (the reports removed). Per run, what it said and the requests it sent; the
    reports of the runs before gone; the first run's report and the Prometheus queries it made, read
    before the reports are removed."""
    tmp_path = tmp_path_factory.mktemp('deploy-runs')
    (tmp_path / 'BUILD_INFO.json').write_text(json.dumps({'build_id': 'b8070-test', 'cuda': False}))
    runs = []
    with OpenAIDouble(ttft_s=0.01, itl_s=0.005) as server, PrometheusDouble() as prometheus:
        deploy_step = {'bench_again_unchanged': False, 'bench_concurrency': [1], 'gpulab_monitoring_enabled': True,
                       'bench_prometheus_url': prometheus.base_url, 'bench_prometheus_step_s': 5}
        for label, extra in (('first', {}), ('again', {}), ('tokens', {'bench_max_tokens': 12}), ('gone', {'bench_max_tokens': 12})):
            if label == 'gone':
                measured = reports
                for report in measured:
                    (report / 'report.md').unlink()
            before = len(server.requests)
            run = run_in(tmp_path / label, 'playbooks/bench.yml', inventory(),
                         bench_vars(tmp_path, server.base_url, **dict(deploy_step, **extra)), envvars=ENV)
            assert run.status == 'successful', run.failures
            (said,) = run.ok_results('Say why the last report stands, or why this run measures')
            runs.append((said['msg'], len(server.requests) - before))
            reports = sorted((tmp_path / 'reports').iterdir())
            if label == 'first':
                (report_dir,) = reports
                first_report = (json.loads((report_dir / 'report.json').read_text()), (report_dir / 'report.md').read_text(),
                                list(prometheus.queries))
        base_url = prometheus.base_url
    return {'tmp_path': tmp_path, 'runs': runs, 'reports': measured, 'first_report': first_report, 'prometheus_url': base_url}


def test_with_prometheus_the_report_holds_its_series_and_a_failed_query_fails_nothing(deploy_runs):
    """The first run of deploy_runs, whose lab runs Prometheus (the double)."""
    doc, text, queries = deploy_runs['first_report']
    base_url = deploy_runs['prometheus_url']
    window = doc['benchmark']['conditions']
    # the dashboard's three expressions over the benchmark's own window, a point every 5 s
    assert sorted(query['query'] for query in queries) == sorted(PrometheusDouble.ANSWERS)
    for query in queries:
        assert query['path'] == '/api/v1/query_range' and query['step'] == '5'
        assert (float(query['start']), float(query['end'])) == (
            round(window['window_start_epoch'], 3), round(window['window_end_epoch'], 3))
    section = doc['prometheus']
    assert section['source'] == '%s on localhost' % base_url
    assert section['errors'] == ['power (gpulab_gpu_power_watts): HTTP 400, bad_data: 1:24: parse error: '
                                 'unexpected end of input inside braces']
    assert [(g['node'], g['utilisation_peak'], g['memory_peak']) for g in section['gpus']] == [
        ('node-a', 31.0, 20480.0), ('node-b', 25.0, 61440.0)]
    assert '## From Prometheus' in text and '**Prometheus did not give a series:** power' in text


def test_concurrency_zero_stops_before_any_load(tmp_path):
    with OpenAIDouble() as server:
        run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                     bench_vars(tmp_path, server.base_url, bench_concurrency=[1, 0]), envvars=ENV)
        assert server.requests == []
    assert run.status == 'failed'
    (failure,) = run.failures
    assert failure[1] == "Check the profile's options"
    assert 'bench_concurrency must list levels of 1 or more (got [1, 0])' in failure[2]
    assert not (tmp_path / 'reports').exists() and not (tmp_path / 'work').exists()


def test_a_rate_of_zero_stops_before_any_load(tmp_path):
    with OpenAIDouble() as server:
        run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                     bench_vars(tmp_path, server.base_url, bench_request_rates=[2, 0]), envvars=ENV)
        assert server.requests == []
    assert run.status == 'failed'
    (failure,) = run.failures
    assert failure[1] == 'Check the request rates and the objectives'
    assert 'bench_request_rates must list rates above 0 requests per second (got [2, 0])' in failure[2]


def test_unreachable_endpoint_names_the_url_and_stops_the_samplers(tmp_path):
    run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                 bench_vars(tmp_path, 'http://127.0.0.1:9'), envvars=ENV)
    assert run.status == 'failed'
    (failure,) = run.failures
    assert failure[1] == 'Stop when the benchmark failed'
    assert 'The benchmark on localhost of http://127.0.0.1:9 failed: cannot reach http://127.0.0.1:9/v1/models' in failure[2]
    assert (tmp_path / 'work' / 'sampler.stop').exists()


def test_check_mode_does_not_benchmark(tmp_path):
    run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                 bench_vars(tmp_path, 'http://127.0.0.1:9'), envvars=ENV, cmdline='--check')
    assert run.status == 'successful', run.failures
    (said,) = run.ok_results('Say that a dry run does not benchmark')
    assert 'only without --check' in said['msg']
    assert not (tmp_path / 'reports').exists()
    assert not (tmp_path / 'work').exists()


def test_report_tells_rdma_from_tcp_per_rpc_server(tmp_path):
    """localhost is also a worker under supervisord (a stand-in supervisorctl), its RPC server's log a
    real capture that stayed on TCP, and its fabric.json found a RoCE v2 GID: the report warns."""
    fixture = Path(__file__).resolve().parents[1] / 'unit' / 'fixtures' / 'roce' / 'llama-rpc' / 'rpc-server-h200-tcp.log'
    (tmp_path / 'BUILD_INFO.json').write_text(json.dumps({'build_id': 'b8070-test', 'cuda': False}))
    (tmp_path / 'etc' / 'roce').mkdir(parents=True)
    (tmp_path / 'etc' / 'roce' / 'fabric.json').write_text(json.dumps({'rdma': {'found': True}}))
    (tmp_path / 'etc' / 'supervisord.conf').write_text('[supervisord]\n')
    (tmp_path / 'log').mkdir()
    (tmp_path / 'log' / 'gpulab-rpc-server-0.log').write_text(
        'Starting RPC server v7.0.0\nAccepted client connection\n' + fixture.read_text())
    ctl = tmp_path / 'supervisorctl'
    ctl.write_text("#!/bin/sh\necho 'gpulab-rpc-server-0   RUNNING   pid 77, uptime 0:10:05'\n")
    ctl.chmod(ctl.stat().st_mode | stat.S_IEXEC)
    # its weight cache: 5 GiB in two tensors (sparse files) against the 8 GiB bound its last deploy recorded
    cache = tmp_path / 'cache' / 'rpc'
    cache.mkdir(parents=True)
    for name, size_gib in (('00000000000000b1', 2), ('00000000000000b2', 3)):
        with open(cache / name, 'wb') as stream:
            stream.truncate(size_gib << 30)
    (tmp_path / 'rpc-cache.json').write_text(json.dumps(
        {'managed_by': 'gpulab.inference', 'schema': 'gpulab.inference.rpc_cache/1', 'path': str(cache), 'model': 'k',
         'since': 1.0, 'max_gib': 8, 'disk_fraction': 0.5, 'min_free_gib': 1.0}))
    host = local_host(gpulab_service_manager='supervisor', gpulab_config_dir=str(tmp_path / 'etc'),
                      gpulab_supervisor_config=str(tmp_path / 'etc' / 'supervisord.conf'), gpulab_supervisorctl=str(ctl),
                      gpulab_log_dir=str(tmp_path / 'log'), gpulab_rpc_cache_file=str(tmp_path / 'rpc-cache.json'))
    both = {'all': {'children': {'gpu_nodes': {'children': {'inference_head': {'hosts': {'localhost': host}},
                                                            'rpc_workers': {'hosts': {'localhost': {}}}}}}}}
    with OpenAIDouble(ttft_s=0.01, itl_s=0.005) as server:
        run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', both,
                     bench_vars(tmp_path, server.base_url, bench_concurrency=[1]), envvars=ENV)
    assert run.status == 'successful', run.failures
    (report_dir,) = list((tmp_path / 'reports').iterdir())
    doc = json.loads((report_dir / 'report.json').read_text())
    (row,) = doc['rpc_transport']
    # only the connections since the last start count: the capture's own, not the older one above it
    assert (row['server'], row['rdma'], row['tcp'], row['rdma_capable']) == ('gpulab-rpc-server-0', 0, 15, True)
    assert 'stayed on TCP' in row['warning']
    assert '**Warning:** localhost gpulab-rpc-server-0: 15 of 15 RPC connections stayed on TCP' in (report_dir / 'report.md').read_text()
    # the worker's weight cache, read on the node by role llama_rpc_server's entry point cache_status
    (worker,) = doc['rpc_cache']['workers']
    assert (worker['host'], worker['path'], worker['size_gib'], worker['bound_gib'], worker['files'], worker['over_bound']) == (
        'localhost', str(cache), 5.0, 8.0, 2, False)
    assert doc['rpc_cache']['note'] is None
    assert '| localhost | %s | 5.00 | 8.00 | 2 | no |' % cache in (report_dir / 'report.md').read_text()


def test_a_record_that_cannot_be_written_names_the_head_the_file_and_the_report(tmp_path):
    # the record's directory is a file: the write fails as a full disk would, after the report
    (tmp_path / 'BUILD_INFO.json').write_text(json.dumps({'build_id': 'b8070-test', 'cuda': False}))
    (tmp_path / 'state').write_text('not a directory\n')
    record = tmp_path / 'state' / 'last-run.json'
    with OpenAIDouble(ttft_s=0.01, itl_s=0.01) as server:
        run = run_in(tmp_path / 'runner', 'playbooks/bench.yml', inventory(),
                     bench_vars(tmp_path, server.base_url, gpulab_bench_last_run_file=str(record), bench_concurrency=[1]),
                     envvars=ENV)
    assert run.status == 'failed'
    # the copy's own failure (rescued), then the stop that names the head
    assert [task for dummy, task, dummy in run.failures] == [
        'Write the record of this benchmark on the head', 'Stop naming the head and the record that could not be written']
    failure = run.failures[-1]
    (report_dir,) = list((tmp_path / 'reports').iterdir())
    assert failure[2].startswith('localhost: the record of this benchmark, %s, cannot be written: ' % record)
    assert 'The report is written (%s)' % (report_dir / 'report.md') in failure[2]
