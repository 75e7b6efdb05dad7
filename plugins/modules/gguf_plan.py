#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gguf_plan
short_description: Predict each device's memory for a GGUF model split by llama.cpp, before loading it
description:
  - Reads the header, metadata and tensor infos of a GGUF model (every shard of a split model),
    never its tensor data.
  - Assigns the layers to the devices the way llama.cpp's C(load_tensors) does for the given
    tensor split and O(n_gpu_layers) (the last layers are offloaded; the output layer follows the
    split like one more layer; the token embeddings stay on the CPU), and returns per device the
    layers held, weight MiB, KV cache MiB, an estimated compute buffer and whether it fits in the
    device's free memory with O(margin_mib) to spare.
  - Also returns the model's facts (architecture, layers, experts, total and active parameters,
    bytes read per token at decode, size on disk), the smallest set of devices that holds the
    model, and for every host whether its devices alone could hold it.
  - Weights and KV cache follow llama.cpp's arithmetic exactly up to buffer alignment; the
    compute buffer is an estimate.
  - Reads only; with O(record_file), keeps the prediction there.
version_added: "0.2.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Plans as in a real run; O(record_file) is not written.
  diff_mode:
    support: none
    description: No diff is returned.
options:
  path:
    description:
      - The model file, or the first shard (C(*-00001-of-0000N.gguf)) of a split model; every
        shard must sit beside it.
    type: path
    required: true
  devices:
    description:
      - The devices llama.cpp splits over, in its order (RPC devices in C(--rpc) order, then local
        GPUs). Each a dict with C(name), C(free_mib) (V(null) when unknown, and then that device is not
        checked), optional C(total_mib), C(host), C(kind), C(gpu_index) and C(cuda) (V(false) for a device that is
        not a GPU, such as an RPC server of a CPU build; default V(true)).
      - Exactly one of O(devices) and O(nodes).
    type: list
    elements: dict
  nodes:
    description:
      - The nodes instead of a device list; the devices are derived as llama.cpp will see them
        (RPC devices of the workers in order, then the head's GPUs when the build has CUDA).
      - C(head) (host name), C(workers) (host names in C(--rpc) order), C(cuda) (whether the
        deployed build has CUDA), C(residency) (host to the C(residency) of
        M(gpulab.inference.gpu_residency), with free memory per GPU and processes per unit), C(servers)
        (host to its C(/etc/gpulab/rpc-server/servers.json), absent before its first deployment,
        when a CUDA build gets one device per GPU), C(own_units) (the collection's serving units,
        or the programs that stand for them, whose GPU memory counts as available since a
        redeploy replaces them), C(drained) (host to
        the C(consumers) of M(gpulab.inference.gpu_drain) in check mode; what the drain will stop
        before the servers start counts as available too), C(kept) (host to C(keep), the node's kept services'
        patterns, C(history), the RV(gpulab.inference.gpu_residency#module:kept_history) read there, and C(stated),
        the operator's C(gpulab_kept_mib)) - what each kept service held when last seen running, or the stated MiB,
        is reserved on its GPUs whether it runs at plan time or not (the part it holds now is already out of the
        free memory); RV(kept_room) and the table's last lines say what was reserved for which service and why.
      - Exactly one of O(devices) and O(nodes).
    type: dict
  tensor_split:
    description:
      - V(equal), V(free) (by free memory, llama.cpp's default), V(proportional) (by total memory,
        as the C(llama_server) role passes it), or a list of proportions (or a V(3,1,1) string) in
        device order; a shorter list leaves the last devices at 0.
      - V(auto) searches the whole-layer splits for the one with the largest smallest headroom over
        every device (RV(choice) says why and what it turned down); a C(ctx_size) of V(auto) (in
        O(server)) is the largest context that fits with the margin, capped by the model's trained one.
    type: raw
    default: equal
  n_gpu_layers:
    description: Layers to offload (the last ones), or V(all); V(all) when not given.
    type: raw
  ctx_size:
    description: llama-server C(--ctx-size); V(0), the default, is the model's training context.
    type: int
  parallel:
    description: llama-server C(--parallel) slots (default V(1)); each gets its own KV stream unless O(kv_unified).
    type: int
  kv_unified:
    description: llama-server C(--kv-unified) (default V(false)).
    type: bool
  cache_type_k:
    description: C(--cache-type-k) (default V(f16)).
    type: str
  cache_type_v:
    description: C(--cache-type-v) (default V(f16)); a quantized V cache needs flash attention.
    type: str
  flash_attn:
    description: C(--flash-attn) (default V(auto)); changes the compute buffer estimate.
    type: str
    choices: ["on", "off", "auto"]
  offload_kqv:
    description: Whether the KV cache sits on the layers' devices (C(--no-kv-offload) is V(false)); V(true) when not given.
    type: bool
  ubatch_size:
    description: C(--ubatch-size), which sizes the compute buffer (default V(512)).
    type: int
  server:
    description:
      - llama-server's options as role C(llama_server) hands them to M(gpulab.inference.llama_server_plan)
        (role C(common)'s C(gpulab_llama_server_memory_options)), keys C(gpu_layers), C(ctx_size), C(parallel),
        C(flash_attn), C(cache_type_k), C(cache_type_v), C(batch_size), C(ubatch_size), C(extra_args).
      - The plan uses what llama-server will run with, extra arguments included (C(-ctk q8_0), C(-c), C(-np),
        C(-ub), C(-kvu), C(-nkvo), ...; the last one wins, as in llama.cpp), so it assumes what the head runs.
      - Not together with O(n_gpu_layers), O(ctx_size), O(parallel), O(kv_unified), O(cache_type_k),
        O(cache_type_v), O(flash_attn), O(offload_kqv) or O(ubatch_size).
    type: dict
  serving_intent:
    description:
      - What the lab serves (role C(common)'s C(gpulab_serving_intent)). With C(parallel) at V(auto) in O(server), the
        slots are one for V(interactive) and O(serving_concurrency) for V(throughput), fewer where the memory cannot give
        each slot 4096 tokens; the context is then the largest that fits those slots (RV(record) C(intent) says what it set).
    type: str
    choices: [interactive, throughput]
    default: throughput
  serving_concurrency:
    description: The streams a V(throughput) lab serves at once (C(gpulab_serving_concurrency)).
    type: int
    default: 4
  margin_mib:
    description: Free memory every device must keep beyond the plan.
    type: int
    default: 1024
  cuda_context_mib:
    description:
      - What a process holds on each GPU it uses beyond llama.cpp's buffers (CUDA context, cuBLAS
        and other library workspaces), added to every GPU device that holds layers; devices given
        with C(cuda=false), and RPC servers of a CPU build, carry none.
      - 683 to 757 MiB per process were measured with CUDA 13.0 on an H200 (docs/benchmarks.md).
    type: int
    default: 720
  cuda_idle_context_mib:
    description:
      - What a process holds on a GPU where it has no llama.cpp buffers (its bare CUDA context, no
        library workspaces), added to every GPU device that gets no layers and not the output; an RPC
        server left without layers still runs and holds it. V(0) leaves it out.
      - 518 MiB were measured for such an RPC server with CUDA 13.0 (driver 580) on an H200.
    type: int
    default: 518
  require_fit:
    description: Fail, with the per-device table, when a checked device would overflow.
    type: bool
    default: false
  record_file:
    description:
      - Where to keep RV(record) as JSON (C(gpulab_memory_plan_file), which the head's role and the report read),
        written atomically, mode C(0644), only when the prediction changed (then the task reports a change); its
        directory is made where missing. Not written when O(require_fit) refuses the plan. Empty writes nothing.
    type: path
    default: ""
notes:
  - The KV cache follows the family (grouped-query, MLA, sliding window, recurrent state, MiniMax-M3's indexer
    cache); a family llama.cpp keeps in a memory of its own otherwise (deepseek32, glm-dsa and others) is
    planned for its weights only and named. Not modelled are C(--override-tensor) and row split mode.
seealso:
  - module: gpulab.inference.gpu_facts
  - module: gpulab.inference.gpu_residency
"""

EXAMPLES = r"""
- name: Plan a split model over two RPC GPUs and a local GPU
  gpulab.inference.gguf_plan:
    path: /var/lib/gpulab/models/MiniMax-M2-Q4_K_M-00001-of-00003.gguf
    devices:
      - {name: RPC0, host: node-b, free_mib: 95000}
      - {name: RPC1, host: node-c, free_mib: 139000}
      - {name: CUDA0, host: node-a, free_mib: 95000}
    tensor_split: free
    ctx_size: 65536
    parallel: 4
  register: layout

- name: Refuse a layout that cannot load, from live free memory
  gpulab.inference.gguf_plan:
    path: "{{ gpulab_model_path }}"
    nodes:
      head: node-a
      workers: [node-b]
      cuda: true
      residency: {node-a: "{{ head_residency }}", node-b: "{{ worker_residency }}"}
    tensor_split: [1, 1, 1]
    ctx_size: 8192
    parallel: 4
    require_fit: true

- name: Plan with the options the head runs (role common's dict, extra arguments included)
  gpulab.inference.gguf_plan:
    path: "{{ gpulab_model_path }}"
    devices: [{name: CUDA0, free_mib: 95000}]
    server:
      ctx_size: 65536
      parallel: 4
      cache_type_k: q8_0
      cache_type_v: q8_0
      extra_args: [--no-mmap]

- name: Only the model's facts and the smallest set of devices
  gpulab.inference.gguf_plan:
    path: /models/model.gguf
    devices: [{name: CUDA0, free_mib: 81000}, {name: CUDA1, free_mib: 81000}]
"""

RETURN = r"""
model:
  description: >-
    The model's facts: architecture, name, layers, embedding_length, attention_heads, kv_heads
    (per layer), head_dim_k, head_dim_v, experts, experts_used, vocab_size, context_length_train,
    total_params, active_params, decode_bytes_per_token, size_bytes, size_mib, files, tensors.
  returned: success
  type: dict
  sample: {architecture: minimax-m2, layers: 62, experts: 256, experts_used: 8, files: 6}
devices:
  description: >-
    Per device in llama.cpp's order: name, host, kind, gpu_index (the nvidia-smi index of its
    GPU, V(null) for a CPU device or one given without it), layers (indices), layer_range,
    output_layer, split, weights_mib, kv_cache_mib, compute_mib_estimate (the compute buffer llama.cpp's
    scheduler reserves, built from the family's graph where compute_modelled is V(true), else a rough
    estimate), compute_modelled, context_mib (see
    O(cuda_context_mib), or O(cuda_idle_context_mib) on a device without layers), total_mib, free_mib,
    margin_mib, headroom_mib and fits (V(null) when the free memory is unknown), shares_gpu_with
    (the other devices on the same host and GPU; their headroom is that GPU's after all of them).
  returned: success
  type: list
  elements: dict
cpu:
  description: >-
    What stays in host memory of the head (input layer, layers not offloaded), and compute_mib, the
    head's CPU compute buffer (V(null) when the family's graph is not built).
  returned: success
  type: dict
fits:
  description: Whether every checked device holds its part with the margin.
  returned: success
  type: bool
overflowing:
  description: Names of the devices that would overflow.
  returned: success
  type: list
  elements: str
device_inputs:
  description: The devices planned over, as given or as derived from O(nodes) (name, host, free_mib, total_mib, ...).
  returned: success
  type: list
  elements: dict
unchecked:
  description: Names of the devices whose free memory is unknown.
  returned: success
  type: list
  elements: str
kept_room:
  description:
    - With C(kept) in O(nodes), C(reserved) (host to C(gpus), GPU index to C(reserved_mib) and C(why), and
      C(unknown), the kept patterns without a figure) and C(lines), one per reservation, as the table ends with.
  returned: success
  type: dict
  sample:
    reserved: {node-b: {gpus: {"0": {reserved_mib: 6144, why: ["whisper-asr: 6144 MiB reserved on GPU 0 (...)"]}}, unknown: []}}
    lines: ["node-b: whisper-asr: 6144 MiB reserved on GPU 0 (6144 MiB from the most it held when last seen running
             (2026-12-07T11:02:03Z); not running now)"]
table:
  description: The per-device table as lines, then the kept services' reservations (RV(kept_room)).
  returned: success
  type: list
  elements: str
tensor_split:
  description: The proportions used, one per device.
  returned: success
  type: list
  elements: float
kv_cells:
  description: KV cells per stream (the padded per-slot context).
  returned: success
  type: int
kv_streams:
  description: KV streams (parallel slots, or 1 when unified).
  returned: success
  type: int
smallest_set:
  description: The fewest devices that hold the model split by free memory (V(null) when none do).
  returned: success
  type: list
  elements: str
single_node:
  description: Per host, whether its devices alone hold the model (V(null) when unknown).
  returned: success
  type: dict
no_single_node_fits:
  description: True when no host can hold the model on its own devices.
  returned: success
  type: bool
choice:
  description:
    - With O(tensor_split) or C(ctx_size) at V(auto), what was chosen and why - C(ctx_size), C(tensor_split),
      C(ctx_reason), C(split_reason), C(split_figures) (the room the split leaves, in MiB), C(rejected) (the
      splits turned down, each with its C(findings) and its C(details) with the figures) and C(lines) (the same
      as lines, with the figures); null otherwise.
  returned: success
  type: dict
record:
  description:
    - The prediction to keep for the report (C(/var/lib/gpulab/memory-plan.json), O(record_file)), with model facts,
      options, split, and per device the layers, weights, KV cache, compute estimate and total;
      C(choice) is RV(choice) without its lines and without a free-memory figure (the lines print them);
      C(intent) the serving intent, the target concurrency and the slots it set (C(parallel), C(parallel_reason)),
      null when the slots were set.
      Live free memory is left out, so the record changes only when the prediction does.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import keep_file, nice_json
from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto
from ansible_collections.gpulab.inference.plugins.module_utils import layout_llama
from ansible_collections.gpulab.inference.plugins.module_utils import llama_server


# The options that size llama-server's buffers, each given alone or all through server: option ->
# (plan_layout's keyword, the default documented above).
MEMORY_OPTIONS = {"n_gpu_layers": ("n_gpu_layers", "all"), "ctx_size": ("ctx_size", 0), "parallel": ("parallel", 1),
                  "kv_unified": ("kv_unified", False), "cache_type_k": ("cache_type_k", "f16"),
                  "cache_type_v": ("cache_type_v", "f16"), "flash_attn": ("flash_attn", "auto"),
                  "offload_kqv": ("offload_kqv", True), "ubatch_size": ("ubatch", 512)}


def memory_options(params):
    """plan_layout's memory keywords: from server as llama-server will run (llama_server.memory_options),
    else the options given one by one."""
    if params["server"] is not None:
        return llama_server.memory_options(params["server"])
    return dict((keyword, default if params[name] is None else params[name])
                for name, (keyword, default) in MEMORY_OPTIONS.items())


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            devices=dict(type="list", elements="dict"),
            nodes=dict(type="dict"),
            tensor_split=dict(type="raw", default="equal"),
            n_gpu_layers=dict(type="raw"),
            ctx_size=dict(type="int"),
            parallel=dict(type="int"),
            kv_unified=dict(type="bool"),
            cache_type_k=dict(type="str"),
            cache_type_v=dict(type="str"),
            flash_attn=dict(type="str", choices=["on", "off", "auto"]),
            offload_kqv=dict(type="bool"),
            ubatch_size=dict(type="int"),
            server=dict(type="dict"),
            serving_intent=dict(type="str", default=layout_auto.DEFAULT_INTENT, choices=list(layout_auto.INTENTS)),
            serving_concurrency=dict(type="int", default=layout_auto.DEFAULT_CONCURRENCY),
            margin_mib=dict(type="int", default=1024),
            cuda_context_mib=dict(type="int", default=720),
            cuda_idle_context_mib=dict(type="int", default=518),
            require_fit=dict(type="bool", default=False),
            record_file=dict(type="path", default=""),
        ),
        required_one_of=[("devices", "nodes")],
        mutually_exclusive=[("devices", "nodes")] + [("server", name) for name in MEMORY_OPTIONS],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    params = module.params
    try:
        options = dict(memory_options(params), margin_mib=params["margin_mib"],
                       cuda_context_mib=params["cuda_context_mib"],
                       cuda_idle_context_mib=params["cuda_idle_context_mib"])
        model = gguf.read_gguf_model(params["path"])
        facts = gguf_plan.model_facts(model)
        reserved = {}
        if params["nodes"] is not None:
            nodes = params["nodes"]
            reserved = kept_room.reserve_on_nodes(nodes.get("kept"), nodes.get("residency"))
            devices = gguf_plan.devices_from_nodes(
                nodes.get("head"), nodes.get("workers") or [], bool(nodes.get("cuda")), nodes.get("residency"),
                nodes.get("servers"), nodes.get("own_units") or (),
                nodes.get("drained"), reserved)
        else:
            devices = params["devices"]
        choice = intent = None
        if options.get("parallel") == "auto":
            # the serving intent sets the slots; options carries ctx_size: the context is chosen with them
            intent = layout_llama.choose_llama_serving(model, devices, params["serving_intent"],
                                                       params["serving_concurrency"], split=params["tensor_split"],
                                                       facts=facts, **options)
            options.update(parallel=intent["parallel"], ctx_size=intent["ctx_size"])
            plan = intent["plan"]
            if layout_auto.is_auto_word(params["tensor_split"]) or intent["ctx_reason"].startswith("auto"):
                choice = intent
        elif layout_auto.is_auto_word(params["tensor_split"]) or options.get("ctx_size") == "auto":
            # options carries ctx_size: the context is chosen with the split
            choice = layout_llama.choose_ctx_and_split(model, devices, split=params["tensor_split"], facts=facts,
                                                       **options)
            options["ctx_size"] = choice["ctx_size"]
            plan = choice["plan"]
        else:
            plan = gguf_plan.plan_layout(model, devices, split=params["tensor_split"], facts=facts, **options)
        smallest, _smallest_plan = gguf_plan.smallest_device_set(model, devices, facts=facts, **options)
        single = gguf_plan.single_node_fits(model, devices, facts=facts, **options)
    except (gguf.GGUFError, gguf_plan.PlanError, llama_server.LlamaServerError, layout_auto.AutoError,
            kept_room.KeptRoomError) as exc:
        module.fail_json(msg=str(exc))
    kept_lines = kept_room.reserved_lines(reserved)
    table = gguf_plan.format_table(plan) + kept_lines
    known = [fits for fits in single.values() if fits is not None]
    result = dict(
        changed=False,
        model=facts,
        devices=plan["devices"],
        device_inputs=devices,
        cpu=plan["cpu"],
        fits=plan["fits"],
        overflowing=plan["overflowing"],
        unchecked=plan["unchecked"],
        table=table,
        kept_room={"reserved": reserved, "lines": kept_lines},
        tensor_split=plan["tensor_split"],
        n_gpu_layers=plan["n_gpu_layers"],
        kv_cells=plan["kv_cells"],
        kv_streams=plan["kv_streams"],
        smallest_set=smallest,
        single_node=single,
        no_single_node_fits=bool(known) and len(known) == len(single) and not any(known),
        record=gguf_plan.plan_record(params["path"], facts, plan, dict(options, tensor_split=params["tensor_split"]),
                                     smallest, single, choice),
        choice=None if choice is None else {
            "ctx_size": choice["ctx_size"], "tensor_split": choice["tensor_split"], "ctx_reason": choice["ctx_reason"],
            "split_reason": choice["split_reason"], "split_figures": choice["split_figures"],
            "rejected": choice["rejected"],
            "lines": [choice["ctx_reason"], choice["split_reason"]]
            + ([choice["split_figures"]] if choice.get("split_figures") else []) + [
                "turned down %s (%s): %s" % (r["label"], ",".join("%g" % v for v in r["tensor_split"]),
                                             "; ".join(r.get("details") or r["findings"]))
                for r in choice["rejected"]]},
    )
    result["record"]["intent"] = None if intent is None else layout_llama.intent_record(intent)
    if intent is not None and result["choice"] is not None:
        result["choice"]["lines"].insert(0, intent["parallel_reason"])
    if params["require_fit"] and not plan["fits"]:
        module.fail_json(msg="%s would overflow (free memory minus a %d MiB margin); nothing was changed. "
                             "Lower ctx_size or parallel, change the tensor split, or add devices:\n%s"
                             % (", ".join(plan["overflowing"]), params["margin_mib"], "\n".join(table)), **result)
    if params["record_file"]:
        try:
            result["changed"] = keep_file(params["record_file"], nice_json(result["record"]), module.check_mode)
        except (IOError, OSError) as exc:
            module.fail_json(msg="%s cannot be written: %s" % (params["record_file"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
