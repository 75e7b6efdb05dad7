# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine table's reader: the only code that knows what an engine is.

Role common's `gpulab_engines` (roles/common/defaults/main/engines.yml) lists the engines, one entry
each; this file checks the table, resolves `gpulab_engine` (auto: the engine that serves the model's
format) and answers what the playbooks ask of an engine (its role, its units). Nothing else compares
an engine's name: adding an engine is one table entry and one role (docs/CONTRACTS.md).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

AUTO = "auto"

# What each entry must say, and the type of each value.
ENTRY_KEYS = {
    "label": str,         # the engine's name in messages and reports
    "role": str,          # its role, whose entry points the generic plays call
    "steps": list,        # which of the role's entry points deploy.yml runs (ENGINE_STEPS, in that order)
    "formats": list,      # model formats it serves: gguf, hf
    "units": list,        # its serving units as shell patterns, in stop order (the head's first)
    "users": list,        # the accounts they run as
    "api": dict,          # where its head answers: prefix, host, port, api_key, unit
    "ports": list,        # what it listens on: variable, at (head, worker, spanning), what
    "health_path": str,   # its health endpoint
    "models_path": str,   # its model list endpoint
}
API_KEYS = ("prefix", "host", "port", "unit")
PORT_PLACES = ("head", "worker", "spanning")
# The entry points of an engine's role that deploy.yml may run, in order: check (every node, with any
# tag: a dry run that cannot plan stops there), build (every node, before the model), model (the
# nodes that read it), plan (before anything is drained), serve (after the drain, inside the
# restoring block), report (on the head, after serving).
ENGINE_STEPS = ("check", "build", "model", "plan", "serve", "report")
FORMATS = ("gguf", "hf")
FORMAT_WORDS = {"gguf": "a GGUF model", "hf": "a Hugging Face checkpoint (config.json and safetensors)"}

# The inventory variables that name the model, in the order the engine rule reads them: a serving
# role's own path first (it says the format), model_synthetic last (a stand-in a lab sets by default).
MODEL_VARIABLES = ("vllm_server_model_path", "llama_server_model_path", "model_source", "model_path", "model_synthetic")


class EngineError(ValueError):
    """The table or gpulab_engine is wrong: the message names the variable and what to do."""


def is_auto(value):
    """auto, or not given (None)."""
    return value is None or (isinstance(value, str) and value.strip().lower() == AUTO)


def check_table(table):
    """The table itself, every entry's keys and types; returns it. Raises EngineError naming the key."""
    if not isinstance(table, dict) or not table:
        raise EngineError("gpulab_engines must be a mapping of engine name to its entry, got %r" % (table,))
    for name, entry in table.items():
        where = "gpulab_engines.%s" % name
        if name == AUTO or not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise EngineError("%s: an engine's name is a word of letters, digits and _ other than auto" % where)
        if not isinstance(entry, dict):
            raise EngineError("%s must be a mapping with %s" % (where, ", ".join(sorted(ENTRY_KEYS))))
        for key, kind in ENTRY_KEYS.items():
            if not isinstance(entry.get(key), kind):
                raise EngineError("%s.%s must be a %s, got %r" % (where, key, kind.__name__, entry.get(key)))
        for key in API_KEYS:
            if key not in entry["api"]:
                raise EngineError("%s.api has no %s" % (where, key))
        for port in entry["ports"]:
            if not isinstance(port, dict) or not port.get("variable") or port.get("at") not in PORT_PLACES:
                raise EngineError("%s.ports: each port needs a variable and at (%s), got %r"
                                  % (where, ", ".join(PORT_PLACES), port))
        unknown = [f for f in entry["formats"] if f not in FORMATS]
        if unknown or not entry["formats"]:
            raise EngineError("%s.formats must list some of %s, got %r" % (where, ", ".join(FORMATS), entry["formats"]))
        steps = [s for s in entry["steps"] if s not in ENGINE_STEPS]
        if steps or "serve" not in entry["steps"]:
            raise EngineError("%s.steps must include serve and name only %s, got %r"
                              % (where, ", ".join(ENGINE_STEPS), entry["steps"]))
        if not entry["units"] or not all(isinstance(u, str) and u for u in entry["units"]):
            raise EngineError("%s.units must list the engine's unit patterns" % where)
    return table


