# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether the bench step at the end of deploy.yml would measure again what the last benchmark
measured. The head keeps a record of each benchmark (bench_last_run_file): a digest of what was
served (every node's collection services, each with its main PID and systemd's invocation id, which
change on every start) and of the benchmark's settings, and the report that benchmark wrote. A deploy
that changed nothing served finds the same digest and leaves that report standing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

# The fields of a service (module service_status) that tell one run of it from the next. Not
# `started`: where a manager reports an uptime (service_status), it is computed and moves by a second.
RUN_FIELDS = ('name', 'state', 'main_pid', 'invocation_id')


def served_identity(services_by_node, settings):
    """A sha256 hex digest of what a benchmark measures: {node: [service_status services]} and the
    benchmark's settings (a JSON-able mapping). The order of nodes and services does not count."""
    nodes = {}
    for node, services in (services_by_node or {}).items():
        runs = [[service.get(field) for field in RUN_FIELDS] for service in services or []]
        nodes[str(node)] = sorted(runs, key=lambda run: json.dumps(run, default=str))
    document = {'nodes': nodes, 'settings': settings or {}}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode('utf-8')).hexdigest()


def parse_record(text):
    """The record as a mapping; {} for no record, an empty file or anything that is not a JSON object
    (a record half written by a run that was killed measures again instead of failing the deploy)."""
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def last_run(record, identity, report_exists, again):
    """{'measure': bool, 'reason': str} for the bench step of a deploy.

    record         the head's record of the last benchmark (identity, report, finished), or {} when none
    identity       served_identity() of now
    report_exists  whether the record's report is still on the controller
    again          bench_again_unchanged: measure even when nothing served changed
    """
    record = record if isinstance(record, dict) else {}
    if again:
        return {'measure': True, 'reason': 'bench_again_unchanged is true: measuring on every deploy'}
    if not record.get('identity'):
        return {'measure': True, 'reason': 'no earlier benchmark of this deployment on record'}
    if record['identity'] != identity:
        return {'measure': True,
                'reason': 'what is served or the benchmark settings changed since the benchmark of %s'
                          % record.get('finished', 'an earlier run')}
    if not report_exists:
        return {'measure': True, 'reason': 'the report of the last benchmark (%s) is gone' % record.get('report')}
    return {'measure': False,
            'reason': 'nothing served and no benchmark setting changed since the benchmark of %s: its report stands (%s); '
                      'set bench_again_unchanged: true, or run playbooks/bench.yml, to measure again'
                      % (record.get('finished', 'an earlier run'), record.get('report'))}
