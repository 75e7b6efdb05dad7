#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: chat_check
short_description: Send one chat completion to an OpenAI-compatible server and fail when no tokens come back
description:
  - Sends one question to C(<base_url>/v1/chat/completions) and returns the tokens, the generation speed
    (llama-server's C(timings)), the answer and the reasoning.
  - Fails naming the server and quoting its reply when the answer has no tokens, when it answers another
    status than 200, refuses the API key or cannot be reached.
  - With O(find_model), reads C(/v1/models) first and asks the first model listed (vLLM wants the id);
    fails when none is listed.
  - The check that roles C(llama_server) and C(vllm_server) and C(playbooks/report.yml) run after a
    deployment; changes nothing.
version_added: "0.4.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  base_url:
    description: The server's base URL, C(http://HOST:PORT) (filter C(gpulab.inference.server_url)).
    type: str
    required: true
  api_key:
    description: The API key, sent as a bearer token (C(Authorization) header); empty for a server without one.
    type: str
    default: ""
  prompt:
    description: The user's message.
    type: str
    required: true
  max_tokens:
    description: C(max_tokens) of the request.
    type: int
    default: 16
  model:
    description: The model to ask; empty sends none (llama-server answers with the model it loaded).
    type: str
    default: ""
  find_model:
    description: Ask the first model C(/v1/models) lists instead of O(model); fail when it lists none.
    type: bool
    default: false
  send:
    description: Send the question; V(false) only finds the model (O(find_model)).
    type: bool
    default: true
  timeout_s:
    description: Seconds each request may take.
    type: int
    default: 120
  name:
    description: How messages name the server, e.g. C(llama-server on node-a).
    type: str
    default: the server
"""

EXAMPLES = r"""
- name: Send one chat completion through the head
  gpulab.inference.chat_check:
    base_url: http://127.0.0.1:8080
    api_key: "{{ llama_server_api_key }}"
    prompt: Say hello in one word.
    max_tokens: 8
    name: llama-server on {{ inventory_hostname }}

- name: Ask vLLM the model it serves
  gpulab.inference.chat_check:
    base_url: http://127.0.0.1:8000
    prompt: Say hello in one word.
    find_model: true
    timeout_s: 300
    name: vLLM on {{ inventory_hostname }}
"""

RETURN = r"""
model:
  description: The model asked (the one O(find_model) found, or O(model)); null when none was named.
  returned: always
  type: str
  sample: minimax-m2
sent:
  description: Whether the question was sent (O(send)).
  returned: always
  type: bool
tokens:
  description: C(usage.completion_tokens) of the answer; null when nothing was sent.
  returned: always
  type: int
  sample: 8
tok_s:
  description: Tokens per second of the generation (llama-server's C(timings.predicted_per_second)); null without timings.
  returned: always
  type: float
  sample: 41.7
answer:
  description: The answer's C(content); null when nothing was sent.
  returned: always
  type: str
reasoning:
  description: The answer's C(reasoning) (or C(reasoning_content)), empty without a reasoning parser; null when nothing was sent.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import bench_client
from ansible_collections.gpulab.inference.plugins.module_utils.bench_stats import BenchInputError
from ansible_collections.gpulab.inference.plugins.module_utils.chat_check import ChatCheckError, check


ARGUMENT_SPEC = dict(
    base_url=dict(type="str", required=True),
    api_key=dict(type="str", default="", no_log=True),
    prompt=dict(type="str", required=True),
    max_tokens=dict(type="int", default=16, no_log=False),
    model=dict(type="str", default=""),
    find_model=dict(type="bool", default=False),
    send=dict(type="bool", default=True),
    timeout_s=dict(type="int", default=120),
    name=dict(type="str", default="the server"),
)


def build_module():
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def main():
    module = build_module()
    p = module.params
    if p["max_tokens"] < 1 or p["timeout_s"] < 1:
        module.fail_json(msg="max_tokens (%d) and timeout_s (%d) must be 1 or more" % (p["max_tokens"], p["timeout_s"]))
    try:
        endpoint = bench_client.Endpoint(p["base_url"], p["api_key"], p["timeout_s"])
        result = check(endpoint, p["prompt"], p["max_tokens"], p["name"], p["model"], p["find_model"], p["send"])
    except (ChatCheckError, bench_client.EndpointError, BenchInputError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
