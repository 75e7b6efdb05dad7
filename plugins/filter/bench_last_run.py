# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: bench_last_run
short_description: Whether deploy.yml's bench step measures again
version_added: 0.2.0
description:
  - Compares the head's record of the last benchmark (O(_input), its text) with what is served now (O(services),
    every node's collection services from module C(service_status)) and the benchmark's settings
    (O(settings)); returns whether to measure, the reason, and the digest to record after measuring.
  - A service that started again has a new main PID (and, under systemd, a new invocation id), so any
    restart, deployment change or setting change measures again; a deploy that changed nothing leaves the
    last report standing, as long as that report is still on the controller (where filters run).
  - The rule lives in C(plugins/module_utils/bench_record.py).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description:
      - The record's text, a JSON object (C(identity), C(report), C(finished)); empty when there is none. Text that
        does not read as one counts as no record.
    type: str
    required: true
  services:
    description: Node name to the list of services C(service_status) returned for it.
    type: dict
    required: true
  settings:
    description: The benchmark's settings; any change measures again.
    type: dict
    required: true
  again:
    description: C(bench_again_unchanged), measure even when nothing changed.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Tell whether the last benchmark measured these same processes
  ansible.builtin.set_fact:
    __bench_last: "{{ record_text | gpulab.inference.bench_last_run(services, settings) }}"
"""

RETURN = r"""
_value:
  description: C(measure) (bool), C(reason) (str) and C(identity), the digest to record after measuring.
  type: dict
"""

import os.path

from ansible_collections.gpulab.inference.plugins.module_utils.bench_record import last_run, parse_record, served_identity


def bench_last_run(record_text, services, settings, again=False):
    record = parse_record(record_text)
    identity = served_identity(services, settings)
    report = record.get('report')
    report_exists = isinstance(report, str) and os.path.isfile(report)
    result = last_run(record, identity, report_exists, bool(again))
    result['identity'] = identity
    return result


class FilterModule:
    """The bench step's record of the last benchmark."""

    def filters(self):
        return {"bench_last_run": bench_last_run}
