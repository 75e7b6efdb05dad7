# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout autopilot for vLLM: TP, PP, DP and expert parallel chosen together, the batch
settings of the serving intent, and the memory kept services hold (pure functions over
vllm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp
from ansible_collections.gpulab.inference.plugins.module_utils.layout_auto import (
    AUTO, AutoError, DEFAULT_CONCURRENCY, REJECTED_LIMIT, STEADY_STEP_MIB, check_intent, is_auto)


def kept_mib(gpu, processes, own_units=(), drained=None, total_mib=None, step_mib=STEADY_STEP_MIB, reserved_mib=0):
    """MiB a GPU keeps for services that stay beside the collection's: its memory less what is
    available (kept_room.available_mib, the memory_plan rule: free, plus the collection's own
    units, plus what the drain frees), the available memory seen in whole steps so that drift does
    not change a pinned plan. gpu: gpu_residency's GPU; None when it reports no free memory.
    reserved_mib: what kept services that are down or still loading will take again
    (kept_room.reserve), out of the available memory."""
    total = gpu.get("memory_total_mib") if total_mib is None else total_mib
    available = kept_room.available_mib(gpu, processes, own_units, drained)
    if total is None or available is None:
        return None
    available = max(0, available - (reserved_mib or 0))
    if step_mib:
        available = int(available // step_mib) * step_mib
    return int(max(0, min(total, total - available)))


def nodes_with_kept(nodes, residency, own_units=(), drained=None, utilization=None, reserved=None):
    """vllm_plan's nodes, each GPU given the kept_mib its node's residency shows (kept_mib).

    nodes: [{name, gpus: [{index, memory_total_mib, ...}]}] (the GPU inventory); residency:
    {host: gpu_residency's residency}; drained: {host: gpu_drain's consumers in check mode}. A GPU
    the residency does not report, or reports without free memory, keeps what it had.
    utilization: vLLM's gpu_memory_utilization; kept memory that fits in the part of the GPU vLLM
    leaves alone anyway lowers nothing (vllm_plan.budget_bytes) and counts as 0, so that memory
    no process owns (a few hundred MiB that move between runs) does not rewrite plan.json.
    reserved: kept_room.reserve_on_nodes, what kept services that are down or still loading will
    take again (kept_mib's reserved_mib), so their room is kept whether they run at plan time or not."""
    residency = residency or {}
    drained = drained or {}
    out = []
    for node in nodes:
        found = residency.get(node.get("name")) or {}
        by_index = dict((g.get("index"), g) for g in found.get("gpus") or [])
        gpus = []
        for gpu in node.get("gpus") or []:
            gpu = dict(gpu)
            seen = by_index.get(gpu.get("index"))
            kept = None if seen is None else kept_mib(
                seen, found.get("processes"), own_units, drained.get(node.get("name")), gpu.get("memory_total_mib"),
                reserved_mib=kept_room.reserved_mib(reserved, node.get("name"), gpu.get("index")))
            if kept is not None and utilization is not None and gpu.get("memory_total_mib") is not None \
                    and kept <= gpu["memory_total_mib"] * (1 - utilization):
                kept = 0
            if kept is not None:
                gpu["kept_mib"] = kept
            gpus.append(gpu)
        out.append(dict(node, gpus=gpus))
    return out


# ---------------------------------------------------------------- vLLM

LAYOUT_DEFAULTS = (("tensor_parallel_size", 1), ("pipeline_parallel_size", 1), ("data_parallel_size", 1),
                   ("enable_expert_parallel", False))


def _given_or(given, key, default):
    value = given.get(key)
    return default if is_auto(value) else value


def _given_matches(layout, given):
    for key, value in (("tensor_parallel_size", layout.tp), ("pipeline_parallel_size", layout.pp),
                       ("data_parallel_size", layout.dp), ("enable_expert_parallel", layout.ep)):
        want = given.get(key)
        if not is_auto(want) and want != value:
            return False
    return True


def _closeness(result):
    """Order of the turned-down layouts: those that use the most GPUs, then fewer pipeline stages
    and data-parallel engines, then the larger TP first (the ones an operator tries first)."""
    layout = result["layout"]
    world = layout["tensor_parallel_size"] * layout["pipeline_parallel_size"] * layout["data_parallel_size"]
    return (-world, layout["pipeline_parallel_size"], layout["data_parallel_size"],
            -layout["tensor_parallel_size"], layout["enable_expert_parallel"])


def _verdict(result):
    """The findings that turn a layout down: its errors, and under auto its idle GPUs."""
    errors = [f["message"] for f in result["findings"] if f["level"] == "error"]
    idle = [f["message"] for f in result["findings"] if f["rule"] == "gpus" and f["level"] == "warning"]
    return errors, idle


def choose_vllm_layout(summary, shape, hw, opts, given=None, limit=REJECTED_LIMIT, intent=None):
    """TP, PP, DP and expert parallel chosen together: every GPU used, vLLM's rules, memory,
    then what the serving intent ranks first (intent_rank_key; without an intent KV capacity,
    vllm_plan.rank_key). given: the operator's values, each a value or auto/None; a layout they fix
    completely is kept and checked (idle GPUs then only warn).

    Returns {layout (vllm_plan.Layout), result (check_layout's), reason, rejected, alternatives}.
    """
    given = dict(given or {})
    fixed = not any(is_auto(given.get(k)) for k in ("tensor_parallel_size", "pipeline_parallel_size",
                                                    "data_parallel_size", "enable_expert_parallel"))
    if fixed:
        layout = vp.check_layout_input(vp.Layout(given["tensor_parallel_size"], given["pipeline_parallel_size"],
                                                 given["data_parallel_size"], given["enable_expert_parallel"]))
        result = vp.check_layout(summary, shape, hw, layout, opts)
        errors, _idle = _verdict(result)
        if errors:
            raise AutoError("vLLM cannot run %s as set: %s" % (layout.label(), " ".join(errors)))
        return {"layout": layout, "result": result, "rejected": [], "alternatives": [],
                "reason": "%s as set (vllm_server_*_parallel_size, vllm_server_enable_expert_parallel)" % layout.label()}
    candidates = [c for c in vp.candidate_layouts(shape, hw) if _given_matches(c, given)]
    if not candidates:
        # the values set rule out every layout of these GPUs: judge them with the rest at vLLM's defaults
        filled = vp.check_layout_input(vp.Layout(*[_given_or(given, key, default) for key, default in LAYOUT_DEFAULTS]))
        errors, idle = _verdict(vp.check_layout(summary, shape, hw, filled, opts))
        raise AutoError("vLLM cannot run %s on %s: %s" % (filled.label(), hw["label"], " ".join(errors + idle)))
    accepted, rejected = [], []
    for layout in candidates:
        result = vp.check_layout(summary, shape, hw, layout, opts)
        errors, idle = _verdict(result)
        if errors or idle:
            rejected.append({"label": result["label"], "layout": result["layout"], "findings": errors + idle,
                             "rules": [f["rule"] for f in result["findings"] if f["level"] == "error"]
                             + (["gpus"] if idle else []),
                             "estimate": result["estimate"]})
        else:
            accepted.append((layout, result))
    rejected.sort(key=_closeness)
    if not accepted:
        first = "; ".join("%s: %s" % (r["label"], " ".join(r["findings"])) for r in rejected[:3])
        raise AutoError("no layout of %s runs the model on every GPU (%s). The closest: %s. %s"
                        % (hw["label"], _given_text(given), first, smallest_vllm_hint(summary, shape, hw, opts)))
    accepted.sort(key=lambda pair: intent_rank_key(pair[1], intent, hw, data_parallel_pays(pair[1], shape, opts, hw)))
    layout, result = accepted[0]
    est = result["estimate"]
    reason = ("auto: %s uses all %d GPUs and passes vLLM's rules; %.1f GiB of weights and %.1f GiB of KV cache "
              "per GPU, %d tokens, %d requests at %d tokens"
              % (layout.label(), hw["gpus_total"], est["weights_gib"], est["kv_cache_gib"], est["kv_tokens_total"],
                 est["concurrency_at_max_model_len"], opts["max_model_len"]))
    if intent is not None:
        reason += "; %s" % INTENT_LAYOUT_REASONS[intent]
    if intent == "throughput" and layout.dp == 1:
        # the data-parallel layout throughput would take first if DP paid: expert parallel, the most engines
        turned = sorted((r for _l, r in accepted[1:] if r["layout"]["data_parallel_size"] > 1),
                        key=lambda r: (not r["layout"]["enable_expert_parallel"], -r["layout"]["data_parallel_size"]))
        if turned:
            reason += "; %s" % data_parallel_turned_down(turned[0], result, shape, opts, hw)
    alternatives = [{"label": r["label"], "layout": r["layout"], "estimate": r["estimate"],
                     "findings": ["valid, ranked lower%s: %d requests at max_model_len, %d KV tokens, PP %d, DP %d"
                                  % ("" if intent is None else " for %s serving" % intent,
                                     r["estimate"]["concurrency_at_max_model_len"], r["estimate"]["kv_tokens_total"],
                                     r["layout"]["pipeline_parallel_size"], r["layout"]["data_parallel_size"])]}
                    for _l, r in accepted[1:]]
    cut = (lambda items: items[:limit]) if limit is not None else (lambda items: items)
    return {"layout": layout, "result": result, "reason": reason, "rejected": cut(rejected),
            "alternatives": cut(alternatives)}


def summary_line(reason, rejected):
    """The reason and the alternatives turned down, each with its first finding, in one line."""
    if not rejected:
        return reason + "."
    turned_down = ["%s (%s)" % (r["label"], r["findings"][0] if r["findings"] else "") for r in rejected]
    return "%s. Turned down: %s." % (reason, "; ".join(turned_down))


def _given_text(given):
    set_values = ["%s=%s" % (k, v) for k, v in sorted(given.items()) if not is_auto(v)]
    return "with " + ", ".join(set_values) if set_values else "every value auto"


def smallest_vllm_hint(summary, shape, hw, opts, max_gpus=64):
    """'it would fit on N x <memory> GPUs (TP=...)': the fewest GPUs of this size, one node of
    gpus_per_node or more nodes of the same, on which some layout is valid."""
    per_node = hw["gpus_per_node"]
    for nodes in range(1, max(1, max_gpus // max(per_node, 1)) + 1):
        trial = dict(hw, nodes=nodes, gpus_total=nodes * per_node,
                     label="%d node(s) x %d GPUs of %d MiB" % (nodes, per_node, hw["gpu_memory_mib"]))
        valid = [r for r in (vp.check_layout(summary, shape, trial, layout, opts)
                             for layout in vp.candidate_layouts(shape, trial) if layout.world == trial["gpus_total"])
                 if r["valid"]]
        if valid:
            return "It would run on %s as %s." % (trial["label"], min(valid, key=vp.rank_key)["label"])
    return "No layout of up to %d GPUs of %d MiB runs it." % (max_gpus, hw["gpu_memory_mib"])


# ---------------------------------------------------------------- the serving intent

# vLLM: how many sequences one engine schedules at once (--max-num-seqs). Interactive: a person's
# few requests at a time (a chat, its tool calls, a title); throughput: vLLM's own default on a
# GPU of 70 GiB or more (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, API server 1024).
INTERACTIVE_MAX_NUM_SEQS = 8
THROUGHPUT_MAX_NUM_SEQS = 1024
# --max-num-batched-tokens, both intents: vLLM's API-server default on such a GPU (get_batch_defaults,
# 8192). A prompt up to it prefills in one step; a larger chunk would hold every decoding stream
# for the whole prefill. vLLM's default is 2048 below 70 GiB, where the intent still sets 8192.
MAX_NUM_BATCHED_TOKENS = 8192
# CUDA graphs under throughput: vLLM's largest capture size (vllm/config/vllm.py
# VllmConfig._set_cudagraph_sizes: min(max_num_seqs x 2, 512), capped by max_num_batched_tokens).
THROUGHPUT_MAX_CAPTURE_SIZE = 512

INTENT_LAYOUT_REASONS = {
    "interactive": "serving intent interactive: ranked for the lowest per-token latency among the valid layouts "
                   "(fewest pipeline stages, one engine rather than data parallel, the largest TP within a node, "
                   "experts tensor-sharded rather than placed whole where vLLM runs both): vLLM's expert-parallel "
                   "guide (docs/serving/expert_parallel_deployment.md) pairs TP with latency",
    "throughput": "serving intent throughput: ranked for the highest aggregate among the valid layouts (fewest "
                  "pipeline stages, expert parallel, the most data-parallel engines where DP attention pays and fits "
                  "with margin, then KV capacity): vLLM's expert-parallel guide "
                  "(docs/serving/expert_parallel_deployment.md) pairs DP attention and EP experts with throughput, "
                  "and its data-parallel guide (docs/serving/data_parallel_deployment.md) for models whose attention "
                  "TP cannot shard (MLA)",
}
# Under throughput a data-parallel layout ranks first only where each engine's KV cache holds at least
# this many requests at max_model_len: a DP engine serves its requests alone, so one long request must
# not fill it, and each engine replicates the attention weights (less room for KV than TP).
DP_MIN_REQUESTS_PER_ENGINE = 2


def tp_replicates_kv(shape, opts, gpus):
    """Whether tensor parallelism over `gpus` GPUs would keep the same KV cache on several of them:
    MLA's latent is whole on every TP rank, and TP beyond the KV heads replicates heads
    (vllm_plan.kv_bytes_per_token, from vllm/config/model.py get_num_kv_heads). Where it does, data
    parallel attention holds each token's cache once; where it does not, DP only replicates the
    attention weights."""
    dtype, layers = opts.get("kv_cache_dtype", "auto"), shape["layers"]
    one = vp.kv_bytes_per_token(shape, vp.Layout(1), dtype, layers)
    spread = vp.kv_bytes_per_token(shape, vp.Layout(gpus), dtype, layers)
    return bool(one) and spread * gpus > one


def _tp_instead(layout, hw):
    """The TP size a DP layout's GPUs would take instead: all of them, within one node."""
    gpus = layout["tensor_parallel_size"] * layout["data_parallel_size"]
    return min(gpus, (hw or {}).get("gpus_per_node") or gpus)


def data_parallel_pays(result, shape, opts, hw=None):
    """A data-parallel layout that throughput serving ranks first: DP > 1 with expert parallelism,
    attention that TP over the same GPUs (within a node) would replicate (tp_replicates_kv), and each
    engine holding DP_MIN_REQUESTS_PER_ENGINE requests at max_model_len. vllm_plan's memory rule
    counts each DP engine's whole attention, embedding and lm_head (weights_per_gpu divides them by
    TP alone)."""
    layout, est = result["layout"], result["estimate"] or {}
    dp = layout["data_parallel_size"]
    if dp < 2 or not layout["enable_expert_parallel"]:
        return False
    per_engine = est.get("concurrency_at_max_model_len", 0) // dp
    return tp_replicates_kv(shape, opts, _tp_instead(layout, hw)) and per_engine >= DP_MIN_REQUESTS_PER_ENGINE


def data_parallel_turned_down(dp_result, chosen, shape, opts, hw=None):
    """Why throughput serving kept a layout without data parallelism over a valid DP one."""
    layout, est = dp_result["layout"], dp_result["estimate"] or {}
    dp, tp_instead = layout["data_parallel_size"], _tp_instead(layout, hw)
    why = []
    if not tp_replicates_kv(shape, opts, tp_instead):
        why.append("TP over %d GPUs holds each KV head once (%d KV heads), so DP attention would only replicate the "
                   "attention weights (%.1f against %.1f GiB per GPU)"
                   % (tp_instead, shape["kv_heads"], est.get("weights_gib", 0), chosen["estimate"]["weights_gib"]))
    per_engine = est.get("concurrency_at_max_model_len", 0) // dp
    if per_engine < DP_MIN_REQUESTS_PER_ENGINE:
        why.append("each of its %d engines would hold %d request(s) at max_model_len %d, below the margin of %d"
                   % (dp, per_engine, opts["max_model_len"], DP_MIN_REQUESTS_PER_ENGINE))
    return "%s ranked lower: %s; %s holds %d requests at max_model_len" % (
        dp_result["label"], " and ".join(why) or "KV capacity", chosen["label"],
        chosen["estimate"]["concurrency_at_max_model_len"])


def intent_rank_key(result, intent, hw, dp_pays=False):
    """The order of valid layouts for a serving intent (None: vllm_plan.rank_key, KV capacity).

    Both: valid first, every GPU used, fewer pipeline stages (a request crosses them one after
    another). interactive: TP within a node (a TP group across nodes all-reduces over the network
    for every layer), one engine (DP splits the requests, never one request), the largest TP (every
    GPU works on each token), experts tensor-sharded (balanced at batch 1, no all-to-all), then KV
    capacity. throughput: expert parallel, then the most data-parallel engines where DP pays
    (dp_pays: data_parallel_pays, each engine schedules its own batch, experts spread over TP x DP),
    then KV capacity, then the larger TP."""
    if intent is None:
        return vp.rank_key(result)
    layout = result["layout"]
    est = result["estimate"] or {}
    tp, pp, dp, ep = (layout["tensor_parallel_size"], layout["pipeline_parallel_size"],
                      layout["data_parallel_size"], layout["enable_expert_parallel"])
    capacity = (-est.get("concurrency_at_max_model_len", 0), -est.get("kv_tokens_total", 0))
    head = (not result["valid"], -(tp * pp * dp))
    if intent == "interactive":
        return head + (tp > hw.get("gpus_per_node", tp), pp, dp, -tp, ep) + capacity
    return head + (pp, not ep, not dp_pays, -dp if dp_pays else 0) + capacity + (-tp,)


def vllm_batch_choice(intent, concurrency=DEFAULT_CONCURRENCY, max_num_seqs=AUTO, max_num_batched_tokens=AUTO,
                      cudagraph_capture_sizes=AUTO, enforce_eager=False):
    """vLLM's batch settings for a serving intent, each a set value kept or auto resolved:
    max_num_seqs (--max-num-seqs), max_num_batched_tokens (--max-num-batched-tokens) and the CUDA
    graphs captured (--cudagraph-capture-sizes, a list, or --max-cudagraph-capture-size under
    throughput, vLLM listing the sizes up to it). vLLM pads a decode batch up to the next captured
    size and runs a larger one without a graph (vllm/config/vllm.py VllmConfig._set_cudagraph_sizes).

    Returns {max_num_seqs, max_num_batched_tokens, cudagraph_capture_sizes (list or None),
    max_cudagraph_capture_size (int or None), reasons: {name: sentence}, set_by_intent: [names]}."""
    intent, concurrency = check_intent(intent, concurrency)
    reasons, by_intent = {}, []

    def whole(value, name):
        if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value).strip()) < 1:
            raise AutoError("vllm_server_%s is %r; set a whole number of 1 or more, or auto" % (name, value))
        return int(str(value).strip())

    if is_auto(max_num_seqs):
        if intent == "interactive":
            seqs = INTERACTIVE_MAX_NUM_SEQS
            reasons["max_num_seqs"] = ("auto, interactive: %d sequences at once, a person's few requests without "
                                       "queueing; small batches keep each step short" % seqs)
        else:
            seqs = max(THROUGHPUT_MAX_NUM_SEQS, concurrency)
            reasons["max_num_seqs"] = ("auto, throughput: %d sequences per engine, vLLM's default on a GPU of 70 GiB or "
                                       "more (vllm/engine/arg_utils.py get_batch_defaults), on every GPU size" % seqs)
        by_intent.append("max_num_seqs")
    else:
        seqs = whole(max_num_seqs, "max_num_seqs")
        reasons["max_num_seqs"] = "vllm_server_max_num_seqs %d as set" % seqs
    if is_auto(max_num_batched_tokens):
        tokens = MAX_NUM_BATCHED_TOKENS
        reasons["max_num_batched_tokens"] = (
            "auto, %s: %d tokens a step, vLLM's API-server default on a GPU of 70 GiB or more (get_batch_defaults): "
            "a prompt up to it prefills in one step, a larger chunk would hold every decoding stream for the whole "
            "prefill" % (intent, tokens))
        by_intent.append("max_num_batched_tokens")
    else:
        tokens = whole(max_num_batched_tokens, "max_num_batched_tokens")
        reasons["max_num_batched_tokens"] = "vllm_server_max_num_batched_tokens %d as set" % tokens
    sizes, largest = None, None
    if enforce_eager:
        reasons["cudagraph_capture_sizes"] = "none: vllm_server_enforce_eager runs without CUDA graphs"
    elif is_auto(cudagraph_capture_sizes):
        if intent == "interactive":
            sizes = sorted(set([s for s in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if s < seqs] + [seqs]))
            sizes = [s for s in sizes if s <= tokens]
            reasons["cudagraph_capture_sizes"] = (
                "auto, interactive: graphs for %s, every decode batch up to max_num_seqs %d padded to the next one; "
                "none captured for batches it never runs" % (" ".join("%d" % s for s in sizes), seqs))
        else:
            largest = min(THROUGHPUT_MAX_CAPTURE_SIZE, tokens)
            reasons["cudagraph_capture_sizes"] = (
                "auto, throughput: vLLM's sizes up to %d (--max-cudagraph-capture-size; 1, 2, 4, every 8 to 256, "
                "every 16 beyond), so wide decode batches run as graphs too" % largest)
        by_intent.append("cudagraph_capture_sizes")
    else:
        values = cudagraph_capture_sizes if isinstance(cudagraph_capture_sizes, (list, tuple)) else [cudagraph_capture_sizes]
        sizes = sorted(set(whole(v, "cudagraph_capture_sizes") for v in values))
        if not sizes:
            raise AutoError("vllm_server_cudagraph_capture_sizes is empty; give batch sizes, e.g. [1, 2, 4, 8], or auto")
        reasons["cudagraph_capture_sizes"] = "vllm_server_cudagraph_capture_sizes %s as set" % " ".join(
            "%d" % s for s in sizes)
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens, "cudagraph_capture_sizes": sizes,
            "max_cudagraph_capture_size": largest, "reasons": reasons, "set_by_intent": by_intent}


def vllm_batch_arguments(batch):
    """The `vllm serve` flags of vllm_batch_choice's answer (vLLM 0.24.0's names:
    tests/unit/fixtures/vllm/vllm-0.24.0-serve-options.txt)."""
    args = ["--max-num-seqs", str(batch["max_num_seqs"]), "--max-num-batched-tokens", str(batch["max_num_batched_tokens"])]
    if batch.get("cudagraph_capture_sizes"):
        args += ["--cudagraph-capture-sizes"] + [str(s) for s in batch["cudagraph_capture_sizes"]]
    elif batch.get("max_cudagraph_capture_size"):
        args += ["--max-cudagraph-capture-size", str(batch["max_cudagraph_capture_size"])]
    return args
