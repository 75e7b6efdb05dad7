# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kept services keep their room: the memory plan reserves for each kept service (gpu_drain's
keep patterns) the GPU memory it held when it was last seen running, or what the operator
states, whether it runs at plan time or not.

Free memory at plan time counts a kept service only while it runs: one that is restarting, or
stopped for a moment, holds nothing then, the plan fills the GPU, and the service cannot start
again ("CUDA out of memory"). So the GPU inventory keeps a history (update_history, run at every
look at the GPUs): per keep pattern and GPU, the most memory its processes held together. The plan
then reserves (reserve) what a kept service is missing now: its whole figure when it is not
running, the difference when it runs with less (still loading); a running service at or above its
figure is already out of the free memory. Each reservation says why, for the plan's output.

Pure functions over gpu_residency's processes (systemd_unit, supervisor_program, container,
gpu_index, used_memory_mib). The history lives on each node in gpulab_kept_history_file
(docs/CONTRACTS.md; parse_history, history_document); the plans take reserve_on_nodes over the
nodes they plan on and print reserved_lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json

from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import matching_pattern, program_units


class KeptRoomError(ValueError):
    pass


def process_names(process):
    """The names a keep pattern matches a GPU process by, as gpu_drain.consumer_names does for its
    consumers: the unit with and without .service, the program with and without its
    group, the container's name."""
    names = []
    unit = process.get('systemd_unit')
    if unit:
        names.append(unit)
        if unit.endswith('.service'):
            names.append(unit[:-len('.service')])
    program = process.get('supervisor_program')
    if program:
        names.append(program)
        if ':' in program:
            names.append(program.split(':', 1)[1])
    if process.get('container'):
        names.append(process['container'])
    return names


def held_by_pattern(processes, keep):
    """{pattern: {gpu_index (str): MiB}} held now by the processes each keep pattern matches (the
    first pattern that matches a process takes it, as the drain decides)."""
    held = {}
    for process in processes or []:
        names = process_names(process)
        for pattern in keep:
            if any(fnmatch.fnmatchcase(name, pattern) for name in names):
                gpus = held.setdefault(pattern, {})
                index = str(process.get('gpu_index'))
                gpus[index] = gpus.get(index, 0) + int(process.get('used_memory_mib') or 0)
                break
    return held


def update_history(history, processes, keep, now):
    """The history after one look: for each kept pattern seen running, per GPU, the most it held
    (this look or an earlier one), with when it was last seen. history: {pattern: {'gpus': {index:
    MiB}, 'seen_at': text}}; patterns no longer kept are dropped."""
    out = {}
    held = held_by_pattern(processes, keep)
    for pattern in keep:
        before = (history or {}).get(pattern) or {}
        gpus = dict((str(k), int(v)) for k, v in (before.get('gpus') or {}).items())
        seen_at = before.get('seen_at')
        for index, mib in (held.get(pattern) or {}).items():
            gpus[index] = max(gpus.get(index, 0), mib)
            seen_at = now
        if gpus:
            out[pattern] = {'gpus': gpus, 'seen_at': seen_at}
    return out


def bad_figures(stated):
    """The entries of the operator's figures that are no MiB (a whole number >= 0), as (pattern, value)."""
    return [(pattern, mib) for pattern, mib in sorted((stated or {}).items())
            if isinstance(mib, bool) or not isinstance(mib, int) or mib < 0]


def not_kept(stated, keep):
    """The patterns of the operator's figures that are not keep patterns (a figure for nothing)."""
    return [pattern for pattern in sorted(stated or {}) if pattern not in (keep or [])]


