#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_plan
short_description: Plan a model on some GPUs before it is downloaded, reading only its headers
description:
  - Reads a model where it lies - a GGUF model's header and tensor table from every shard, or a Hugging
    Face checkpoint's C(config.json), index and every safetensors header - through HTTP C(Range)
    requests to the mirror (the model role's client) or from a directory on the machine it runs on;
    never the weights.
  - Ranks the layouts of the engine the format allows on the given nodes - for llama.cpp every node
    together and each node alone, with the whole-layer split and the largest context that fit; for
    vLLM the layout chosen over every GPU, the valid ones ranked lower and those turned down with
    their reasons - and, when the model fits nowhere, names the smallest hardware of the same GPUs
    that would hold it.
  - Reads only; changes nothing.
version_added: "0.3.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  source:
    description:
      - Where the model lies, as C(model_source) says it - an http(s) mirror URL or an absolute path, naming
        the GGUF file (the first shard of a split model) or the checkpoint's directory.
    type: str
    required: true
  hf_layout:
    description: The mirror serves C(<base>/resolve/main/<file>) (C(model_source_hf_layout)).
    type: bool
    default: false
  hardware:
    description:
      - "The nodes to plan for, the head first - a list of C({name, gpus, memory_gib}) (C(gpus) a count)
        or C({name, gpus: [{memory_gib, kept_gib}]}); C(_mib) instead of C(_gib) works too. C(kept) is
        what services that stay hold on that GPU."
      - Exactly one of O(hardware) and O(residency).
    type: raw
  residency:
    description:
      - The lab's GPUs instead - host to the C(residency) of M(gpulab.inference.gpu_residency); what is
        neither free nor held by O(own_units) counts as kept.
      - Exactly one of O(hardware) and O(residency).
    type: dict
  head:
    description: With O(residency), the head's host name (the first node).
    type: str
  vllm_nodes:
    description:
      - With O(residency), the nodes besides the head that a vLLM deployment spans (group C(vllm_nodes)); a checkpoint
        is planned over the head and these only. Hypothetical O(hardware) is planned as given.
    type: list
    elements: str
    default: []
  kept:
    description:
      - With O(residency), per host its kept services - C(keep) (the C(gpu_drain_keep) patterns), C(history) (the
        RV(gpulab.inference.gpu_residency#module:kept_history) read there) and C(stated) (C(gpulab_kept_mib)). What a
        kept service held when last seen running, or the stated MiB, counts as kept whether it runs now or not;
        RV(lines) ends with what was reserved and why.
    type: dict
  own_units:
    description: With O(residency), the collection's serving units (C(gpulab_own_unit_patterns)), whose memory counts as free.
    type: list
    elements: str
    default: []
  hardware_variable:
    description: The variable O(hardware) came from, named in errors.
    type: str
    default: plan_hardware
  engine:
    description: C(gpulab_engine) - an engine of O(engines), or V(auto), which follows the model's format.
    type: str
    default: auto
  engines:
    description: Role common's engine table, C(gpulab_engines) - which formats each engine serves.
    type: dict
    required: true
  llama:
    description:
      - llama.cpp's options as C(gguf_plan) takes them - C(parallel) (default 1; V(auto) sets it from C(serving_intent),
        V(interactive) or V(throughput) (default), and C(serving_concurrency) (default 4)), C(ctx_size) (V(auto) or tokens),
        C(cache_type_k), C(cache_type_v), C(flash_attn), C(margin_mib) (default 1024), C(cuda_context_mib) (default 720),
        C(cuda_idle_context_mib) (default 518).
    type: dict
    default: {}
  vllm:
    description:
      - vLLM's options as C(vllm_plan) takes them - C(gpu_memory_utilization) (default 0.9), C(max_model_len)
        (default the model's), C(kv_cache_dtype) (default V(auto)), C(reserve_mib) (default 4096).
    type: dict
    default: {}
  timeout_s:
    description: Socket timeout of each request to the mirror.
    type: int
    default: 30
notes:
  - The mirror must answer C(Range) requests with 206; one that does not is refused before anything
    larger than a header is read.
seealso:
  - module: gpulab.inference.gguf_plan
  - module: gpulab.inference.vllm_plan
"""

EXAMPLES = r"""
- name: Will the mirror's GGUF fit on the lab, and how
  gpulab.inference.model_plan:
    source: http://10.231.77.5/MiniMax-M2.7-Q8_0-00001-of-00006.gguf
    hardware:
      - {name: node-a, gpus: 2, memory_gib: 95}
      - {name: node-b, gpus: [{memory_gib: 95, kept_gib: 10}]}
    engines: "{{ gpulab_engines }}"
  register: plan

- name: What if a checkpoint ran on eight 96 GB GPUs
  gpulab.inference.model_plan:
    source: http://10.231.77.5/hf/MiniMaxAI/MiniMax-M2.5
    hf_layout: true
    hardware: [{name: box, gpus: 8, memory_gib: 95.6}]
    engines: "{{ gpulab_engines }}"
    vllm:
      max_model_len: 196608

- name: A model in a directory on this machine
  gpulab.inference.model_plan:
    source: /srv/models/synthetic-minimax-m2-00001-of-00002.gguf
    hardware: "{{ plan_hardware }}"
    engines: "{{ gpulab_engines }}"
    llama:
      parallel: 4
"""

RETURN = r"""
format:
  description: V(gguf) or V(hf).
  returned: success
  type: str
engine:
  description: C(engine) (an engine of O(engines)) and C(reason).
  returned: success
  type: dict
table:
  description:
    - The engine's ranked layouts - C(rows), C(smallest_fitting) (null unless nothing fits), and for vLLM
      C(error) when no layout can run; llama.cpp rows carry per device weights, KV cache, compute and headroom.
    - C(structure) names the family's attention and cache. A family whose cache is not modelled is named
      there; its rows keep the weights and, instead of a figure, null C(ctx_size) and C(kv_tokens)
      (llama.cpp) or null C(kv_tokens) and C(concurrency) (vLLM).
  returned: success
  type: dict
lines:
  description: The table as lines for the play's output, then the kept services' reservations (O(kept)).
  returned: success
  type: list
  elements: str
size_bytes:
  description: The model's files, in bytes (from the mirror's Content-Length or the file sizes).
  returned: success
  type: int
bytes_read:
  description: Bytes read from the source to plan (headers, SHA256SUMS, the index).
  returned: success
  type: int
requests:
  description: Reads made from the source.
  returned: success
  type: int
hardware:
  description: The nodes planned for, as read from O(hardware).
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import engines as en
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import model_header as mh
from ansible_collections.gpulab.inference.plugins.module_utils import model_plan as mp
from ansible_collections.gpulab.inference.plugins.module_utils import model_transfer as mt
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp

LLAMA_DEFAULTS = {"parallel": 1, "ctx_size": la.AUTO, "margin_mib": 1024, "cuda_context_mib": 720,
                  "cuda_idle_context_mib": 518}
VLLM_DEFAULTS = {"gpu_memory_utilization": 0.9, "max_model_len": None, "kv_cache_dtype": "auto",
                 "reserve_mib": vp.DEFAULT_RESERVE_MIB}


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", required=True),
            hf_layout=dict(type="bool", default=False),
            hardware=dict(type="raw"),
            residency=dict(type="dict"),
            head=dict(type="str"),
            vllm_nodes=dict(type="list", elements="str", default=[]),
            own_units=dict(type="list", elements="str", default=[]),
            kept=dict(type="dict"),
            hardware_variable=dict(type="str", default="plan_hardware"),
            engine=dict(type="str", default="auto"),
            engines=dict(type="dict", required=True),
            llama=dict(type="dict", default={}),
            vllm=dict(type="dict", default={}),
            timeout_s=dict(type="int", default=30),
        ),
        required_one_of=[("hardware", "residency")],
        mutually_exclusive=[("hardware", "residency")],
        required_by={"residency": "head"},
        supports_check_mode=True,
    )


