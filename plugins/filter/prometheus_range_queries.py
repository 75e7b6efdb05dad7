# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: prometheus_range_queries
short_description: Prometheus range queries of the dashboard's GPU series over a benchmark's minutes
version_added: 0.2.0
description:
  - The URLs of Prometheus's C(/api/v1/query_range) for the expressions the monitoring dashboard draws GPU
    utilisation, power and memory with, over the sweep of O(_input) (its window, the endpoints compared after
    it included), every O(step_s) seconds.
  - The rule lives in C(plugins/module_utils/prometheus_series.py).
author:
  - gpulab.inference contributors (@gpulab)
options:
  _input:
    description: The C(benchmark) return value of M(gpulab.inference.llm_benchmark).
    type: dict
    required: true
  base_url:
    description: Prometheus's URL as its own host reaches it.
    type: str
    required: true
  step_s:
    description: Seconds between two points, Prometheus's scrape interval.
    type: float
    required: true
"""

EXAMPLES = r"""
- name: Ask Prometheus for the run's GPU series
  ansible.builtin.uri:
    url: "{{ item.url }}"
    return_content: true
  loop: "{{ (bench.benchmark | gpulab.inference.prometheus_range_queries('http://127.0.0.1:9090', 15)).queries }}"
"""

RETURN = r"""
_value:
  description:
    - C(window) (C(start_epoch), C(end_epoch), C(step_s); null without a window) and C(queries), each with
      C(figure) (utilisation, power, memory), C(expr) and C(url); empty without a window.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpulab.inference.plugins.module_utils.prometheus_series import range_queries


def prometheus_range_queries(benchmark, base_url, step_s):
    try:
        return range_queries(benchmark, base_url, step_s)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpulab.inference.prometheus_range_queries: %s" % exc)


class FilterModule:
    """The bench report's questions to Prometheus."""

    def filters(self):
        return {"prometheus_range_queries": prometheus_range_queries}
