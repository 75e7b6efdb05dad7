# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout autopilot for llama.cpp: the tensor split, the context and the slots that `auto`
resolves to, with the reason and the alternatives turned down (pure functions over gguf_plan).

Layers are whole, so the split is searched, not scaled. Device d of n takes a contiguous run of
the offloaded slots (layers, then the output layer), as load_tensors assigns them; a split of
whole-layer counts c_0..c_n-1 over the S offloaded slots puts slot j on the first device whose
cumulative count exceeds j (float32 upper_bound of j/S against cum/S keeps that order exactly).
The search maximises the smallest headroom over every device with a dynamic programme over
(device, slots taken): O(n x S^2) per context size, so the context is found by bisection on top
of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils.layout_auto import (
    AUTO, AutoError, DEFAULT_CONCURRENCY, DEFAULT_INTENT, REJECTED_LIMIT, STEADY_STEP_MIB, check_intent, is_auto)


MIB = gp.MIB
# With no memory figure for some device (an RPC server of a CPU build started without -m) the
# context cannot be sized from memory: auto takes the trained context, capped here.
UNKNOWN_MEMORY_CTX = 8192


# ---------------------------------------------------------------- llama.cpp: costs per slot

def steady_devices(devices, step_mib=STEADY_STEP_MIB):
    """The devices with free memory rounded down to whole steps, for choosing (the plan that is
    returned is computed on the real figures, which are at least these)."""
    steady = []
    for device in devices:
        device = dict(device)
        if device.get("free_mib") is not None and step_mib:
            device["free_mib"] = float(int(device["free_mib"] // step_mib) * step_mib)
        steady.append(device)
    return steady


def _capacities(devices):
    """MiB each device may fill: its free memory (kept services already out of it), else its total,
    else None. An RPC server of a CPU build counts as unknown: its memory (the host's) is known
    only from servers.json, which exists once it ran, so a choice from it would differ between a
    lab's first deploy and its second, and every deploy after the first would move layers."""
    caps = []
    for device in devices:
        if device.get("free_mib") is not None:
            caps.append(float(device["free_mib"]))
        elif device.get("total_mib") is not None and device.get("cuda", True):
            caps.append(float(device["total_mib"]))
        else:
            caps.append(None)
    return caps


class _Costs:
    """Bytes of each offloaded slot and each device's fixed bytes, as gguf_plan.plan_layout
    counts them, for one context size."""

    def __init__(self, model, facts, devices, options):
        opts = dict(options)
        self.margin = float(opts.get("margin_mib", 1024))
        self.context_mib, self.idle_mib = gp.cuda_context_figures(opts.get("cuda_context_mib", 0),
                                                                  opts.get("cuda_idle_context_mib", 0))
        n_layer = facts["layers"]
        ngl = gp.gpu_layers(opts.get("n_gpu_layers", "all"), n_layer)
        self.start = max(n_layer + 1 - ngl, 0)
        self.slots = min(ngl, n_layer + 1)
        self.n_layer = n_layer
        cells, streams = gp.kv_cells(opts.get("ctx_size", 0), opts.get("parallel", 1), facts["context_length_train"],
                                     opts.get("kv_unified", False))
        self.cells = cells
        type_k = gp.cache_type(opts.get("cache_type_k", "f16"), "cache_type_k")
        type_v = gp.cache_type(opts.get("cache_type_v", "f16"), "cache_type_v")
        full = dict(facts, expert_ffn_size=gp._expert_ffn(model, facts))
        weights = gp.weight_bytes_by_layer(model, n_layer, opts.get("alignment", 32))
        kv = gp.kv_bytes_per_layer(full, cells, streams, type_k, type_v)
        offload = opts.get("offload_kqv", True)
        self.slot_bytes = []
        for j in range(self.slots):
            il = self.start + j
            if il == n_layer:
                self.slot_bytes.append(weights[gp.OUTPUT])
            else:
                self.slot_bytes.append(weights[il] + (kv[il][0] + kv[il][1] if offload else 0))
        self.prefix = [0]
        for nbytes in self.slot_bytes:
            self.prefix.append(self.prefix[-1] + nbytes)
        flash = opts.get("flash_attn", "auto") != "off"
        ubatch = opts.get("ubatch", gp.DEFAULT_UBATCH)
        outputs = max(opts.get("parallel", 1), 1)
        # the compute buffer of a range of slots: built from the graph where compute_buffer has the
        # family (one build per set of layer kinds in the range and output or not), else estimated
        self.kind = gp.layer_kinds(full, n_layer)
        structure = full.get("structure") or {}
        swa = gp.swa_cells(cells, structure.get("window") or 0, max(opts.get("parallel", 1), 1),
                           opts.get("kv_unified", False), opts.get("ubatch", gp.DEFAULT_UBATCH),
                           opts.get("swa_full", False)) if structure.get("window") else cells
        self.graph = dict(cells=cells, streams=streams, n_seq=max(opts.get("parallel", 1), 1),
                          flash_attn=opts.get("flash_attn", "auto") != "off",
                          ubatch=opts.get("ubatch", gp.DEFAULT_UBATCH), type_k=type_k, type_v=type_v,
                          swa_cells_per_stream=swa) if offload else None
        self.n_copies = gp.pipeline_copies(len(devices), opts.get("n_gpu_layers", "all"), n_layer, offload)
        self.model, self.full = model, full
        self.graph_compute = {}
        self.compute = {}
        for layers in (False, True):
            for output in (False, True):
                self.compute[(layers, output)] = gp.compute_bytes_estimate(full, cells, layers, output, flash, ubatch,
                                                                           outputs)
        self.devices = devices
        self.caps = _capacities(devices)

    def used_mib(self, d, a, b):
        """MiB device d holds with slots [a, b); with none, a CUDA device still holds its idle context."""
        cuda = self.devices[d].get("cuda", True) is not False
        if b <= a:
            return gp.cuda_context_bytes(cuda, False, self.context_mib, self.idle_mib) / float(MIB)
        output = b == self.slots and self.start + self.slots - 1 == self.n_layer
        layers = (b - a) - (1 if output else 0) > 0
        total = self.prefix[b] - self.prefix[a] + self.compute_bytes(a, b, layers, output)
        total += gp.cuda_context_bytes(cuda, True, self.context_mib, self.idle_mib)
        return total / float(MIB)

    def compute_bytes(self, a, b, layers, output):
        """The compute buffer of a device holding slots [a, b)."""
        if self.graph is None:
            return self.compute[(layers, output)]
        held = list(range(self.start + a, min(self.start + b, self.n_layer)))
        # a device's first layer reads its input from the split's copy, the others from the layer
        # before: one and two layers differ, more repeat the second's peak
        key = (frozenset(self.kind[il] for il in held), min(len(held), 3), output)
        if key not in self.graph_compute:
            self.graph_compute[key] = gp.range_compute_bytes(self.model, self.full, held, output, self.n_copies,
                                                             self.start, **self.graph)
        found = self.graph_compute[key]
        return self.compute[(layers, output)] if found is None else found

    def headroom(self, d, a, b):
        """MiB device d keeps with slots [a, b) (None when its memory is unknown)."""
        cap = self.caps[d]
        if cap is None:
            return None
        return cap - self.margin - self.used_mib(d, a, b)


def best_whole_layer_split(costs):
    """(smallest headroom in MiB, slot counts per device): the contiguous whole-slot split with the
    largest smallest headroom (dynamic programme over devices and slots taken)."""
    if gp.shared_gpus(costs.devices):
        return _best_split_sharing_gpus(costs)
    n, slots = len(costs.devices), costs.slots
    neg = float("-inf")
    best = [[neg] * (slots + 1) for _d in range(n)]
    back = [[0] * (slots + 1) for _d in range(n)]
    for b in range(slots + 1):
        best[0][b] = costs.headroom(0, 0, b)
    for d in range(1, n):
        for b in range(slots + 1):
            for a in range(b + 1):
                if best[d - 1][a] == neg:
                    continue
                value = min(best[d - 1][a], costs.headroom(d, a, b))
                # ties keep the later layers on the later devices (the larger a), like an equal split
                if value >= best[d][b]:
                    best[d][b], back[d][b] = value, a
    counts = [0] * n
    b = slots
    for d in range(n - 1, 0, -1):
        a = back[d][b]
        counts[d] = b - a
        b = a
    counts[0] = b
    return best[n - 1][slots], counts


def _best_split_sharing_gpus(costs):
    """best_whole_layer_split where some devices share a GPU (gguf_plan.shared_gpus): such a GPU's
    headroom is its memory less the margin and what all its devices hold, so a device's layers
    cannot be judged alone. The programme keeps, per (device, slots taken), every state not beaten
    on both the smallest headroom of the GPUs already complete and the MiB already put on GPUs still
    awaiting a device (a Pareto front; small, as only shared GPUs stay open)."""
    n, slots = len(costs.devices), costs.slots
    groups = gp.shared_gpus(costs.devices)
    group_of, last_of, cap_of = {}, {}, {}
    for g, members in enumerate(groups):
        cap_of[g] = min(costs.caps[m] for m in members)
        last_of[g] = members[-1]
        for m in members:
            group_of[m] = g
    # a state: (smallest headroom of complete GPUs, MiB on each open shared GPU, (previous a, state index))
    fronts = [[(float("inf"), (0.0,) * len(groups), None)]] + [[] for _b in range(slots)]
    history = []
    for d in range(n):
        new = [[] for _b in range(slots + 1)]
        for b in range(slots + 1):
            candidates = []
            g = group_of.get(d)
            for a in range(b + 1):
                used = costs.used_mib(d, a, b) if fronts[a] else 0.0
                for k, (low, held, _back) in enumerate(fronts[a]):
                    if g is None:
                        candidates.append((min(low, costs.caps[d] - costs.margin - used), held, (a, k)))
                        continue
                    held_now = list(held)
                    held_now[g] += used
                    if d == last_of[g]:
                        low = min(low, cap_of[g] - costs.margin - held_now[g])
                        held_now[g] = 0.0
                    candidates.append((low, tuple(held_now), (a, k)))
            new[b] = _pareto(candidates)
        history.append(new)
        fronts = new
    if not fronts[slots]:
        return float("-inf"), [0] * n
    best_k = max(range(len(fronts[slots])), key=lambda k: fronts[slots][k][0])
    counts = [0] * n
    b, k = slots, best_k
    for d in range(n - 1, -1, -1):
        a, k = history[d][b][k][2]
        counts[d] = b - a
        b = a
    return fronts[slots][best_k][0] if n else float("-inf"), counts


def _pareto(states):
    """The states no other beats on both the smallest headroom (higher) and the MiB held on open
    GPUs (lower, each); of equal ones the later (more slots on the earlier devices) stays out."""
    kept = []
    lowest = None
    for state in sorted(states, key=lambda s: (-s[0], s[1])):
        if len(state[1]) == 1:
            # one shared GPU: sorted by headroom, a state stays only if it holds less than every kept one
            if lowest is not None and state[1][0] >= lowest:
                continue
            lowest = state[1][0]
        elif any(other[0] >= state[0] and all(o <= h for o, h in zip(other[1], state[1])) for other in kept):
            continue
        kept.append(state)
    return kept


def _plan_summary(label, split, plan):
    checked = [r for r in plan["devices"] if r["headroom_mib"] is not None]
    tightest = min(checked, key=lambda r: r["headroom_mib"]) if checked else None
    # findings hold no free-memory figure (memory-plan.json keeps them); details add the figures for the play
    findings, details = [], []
    for row in checked:
        if not row["fits"]:
            findings.append("%s would overflow" % row["name"])
            details.append("%s would overflow by %.0f MiB (%.0f MiB planned, %s MiB free, %s MiB margin)"
                           % (row["name"], -row["headroom_mib"], row["total_mib"], gp._fmt(row["free_mib"]),
                              gp._fmt(row["margin_mib"])))
    if not findings and tightest is not None:
        findings.append("fits")
        details.append("fits; the tightest device %s keeps %.0f MiB" % (tightest["name"], tightest["headroom_mib"]))
    return {
        "label": label,
        "tensor_split": split,
        "layer_ranges": [r["layer_range"] + ("+out" if r["output_layer"] else "") for r in plan["devices"]],
        # the whole-layer counts that place the same layers: a split by free memory is proportions of
        # live figures, which memory-plan.json does not keep
        "layer_counts": [len(r["layers"]) + (1 if r["output_layer"] else 0) for r in plan["devices"]],
        "fits": plan["fits"],
        "smallest_headroom_mib": round(tightest["headroom_mib"], 2) if tightest else None,
        "tightest": tightest["name"] if tightest else None,
        "findings": findings,
        "details": details,
    }


def choose_tensor_split(model, devices, facts=None, limit=REJECTED_LIMIT, **options):
    """llama_server_tensor_split auto: the whole-layer split with the largest smallest headroom.

    options: gguf_plan.plan_layout's (ctx_size resolved, parallel, cache types, margin_mib,
    cuda_context_mib, cuda_idle_context_mib, ...). Returns {tensor_split (whole-layer counts), plan, reason, rejected,
    smallest_headroom_mib}. Devices whose memory is unknown get llama.cpp's equal split.
    """
    facts = facts or gp.model_facts(model)
    devices = gp.normalise_devices(devices)
    options = dict(options)
    options.pop("split", None)
    costs = _Costs(model, facts, steady_devices(devices), options)
    unknown = [d["name"] for d, cap in zip(devices, costs.caps) if cap is None]
    if unknown:
        split = [1.0] * len(devices)
        plan = gp.plan_layout(model, devices, split=split, facts=facts, **options)
        return {"tensor_split": split, "plan": plan, "smallest_headroom_mib": None, "rejected": [], "figures": None,
                "reason": "auto: equal split, since the memory of %s is unknown (no free or total MiB); give the "
                          "RPC servers their memory or set llama_server_tensor_split" % ", ".join(unknown)}
    smallest, counts = best_whole_layer_split(costs)
    split = [float(c) for c in counts]
    plan = gp.plan_layout(model, devices, split=split, facts=facts, **options)
    chosen = _plan_summary("auto", split, plan)
    if chosen["smallest_headroom_mib"] is None:
        # devices checked against their total only (RPC servers of a CPU build given memory)
        chosen["smallest_headroom_mib"] = round(smallest, 2)
        chosen["tightest"] = "of the given memory"
    alternatives = []
    for label, mode in (("equal", "equal"), ("by free memory (llama.cpp's default)", "free"),
                        ("by total memory", "proportional")):
        try:
            values = gp.tensor_split(mode, devices)
        except gp.PlanError:
            continue
        other = gp.plan_layout(model, devices, split=values, facts=facts, **options)
        summary = _plan_summary(label, values, other)
        if summary["layer_ranges"] != chosen["layer_ranges"]:
            alternatives.append(summary)
    ranges = ", ".join("%s %s" % (d["name"], r or "-") for d, r in zip(devices, chosen["layer_ranges"]))
    # The reason names the split, not free memory (it is kept in memory-plan.json, which drift must not
    # rewrite); `figures` says how much room is left, for the play's output only.
    if plan["fits"]:
        reason = ("auto: whole-layer split %s (%s) leaves the most room beyond the margin on the tightest device"
                  % (",".join("%d" % c for c in counts), ranges))
        figures = ("the split keeps at least %.0f MiB beyond the margin on every device (tightest %s)"
                   % (chosen["smallest_headroom_mib"], chosen["tightest"]))
    else:
        reason = ("auto: no whole-layer split fits; the best, %s (%s), still overflows %s"
                  % (",".join("%d" % c for c in counts), ranges, ", ".join(plan["overflowing"])))
        figures = "the split overflows: %s" % "; ".join(chosen["details"])
    for alt in alternatives:
        if alt["smallest_headroom_mib"] is not None and chosen["smallest_headroom_mib"] is not None:
            less = chosen["smallest_headroom_mib"] - alt["smallest_headroom_mib"]
            alt["findings"].append("less room on its tightest device than auto" if round(less) > 0
                                   else "as much room on its tightest device as auto")
            alt["details"].append("%.0f MiB less on its tightest device than auto" % less)
    return {"tensor_split": split, "plan": plan, "smallest_headroom_mib": chosen["smallest_headroom_mib"],
            "reason": reason, "figures": figures,
            "rejected": alternatives[:limit] if limit is not None else alternatives}


def _streams(parallel, kv_unified):
    return 1 if kv_unified or parallel == 1 else parallel


def choose_ctx_and_split(model, devices, ctx_size=AUTO, split=AUTO, facts=None, limit=REJECTED_LIMIT,
                         per_slot_trained=False, **options):
    """llama_server_ctx_size and llama_server_tensor_split, each auto or the operator's value.

    ctx auto: the largest context (whole 256-cell blocks per slot) whose plan fits with the
    margin, capped by the model's trained context (per_slot_trained: the trained context for each
    slot's stream, as llama-server caps a slot); with split auto the split is searched at every
    context tried. A given context is kept and checked. Returns {ctx_size, tensor_split, plan,
    ctx_reason, split_reason, split_figures, rejected, fits}: the reasons and the rejected splits'
    findings name no free-memory figure (memory-plan.json keeps them); split_figures and each rejected
    split's details give the figures for the play's output.
    """
    facts = facts or gp.model_facts(model)
    devices = gp.normalise_devices(devices)
    options = dict(options)
    parallel = options.get("parallel", 1)
    streams = _streams(parallel, options.get("kv_unified", False))
    trained = facts["context_length_train"]

    steady = steady_devices(devices)

    def plan_at(ctx, on=None):
        """(plan, split choice) at one context; the search judges fitting on the steady figures."""
        on = on or steady
        opts = dict(options, ctx_size=ctx)
        if is_auto(split):
            choice = choose_tensor_split(model, on, facts=facts, limit=limit, **opts)
            return choice["plan"], choice
        plan = gp.plan_layout(model, on, split=split, facts=facts, **opts)
        return plan, None

    if not is_auto(ctx_size):
        plan, choice = plan_at(ctx_size)
        ctx_reason = "llama_server_ctx_size %d as set" % ctx_size
        if trained and ctx_size > trained:
            ctx_reason += ", beyond the model's trained context %d (llama.cpp warns; quality may drop)" % trained
        ctx = ctx_size
    else:
        if not trained:
            raise AutoError("llama_server_ctx_size is auto but the model does not say its trained context "
                            "(%s.context_length); set llama_server_ctx_size" % facts["architecture"])
        block = gp.KV_CTX_PAD * streams
        cap = trained * streams if per_slot_trained else trained
        top = max(cap // block, 1)
        caps = _capacities(devices)
        if any(c is None for c in caps):
            ctx = min(trained, max(UNKNOWN_MEMORY_CTX // block, 1) * block)
            plan, choice = plan_at(ctx)
            ctx_reason = ("auto: %d tokens, the trained context %d capped at %d, since the memory of some device "
                          "is unknown" % (ctx, trained, UNKNOWN_MEMORY_CTX))
        else:
            plan, choice = plan_at(block)
            if not plan["fits"]:
                ctx = block
                ctx_reason = ("auto: not even %d tokens (%d slot(s) of %d) fit: the weights alone overflow %s"
                              % (block, streams, gp.KV_CTX_PAD, ", ".join(plan["overflowing"])))
            else:
                # fitting is monotone in the context: bisect over whole blocks
                low, high = 1, top
                best = (plan, choice)
                while low < high:
                    mid = (low + high + 1) // 2
                    trial = plan_at(mid * block)
                    if trial[0]["fits"]:
                        low, best = mid, trial
                    else:
                        high = mid - 1
                plan, choice = best
                ctx = low * block
                if ctx >= cap or low == top:
                    ctx_reason = "auto: %d tokens, the model's trained context%s (it fits with the margin)" % (
                        ctx, " for each of the %d slots" % streams if cap > trained else "")
                else:
                    ctx_reason = ("auto: %d tokens, the largest context that fits with the margin (trained %d)"
                                  % (ctx, trained))
    # the chosen context and split on the real figures (at least the steady ones)
    plan, choice = plan_at(ctx, devices) if choice is None else (
        gp.plan_layout(model, devices, split=choice["tensor_split"], facts=facts, **dict(options, ctx_size=ctx)),
        choice)
    return {
        "ctx_size": ctx,
        "tensor_split": choice["tensor_split"] if choice else plan["tensor_split"],
        "plan": plan,
        "fits": plan["fits"],
        "ctx_reason": ctx_reason,
        "split_reason": choice["reason"] if choice else "llama_server_tensor_split %r as set" % (split,),
        "split_figures": choice["figures"] if choice else None,
        "rejected": choice["rejected"] if choice else [],
    }


# ---------------------------------------------------------------- the serving intent

# llama.cpp under throughput: a slot with less context than this (or than the trained context, if
# that is shorter) would cut off ordinary conversations; the plan then runs fewer slots.
MIN_SLOT_CTX = 4096


def llama_slots(intent, concurrency=DEFAULT_CONCURRENCY, parallel=AUTO):
    """llama_server_parallel: a set value is kept; auto is one slot for interactive (the one stream
    gets the whole context and shares no batch) and the target concurrency for throughput (one
    slot per stream, decoded together). Returns {parallel, reason}."""
    intent, concurrency = check_intent(intent, concurrency)
    if not is_auto(parallel):
        if isinstance(parallel, bool) or not str(parallel).strip().isdigit() or int(str(parallel).strip()) < 1:
            raise AutoError("llama_server_parallel is %r; set a whole number of 1 or more, or auto" % (parallel,))
        return {"parallel": int(str(parallel).strip()), "reason": "llama_server_parallel %s as set" % parallel}
    if intent == "interactive":
        return {"parallel": 1, "reason": "auto, serving intent interactive: one slot, so the one stream has the "
                                         "whole context and shares no batch"}
    return {"parallel": concurrency, "reason": "auto, serving intent throughput: %d slot(s), one per stream of "
                                               "gpulab_serving_concurrency, decoded in one batch" % concurrency}


def choose_llama_serving(model, devices, intent=DEFAULT_INTENT, concurrency=DEFAULT_CONCURRENCY, parallel=AUTO,
                         ctx_size=AUTO, split=AUTO, facts=None, limit=REJECTED_LIMIT, **options):
    """The slots, the context and the split for a serving intent: llama_slots, then
    choose_ctx_and_split with each slot's context capped by the trained one (llama-server caps a
    slot there: tools/server/server-context.cpp n_ctx_slot). Under throughput with slots and
    context both auto, a memory that cannot give every slot MIN_SLOT_CTX tokens gets fewer slots.
    Returns choose_ctx_and_split's answer with intent, concurrency, parallel and parallel_reason."""
    facts = facts or gp.model_facts(model)
    slots = llama_slots(intent, concurrency, parallel)
    options = dict(options)
    options.pop("parallel", None)

    def choose(count):
        return choose_ctx_and_split(model, devices, ctx_size=ctx_size, split=split, facts=facts, limit=limit,
                                    parallel=count, per_slot_trained=True, **options)

    count, reason = slots["parallel"], slots["reason"]
    choice = choose(count)
    trained = facts.get("context_length_train") or 0
    floor = min(MIN_SLOT_CTX, trained) if trained else MIN_SLOT_CTX
    if (intent == "throughput" and is_auto(parallel) and is_auto(ctx_size) and count > 1
            and not options.get("kv_unified") and choice["fits"] and choice["ctx_size"] // count < floor):
        fewer = max(1, choice["ctx_size"] // floor)
        while True:
            choice = choose(fewer)
            if fewer == 1 or choice["ctx_size"] // fewer >= floor:
                break
            fewer -= 1
        reason = ("auto, serving intent throughput: %d slot(s) of the %d of gpulab_serving_concurrency: the memory "
                  "holds %d tokens of context, and a slot below %d tokens would cut conversations short"
                  % (fewer, count, choice["ctx_size"], floor))
        count = fewer
    return dict(choice, intent=intent, concurrency=concurrency, parallel=count, parallel_reason=reason)


def intent_record(choice):
    """memory-plan.json's `intent`: the intent, the target concurrency and what it set (the
    slots, with the reason); the head reads the slots from here when llama_server_parallel is auto."""
    return {"intent": choice["intent"], "concurrency": choice["concurrency"], "parallel": choice["parallel"],
            "parallel_reason": choice["parallel_reason"]}