def _stated(stated, keep):
    """The operator's figures ({pattern: MiB}), each checked; a pattern that is not kept is refused.
    The preflight checks the same (serving_checks), before any change."""
    if stated is not None and not isinstance(stated, dict):
        raise KeptRoomError('gpulab_kept_mib is %r; give a dict of keep pattern (gpu_drain_keep) to the MiB that '
                            'service holds, e.g. {"whisper-asr": 6144}' % (stated,))
    unknown, bad = not_kept(stated, keep), bad_figures(stated)
    if unknown:
        raise KeptRoomError('gpulab_kept_mib names %r, which is not a keep pattern (gpu_drain_keep: %s); '
                            'add it there or remove it' % (unknown[0], ', '.join(keep) or 'none'))
    if bad:
        raise KeptRoomError('gpulab_kept_mib[%r] is %r; give the MiB the service holds, a whole number >= 0' % bad[0])
    return dict(stated or {})


def reserve(history, stated, processes, keep, gpu_indices):
    """{gpu_index (str): {'reserved_mib': n, 'why': [...]}} for every GPU of gpu_indices: what the plan
    must leave free beyond today's free memory for the kept services.

    stated: {pattern: MiB} from the operator, on each GPU the history saw the service on (every GPU
    of the node when it never was seen) and in place of the history's figure there."""
    stated = _stated(stated, keep)
    held = held_by_pattern(processes, keep)
    out = dict((str(i), {'reserved_mib': 0, 'why': []}) for i in gpu_indices)
    for pattern in keep:
        figures = dict((str(k), int(v)) for k, v in (((history or {}).get(pattern) or {}).get('gpus') or {}).items())
        source = 'the most it held when last seen running (%s)' % ((history or {}).get(pattern) or {}).get('seen_at')
        if pattern in stated:
            figures = dict((index, stated[pattern]) for index in (figures or out))
            source = 'gpulab_kept_mib'
        for index, mib in sorted(figures.items()):
            if index not in out:
                continue
            now = (held.get(pattern) or {}).get(index, 0)
            missing = max(0, mib - now)
            if not missing:
                continue
            out[index]['reserved_mib'] += missing
            state = 'not running now' if not now else 'running with %d MiB now' % now
            out[index]['why'].append('%s: %d MiB reserved on GPU %s (%d MiB from %s; %s)'
                                     % (pattern, missing, index, mib, source, state))
    return out


# ---------------------------------------------------------------- the history file on the node

HISTORY_MANAGED_BY = 'gpulab.inference'


