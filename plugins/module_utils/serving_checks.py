# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure checks of the build, serving and benchmark variables an operator sets, before any node is touched.

The serving roles check their arguments when they run, minutes into a deployment and under
from role common's dicts (llama_server_ctx_size reaches the memory plan inside
gpulab_llama_server_memory_options). These
checks run in the first play on the values the inventory and `-e` give, so a wrong value stops
the run in seconds with one sentence per problem that names the variable as the user set it,
the hosts it was set on, and what to set instead.

Values come as Ansible hands them over: `-e name=value` gives strings, so a whole number may be
a string of digits, and a boolean one of Ansible's boolean words.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpulab.inference.plugins.module_utils.gguf_plan import CACHE_TYPES

_WHOLE = re.compile(r"\A[+-]?[0-9]+\Z")
# What Ansible's `type: bool` accepts (ansible.module_utils.parsing.convert_bool).
_TRUE = frozenset(("y", "yes", "on", "1", "true", "t"))
_FALSE = frozenset(("n", "no", "off", "0", "false", "f"))


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


def as_bool(value):
    """True or False for a boolean setting, or None when the value is not one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    return None


def _whole(minimum=None, maximum=None):
    def check(value):
        number = as_whole(value)
        if number is None:
            return "is not a whole number"
        if minimum is not None and number < minimum:
            return "is below %d" % minimum
        if maximum is not None and number > maximum:
            return "is above %d" % maximum
        return None
    return check


def _optional(check):
    def optional(value):
        return None if value is None else check(value)
    return optional


def _boolean(value):
    return None if as_bool(value) is not None else "is not true or false"


def _choice(*choices):
    def check(value):
        if isinstance(value, bool):
            # YAML 1.1 reads an unquoted on/off/yes/no as a boolean
            return "is a boolean (YAML reads an unquoted on or off as true or false)"
        if not isinstance(value, str) or value not in choices:
            return "is not one of %s" % ", ".join(choices)
        return None
    return check


def _gpu_layers(value):
    if isinstance(value, str) and value in ("all", "auto"):
        return None
    return None if as_whole(value) is not None else "is not a number of layers, all or auto"


def _tensor_split(value):
    if isinstance(value, str) and value in ("equal", "proportional"):
        return None
    if not isinstance(value, (list, tuple)) or not value:
        return "is not equal, proportional or a list of numbers"
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


def _backend_sampling(value):
    if isinstance(value, str) and value == "auto":
        return None
    return None if as_bool(value) is not None else "is not auto, true or false"


def _text(value):
    if not isinstance(value, str) or not value.strip():
        return "is not a non-empty string"
    return None


def _whole_list(value):
    if not isinstance(value, (list, tuple)):
        return "is not a list"
    for entry in value:
        number = as_whole(entry)
        if number is None or number < 0:
            return "has an entry %r that is not a GPU index (0, 1, ...)" % (entry,)
    return None


def _levels(value):
    if isinstance(value, str):
        # -e name=1,2,4 gives a string; a list needs JSON: -e '{"name": [1, 2, 4]}'
        return "is a string, not a list (on the command line give JSON, -e '{\"bench_concurrency\": [1, 2, 4]}')"
    if not isinstance(value, (list, tuple)) or not value:
        return "is not a non-empty list"
    for entry in value:
        number = as_whole(entry)
        if number is None or number < 1:
            return "has an entry %r that is not a concurrency of 1 or more" % (entry,)
    return None


_PORT = _whole(1, 65535)

# name -> (check, what to set). Every name is an option of its role's meta/argument_specs.yml
# (tests/unit/plugins/module_utils/test_serving_checks.py checks it, and that defaults pass).
RULES = {
    "llama_server_host": (_text, "the address llama-server binds to, e.g. 127.0.0.1"),
    "llama_server_port": (_PORT, "a TCP port from 1 to 65535, e.g. 8080"),
    "llama_server_ctx_size": (_whole(0), "the context in tokens shared by all slots, e.g. 8192 (0: the model's training context)"),
    "llama_server_parallel": (_whole(1), "the number of requests served at once, 1 or more, e.g. 4"),
    "llama_server_gpu_layers": (_gpu_layers, "a number of layers, or all"),
    "llama_server_tensor_split": (_tensor_split, "equal, proportional, or one share per device, e.g. [1, 1, 2]"),
    "llama_server_flash_attn": (_choice("on", "off", "auto"), "on, off or auto (quoted in YAML)"),
    "llama_server_cache_type_k": (_choice(*sorted(CACHE_TYPES)), "a KV cache type, e.g. f16 or q8_0"),
    "llama_server_cache_type_v": (_choice(*sorted(CACHE_TYPES)), "a KV cache type, e.g. f16 or q8_0"),
    "llama_server_batch_size": (_whole(1), "the logical batch in tokens, e.g. 2048"),
    "llama_server_ubatch_size": (_whole(1), "the physical batch in tokens, e.g. 512"),
    "llama_server_jinja": (_boolean, "true or false"),
    "llama_server_metrics": (_boolean, "true or false"),
    "llama_server_reasoning_budget": (_optional(_whole(-1)), "-1 (unlimited), 0 (none), a number of tokens, or null"),
    "llama_server_threads": (_whole(0), "a number of CPU threads, or 0 for llama.cpp's default"),
    "llama_server_log_verbosity": (_optional(_whole(0)), "a verbosity level from 0, e.g. 4, or null"),
    "llama_server_backend_sampling": (_backend_sampling, "auto, true or false"),
    "llama_server_extra_args": (lambda v: None if isinstance(v, (list, tuple)) else "is not a list",
                                "a list of strings, e.g. ['--no-mmap']"),
    "llama_server_worker_wait_s": (_whole(0), "seconds to wait for the workers, e.g. 300"),
    "llama_server_worker_watch_s": (_whole(0), "seconds between connection checks, e.g. 5 (0: no watch)"),
    "llama_server_restart_sec": (_whole(0), "seconds before a restart, e.g. 5"),
    "llama_server_restart_max_delay_s": (_whole(0), "the longest restart delay in seconds, e.g. 30"),
    "llama_server_health_timeout_s": (_whole(0), "seconds to wait for /health, or 0 to scale it to the model"),
    "llama_server_health_timeout_floor_s": (_whole(0), "seconds, e.g. 120"),
    "llama_server_health_load_rate_mib_s": (_whole(1), "MiB/s the model loads at, 1 or more, e.g. 100"),
    "llama_server_health_poll_s": (_whole(1), "seconds between /health polls, e.g. 5"),
    "llama_server_smoke_enabled": (_boolean, "true or false"),
    "llama_server_smoke_max_tokens": (_whole(1), "tokens of the smoke answer, e.g. 8"),
    "llama_server_smoke_timeout_s": (_whole(1), "seconds, e.g. 120"),
    "llama_rpc_server_port_base": (_PORT, "the first RPC port, from 1 to 65535, e.g. 50052"),
    "llama_rpc_server_threads": (_whole(0), "a number of CPU threads, or 0 for llama.cpp's default"),
    "llama_rpc_server_gpu_indices": (_whole_list, "a list of nvidia-smi GPU indices, e.g. [0, 1], or [] for all"),
    "llama_rpc_server_cache_enabled": (_boolean, "true or false"),
    "llama_rpc_server_allow_any_address": (_boolean, "true or false"),
    "llama_rpc_server_firewall_enabled": (_boolean, "true or false"),
    "llama_rpc_server_restart_sec": (_whole(0), "seconds before a restart, e.g. 5"),
    "llama_rpc_server_restart_max_delay_s": (_whole(0), "the longest restart delay in seconds, e.g. 60"),
    "llama_rpc_server_listen_timeout_s": (_whole(1), "seconds to wait for the servers to listen, e.g. 60"),
    "llama_rpc_server_other_firewall": (_choice("fail", "opened"), "fail, or opened once the ports are open"),
    "memory_plan_margin_mib": (_whole(0), "MiB every device keeps free, e.g. 1024"),
    "memory_plan_cuda_context_mib": (_whole(0), "MiB per process and GPU for the CUDA context, e.g. 720"),
    "memory_plan_enforce": (_boolean, "true or false"),
    "memory_plan_count_drain": (_boolean, "true or false"),
    "llama_cpp_source": (_choice("git", "archive"), "git or archive"),
    "llama_cpp_cuda": (_choice("auto", "on", "off"), "auto, on or off (quoted in YAML)"),
    "llama_cpp_rpc_rdma": (_choice("auto", "on", "off"), "auto, on or off (quoted in YAML)"),
    "llama_cpp_native": (_boolean, "true or false"),
    "llama_cpp_keep_builds": (_whole(2), "builds to keep, 2 or more (the current one and the previous for a rollback)"),
    "llama_cpp_build_timeout_s": (_whole(1), "seconds the build may take, e.g. 7200"),
    "bench_concurrency": (_levels, "the concurrency levels, e.g. [1, 2, 4]"),
    "bench_requests_per_level": (_whole(1), "requests per level, 1 or more, e.g. 8"),
    "bench_warmup_requests": (_whole(0), "warm-up requests, e.g. 2"),
    "bench_prompt_tokens": (_whole(1), "prompt tokens per request, e.g. 512"),
    "bench_max_tokens": (_whole(2), "output tokens per request, 2 or more, e.g. 256"),
    "bench_ignore_eos": (_boolean, "true or false"),
    "bench_greedy": (_boolean, "true or false"),
    "bench_request_timeout_s": (_whole(1), "seconds per request, e.g. 300"),
    "bench_timeout_s": (_whole(1), "seconds for the whole benchmark, e.g. 1800"),
    "bench_progress_interval_s": (_whole(1), "seconds between progress lines, e.g. 10"),
    "bench_sampler_interval_ms": (_whole(1), "milliseconds between GPU samples, e.g. 200"),
    "bench_sampler_method": (_choice("auto", "nvml", "nvidia-smi-loop", "nvidia-smi-poll"),
                             "auto, nvml, nvidia-smi-loop or nvidia-smi-poll"),
}

# Defaults of the roles (defaults/main.yml, checked by the unit test) for the combinations below,
# when the user set only one side.
DEFAULTS = {
    "llama_server_ctx_size": 8192,
    "llama_server_parallel": 4,
    "llama_server_restart_sec": 5,
    "llama_server_restart_max_delay_s": 30,
    "llama_rpc_server_restart_sec": 5,
    "llama_rpc_server_restart_max_delay_s": 60,
}


def value_problem(name, value):
    """Why the value of a known variable cannot work (a phrase), or None."""
    check = RULES[name][0]
    return check(value)


def _combination_problems(values):
    """(subject, rest of the sentence) for values that are each fine but cannot work together;
    values: name -> value as set on one host (only names the user set, each valid)."""
    def get(name):
        return as_whole(values[name]) if name in values else DEFAULTS[name]

    def shown(name):
        return "%s=%s%s" % (name, get(name), "" if name in values else " (the default)")

    problems = []
    for prefix in ("llama_server", "llama_rpc_server"):
        first, longest = prefix + "_restart_sec", prefix + "_restart_max_delay_s"
        if (first in values or longest in values) and get(longest) < get(first):
            problems.append((shown(longest), "is below %s: the longest restart delay cannot be below the "
                             "first; raise %s or lower %s." % (shown(first), longest, first)))
    ctx, parallel = "llama_server_ctx_size", "llama_server_parallel"
    if (ctx in values or parallel in values) and 0 < get(ctx) < get(parallel):
        problems.append((shown(ctx), "over %s leaves less than one token per slot: raise %s or lower %s."
                         % (shown(parallel), ctx, parallel)))
    return problems


def _where(hosts, all_hosts):
    if len(hosts) > 1 and set(hosts) >= set(all_hosts):
        return "on every node"
    return "on " + ", ".join(hosts)


def serving_problems(values_by_host, all_hosts=None):
    """Every problem of the serving variables, as sentences: [] when all is well.

    values_by_host: host -> {variable: value} holding only the variables of RULES that are set
    for that host (inventory or -e); all_hosts: the hosts checked, for "every node". Problems
    that several hosts share are reported once, naming the hosts.
    """
    if not isinstance(values_by_host, dict):
        raise TypeError("values_by_host must be a mapping of host to variables, got %s"
                        % type(values_by_host).__name__)
    all_hosts = list(all_hosts if all_hosts is not None else values_by_host)
    found = {}
    order = []
    for host in sorted(values_by_host):
        values = values_by_host[host] or {}
        unknown = sorted(set(values) - set(RULES))
        if unknown:
            raise KeyError("no rule for %s" % ", ".join(unknown))
        valid = {}
        for name in sorted(values, key=list(RULES).index):
            reason = value_problem(name, values[name])
            if reason is None:
                valid[name] = values[name]
                continue
            problem = ("%s=%r" % (name, values[name]), "%s: set %s." % (reason, RULES[name][1]))
            found.setdefault(problem, [])
            if problem not in order:
                order.append(problem)
            found[problem].append(host)
        for problem in _combination_problems(valid):
            found.setdefault(problem, [])
            if problem not in order:
                order.append(problem)
            found[problem].append(host)
    return ["%s %s %s" % (subject, _where(found[(subject, rest)], all_hosts), rest) for subject, rest in order]
