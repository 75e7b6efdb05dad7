#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_plan
short_description: Check a vLLM layout (TP, PP, DP, expert parallel) against a model and the GPUs before launch
description:
  - Reads a Hugging Face model directory (C(config.json), and the safetensors headers for the
    exact bytes of every tensor; no weights are read) and checks a requested vLLM layout against
    the rules vLLM enforces or trips over while loading - attention and KV heads against TP,
    tensor-sharded expert FFN against the FP8 block size, experts against the EP size,
    TP x PP x DP against the GPUs, and memory.
  - Memory per GPU - the weights this GPU holds under the layout, against memory x
    O(gpu_memory_utilization) less O(reserve_mib); what is left is the KV cache, reported as KV
    tokens per GPU and the concurrency it supports at O(max_model_len).
  - Returns C(valid), findings a person can act on, the per-GPU estimate, and the valid layouts
    for the same hardware ranked (every GPU used, then fewer pipeline stages, then the most KV
    capacity).
  - Resolves the model's reasoning and tool-call parsers (per-model defaults, overridable) and
    fails on a name vLLM 0.24 does not register.
  - Reads only; never changes the host. An invalid layout does not fail the module; the caller
    decides (the C(vllm_server) role fails with the findings).
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - gpulab.inference.read_only
options:
  model_path:
    description:
      - Hugging Face model directory with C(config.json). With C(model.safetensors.index.json) its
        shards are read, else every C(*.safetensors) file; without any, sizes are estimated from
        C(config.json) for the architectures the module knows (MiniMax-M2, Qwen3-MoE, Mixtral,
        Llama, Qwen2, Qwen3, Mistral).
    type: path
    required: true
  nodes:
    description:
      - The nodes the layout spans, each with C(name) and C(gpus) (the C(gpulab_gpus) facts of
        C(gpulab.inference.gpu_facts); only C(memory_total_mib) is used, and C(kept_mib), the MiB
        services kept beside vLLM hold there). Every node must have the same number of GPUs.
      - Give either O(nodes) or O(gpus).
    type: list
    elements: dict
  gpus:
    description: The GPUs of a single node (C(gpulab_gpus) facts); shorthand for one entry in O(nodes).
    type: list
    elements: dict
  residency:
    description:
      - Per node name, what M(gpulab.inference.gpu_residency) reports there (C(residency)). Each GPU it
        lists gets as C(kept_mib) its memory less what is available - free, plus what O(own_units)
        hold, plus what O(drained) frees - in whole 256 MiB steps, so that a few MiB of drift leave the
        plan and the pinned KV cache as they were; kept memory within the part of the GPU that
        O(gpu_memory_utilization) leaves to others counts as 0, as it lowers nothing.
    type: dict
  own_units:
    description:
      - The collection's serving units (shell patterns); their memory counts as available, since a redeploy replaces them.
      - A process under a program counts as the unit it stands for (V(gpulab-rpc-server-0) as
        V(gpulab-rpc-server@0.service)).
    type: list
    elements: str
    default: []
  drained:
    description: Per node name, M(gpulab.inference.gpu_drain)'s C(consumers) in check mode; what it would stop counts as available.
    type: dict
  kept:
    description:
      - With O(residency), per node name its kept services - C(keep) (the C(gpu_drain_keep) patterns), C(history)
        (the RV(gpulab.inference.gpu_residency#module:kept_history) read there) and C(stated) (the operator's
        C(gpulab_kept_mib)). What each kept service held when last seen running, or the stated MiB, counts as kept on
        its GPUs whether it runs at plan time or not (what it holds now is already out of the free memory), so a kept
        service that was down or still loading can start again beside vLLM; RV(kept_room) says what and why.
    type: dict
  tensor_parallel_size:
    description:
      - C(--tensor-parallel-size), or V(auto).
      - Where any of the four layout options is V(auto), the layout is chosen over every GPU
        (vLLM's rules, memory, then KV capacity) keeping the values given; see RV(choice).
    type: raw
    default: 1
  pipeline_parallel_size:
    description: C(--pipeline-parallel-size), or V(auto).
    type: raw
    default: 1
  data_parallel_size:
    description: C(--data-parallel-size), or V(auto).
    type: raw
    default: 1
  enable_expert_parallel:
    description:
      - C(--enable-expert-parallel), or V(auto); experts are placed whole over TP x DP GPUs instead
        of tensor-sharded.
    type: raw
    default: false
  pin_kv_cache:
    description:
      - Pass the planned KV cache per GPU as C(--kv-cache-memory-bytes), so vLLM skips its memory
        profiling and a restart holds what was planned; C(--gpu-memory-utilization) is lowered
        where kept services (a GPU's C(kept_mib)) leave less than it asks for at start-up.
    type: bool
    default: true
  gpu_memory_utilization:
    description: C(--gpu-memory-utilization), the fraction of each GPU's memory vLLM may use.
    type: float
    default: 0.9
  max_model_len:
    description: C(--max-model-len) in tokens; null takes the model's C(max_position_embeddings), as vLLM does.
    type: int
  kv_cache_dtype:
    description: C(--kv-cache-dtype); V(auto) is the model's dtype.
    type: str
    default: auto
    choices: [auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2]
  reserve_mib:
    description:
      - Memory per GPU kept out of the KV cache for activations, CUDA graphs and communication
        buffers, an estimate (vLLM measures its own at start-up).
    type: int
    default: 4096
  reasoning_parser:
    description: C(--reasoning-parser); null takes the model's default, an empty string none.
    type: str
  tool_call_parser:
    description: C(--tool-call-parser); null takes the model's default, an empty string none.
    type: str
  ranked_limit:
    description: How many valid layouts to return in RV(ranked).
    type: int
    default: 10
  host:
    description: C(--host) of the API server.
    type: str
    default: 127.0.0.1
  port:
    description: C(--port) of the API server.
    type: int
    default: 8000
  served_model_name:
    description: C(--served-model-name); null lets vLLM name the model by its path.
    type: str
  enforce_eager:
    description: C(--enforce-eager) (no CUDA graphs; faster start, slower decode).
    type: bool
    default: false
  serving_intent:
    description:
      - What the lab serves (role C(common)'s C(gpulab_serving_intent)). Where a layout option is V(auto), the valid
        layouts are ranked for it - V(interactive) the lowest per-token latency (TP within a node, no DP), V(throughput)
        the highest aggregate (EP with the most DP engines); it also resolves O(max_num_seqs),
        O(max_num_batched_tokens) and O(cudagraph_capture_sizes) left at V(auto). RV(intent) says what it set and why.
      - Null ranks by KV capacity and leaves the three at vLLM's defaults.
    type: str
    choices: [interactive, throughput]
  serving_concurrency:
    description: The streams a V(throughput) lab serves at once (C(gpulab_serving_concurrency)); C(--max-num-seqs) is at least this.
    type: int
    default: 4
  max_num_seqs:
    description: C(--max-num-seqs), sequences one engine schedules at once, or V(auto) (the serving intent's).
    type: raw
    default: auto
  max_num_batched_tokens:
    description: C(--max-num-batched-tokens), tokens one engine step holds, or V(auto) (the serving intent's).
    type: raw
    default: auto
  cudagraph_capture_sizes:
    description:
      - C(--cudagraph-capture-sizes), the decode batch sizes captured as CUDA graphs, or V(auto) (the serving intent's -
        every size up to O(max_num_seqs) for V(interactive), vLLM's list up to C(--max-cudagraph-capture-size 512) for
        V(throughput)).
    type: raw
    default: auto
  extra_args:
    description: More C(vllm serve) arguments, appended as given.
    type: list
    elements: str
    default: []
  node_rank:
    description: This node's rank in O(nodes) (0 is the head, which serves the API).
    type: int
    default: 0
  master_addr:
    description: The head's address on the fabric, for layouts over several nodes.
    type: str
  master_port:
    description: C(--master-port) of vLLM's multi-node launcher.
    type: int
    default: 29501
  dp_rpc_port:
    description: C(--data-parallel-rpc-port) when data-parallel engines are spread over the nodes.
    type: int
    default: 13345
  distributed_backend:
    description: V(mp) - vLLM's own launcher (C(--nnodes), C(--headless) followers); V(ray) - a Ray cluster the followers join.
    type: str
    default: mp
    choices: [mp, ray]
  service:
    description:
      - The service of this node. Given, the module also returns RV(wrapper), RV(environment), RV(unit_file) and
        RV(program_user), what the vllm_server role's templates render; every value is refused when it holds a newline
        or another character that would break the wrapper or the unit.
    type: dict
    suboptions:
      node_name:
        description: The node's inventory name, named in the wrapper's comments.
        type: str
      install:
        description: How vLLM is installed; V(container) runs it as root inside the container (no account, no hardening).
        type: str
        choices: [pip, preinstalled, container]
        required: true
      service_manager:
        description: What runs the wrapper, named in its comments.
        type: str
        choices: [systemd, supervisor]
        required: true
      vllm_command:
        description: The C(vllm) command (the binary, or the C(podman run) line whose entrypoint it is).
        type: list
        elements: str
        required: true
      ray_command:
        description: The C(ray) command, likewise.
        type: list
        elements: str
        required: true
      ray_port:
        description: Port of the Ray head.
        type: int
        default: 6379
      fabric_address:
        description: This node's fabric address (C(VLLM_HOST_IP), Ray's C(--node-ip-address)); empty where it has none.
        type: str
        default: ""
      user:
        description: The service account.
        type: str
        default: gpulab-vllm
      group:
        description: Its group.
        type: str
        default: gpulab-vllm
      unit:
        description: The unit's (and the wrapper's) name.
        type: str
        default: gpulab-vllm
      bin_dir:
        description: Directory of the wrapper.
        type: str
        default: /opt/gpulab/bin
      env_file:
        description: The environment file systemd reads (C(EnvironmentFile=)).
        type: str
        required: true
      rdma_env_file:
        description: The fabric's NCCL/Gloo environment file (role roce), read when it exists.
        type: str
        required: true
      api_key_file:
        description: The file the wrapper reads C(VLLM_API_KEY) from; empty where no key is set.
        type: str
        default: ""
      cache_dir:
        description: HOME of the service outside a container (C(ReadWritePaths=)).
        type: str
        required: true
      environment:
        description: More environment (vllm_server_environment), after the collection's own.
        type: dict
        default: {}
      hardening:
        description: systemd hardening, directive to value; a value of V(null) leaves the directive out.
        type: dict
        default: {}
      cuda_devices:
        description: Device groups the unit opens (C(DeviceAllow=)) outside a container.
        type: list
        elements: str
        default: []
      restart_sec:
        description: C(RestartSec=) after a crash.
        type: int
        default: 30
      start_limit_burst:
        description: C(StartLimitBurst=).
        type: int
        default: 3
      start_limit_interval_s:
        description: C(StartLimitIntervalSec=).
        type: int
        default: 1800
"""

EXAMPLES = r"""
- name: Check MiniMax-M2.5 with TP=8 and expert parallelism on this node's GPUs
  gpulab.inference.vllm_plan:
    model_path: /srv/models/MiniMax-M2.5
    gpus: "{{ ansible_facts.gpulab_gpus }}"
    tensor_parallel_size: 8
    enable_expert_parallel: true
    max_model_len: 196608
  register: vllm_layout

- name: Fail with the findings when the layout cannot run
  ansible.builtin.assert:
    that: vllm_layout.valid
    fail_msg: "{{ vllm_layout.errors | join('; ') }} (valid: {{ vllm_layout.ranked | map(attribute='label') | join(', ') }})"

- name: Check a two-node layout
  gpulab.inference.vllm_plan:
    model_path: /srv/models/MiniMax-M2.5
    nodes:
      - {name: node-a, gpus: "{{ node_a_gpus }}"}
      - {name: node-b, gpus: "{{ node_b_gpus }}"}
    tensor_parallel_size: 8
    data_parallel_size: 2
    enable_expert_parallel: true
"""

RETURN = r"""
valid:
  description: Whether the requested layout passes every rule.
  returned: success
  type: bool
  sample: true
label:
  description: The layout in short, e.g. C(TP=8+EP).
  returned: success
  type: str
  sample: TP=8+EP
layout:
  description: The requested layout.
  returned: success
  type: dict
  sample: {tensor_parallel_size: 8, pipeline_parallel_size: 1, data_parallel_size: 1, enable_expert_parallel: true}
findings:
  description: One entry per rule that spoke, with C(rule), C(level) (error or warning), C(message) and C(source) (the vLLM file).
  returned: success
  type: list
  elements: dict
errors:
  description: The messages of the error findings.
  returned: success
  type: list
  elements: str
warnings_found:
  description: The messages of the warning findings (also issued as module warnings).
  returned: success
  type: list
  elements: str
estimate:
  description:
    - Per-GPU estimate, null when the layout needs more GPUs than exist. C(weights_gib) on the
      fullest GPU, C(weights_bytes), C(weights_mib), C(weights_by_role_mib), C(budget_gib), C(reserve_gib), C(kv_cache_gib),
      C(kv_bytes_per_token), C(kv_tokens_per_gpu) (as vLLM logs "GPU KV cache size"; with several layer types
      max_model_len x the requests the cache's pages hold), C(kv_tokens_total) (over DP engines),
      C(concurrency_at_max_model_len), C(recurrent_state_bytes_per_sequence) (hybrid models), C(gpu_memory_gib).
  returned: success
  type: dict
kept_room:
  description:
    - With O(kept), C(reserved) (node to C(gpus), GPU index to C(reserved_mib) and C(why), and C(unknown), the kept
      patterns without a figure) and C(lines), one per reservation.
  returned: success
  type: dict
choice:
  description:
    - How the layout was chosen, C(reason) (one sentence), C(rejected) (the first layouts turned
      down, each with C(label), C(layout), C(rules) and C(findings)), C(alternatives) (valid
      layouts ranked lower) and C(summary) (the reason and the turned-down layouts in one line); a
      layout set completely is kept and only checked.
  returned: success
  type: dict
intent:
  description:
    - The serving intent and what it set - C(intent), C(concurrency), C(max_num_seqs), C(max_num_batched_tokens),
      C(cudagraph_capture_sizes) (a list, or null), C(max_cudagraph_capture_size) (or null), C(reasons) (one sentence
      per value, a value set by the operator said to be so), C(set_by_intent) (the values it set), C(layout_reason);
      null without O(serving_intent).
  returned: success
  type: dict
kv_cache_memory_bytes:
  description: The KV cache pinned per GPU (C(--kv-cache-memory-bytes)); null when not pinned or invalid.
  returned: success
  type: int
ranked:
  description: Valid layouts for the same hardware, best first, each with C(label), C(layout), C(estimate), C(warnings).
  returned: success
  type: list
  elements: dict
hardware:
  description: C(nodes), C(gpus_per_node), C(gpus_total), C(gpu_memory_mib) (the smallest GPU).
  returned: success
  type: dict
model:
  description:
    - What was read - C(architecture), C(model_type), C(layers), C(heads), C(kv_heads), C(head_dim),
      C(experts), C(expert_ffn_size), C(quantization), C(parameters), C(weights_bytes), and
      C(tensor_source) (V(safetensors), V(index) or V(config)).
  returned: success
  type: dict
serve_args:
  description:
    - The C(vllm serve) arguments for this node (without the C(vllm) command and the API key), empty when the
      layout is invalid or this node is a Ray worker.
  returned: success
  type: list
  elements: str
  sample: [serve, /srv/models/m, --host, 127.0.0.1, --port, "8000", --tensor-parallel-size, "8", --enable-expert-parallel]
node_role:
  description: V(head) (serves the API), V(follower) (C(--headless)) or V(ray-worker); null when the layout is invalid.
  returned: success
  type: str
  sample: head
max_model_len:
  description: The max_model_len checked (the model's own when none was given).
  returned: success
  type: int
reasoning_parser:
  description: The C(--reasoning-parser) to pass, or null.
  returned: success
  type: str
  sample: minimax_m2_append_think
tool_call_parser:
  description: The C(--tool-call-parser) to pass, or null.
  returned: success
  type: str
  sample: minimax_m2
wrapper:
  description:
    - The wrapper script, as the template renders it - C(comments), C(environment) (exports, empty here),
      C(file_environment) (C(VLLM_API_KEY) read from O(service.api_key_file)), C(preludes) (C(ray start --head) where
      the nodes meet over Ray) and C(argv_lines) (the command exec'd with C("$@"), one list per script line; C(argv)
      the same, flat).
  returned: when O(service) is given and the layout is valid
  type: dict
environment:
  description: The service's environment in the environment file's order, each C(name), C(value) and C(why) (empty).
  returned: when O(service) is given and the layout is valid
  type: list
  elements: dict
unit_file:
  description: The unit, C(comments) and the lines of its C(unit), C(service) and C(install) sections.
  returned: when O(service) is given and the layout is valid
  type: dict
program_user:
  description: The account the program runs as under the manager C(supervisor); empty inside a container (root there).
  returned: when O(service) is given and the layout is valid
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import layout_vllm as lv
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_service as vs
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import MANAGERS

INDEX_NAME = "model.safetensors.index.json"
# a safetensors header larger than this is not one (the format caps it at 100 MB)
MAX_HEADER_BYTES = 100 * 1000 * 1000


def read_json(path, what):
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        raise vp.VllmPlanError("cannot read %s %s: %s" % (what, path, exc))
    except (ValueError, UnicodeDecodeError) as exc:
        raise vp.VllmPlanError("%s %s is not valid JSON: %s" % (what, path, exc))


def read_safetensors_header(path):
    """Read only the header of a safetensors file: 8 bytes of length, then the JSON."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise vp.VllmPlanError("%s is not a safetensors file: shorter than 8 bytes" % path)
            length = int.from_bytes(head, "little")
            if length > MAX_HEADER_BYTES:
                raise vp.VllmPlanError("%s is not a safetensors file: header length %d" % (path, length))
            return hf.parse_safetensors_header(head + handle.read(length), path)
    except (IOError, OSError) as exc:
        raise vp.VllmPlanError("cannot read %s: %s" % (path, exc))


def read_model(model_path):
    """config.json, the tensors with exact sizes (or None) and where they came from."""
    if not os.path.isdir(model_path):
        raise vp.VllmPlanError("model_path %s is not a directory; give the Hugging Face model directory" % model_path)
    config_path = os.path.join(model_path, "config.json")
    if not os.path.isfile(config_path):
        raise vp.VllmPlanError("model directory %s has no config.json: it is not a Hugging Face model directory "
                               "(download the whole repository, or write one with gpulab.inference.synthetic_hf)" % model_path)
    config = read_json(config_path, "config")
    index_path = os.path.join(model_path, INDEX_NAME)
    if os.path.isfile(index_path):
        index = read_json(index_path, "safetensors index")
        files = hf.index_files(index, index_path)
        missing = [f for f in files if not os.path.isfile(os.path.join(model_path, f))]
        if missing:
            metadata = index.get("metadata")
            total = metadata.get("total_size") if isinstance(metadata, dict) else None
            return config, None, "index", total if isinstance(total, int) and not isinstance(total, bool) else None, missing
    else:
        files = sorted(f for f in os.listdir(model_path) if f.endswith(".safetensors"))
    if not files:
        return config, None, "config", None, []
    tensors = {}
    for name in files:
        tensors.update(read_safetensors_header(os.path.join(model_path, name)))
    return config, tensors, "safetensors", None, []


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path", required=True),
            nodes=dict(type="list", elements="dict"),
            gpus=dict(type="list", elements="dict"),
            tensor_parallel_size=dict(type="raw", default=1),
            pipeline_parallel_size=dict(type="raw", default=1),
            data_parallel_size=dict(type="raw", default=1),
            enable_expert_parallel=dict(type="raw", default=False),
            residency=dict(type="dict"),
            own_units=dict(type="list", elements="str", default=[]),
            drained=dict(type="dict"),
            kept=dict(type="dict"),
            pin_kv_cache=dict(type="bool", default=True),
            gpu_memory_utilization=dict(type="float", default=0.9),
            max_model_len=dict(type="int"),
            kv_cache_dtype=dict(type="str", default="auto", choices=sorted(vp.KV_CACHE_DTYPE_BYTES)),
            reserve_mib=dict(type="int", default=vp.DEFAULT_RESERVE_MIB),
            reasoning_parser=dict(type="str"),
            tool_call_parser=dict(type="str"),
            ranked_limit=dict(type="int", default=10),
            host=dict(type="str", default="127.0.0.1"),
            port=dict(type="int", default=8000),
            served_model_name=dict(type="str"),
            enforce_eager=dict(type="bool", default=False),
            serving_intent=dict(type="str", choices=list(la.INTENTS)),
            serving_concurrency=dict(type="int", default=la.DEFAULT_CONCURRENCY),
            max_num_seqs=dict(type="raw", default=la.AUTO),
            max_num_batched_tokens=dict(type="raw", default=la.AUTO, no_log=False),
            cudagraph_capture_sizes=dict(type="raw", default=la.AUTO),
            extra_args=dict(type="list", elements="str", default=[]),
            node_rank=dict(type="int", default=0),
            master_addr=dict(type="str"),
            master_port=dict(type="int", default=29501),
            dp_rpc_port=dict(type="int", default=13345),
            distributed_backend=dict(type="str", default="mp", choices=list(vp.DISTRIBUTED_BACKENDS)),
            service=dict(type="dict", options=dict(
                node_name=dict(type="str"),
                install=dict(type="str", choices=list(vs.INSTALLS), required=True),
                service_manager=dict(type="str", choices=list(MANAGERS), required=True),
                vllm_command=dict(type="list", elements="str", required=True),
                ray_command=dict(type="list", elements="str", required=True),
                ray_port=dict(type="int", default=6379),
                fabric_address=dict(type="str", default=""),
                user=dict(type="str", default="gpulab-vllm"),
                group=dict(type="str", default="gpulab-vllm"),
                unit=dict(type="str", default="gpulab-vllm"),
                bin_dir=dict(type="str", default="/opt/gpulab/bin"),
                env_file=dict(type="str", required=True),
                rdma_env_file=dict(type="str", required=True),
                api_key_file=dict(type="str", default=""),
                cache_dir=dict(type="str", required=True),
                environment=dict(type="dict", default={}),
                hardening=dict(type="dict", default={}),
                cuda_devices=dict(type="list", elements="str", default=[]),
                restart_sec=dict(type="int", default=30),
                start_limit_burst=dict(type="int", default=3),
                start_limit_interval_s=dict(type="int", default=1800),
            )),
        ),
        required_one_of=[("nodes", "gpus")],
        mutually_exclusive=[("nodes", "gpus")],
        supports_check_mode=True,
    )


def run(module):
    p = module.params
    vp.check_launch(p)
    config, tensors, source, index_total, missing = read_model(p["model_path"])
    if missing:
        module.warn("the index names shard(s) missing from %s (%s): sizes are estimated from config.json"
                    % (p["model_path"], ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")))
    nodes = p["nodes"] if p["nodes"] is not None else [{"name": "this node", "gpus": p["gpus"]}]
    reserved = {}
    if p["residency"]:
        reserved = kept_room.reserve_on_nodes(p["kept"], p["residency"])
        nodes = lv.nodes_with_kept(nodes, p["residency"], p["own_units"], p["drained"], p["gpu_memory_utilization"],
                                   reserved)
    given = layout_values(p)
    opts = {"gpu_memory_utilization": p["gpu_memory_utilization"], "max_model_len": p["max_model_len"],
            "kv_cache_dtype": p["kv_cache_dtype"], "reserve_mib": p["reserve_mib"]}
    if any(la.is_auto(v) for v in given.values()):
        shape, summary, hw, checked, _tensors = vp.plan_inputs(config, tensors, nodes, opts, p["model_path"])
        choice = lv.choose_vllm_layout(summary, shape, hw, checked, given, intent=p["serving_intent"])
        layout = choice["layout"]
        choice = {"reason": choice["reason"], "rejected": choice["rejected"], "alternatives": choice["alternatives"],
                  "summary": lv.summary_line(choice["reason"], choice["rejected"])}
    else:
        layout = vp.Layout(given["tensor_parallel_size"], given["pipeline_parallel_size"], given["data_parallel_size"],
                           given["enable_expert_parallel"])
        reason = "%s as set" % layout.label()
        choice = {"reason": reason, "rejected": [], "alternatives": [], "summary": lv.summary_line(reason, [])}
    result = vp.plan(config, tensors, source, nodes, layout, opts, p["reasoning_parser"], p["tool_call_parser"],
                     where=p["model_path"])
    result["choice"] = choice
    result["kept_room"] = {"reserved": reserved, "lines": kept_room.reserved_lines(reserved)}
    result["kv_cache_memory_bytes"] = None
    if index_total:
        result["model"]["index_total_size"] = index_total
    result["ranked"] = result["ranked"][:max(0, p["ranked_limit"])]
    result["intent"] = intent_settings(p, choice["reason"])
    result["serve_args"], result["node_role"] = [], None
    if result["valid"]:
        keys = ("host", "port", "served_model_name", "node_rank", "master_addr", "master_port", "dp_rpc_port",
                "enforce_eager", "extra_args")
        launch = dict((k, p[k]) for k in keys)
        launch.update(backend=p["distributed_backend"], reasoning_parser=result["reasoning_parser"],
                      tool_call_parser=result["tool_call_parser"],
                      batch_args=lv.vllm_batch_arguments(result["intent"]) if result["intent"] else [])
        opts["max_model_len"] = result["max_model_len"]
        if p["pin_kv_cache"]:
            hw = result["hardware"]
            opts["gpu_memory_utilization"] = vp.startup_utilization(hw["gpu_memory_mib"], opts["gpu_memory_utilization"],
                                                                    hw["kept_mib"])
            opts["kv_cache_memory_bytes"] = result["kv_cache_memory_bytes"] = result["estimate"]["kv_cache_memory_bytes"]
        command = vp.serve_arguments(p["model_path"], layout, opts, result["hardware"], launch)
        result["serve_args"], result["node_role"] = command["args"], command["role"]
        if p["service"] is not None:
            service = dict(p["service"], master_addr=p["master_addr"], distributed_backend=p["distributed_backend"])
            plan_info = {"label": result["label"], "nodes": result["hardware"]["nodes"], "estimate": result["estimate"],
                         "model_path": p["model_path"]}
            result.update(vs.service_files_of(service, plan_info, command["role"], command["args"]))
    return result


def intent_settings(params, layout_reason):
    """What the serving intent sets (layout_vllm.vllm_batch_choice) with the layout's reason; None
    without an intent, where vLLM keeps its own batch defaults."""
    if params["serving_intent"] is None:
        return None
    batch = lv.vllm_batch_choice(params["serving_intent"], params["serving_concurrency"], params["max_num_seqs"],
                                 params["max_num_batched_tokens"], params["cudagraph_capture_sizes"],
                                 params["enforce_eager"])
    return dict(batch, intent=params["serving_intent"], concurrency=params["serving_concurrency"],
                layout_reason=layout_reason)


def layout_values(params):
    """The four layout options, each a whole number >= 1 (a bool for expert parallel) or auto."""
    values = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel"):
        value = params[key]
        if la.is_auto(value):
            values[key] = la.AUTO
            continue
        try:
            if key == "enable_expert_parallel":
                values[key] = boolean(value, strict=True)
            else:
                if isinstance(value, bool) or int(str(value).strip()) < 1:
                    raise ValueError(value)
                values[key] = int(str(value).strip())
        except (TypeError, ValueError):
            raise vp.VllmPlanError("%s is %r; give %s or auto" % (
                key, value, "true or false" if key == "enable_expert_parallel" else "a whole number of 1 or more"))
    return values


def main():
    module = build_module()
    try:
        result = run(module)
    except (vp.VllmPlanError, hf.CheckpointError, la.AutoError, kept_room.KeptRoomError) as exc:
        module.fail_json(msg=str(exc))
    for warning in result["warnings"]:
        module.warn(warning)
    result["warnings_found"] = result.pop("warnings")
    result["max_model_len"] = result.pop("max_model_len", None)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