def parse_history(text, path):
    """The history kept in the node's file (gpulab_kept_history_file); None text (no file yet) is
    an empty history. A file that is not the collection's record is refused, naming it: taking
    it for empty would give the kept services' room away."""
    if text is None:
        return {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise KeptRoomError('kept services history %s is not JSON (%s); remove it (the next look at the GPUs '
                            'starts it again) or state the figures in gpulab_kept_mib' % (path, exc))
    services = document.get('services') if isinstance(document, dict) else None
    if not isinstance(services, dict) or document.get('managed_by') != HISTORY_MANAGED_BY or not all(
            isinstance(entry, dict) and isinstance(entry.get('gpus'), dict) for entry in services.values()):
        raise KeptRoomError('kept services history %s is not a gpulab.inference record ({"managed_by": '
                            '"gpulab.inference", "services": {pattern: {"gpus": {index: MiB}, "seen_at": time}}}); '
                            'remove it or point gpulab_kept_history_file elsewhere' % path)
    for pattern, entry in services.items():
        for index, mib in entry['gpus'].items():
            if isinstance(mib, bool) or not isinstance(mib, int) or mib < 0:
                raise KeptRoomError('kept services history %s: %s on GPU %s is %r, not a whole number of MiB; '
                                    'remove the file' % (path, pattern, index, mib))
    return services


def history_document(history):
    """What the file holds: the history under services, marked as the collection's."""
    return {'managed_by': HISTORY_MANAGED_BY, 'services': history}


# ---------------------------------------------------------------- the plan's view over the nodes

def reserve_on_nodes(kept, residency):
    """{host: reserve(...)} for each node of kept, on the GPUs residency lists there.

    kept: {host: {'keep': [patterns], 'history': the node's history, 'stated': gpulab_kept_mib}}
    (the plan roles read each node's own values); residency: {host: gpu_residency's residency}. A
    node without residency (a CPU node) reserves nothing. An operator's figure that cannot be
    used is refused naming the node and the variable."""
    out = {}
    for host in sorted(kept or {}):
        entry = kept[host] or {}
        keep = list(entry.get('keep') or [])
        found = (residency or {}).get(host) or {}
        indices = [gpu.get('index') for gpu in found.get('gpus') or []]
        try:
            gpus = reserve(entry.get('history'), entry.get('stated'), found.get('processes'), keep, indices)
        except KeptRoomError as exc:
            raise KeptRoomError('%s: %s' % (host, exc))
        held = held_by_pattern(found.get('processes'), keep)
        unknown = [p for p in keep if indices and p not in (entry.get('history') or {})
                   and p not in (entry.get('stated') or {}) and p not in held]
        out[host] = {'gpus': gpus, 'unknown': unknown}
    return out


def reserved_mib(reserved, host, gpu_index):
    """MiB reserve_on_nodes keeps free on one GPU of one host (0 where nothing is kept)."""
    gpus = ((reserved or {}).get(host) or {}).get('gpus') or {}
    return (gpus.get(str(gpu_index)) or {}).get('reserved_mib', 0)


def reserved_lines(reserved):
    """The plan's lines about the kept services: per host, what was reserved on which GPU and why,
    and the kept patterns it has no figure for (not running, never seen holding memory, none stated)."""
    lines = []
    for host in sorted(reserved or {}):
        gpus = reserved[host].get('gpus') or {}
        for index in sorted(gpus, key=lambda k: (len(k), k)):
            lines.extend('%s: %s' % (host, why) for why in gpus[index]['why'])
        if reserved[host].get('unknown'):
            lines.append('%s: nothing reserved for %s: not running, never seen holding GPU memory here, and no '
                         'figure in gpulab_kept_mib' % (host, ', '.join(reserved[host]['unknown'])))
    return lines


# ---------------------------------------------------------------- what the collection may use

def own_service(unit, own_units):
    """Whether a systemd unit is one of the collection's serving units: own_units are role
    common's gpulab_own_unit_patterns, matched as the drain matches them (matching_pattern)."""
    if not unit:
        return False
    return matching_pattern(own_units, [unit]) is not None


def own_process(process, own_units):
    """Whether a gpu_residency process runs in one of the collection's serving units, or under a
    program that stands for one (service_manager.program_units: gpulab-rpc-server-0 as
    gpulab-rpc-server@0.service), as the drain tells its own services apart under either manager."""
    if own_service(process.get("systemd_unit"), own_units):
        return True
    program = process.get("supervisor_program")
    return bool(program) and matching_pattern(own_units, program_units(program)) is not None


# gpu_drain's actions for the consumers it takes off the GPUs (module_utils.gpu_drain.decide).
DRAIN_FREES = ("stop", "kill")


def drain_frees_mib(gpu, consumers):
    """What the drain will free on a GPU: the MiB its stopped (or killed) consumers hold there.

    consumers: gpu_drain's consumers in check mode (action, gpus = {gpu uuid: MiB})."""
    uuid = gpu.get("uuid")
    return sum((c.get("gpus") or {}).get(uuid) or 0 for c in consumers or [] if c.get("action") in DRAIN_FREES)


def available_mib(gpu, processes, own_units, drained=None):
    """A GPU's free memory plus what the collection's own services hold on it (a redeploy
    replaces them) plus what the drain will free on it (it runs after the plan, before the
    servers start), so their memory is available to the new layout."""
    free = gpu.get("memory_free_mib")
    if free is None:
        return None
    held = sum(p.get("used_memory_mib") or 0 for p in processes or []
               if p.get("gpu_index") == gpu.get("index") and own_process(p, own_units))
    return free + held + drain_frees_mib(gpu, drained)
