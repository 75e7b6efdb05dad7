# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout autopilot's shared words: what `auto` is, the error that names the variable, the
serving intents. The choices themselves are per engine, so that a module ships only the planner
it calls: layout_llama (gguf_plan's split, context and slots) and layout_vllm (vllm_plan's TP,
PP, DP and expert parallel, and the batch settings). Every choice returns the same shape: the
chosen value, `reason` (one sentence) and `rejected` (the first alternatives, each with its
`findings`), so a play can print why and a test can assert it.
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