def engine_for_format(table, fmt, where="the model"):
    """{engine, reason}: the first engine of the table that serves this format."""
    for name, entry in table.items():
        if fmt in entry["formats"]:
            return {"engine": name, "reason": "auto: %s is %s, which %s serves" % (where, FORMAT_WORDS[fmt], entry["label"])}
    raise EngineError("gpulab_engine is auto but no engine of gpulab_engines serves %s (%s); set gpulab_engine "
                      "to one of %s" % (where, FORMAT_WORDS.get(fmt, fmt), ", ".join(table)))


def choose_engine(setting, fmt, table, where="the model"):
    """A set gpulab_engine is kept; auto takes the engine that serves the model's format."""
    check_table(table)
    if not is_auto(setting):
        if setting not in table:
            raise EngineError("gpulab_engine is %r; set one of %s (the engines of gpulab_engines) or auto"
                              % (setting, ", ".join(table)))
        return {"engine": setting, "reason": "gpulab_engine is set to %s" % setting}
    if fmt not in FORMATS:
        raise EngineError("gpulab_engine is auto but %s is neither a GGUF file nor a Hugging Face checkpoint "
                          "(config.json and *.safetensors); set gpulab_engine to one of %s, or point model_path "
                          "or model_source at the model" % (where, ", ".join(table)))
    return engine_for_format(table, fmt, where)


def named_format(name, value, model_path=""):
    """'gguf' or 'hf' for one inventory variable that names the model, None when it is unset."""
    if isinstance(value, dict):
        return "gguf" if value else None
    value = "" if value is None else str(value).strip()
    if not value:
        return None
    if name == "vllm_server_model_path":
        return "hf"
    if name == "model_source" and value == "head":
        return named_format("model_path", model_path)
    # a GGUF model is named by its (first shard's) file; anything else is a checkpoint directory
    return "gguf" if value.split("?", 1)[0].rstrip("/").lower().endswith(".gguf") else "hf"


def engine_from_inventory(setting, variables, table):
    """gpulab_engine with auto resolved from the head's inventory variables alone (nothing is read
    on a node, so every play and every host resolve it alike), the first set of MODEL_VARIABLES
    deciding (model_source head: model_path says). Without any model named, auto is the table's first
    engine (the one a lab that names no model, such as a fabric-only run, has always had).
    Returns {engine, reason}."""
    check_table(table)
    if not is_auto(setting):
        return choose_engine(setting, None, table)
    variables = variables or {}
    if str(variables.get("model_source") or "").strip() == "head" and not str(variables.get("model_path") or "").strip():
        raise EngineError("gpulab_engine is auto and model_source is head, but model_path (the model on the head) is "
                          "not set; set model_path, or set gpulab_engine to one of %s" % ", ".join(table))
    for name in MODEL_VARIABLES:
        value = variables.get(name)
        fmt = named_format(name, value, variables.get("model_path"))
        if fmt is not None:
            shown = "a synthetic GGUF (model_synthetic)" if name == "model_synthetic" else "%s %s" % (name, value)
            if name == "model_source" and str(value).strip() == "head":
                shown = "model_source head, model_path %s" % variables.get("model_path")
            return choose_engine(setting, fmt, table, where=shown)
    first = next(iter(table))
    return {"engine": first, "reason": "auto: the inventory names no model (%s), so the first engine of "
                                       "gpulab_engines" % ", ".join(MODEL_VARIABLES)}


def unit_patterns(table, engines=None):
    """The serving unit patterns of the given engines (all by default), in table and stop order."""
    check_table(table)
    names = list(table) if engines is None else list(engines)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise EngineError("gpulab_stop_engines names %s, not an engine of gpulab_engines (%s)"
                          % (", ".join(unknown), ", ".join(table)))
    patterns = []
    for name in table:
        if name in names:
            patterns += [p for p in table[name]["units"] if p not in patterns]
    return patterns


def others(table, engine):
    """Every engine but this one: deploy.yml retires them before the engine starts."""
    return [name for name in check_table(table) if name != engine]
