# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will it fit, and how: the ranked layouts of one model on some hardware, per engine.

Pure functions over a model read by model_header (a GGUFModel, or a checkpoint's config and
tensors) and nodes ([{name, gpus: [{index, memory_total_mib, kept_mib}]}], the first node the
head). llama.cpp's layouts are placed by layout_llama.choose_ctx_and_split, vLLM's chosen by
layout_vllm.choose_vllm_layout; a model that fits nowhere names the smallest hardware of the same
GPUs that would hold it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpulab.inference.plugins.module_utils import model_family
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import layout_llama as ll
from ansible_collections.gpulab.inference.plugins.module_utils import layout_vllm as lv
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp

MIB = gp.MIB
# The context the smallest-hardware search asks for when the model's own is larger.
HINT_CTX = 4096


def nodes_from_residency(head, residency, own_units=(), reserved=None):
    """The lab's nodes, the head first, from gpu_residency's answer per host: each GPU's memory,
    and as kept what neither is free nor held by the collection's own units (a redeploy replaces
    those, kept_room.available_mib), plus reserved ({host: {gpu index (str): MiB}}: what kept
    services that are down or still loading will take again, kept_room.reserve_on_nodes)."""
    if head not in residency:
        raise gp.PlanError("the head %s did not report its GPUs (gpu_residency)" % head)
    nodes = []
    for host in [head] + sorted(h for h in residency if h != head):
        found = residency[host] or {}
        gpus = []
        for gpu in sorted(found.get("gpus") or [], key=lambda g: int(g["index"])):
            total = gpu.get("memory_total_mib")
            available = kept_room.available_mib(gpu, found.get("processes"), own_units)
            if total is None or available is None:
                raise gp.PlanError("%s: GPU %s reports no memory (MIG mode?); plan it with -e plan_hardware=[...]"
                                   % (host, gpu.get("index")))
            again = ((reserved or {}).get(host) or {}).get(str(gpu["index"]), 0)
            gpus.append({"index": int(gpu["index"]), "memory_total_mib": int(total),
                         "kept_mib": min(int(total), max(0, int(total) - int(available)) + again)})
        if gpus:
            nodes.append({"name": host, "gpus": gpus})
    if not nodes or nodes[0]["name"] != head:
        raise gp.PlanError("the head %s has no GPU to plan on; give the hardware with -e plan_hardware=[...]" % head)
    return nodes


def vllm_nodes(nodes, names):
    """The nodes a vLLM deployment spans on this lab: the head (the first node) and the nodes named
    (vllm_nodes); the RPC workers of a llama.cpp lab are not vLLM's."""
    return [node for position, node in enumerate(nodes) if position == 0 or node["name"] in (names or ())]


def llama_devices(nodes):
    """llama.cpp's devices over the nodes: the workers' GPUs as RPC devices (in node order), then
    the head's (the first node's) own GPUs; free memory is what the kept services leave."""
    devices = []
    for node in nodes[1:]:
        for gpu in node["gpus"]:
            devices.append({"name": "RPC%d" % len(devices), "host": node["name"], "kind": "rpc",
                            "gpu_index": gpu["index"], "total_mib": gpu["memory_total_mib"],
                            "free_mib": gpu["memory_total_mib"] - gpu.get("kept_mib", 0)})
    for i, gpu in enumerate(nodes[0]["gpus"]):
        devices.append({"name": "CUDA%d" % i, "host": nodes[0]["name"], "kind": "local", "gpu_index": gpu["index"],
                        "total_mib": gpu["memory_total_mib"], "free_mib": gpu["memory_total_mib"] - gpu.get("kept_mib", 0)})
    return devices


def _gb(mib):
    gib = mib / 1024.0
    return ("%.0f GiB" if gib >= 10 else "%.1f GiB") % gib


def hardware_label(nodes):
    gpus = [g["memory_total_mib"] for n in nodes for g in n["gpus"]]
    sizes = sorted(set(gpus))
    low, high = _gb(sizes[0]), _gb(sizes[-1])
    size = low if low == high else "%s to %s" % (low, high)
    return "%d x %s over %d node%s" % (len(gpus), size, len(nodes), "" if len(nodes) == 1 else "s")


