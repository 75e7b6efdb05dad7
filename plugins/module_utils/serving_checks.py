# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure checks of the role variables an operator sets, before any node is touched.

One layer: each role's meta/argument_specs.yml holds the types, choices and defaults of its
variables, and its descriptions say what null and an empty path mean where they mean anything.
The preflight checks every variable the inventory or `-e` set against the specs of all roles at
once (`role_options`), so a wrong value stops the run in seconds instead of in its role, minutes
into a deployment and after the drain. Each option set is validated alone
(`ansible.builtin.validate_argument_spec`'s own validator), so every error belongs to the option
it was found in. Besides the spec, this module keeps:
- what the specs say in words: null only where the description gives it a meaning, a path
  absolute (empty only where the description says what empty means);
- values Ansible's validation accepts by converting them while the role goes on using them as
  given (text for a list or `[1,2]` for a path, a boolean for a string or a number);
- ranges and forms a spec cannot state (a port from 1 to 65535, `all` or a number of layers);
- combinations (a context below one token per slot, a longest restart delay below the first).
Every problem is one sentence that names the variable as the user set it, the hosts it was set
on, and what to set instead.

Values come as Ansible hands them over: `-e name=value` gives strings, so a whole number may be
a string of digits, as the argument specs accept it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpulab.inference.plugins.module_utils import kept_room

_WHOLE = re.compile(r"\A[+-]?[0-9]+\Z")


def as_whole(value):
    """The int a whole-number setting means, or None when it is not one (bools are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _WHOLE.match(value.strip()):
        return int(value.strip())
    return None


def _for_validation(spec, top=True):
    """The spec without what validation does not use (the registered result stays small); an option's
    own `required` goes too: only options a host set are validated, and only a role needs them."""
    kept = {}
    for key, value in spec.items():
        if key in ("description", "version_added") or (top and key == "required"):
            continue
        if key == "options" and isinstance(value, dict):
            value = dict((name, _for_validation(sub, top=False)) for name, sub in value.items())
        kept[key] = value
    return kept


# Role common's shared names are its entry point `names` (which its tasks validate), not `main`.
ROLE_OPTIONS_ENTRY = {"common": "names"}


def _says(description, word):
    """Whether a description gives `word` (null, empty) a meaning: a clause that starts with it
    ("...; null keeps llama.cpp's default", "Empty takes ...") or "Unset (null)"."""
    if isinstance(description, list):
        description = " ".join(description)
    return bool(re.search(r"(?:\A|[.;:]\s+|\bunset \()%s\b" % word, description or "", re.IGNORECASE))


def role_options(spec_files):
    """Every option of every role's main entry point, as {option: {"role": role, "spec": spec}}, with
    "null": True where its description gives null a meaning and, for a path, "empty": True where it
    says what an empty value means.

    spec_files: {role: the content of roles/<role>/meta/argument_specs.yml}. Only `main` (role common's
    `names`): it is what a role validates when a play runs it, with the inventory's and -e's values;
    other entry points take parameters from the role that includes them (role service's `stop`,
    gpu_drain's `restore`).
    An option two roles describe differently raises ValueError: one of them would refuse what the
    other accepts.
    """
    options = {}
    for role in sorted(spec_files):
        entry = ROLE_OPTIONS_ENTRY.get(role, "main")
        main = ((spec_files[role] or {}).get("argument_specs") or {}).get(entry) or {}
        for name, spec in (main.get("options") or {}).items():
            mine = {"role": role, "spec": _for_validation(spec or {})}
            words = ("null", "empty") if mine["spec"].get("type") == "path" else ("null",)
            mine.update((word, True) for word in words if _says((spec or {}).get("description"), word))
            known = options.get(name)
            if known is None:
                options[name] = mine
            elif dict(known, role=role) != mine:
                raise ValueError("%s is %r in role %s but %r in role %s: give both argument specs the same type, "
                                 "choices, default and meaning of null" % (name, known["spec"], known["role"], mine["spec"], role))
    return options


def _shown(value):
    return "null" if value is None else repr(value)


def _default(spec):
    default = spec.get("default")
    if default is None:
        return None
    if isinstance(default, str) and "{{" in default:
        return "the role's default"
    return "the default %s" % (_shown(default) if isinstance(default, str) else default,)


def wanted(spec):
    """What an option takes, in words, from its spec."""
    kind = spec.get("type", "str")
    if spec.get("choices"):
        words = "one of %s" % ", ".join(str(choice) for choice in spec["choices"])
        return ("a list of " + words) if kind == "list" else words
    if kind == "list":
        return "a list of %s values" % spec["elements"] if spec.get("elements") else "a list"
    return {"int": "a whole number", "float": "a number", "bool": "true or false", "dict": "a mapping",
            "path": "a path", "raw": "a value"}.get(kind, "a string")


# Text that YAML would read as a list or a mapping (what `-e name=[1,2]` hands over), not a template.
_COLLECTION_TEXT = re.compile(r"\A\s*(?:\[.*\]|\{(?![{%#]).*(?<![}%#])\})\s*\Z", re.DOTALL)


def _as_given_problem(name, entry, value):
    """Why a value the spec accepts, or accepts by converting it, cannot work as the role uses it (the
    role reads the variable as set, not as the validation converted it): a phrase ending in what to
    set, or None."""
    spec = entry["spec"]
    kind = spec.get("type", "str")
    if isinstance(value, bool) and kind in ("str", "path", "int", "float"):
        return ("is a boolean (YAML reads an unquoted yes, no, on, off, true or false as one): set %s, quoted "
                "where it is one of those words" % wanted(spec))
    if isinstance(value, (list, dict)) and kind in ("str", "path", "int", "float"):
        return "is a %s: set %s" % ("list" if isinstance(value, list) else "mapping", wanted(spec))
    if isinstance(value, str) and kind in ("list", "dict"):
        example = "[...]" if kind == "list" else "{...}"
        return ("is text, which Ansible would take as a %s of its comma-separated parts: set %s, in YAML in the "
                "inventory or as JSON on the command line (-e '{\"%s\": %s}')" % (kind, wanted(spec), name, example))
    if isinstance(value, str) and kind in ("str", "path") and _COLLECTION_TEXT.match(value):
        return ("is text that reads as a %s (-e name=value gives text): set %s, one value" %
                ("list" if value.strip().startswith("[") else "mapping", wanted(spec)))
    if kind == "path" and isinstance(value, str) and not value.startswith("/"):
        if value == "" and (spec.get("default") == "" or entry.get("empty")):
            return None
        return ("is %s, which a task would take from wherever it runs (the deploy user's home on a node): set "
                "an absolute path" % ("empty" if value == "" else "a relative path"))
    return None


def _at_least(minimum, maximum=None):
    def check(value):
        number = as_whole(value)
        # Not a whole number: the argument spec says so in its own words.
        if number is None:
            return None
        if number < minimum:
            return "is below %d" % minimum
        if maximum is not None and number > maximum:
            return "is above %d" % maximum
        return None
    return check


def _gpu_layers(value):
    if value in ("all", "auto") or as_whole(value) is not None:
        return None
    return "is not a number of layers, all or auto"


def _ctx_size(value):
    if value == "auto":
        return None
    if as_whole(value) is None:
        return "is not a whole number or auto"
    return _at_least(0)(value)


def _parallel(value):
    if value == "auto":
        return None
    if as_whole(value) is None:
        return "is not a whole number or auto"
    return _at_least(1)(value)


def _tensor_split(value):
    if isinstance(value, str) and value in ("auto", "equal", "proportional"):
        return None
    if not isinstance(value, (list, tuple)) or not value:
        return "is not auto, equal, proportional or a list of numbers"
    numbers = []
    for entry in value:
        try:
            if isinstance(entry, bool):
                raise ValueError(entry)
            numbers.append(float(entry))
        except (TypeError, ValueError):
            return "has an entry %r that is not a number" % (entry,)
    if any(number < 0 for number in numbers) or not any(numbers):
        return "needs non-negative shares, one above 0"
    return None


# What Ansible's `type: bool` accepts (ansible.module_utils.parsing.convert_bool).
_BOOLEAN_WORDS = frozenset(("y", "yes", "on", "1", "true", "t", "n", "no", "off", "0", "false", "f"))


def _backend_sampling(value):
    if isinstance(value, bool) or value in (0, 1):
        return None
    if isinstance(value, str) and (value == "auto" or value.strip().lower() in _BOOLEAN_WORDS):
        return None
    return "is not auto, true or false"


def _not_empty(value):
    return "is empty" if isinstance(value, str) and not value.strip() else None


def _entries_at_least(minimum, what):
    def check(value):
        if not isinstance(value, (list, tuple)):
            return None
        for entry in value:
            number = as_whole(entry)
            if number is not None and number < minimum:
                return "has an entry %r that is not %s" % (entry, what)
        return None
    return check


def _kept_figures(value):
    bad = kept_room.bad_figures(value) if isinstance(value, dict) else []
    return "gives %s" % ", ".join("%s %r" % (pattern, mib) for pattern, mib in bad) if bad else None


def _levels(value):
    if isinstance(value, (list, tuple)) and not value:
        return "is an empty list"
    return _entries_at_least(1, "a concurrency of 1 or more")(value)


_PORT = _at_least(1, 65535)

# name -> (check, what to set): what each option's argument spec cannot say (its type, choices and
# null are the spec's). Every name is an option of its role's meta/argument_specs.yml
# (tests/unit/plugins/module_utils/test_serving_checks.py checks it, and that defaults pass).
RULES = {
    "llama_server_host": (_not_empty, "the address llama-server binds to, e.g. 127.0.0.1"),
    "llama_server_port": (_PORT, "a TCP port from 1 to 65535, e.g. 8080"),
    "llama_server_ctx_size": (_ctx_size, "the context in tokens shared by all slots, e.g. 8192 (0: the model's training "
                                         "context), or auto (the largest that fits, chosen by the memory plan)"),
    "llama_server_parallel": (_parallel, "the number of requests served at once, 1 or more, e.g. 4, or auto (from "
                                         "gpulab_serving_intent, set by the memory plan)"),
    "gpulab_serving_concurrency": (_at_least(1), "the streams the lab serves at once, 1 or more, e.g. 4"),
    "llama_server_gpu_layers": (_gpu_layers, "a number of layers, or all"),
    "llama_server_tensor_split": (_tensor_split, "auto (whole layers with the most headroom, chosen by the memory plan), "
                                                 "equal, proportional, or one share per device, e.g. [1, 1, 2]"),
    "llama_server_batch_size": (_at_least(1), "the logical batch in tokens, e.g. 2048"),
    "llama_server_ubatch_size": (_at_least(1), "the physical batch in tokens, e.g. 512"),
    "llama_server_reasoning_budget": (_at_least(-1), "-1 (unlimited), 0 (none), a number of tokens, or null"),
    "llama_server_threads": (_at_least(0), "a number of CPU threads, or 0 for llama.cpp's default"),
    "llama_server_log_verbosity": (_at_least(0), "a verbosity level from 0, e.g. 4"),
    "llama_server_backend_sampling": (_backend_sampling, "auto, true or false"),
    "llama_server_worker_wait_s": (_at_least(0), "seconds to wait for the workers, e.g. 300"),
    "llama_server_worker_watch_s": (_at_least(0), "seconds between connection checks, e.g. 5 (0: no watch)"),
    "llama_server_worker_unreachable_s": (_at_least(0), "seconds without an ACK from a worker, e.g. 20 (0: off)"),
    "llama_server_restart_sec": (_at_least(0), "seconds before a restart, e.g. 5"),
    "llama_server_restart_max_delay_s": (_at_least(0), "the longest restart delay in seconds, e.g. 30"),
    "llama_server_health_timeout_s": (_at_least(0), "seconds to wait for /health, or 0 to scale it to the model"),
    "llama_server_health_timeout_floor_s": (_at_least(0), "seconds, e.g. 120"),
    "llama_server_health_load_rate_mib_s": (_at_least(1), "MiB/s the model loads at, 1 or more, e.g. 100"),
    "llama_server_health_poll_s": (_at_least(1), "seconds between /health polls, e.g. 5"),
    "llama_server_smoke_max_tokens": (_at_least(1), "tokens of the smoke answer, e.g. 8"),
    "llama_server_smoke_timeout_s": (_at_least(1), "seconds, e.g. 120"),
    "llama_rpc_server_port_base": (_PORT, "the first RPC port, from 1 to 65535, e.g. 50052"),
    "llama_rpc_server_threads": (_at_least(0), "a number of CPU threads, or 0 for llama.cpp's default"),
    "llama_rpc_server_gpu_indices": (_entries_at_least(0, "a GPU index (0, 1, ...)"),
                                     "a list of nvidia-smi GPU indices, e.g. [0, 1], or [] for all"),
    "llama_rpc_server_restart_sec": (_at_least(0), "seconds before a restart, e.g. 5"),
    "llama_rpc_server_restart_max_delay_s": (_at_least(0), "the longest restart delay in seconds, e.g. 60"),
    "llama_rpc_server_listen_timeout_s": (_at_least(1), "seconds to wait for the servers to listen, e.g. 60"),
    "memory_plan_margin_mib": (_at_least(0), "MiB every device keeps free, e.g. 1024"),
    "memory_plan_cuda_context_mib": (_at_least(0), "MiB per process and GPU for the CUDA context, e.g. 720"),
    "memory_plan_cuda_idle_context_mib": (_at_least(0), "MiB per process and GPU without layers for the bare "
                                          "CUDA context, e.g. 518 (0 leaves it out)"),
    "llama_cpp_keep_builds": (_at_least(2), "builds to keep, 2 or more (the current one and the previous for a rollback)"),
    "llama_cpp_build_timeout_s": (_at_least(1), "seconds the build may take, e.g. 7200"),
    "gpulab_kept_mib": (_kept_figures, "the MiB each kept service holds, a whole number >= 0 per keep pattern of "
                                       "gpu_drain_keep, e.g. {\"whisper-asr\": 6144}"),
    "bench_concurrency": (_levels, "the concurrency levels, e.g. [1, 2, 4]"),
    "bench_requests_per_level": (_at_least(1), "requests per level, 1 or more, e.g. 8"),
    "bench_warmup_requests": (_at_least(0), "warm-up requests, e.g. 2"),
    "bench_prompt_tokens": (_at_least(1), "prompt tokens per request, e.g. 512"),
    "bench_max_tokens": (_at_least(2), "output tokens per request, 2 or more, e.g. 256"),
    "bench_request_timeout_s": (_at_least(1), "seconds per request, e.g. 300"),
    "bench_timeout_s": (_at_least(1), "seconds for the whole benchmark, e.g. 1800"),
    "bench_progress_interval_s": (_at_least(1), "seconds between progress lines, e.g. 10"),
    "bench_sampler_interval_ms": (_at_least(1), "milliseconds between GPU samples, e.g. 200"),
}


def _type_problem(name, spec, value):
    """Ansible's own validation of one option: its errors belong to that option by construction."""
    errors = ArgumentSpecValidator({name: spec}).validate({name: value}).error_messages
    return "; ".join(error.rstrip(".") for error in errors) or None


def value_problem(name, entry, value):
    """Why a value set for an option cannot work: (True, Ansible's errors) where its spec refuses it,
    (False, a phrase ending in what to set) where a rule here does, or None."""
    spec = entry["spec"]
    if value is None:
        if entry.get("null"):
            return None
        return False, ("is null, which role %s gives no meaning: remove the setting for %s, or set %s"
                       % (entry["role"], _default(spec) or "the role's default", wanted(spec)))
    refused = _type_problem(name, spec, value)
    if refused is not None:
        return True, refused
    reason = _as_given_problem(name, entry, value)
    if reason is None and name in RULES:
        reason = RULES[name][0](value)
        reason = reason and "%s: set %s" % (reason, RULES[name][1])
    return reason and (False, reason)


def _combination_problems(values, options):
    """(subject, rest of the sentence) for values that are each fine but cannot work together;
    values: name -> value as set on one host (only names the user set, each valid); what is not set
    is its spec's default."""
    def get(name):
        return as_whole(values[name] if name in values else options[name]["spec"].get("default"))

    def shown(name):
        return "%s=%s%s" % (name, get(name), "" if name in values else " (the default)")

    def known(*names):
        # a set value that is not a number (a word the spec allows, e.g. auto) has no order
        return any(name in values for name in names) and all(get(name) is not None for name in names)

    problems = []
    for prefix in ("llama_server", "llama_rpc_server"):
        first, longest = prefix + "_restart_sec", prefix + "_restart_max_delay_s"
        if known(first, longest) and get(longest) < get(first):
            problems.append((shown(longest), "is below %s: the longest restart delay cannot be below the "
                             "first; raise %s or lower %s." % (shown(first), longest, first)))
    if isinstance(values.get("gpulab_kept_mib"), dict):
        keep = values["gpu_drain_keep"] if "gpu_drain_keep" in values else options["gpu_drain_keep"]["spec"].get("default")
        unknown = kept_room.not_kept(values["gpulab_kept_mib"], keep)
        if unknown:
            problems.append(("gpulab_kept_mib", "names %s, which gpu_drain_keep (%s) does not keep: a figure for no "
                             "kept service; add the pattern to gpu_drain_keep or remove it."
                             % (", ".join(unknown), ", ".join(keep or []) or "empty")))
    ctx, parallel = "llama_server_ctx_size", "llama_server_parallel"
    if known(ctx, parallel) and 0 < get(ctx) < get(parallel):
        problems.append((shown(ctx), "over %s leaves less than one token per slot: raise %s or lower %s."
                         % (shown(parallel), ctx, parallel)))
    return problems


def _subject(name, values, options):
    if options[name]["spec"].get("no_log"):
        return "%s (its value hidden)" % name
    return "%s=%s" % (name, _shown(values[name]))


def _spec_sentence(errors, entry):
    spec = entry["spec"]
    default = _default(spec)
    hint = "role %s takes %s" % (entry["role"], wanted(spec))
    if default is not None:
        hint += "; remove the setting for %s" % default
    return ": %s; %s." % (errors, hint)


def _where(hosts, all_hosts):
    if len(hosts) > 1 and set(hosts) >= set(all_hosts):
        return "on every node"
    return "on " + ", ".join(hosts)


def serving_problems(checked, options, all_hosts=None):
    """Every problem of the variables the hosts set, as sentences: [] when all is well.

    checked: host -> {option: value} (the options of role_options the host set whose value could be
    read); options: role_options' result; all_hosts: the hosts checked, for "every node". What the
    spec refuses comes first, then the rules' findings in the specs' order, then combinations; a
    problem several hosts share is reported once, naming the hosts.
    """
    if not isinstance(checked, dict):
        raise TypeError("checked must be a mapping of host to values, got %s" % type(checked).__name__)
    all_hosts = list(all_hosts if all_hosts is not None else checked)
    order = list(options)
    found = {}
    for host in sorted(checked):
        values = dict(checked[host] or {})
        unknown = sorted(set(values) - set(options))
        if unknown:
            raise KeyError("no argument spec has %s" % ", ".join(unknown))
        refused, problems, valid = [], [], {}
        for name in sorted(values, key=order.index):
            problem = value_problem(name, options[name], values[name])
            if problem is None:
                valid[name] = values[name]
            elif problem[0]:
                refused.append((_subject(name, values, options), _spec_sentence(problem[1], options[name])))
            else:
                problems.append((_subject(name, values, options), " %s." % problem[1]))
        for problem in refused + problems + [(subject, " " + rest) for subject, rest in _combination_problems(valid, options)]:
            found.setdefault(problem, []).append(host)
    return ["%s %s%s" % (subject, _where(hosts, all_hosts), rest) for (subject, rest), hosts in found.items()]
