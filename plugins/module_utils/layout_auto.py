# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout autopilot's shared words: what `auto` is, the error that names the variable, the
serving intents, and the head's auto settings read back from the memory plan's record. The
choices themselves are per engine, so that a module ships only the planner it calls:
layout_llama (gguf_plan's split, context and slots) and layout_vllm (vllm_plan's TP, PP, DP and
expert parallel, and the batch settings). Every choice returns the same shape: the chosen value,
`reason` (one sentence) and `rejected` (the first alternatives, each with its `findings`), so a
play can print why and a test can assert it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


AUTO = "auto"
# How many turned-down alternatives a choice reports by default.
REJECTED_LIMIT = 5
# Free memory moves by a few MiB between runs; the choices see it in whole steps, so an unchanged
# node gets the same split and context (the same argv, no restart) and a real change moves them.
STEADY_STEP_MIB = 256


class AutoError(ValueError):
    """No layout fits, or an input cannot be chosen from: the message names the variable."""


def is_auto(value):
    """auto, or not given (None)."""
    return value is None or is_auto_word(value)


def is_auto_word(value):
    return isinstance(value, str) and value.strip().lower() == AUTO


# ---------------------------------------------------------------- the serving intent
#
# gpulab_serving_intent (role common) says what the lab serves, and the autopilot tunes both engines
# for it. Every value it sets stays the operator's: a setting other than auto is kept, and the plan
# says which values the intent set and why.

INTENTS = ("interactive", "throughput")
DEFAULT_INTENT = "throughput"
DEFAULT_CONCURRENCY = 4


def check_intent(intent, concurrency=DEFAULT_CONCURRENCY):
    """(intent, concurrency), or an error naming the variable the operator set."""
    if intent not in INTENTS:
        raise AutoError("gpulab_serving_intent is %r; set interactive (one user, the fastest stream) or throughput "
                        "(several users, the most tokens in all)" % (intent,))
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise AutoError("gpulab_serving_concurrency is %r; set the number of streams the lab should serve at once, "
                        "a whole number of 1 or more" % (concurrency,))
    return intent, concurrency


# ---------------------------------------------------------------- auto resolved by the memory plan

def resolve_from_memory_plan(split, ctx_size, record, model_path, record_path="memory-plan.json"):
    """(tensor_split, ctx_size) for the head's command line: each auto setting takes what the
    memory plan resolved (its record, memory-plan.json, written before any service changes), a
    set value stays. record: the parsed file, or None when there is none."""
    wanted = [name for name, value in (("llama_server_tensor_split", split), ("llama_server_ctx_size", ctx_size))
              if is_auto_word(value)]
    if not wanted:
        return split, ctx_size
    subject = " and ".join(wanted) + (" are" if len(wanted) > 1 else " is")
    if not isinstance(record, dict):
        raise AutoError("%s auto: the memory plan resolves %s (role memory_plan writes %s before any service "
                        "changes), but there is no plan there; run deploy.yml, or set %s"
                        % (subject, "them" if len(wanted) > 1 else "it", record_path, " and ".join(wanted)))
    if record.get("model_path") != model_path:
        raise AutoError("%s auto, but %s plans %s, not %s; run the memory plan again (deploy.yml)"
                        % (subject, record_path, record.get("model_path"), model_path))
    options = record.get("options") if isinstance(record.get("options"), dict) else {}
    planned_split, planned_ctx = record.get("tensor_split"), options.get("ctx_size")
    if is_auto_word(split):
        if not isinstance(planned_split, list) or not planned_split or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in planned_split):
            raise AutoError("%s holds no tensor_split list (%r); run the memory plan again" % (record_path, planned_split))
        split = [int(v) if float(v).is_integer() else v for v in planned_split]
    if is_auto_word(ctx_size):
        if isinstance(planned_ctx, bool) or not isinstance(planned_ctx, int) or planned_ctx < 1:
            raise AutoError("%s holds no resolved ctx_size (%r); run the memory plan again" % (record_path, planned_ctx))
        ctx_size = planned_ctx
    return split, ctx_size


def resolve_parallel_from_memory_plan(parallel, record, record_path="memory-plan.json"):
    """llama_server_parallel for the head's command line: auto takes the slots the memory plan
    resolved (memory-plan.json's intent), a set value stays."""
    if not is_auto_word(parallel):
        return parallel
    planned = ((record or {}).get("intent") or {}).get("parallel") if isinstance(record, dict) else None
    if isinstance(planned, bool) or not isinstance(planned, int) or planned < 1:
        raise AutoError("llama_server_parallel is auto: the memory plan resolves it (role memory_plan writes %s before "
                        "any service changes), but %s holds no resolved slots (%r); run deploy.yml "
                        "(deploy.yml), or set llama_server_parallel" % (record_path, record_path, planned))
    return planned