def llama_row(model, facts, nodes, options, label):
    devices = llama_devices(nodes)
    # the slots as the deployment would set them: a number, or auto from the serving intent
    result = ll.choose_llama_serving(model, devices, options.get("serving_intent", la.DEFAULT_INTENT),
                                     options.get("serving_concurrency", la.DEFAULT_CONCURRENCY),
                                     parallel=options.get("parallel", 1), ctx_size=options.get("ctx_size", la.AUTO),
                                     split=la.AUTO, facts=facts,
                                     **dict((k, v) for k, v in _llama_options(options).items() if k != "parallel"))
    plan = result["plan"]
    checked = [r["headroom_mib"] for r in plan["devices"] if r["headroom_mib"] is not None]
    row = {
        "engine": "llama_cpp",
        "layout": label,
        "hardware": hardware_label(nodes),
        "fits": plan["fits"],
        "tensor_split": result["tensor_split"],
        "ctx_size": result["ctx_size"],
        "kv_tokens": plan["kv_cells"] * plan["kv_streams"],
        "concurrency": plan["kv_streams"],
        "smallest_headroom_mib": round(min(checked), 2) if checked else None,
        "devices": [dict((k, r[k]) for k in ("name", "host", "layer_range", "output_layer", "weights_mib", "kv_cache_mib",
                                             "compute_mib_estimate", "context_mib", "total_mib", "free_mib",
                                             "headroom_mib", "fits")) for r in plan["devices"]],
        "verdict": "fits" if plan["fits"] else "does not fit",
        "reason": "%s; %s; %s" % (result["parallel_reason"], result["ctx_reason"], result["split_reason"]),
        "rejected": result["rejected"],
    }
    if plan["kv_note"]:
        # the cache is not sized, so no context is claimed: the weights and compute are, and the
        # headroom is what they leave for the cache
        row.update(ctx_size=None, kv_tokens=None, verdict="weights fit" if plan["fits"] else "does not fit",
                   reason="%s: the context and its cache are not sized; %s" % (plan["kv_note"], result["split_reason"]))
        for device in row["devices"]:
            device["kv_cache_mib"] = None
    return row


def _llama_options(options):
    keys = ("parallel", "kv_unified", "cache_type_k", "cache_type_v", "flash_attn", "margin_mib", "offload_kqv",
            "ubatch", "cuda_context_mib", "cuda_idle_context_mib", "n_gpu_layers")
    return dict((k, options[k]) for k in keys if k in options)


def llama_table(model, nodes, options):
    """Ranked rows for llama.cpp: every node together, then each node alone; those that fit first,
    then the longer context, then the fewer devices."""
    facts = gp.model_facts(model)
    candidates = [(nodes, "all %d nodes" % len(nodes) if len(nodes) > 1 else nodes[0]["name"])]
    if len(nodes) > 1:
        candidates += [([node], "%s alone" % node["name"]) for node in nodes]
    rows = [llama_row(model, facts, subset, options, label) for subset, label in candidates]
    rows.sort(key=lambda r: (not r["fits"], -(r["ctx_size"] or 0), len(r["devices"])))
    hint = None
    if not any(r["fits"] for r in rows):
        hint = llama_smallest_hint(model, facts, nodes, options)
    structure = gp.structure_line(facts, options.get("cache_type_k", "f16"), options.get("cache_type_v", "f16"))
    return {"engine": "llama_cpp", "facts": facts, "rows": rows, "smallest_fitting": hint, "structure": structure}


def llama_smallest_hint(model, facts, nodes, options, max_gpus=gp.MAX_TENSOR_SPLIT_ENTRIES + 1):
    """'3 x 96 GB over 2 nodes': the fewest GPUs of the largest size here, as many per node as the
    fullest node has, that hold the model at a short context."""
    memory = max(g["memory_total_mib"] for n in nodes for g in n["gpus"])
    per_node = max(len(n["gpus"]) for n in nodes)
    ctx = min(facts["context_length_train"] or HINT_CTX, HINT_CTX)
    for count in range(1, max_gpus + 1):
        trial = []
        for start in range(0, count, per_node):
            trial.append({"name": "node-%d" % len(trial),
                          "gpus": [{"index": i, "memory_total_mib": memory, "kept_mib": 0}
                                   for i in range(min(per_node, count - start))]})
        choice = ll.choose_tensor_split(model, llama_devices(trial), facts=facts, ctx_size=ctx,
                                        **_llama_options(options))
        if choice["plan"]["fits"]:
            return "%s (at %d tokens of context)" % (hardware_label(trial), ctx)
    return "none: more than %d GPUs of %s, the most llama.cpp splits over" % (max_gpus, _gb(memory))


def vllm_table(config, tensors, nodes, options):
    """Ranked rows for vLLM: the chosen layout, the valid ones ranked lower, then those turned down."""
    try:
        shape, summary, hw, opts, _tensors = vp.plan_inputs(config, tensors, nodes, options)
    except vp.VllmPlanError as exc:
        return {"engine": "vllm", "rows": [], "error": str(exc), "smallest_fitting": None}
    try:
        choice = lv.choose_vllm_layout(summary, shape, hw, opts, limit=None)
    except la.AutoError as exc:
        hint = lv.smallest_vllm_hint(summary, shape, hw, opts)
        # the family's structure even when nothing fits: what the weights and the cache are made of
        return {"engine": "vllm", "rows": [], "error": str(exc), "smallest_fitting": hint,
                "structure": vllm_structure_line(shape, opts)}
    modelled = (shape.get("structure") or {}).get("modelled", True)
    chosen = dict(choice["result"], findings=[choice["reason"]])
    rows = [_vllm_row(chosen, "chosen", opts, modelled)]
    rows += [_vllm_row(r, "valid, ranked lower", opts, modelled) for r in choice["alternatives"]]
    rows += [_vllm_row(r, "rejected", opts, modelled) for r in choice["rejected"]]
    return {"engine": "vllm", "rows": rows, "error": None, "smallest_fitting": None, "max_model_len": opts["max_model_len"],
            "hardware": hw["label"], "structure": vllm_structure_line(shape, opts)}