def run(params):
    kept_lines = []
    if params["residency"] is not None:
        reserved = kept_room.reserve_on_nodes(params["kept"], params["residency"])
        kept_lines = kept_room.reserved_lines(reserved)
        nodes = mp.nodes_from_residency(params["head"], params["residency"], params["own_units"], dict(
            (host, dict((index, gpu["reserved_mib"]) for index, gpu in found["gpus"].items()))
            for host, found in reserved.items()))
    else:
        nodes = mh.parse_hardware(params["hardware"], params["hardware_variable"])
    source = mh.Source(params["source"], params["hf_layout"], params["timeout_s"])
    engine = en.choose_engine(params["engine"], source.format, params["engines"], params["source"])
    served = params["engines"][engine["engine"]]
    if source.format not in served["formats"]:
        raise en.EngineError("gpulab_engine is %s but %s is %s, which %s does not serve: set gpulab_engine to auto" % (
            engine["engine"], params["source"], en.FORMAT_WORDS[source.format], served["label"]))
    if source.format == "gguf":
        model = source.gguf_model()
        table = mp.llama_table(model, nodes, dict(LLAMA_DEFAULTS, **params["llama"]))
    else:
        config, tensors = source.hf_checkpoint()
        if params["residency"] is not None:
            nodes = mp.vllm_nodes(nodes, params["vllm_nodes"])
        table = mp.vllm_table(config, tensors or None, nodes, dict(VLLM_DEFAULTS, **params["vllm"]))
    return {
        "format": source.format,
        "engine": engine,
        "table": table,
        "lines": mp.table_lines(table) + kept_lines,
        "size_bytes": source.size_bytes,
        "bytes_read": source.counter.bytes_read,
        "requests": source.counter.requests,
        "hardware": nodes,
    }


def main():
    module = build_module()
    try:
        result = run(module.params)
    except (mh.HeaderError, la.AutoError, en.EngineError, gp.PlanError, vp.VllmPlanError, mt.ModelTransferError,
            kept_room.KeptRoomError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