def vllm_structure_line(shape, opts):
    """The family's structure as vLLM holds it, for the table: attention kind, KV per token on one
    GPU at TP 1, the recurrent state per sequence (model_family.hf_structure)."""
    structure = shape.get("structure")
    if not structure:
        return None
    per_token = vp.kv_bytes_per_token(shape, vp.Layout(1), opts["kv_cache_dtype"], shape["layers"])
    dtype = vp.KV_CACHE_DTYPE_BYTES[opts["kv_cache_dtype"]] or shape["dtype_bytes"]
    state = sum(1 for k in structure["layer_kinds"] if k == "recurrent") * \
        (structure["state_r_values"] + structure["state_s_values"]) * dtype
    return "%s: %s" % (shape["architecture"], model_family.describe(structure, per_token, state))


def _vllm_row(result, verdict, opts, modelled=True):
    """One layout's row. A family whose cache is not modelled keeps its weights and the memory left
    for the cache, but no token count: none rather than a wrong one."""
    est = result.get("estimate") or {}
    findings = list(result.get("findings") or [])
    if not modelled:
        findings.append("KV tokens not sized: the family's cache is not modelled")
    return {
        "engine": "vllm",
        "layout": result["label"],
        "verdict": verdict,
        "weights_gib": est.get("weights_gib"),
        "kv_cache_gib": est.get("kv_cache_gib"),
        "kv_tokens": est.get("kv_tokens_total") if modelled else None,
        "concurrency": est.get("concurrency_at_max_model_len") if modelled else None,
        "max_model_len": opts["max_model_len"],
        "reason": "; ".join(findings),
    }


def _fmt(value, spec="%s"):
    return "-" if value is None else spec % value


def table_lines(table):
    """The table as lines for the play's output."""
    if table["engine"] == "llama_cpp":
        header = ("layout", "hardware", "verdict", "context", "slots", "headroom MiB", "split")
        lines = ["llama.cpp: %-22s %-24s %-10s %9s %9s %12s  %s" % header]
        for row in table["rows"]:
            lines.append("           %-22s %-24s %-10s %9s %9d %12s  %s" % (
                row["layout"], row["hardware"], row["verdict"] if row["fits"] else "NO", _fmt(row["ctx_size"]),
                row["concurrency"],
                _fmt(row["smallest_headroom_mib"], "%.0f"), ",".join("%g" % v for v in row["tensor_split"])))
            for device in row["devices"]:
                lines.append("             %-7s %-12s layers %-10s weights %9.0f  kv %8s  compute %7.0f  headroom %s MiB" % (
                    device["name"], device["host"] or "-", (device["layer_range"] or "-") + ("+out" if device["output_layer"] else ""),
                    device["weights_mib"], _fmt(device["kv_cache_mib"], "%.0f"), device["compute_mib_estimate"],
                    _fmt(device["headroom_mib"], "%.0f")))
            lines.append("             reason: %s" % row["reason"])
    else:
        if table.get("error"):
            hint = table["smallest_fitting"]
            return (["vLLM: %s" % table["error"]] + (["vLLM: %s" % hint] if hint and hint not in table["error"] else [])
                    + (["model: %s" % table["structure"]] if table.get("structure") else []))
        lines = ["vLLM on %s at max_model_len %d:" % (table["hardware"], table["max_model_len"]),
                 "      %-20s %-20s %10s %10s %12s %6s  %s" % ("layout", "verdict", "weights", "KV GiB", "KV tokens",
                                                               "conc.", "reason")]
        for row in table["rows"]:
            lines.append("      %-20s %-20s %10s %10s %12s %6s  %s" % (
                row["layout"], row["verdict"], _fmt(row["weights_gib"], "%.1f"), _fmt(row["kv_cache_gib"], "%.1f"),
                _fmt(row["kv_tokens"]), _fmt(row["concurrency"]), row["reason"]))
    if table.get("structure"):
        lines.append("model: %s" % table["structure"])
    if table.get("smallest_fitting"):
        lines.append("fits nowhere here; the smallest that would: %s" % table["smallest_fitting"])
    return lines
