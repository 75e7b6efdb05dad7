# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions behind gpulab.inference.gpu_drain: who owns a GPU process, what to do with it,
and the drain state file that makes a drain reversible.

No AnsibleModule in here: every function takes text or data and returns data, or raises
DrainStateError naming the file and the field at fault, so unit tests feed captured
/proc/PID/cgroup files, systemctl and supervisorctl answers directly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# Which of a node's units and programs are the collection's, and what supervisorctl answers: the
# service role's rules (module_utils.service_manager), used here as they are, never restated.
from ansible_collections.gpulab.inference.plugins.module_utils.service_status import parse_list_units, show_properties
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import (  # noqa: F401 (re-exported)
    SUPERVISORCTL_STATUS_RCS,
    active_programs,
    matching_pattern,
    parse_supervisorctl_states,
    program_units,
    supervisorctl_argv,
)

STATE_SCHEMA = 'gpulab.inference.gpu_drain/1'
DEFAULT_STATE_FILE = '/var/lib/gpulab/drain-state.json'
# The collection's own inference units (role common: gpulab_llama_server_unit,
# gpulab_rpc_server_unit@<i>, gpulab_vllm_unit): the drain never stops them, playbooks/restore.yml does.
# Driver daemons and monitors hold /dev/nvidia* open without holding memory for work.
DEFAULT_IGNORED_PROCESSES = ('nvidia-persistenced', 'nvidia-fabricmanager', 'nv-hostengine',
                             'nvidia-smi', 'nvidia-cuda-mps-control')

PHASE_STOPPING = 'stopping'
PHASE_DRAINED = 'drained'
PHASES = (PHASE_STOPPING, PHASE_DRAINED)

KIND_SYSTEMD = 'systemd'
KIND_CONTAINER = 'container'
KIND_SUPERVISOR = 'supervisor'
KIND_USER_UNIT = 'user_unit'
KIND_PROCESS = 'process'
# Owners the drain can stop and start again, and so record in the state file.
RESTORABLE_KINDS = (KIND_SYSTEMD, KIND_CONTAINER, KIND_SUPERVISOR)
MANAGED_RUNTIMES = ('podman', 'docker')

ACTION_STOP = 'stop'
ACTION_KEEP = 'keep'
ACTION_OWN = 'own'
ACTION_KILL = 'kill'
ACTION_REPORT = 'report'

SYSTEMCTL_SHOW_PROPERTIES = ('ActiveState', 'UnitFileState', 'LoadState', 'Transient')
# States in which `systemctl start` would leave the unit running: recorded as was_active.
_ACTIVE_STATES = ('active', 'activating', 'reloading')
_RESTORABLE_ENABLED_STATES = ('enabled', 'disabled')

_HEX_ID = r'([0-9a-f]{12,64})'
# Container cgroups by runtime and cgroup manager (innermost path component):
#   podman, systemd manager: machine.slice/libpod-<id>.scope (conmon: libpod-conmon-<id>.scope)
#   podman, cgroupfs manager: libpod_parent/libpod-<id>
#   podman under a systemd service (quadlet, --cgroups=split): <unit>.service/libpod-payload-<id>
#   docker, systemd driver: system.slice/docker-<id>.scope; cgroupfs driver: docker/<id>
#   containerd and CRI-O under kubelet: kubepods.slice/.../cri-containerd-<id>.scope, crio-<id>.scope
_CONTAINER_COMPONENTS = (
    (re.compile(r'^libpod-conmon-'), None),
    (re.compile(r'^libpod-payload-' + _HEX_ID + r'\Z'), 'podman'),
    (re.compile(r'^libpod-' + _HEX_ID + r'(?:\.scope)?\Z'), 'podman'),
    (re.compile(r'^docker-' + _HEX_ID + r'\.scope\Z'), 'docker'),
    (re.compile(r'^cri-containerd-' + _HEX_ID + r'\.scope\Z'), 'containerd'),
    (re.compile(r'^crio-' + _HEX_ID + r'\.scope\Z'), 'cri-o'),
)
_BARE_ID_RE = re.compile(r'^[0-9a-f]{64}\Z')
_USER_MANAGER_RE = re.compile(r'^user@(\d+)\.service\Z')
_NVIDIA_DEVICE_RE = re.compile(r'^/dev/nvidia(\d+)\Z')
_CONTAINER_ID_RE = re.compile(r'^[0-9a-f]{12,64}\Z')
# A systemd unit or supervisord program name as the state file may record it: what systemctl and
# supervisorctl are given back on restore, so no option (leading -), space or newline.
_STATE_NAME_RE = re.compile(r'\A[A-Za-z0-9_][A-Za-z0-9_.:@\\-]{0,255}\Z')


class DrainStateError(ValueError):
    """The drain state file cannot be read as what this module wrote."""


# --- who owns a process -------------------------------------------------------------------------

def cgroup_path(text):
    """The cgroup path that names a process's owner, from the text of /proc/PID/cgroup, or None.

    Prefers v1's name=systemd hierarchy (systemd's own on a v1 or hybrid host, where the
    unified line may still name the parent that forked the process, as for docker's cgroupfs
    driver), then the unified hierarchy ("0::/..."), then any other v1 controller. A root
    path ("/") names nothing, as inside a cgroup namespace.
    """
    unified, named, other = [], [], []
    for line in text.splitlines():
        parts = line.strip().split(':', 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        path = path.strip()
        if not path or path == '/':
            continue
        if hierarchy_id == '0' and controllers == '':
            unified.append(path)
        elif controllers == 'name=systemd':
            named.append(path)
        else:
            other.append(path)
    for paths in (named, unified, other):
        if paths:
            return paths[0]
    return None


def _container_at(components):
    """(index, runtime, id) of the innermost container component, or None."""
    found = None
    for index, component in enumerate(components):
        for pattern, runtime in _CONTAINER_COMPONENTS:
            match = pattern.match(component)
            if match:
                if runtime is not None:
                    found = (index, runtime, match.group(1))
                break
        else:
            if component == 'docker' and index + 1 < len(components) \
                    and _BARE_ID_RE.match(components[index + 1]):
                found = (index + 1, 'docker', components[index + 1])
    return found


def container_root(text):
    """The cgroup of the container a process runs in, from the text of its own /proc/PID/cgroup,
    or None on the host.

    Without a cgroup namespace (podman and docker on a cgroup v1 host), a process in a container
    sees the host's paths: a unit of the container's own systemd reads
    /libpod_parent/libpod-<id>/system.slice/<unit>.service. The module reads its own cgroup and
    strips this root, so inside a container it manages that container's systemd.
    """
    path = cgroup_path(text or '')
    if path is None:
        return None
    components = [part for part in path.split('/') if part]
    container = _container_at(components)
    if container is None:
        return None
    return '/' + '/'.join(components[:container[0] + 1])


def owner_from_cgroup(text, root=None):
    """Who manages a process, from the text of its /proc/PID/cgroup.

    Returns a dict with kind:
      systemd    a system service (name: the unit), also when it runs a container (quadlet);
      container  a container (runtime, id); rootless: true inside a user manager, and
                 runtime "kubernetes" under kubepods, both left to their own managers;
      user_unit  a service of a user's systemd manager (name, uid);
      process    anything else: a login session, a scope, an unknown sandbox (cgroup: the path).
    root: container_root() of the module's own process; paths under it are read relative to it.
    """
    path = cgroup_path(text or '')
    if path is not None and root and (path == root or path.startswith(root + '/')):
        path = path[len(root):] or None
    if path is None:
        return {'kind': KIND_PROCESS, 'cgroup': '/'}
    components = [part for part in path.split('/') if part]
    manager_at = None
    uid = None
    for index, component in enumerate(components):
        match = _USER_MANAGER_RE.match(component)
        if match:
            manager_at, uid = index, int(match.group(1))
            break
    services = [index for index, component in enumerate(components)
                if component.endswith('.service') and index != manager_at]
    system_services = [index for index in services if manager_at is None or index < manager_at]
    user_services = [index for index in services if manager_at is not None and index > manager_at]

    container = _container_at(components)
    if container is not None:
        at, runtime, container_id = container
        enclosing_system = [index for index in system_services if index < at]
        enclosing_user = [index for index in user_services if index < at]
        if enclosing_system:
            return {'kind': KIND_SYSTEMD, 'name': components[enclosing_system[-1]]}
        if enclosing_user:
            return {'kind': KIND_USER_UNIT, 'name': components[enclosing_user[-1]], 'uid': uid}
        if any(component.startswith('kubepods') for component in components[:at]):
            runtime = 'kubernetes'
        return {'kind': KIND_CONTAINER, 'runtime': runtime, 'id': container_id,
                'rootless': manager_at is not None and manager_at < at}
    if user_services:
        return {'kind': KIND_USER_UNIT, 'name': components[user_services[-1]], 'uid': uid}
    if system_services:
        return {'kind': KIND_SYSTEMD, 'name': components[system_services[-1]]}
    return {'kind': KIND_PROCESS, 'cgroup': path}


def parse_stat_ppid(text):
    """Parent pid from the text of /proc/PID/stat (the command name may hold spaces and parens)."""
    try:
        return int(text.rsplit(')', 1)[1].split()[1])
    except (IndexError, ValueError):
        raise ValueError('cannot read the parent pid from /proc/PID/stat text %r' % (text[:80],)) from None


def parse_supervisorctl_status(output):
    """{pid: program} of the RUNNING programs in `supervisorctl status` output ("group:name" kept whole)."""
    return dict((program['pid'], name) for name, program in parse_supervisorctl_states(output).items()
                if program['state'] == 'RUNNING' and program['pid'] is not None)


def parse_container_ps(output):
    """{id: name} from `<runtime> ps --no-trunc --format '{{.ID}} {{.Names}}'` output."""
    containers = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and _CONTAINER_ID_RE.match(parts[0]):
            containers[parts[0]] = parts[1].split(',')[0]
    return containers


def container_name(container_id, names):
    """The name of a container from parse_container_ps's map, matching ids by prefix, or None."""
    for known_id, name in names.items():
        if known_id.startswith(container_id) or container_id.startswith(known_id):
            return name
    return None


def owner_of(cgroup_text, lineage, supervisor_programs, root=None):
    """Owner of a process: a supervisord program when the process or an ancestor is one
    (lineage: the pid then its ancestors), else what its cgroup says (root: see owner_from_cgroup)."""
    for pid in lineage:
        if pid in supervisor_programs:
            return {'kind': KIND_SUPERVISOR, 'name': supervisor_programs[pid]}
    return owner_from_cgroup(cgroup_text, root)


def nvidia_device_minor(link_target):
    """Minor number of a GPU device node (/dev/nvidia<N>) an fd link points to, or None.

    nvidiactl, nvidia-uvm and nvidia-modeset are opened by every CUDA client and by monitors;
    only a GPU node says that the process holds a GPU.
    """
    match = _NVIDIA_DEVICE_RE.match(link_target or '')
    return int(match.group(1)) if match else None


def hidden_processes(device_holders, listed_pids, ignored_names, excluded_pids=()):
    """Processes that hold a GPU device node open but that nvidia-smi did not list.

    device_holders: {pid: {'name': comm, 'devices': [/dev/nvidiaN, ...]}}. Driver daemons named
    in ignored_names and the pids in excluded_pids (the module itself) are left out.
    """
    hidden = []
    for pid in sorted(device_holders):
        holder = device_holders[pid]
        if pid in listed_pids or pid in excluded_pids or holder['name'] in ignored_names:
            continue
        hidden.append({'pid': pid, 'process_name': holder['name'], 'gpu_uuid': None,
                       'used_memory_mib': None, 'devices': sorted(holder['devices'])})
    return hidden


# --- consumers and decisions ---------------------------------------------------------------------

def consumer_key(owner, pid):
    """Stable identity of an owner, used to merge drains and in the state file."""
    kind = owner['kind']
    if kind in (KIND_SYSTEMD, KIND_SUPERVISOR):
        return '%s:%s' % (kind, owner['name'])
    if kind == KIND_USER_UNIT:
        return '%s:%s:%s' % (kind, owner['uid'], owner['name'])
    if kind == KIND_CONTAINER:
        return '%s:%s:%s' % (kind, owner['runtime'], owner['id'])
    return '%s:%d' % (kind, pid)


def group_consumers(processes):
    """One consumer per owner, from process dicts carrying an 'owner'.

    Each consumer lists its pids, the MiB it holds per GPU uuid (N/A counts as 0 and is
    flagged memory_unknown) and the device nodes of processes nvidia-smi did not list.
    Ordered by key, so a run is reproducible.
    """
    consumers = {}
    for process in processes:
        owner = process['owner']
        key = consumer_key(owner, process['pid'])
        consumer = consumers.get(key)
        if consumer is None:
            consumer = dict(owner, key=key, pids=[], process_names=[], gpus={}, devices=[],
                            memory_unknown=False)
            consumers[key] = consumer
        if process['pid'] not in consumer['pids']:
            consumer['pids'].append(process['pid'])
        if process['process_name'] not in consumer['process_names']:
            consumer['process_names'].append(process['process_name'])
        if process.get('gpu_uuid'):
            used = process.get('used_memory_mib')
            if used is None:
                consumer['memory_unknown'] = True
            consumer['gpus'][process['gpu_uuid']] = consumer['gpus'].get(process['gpu_uuid'], 0) + (used or 0)
        for device in process.get('devices') or ():
            if device not in consumer['devices']:
                consumer['devices'].append(device)
    result = []
    for key in sorted(consumers):
        consumer = consumers[key]
        consumer['pids'].sort()
        result.append(consumer)
    return result


def consumer_names(consumer):
    """The names a keep pattern is matched against: a unit with and without its .service
    suffix, a container's name and id, a supervisord program with and without its group."""
    names = []
    name = consumer.get('name')
    if name:
        names.append(name)
        if name.endswith('.service'):
            names.append(name[:-len('.service')])
        if consumer['kind'] == KIND_SUPERVISOR and ':' in name:
            names.append(name.split(':', 1)[1])
    if consumer.get('id'):
        names.append(consumer['id'])
    return names


def decide(consumer, keep, own_units, kill_unmanaged, unit=None):
    """The drain decision for one consumer: (action, reason).

    own     one of the collection's inference units (own_units): left running;
    keep    matched by a keep pattern: left running;
    stop    a system unit, a podman/docker container or a supervisord program: stopped and
            recorded, so restore starts it again;
    kill    a process nothing manages (or a transient unit, a user's unit, a rootless or
            kubelet container) with kill_unmanaged: killed, and not restorable;
    report  the same without kill_unmanaged: left running and reported.
    unit: parse_systemctl_show's answer for a systemd consumer.
    """
    kind = consumer['kind']
    if kind == KIND_SYSTEMD and matching_pattern(own_units, [consumer['name']]):
        return ACTION_OWN, 'an inference unit of gpulab.inference'
    if kind == KIND_SUPERVISOR and matching_pattern(own_units, program_units(consumer['name'])):
        return ACTION_OWN, 'an inference program of gpulab.inference'
    pattern = matching_pattern(keep, consumer_names(consumer))
    if pattern is not None:
        return ACTION_KEEP, 'matches keep pattern %r' % pattern
    unmanaged = None
    if kind == KIND_SYSTEMD:
        if unit is not None and unit.get('Transient') == 'yes':
            unmanaged = 'a transient unit cannot be started again once stopped'
        elif unit is not None and unit.get('LoadState') not in (None, 'loaded'):
            unmanaged = 'unit load state is %s' % unit.get('LoadState')
    elif kind == KIND_CONTAINER:
        if consumer.get('rootless'):
            unmanaged = 'a rootless container belongs to its user'
        elif consumer['runtime'] not in MANAGED_RUNTIMES:
            unmanaged = 'a %s container is restarted by its own manager' % consumer['runtime']
        elif not consumer.get('runtime_present', True):
            unmanaged = '%s is not installed on this host' % consumer['runtime']
    elif kind == KIND_USER_UNIT:
        unmanaged = "a unit of user %s's systemd manager" % consumer['uid']
    elif kind == KIND_PROCESS:
        unmanaged = 'no systemd unit, container or supervisord program manages it'
    if unmanaged is None:
        return ACTION_STOP, 'not kept'
    if kill_unmanaged:
        return ACTION_KILL, unmanaged + '; kill_unmanaged is set'
    return ACTION_REPORT, unmanaged + '; left running (kill_unmanaged is false)'


def unmatched_patterns(keep, consumers):
    """Keep patterns that matched none of the consumers (probably a typo)."""
    return [pattern for pattern in keep
            if not any(matching_pattern([pattern], consumer_names(consumer)) for consumer in consumers)]


# --- systemd ---------------------------------------------------------------------------------------

# One parser per systemctl answer, in service_status.py: a unit's properties, and list-units.
parse_systemctl_show = show_properties


def parse_active_units(output):
    """Unit names from `systemctl list-units --type=service --state=active --plain --no-legend`."""
    return parse_list_units(output, ('*.service',))


def unit_is_active(unit):
    return unit.get('ActiveState') in _ACTIVE_STATES


# --- the state file -----------------------------------------------------------------------------

def state_entry(consumer, was_active, was_enabled=None):
    """What the state file records of a consumer the drain stops."""
    entry = {
        'key': consumer['key'],
        'kind': consumer['kind'],
        'name': consumer.get('name'),
        'was_active': bool(was_active),
        'was_enabled': was_enabled,
        'gpus_mib': dict(consumer.get('gpus') or {}),
    }
    if consumer['kind'] == KIND_CONTAINER:
        entry['runtime'] = consumer['runtime']
        entry['id'] = consumer['id']
    return entry


def new_state(now):
    return {'schema': STATE_SCHEMA, 'phase': PHASE_STOPPING, 'created': now, 'updated': now,
            'entries': [], 'killed': []}


def _entry_error(path, index, message):
    return DrainStateError('drain state file %s is corrupt: entries[%d] %s; restore or remove it by '
                           'hand, it is never overwritten' % (path, index, message))


def validate_state(data, path):
    """Check a loaded state file; raises DrainStateError naming the file and the field."""
    def fail(message):
        raise DrainStateError('drain state file %s is corrupt: %s; restore or remove it by hand, '
                              'it is never overwritten' % (path, message))

    if not isinstance(data, dict):
        fail('expected a JSON object, found %s' % type(data).__name__)
    if data.get('schema') != STATE_SCHEMA:
        fail('schema is %r, expected %r' % (data.get('schema'), STATE_SCHEMA))
    if data.get('phase') not in PHASES:
        fail('phase is %r, expected one of %s' % (data.get('phase'), ', '.join(PHASES)))
    for field in ('created', 'updated'):
        if not isinstance(data.get(field), str):
            fail('%s is %r, expected a time stamp' % (field, data.get(field)))
    entries = data.get('entries')
    if not isinstance(entries, list):
        fail('entries is %r, expected a list' % (entries,))
    if not isinstance(data.get('killed', []), list):
        fail('killed is %r, expected a list' % (data.get('killed'),))
    keys = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _entry_error(path, index, 'is %r, expected an object' % (entry,))
        kind = entry.get('kind')
        if kind not in RESTORABLE_KINDS:
            raise _entry_error(path, index, 'kind is %r, expected one of %s' % (kind, ', '.join(RESTORABLE_KINDS)))
        if kind == KIND_CONTAINER:
            if entry.get('runtime') not in MANAGED_RUNTIMES:
                raise _entry_error(path, index, 'runtime is %r, expected podman or docker' % (entry.get('runtime'),))
            if not isinstance(entry.get('id'), str) or not _CONTAINER_ID_RE.match(entry['id']):
                raise _entry_error(path, index, 'id is %r, expected a container id' % (entry.get('id'),))
        elif not isinstance(entry.get('name'), str) or not _STATE_NAME_RE.match(entry['name']):
            raise _entry_error(path, index, 'name is %r, expected a %s name' % (entry.get('name'), kind))
        if not isinstance(entry.get('was_active'), bool):
            raise _entry_error(path, index, 'was_active is %r, expected true or false' % (entry.get('was_active'),))
        if entry.get('was_enabled') is not None and not isinstance(entry['was_enabled'], str):
            raise _entry_error(path, index, 'was_enabled is %r, expected a string or null' % (entry['was_enabled'],))
        if not isinstance(entry.get('key'), str) or entry['key'] in keys:
            raise _entry_error(path, index, 'key is %r, missing or listed twice' % (entry.get('key'),))
        gpus_mib = entry.get('gpus_mib', {})
        if not isinstance(gpus_mib, dict) or not all(
                isinstance(mib, int) and not isinstance(mib, bool) and mib >= 0 for mib in gpus_mib.values()):
            raise _entry_error(path, index, 'gpus_mib is %r, expected GPU uuids with whole MiB >= 0' % (gpus_mib,))
        keys.add(entry['key'])
    return data


def parse_state(text, path):
    """Load and validate the text (or bytes) of a state file."""
    if isinstance(text, bytes):
        try:
            text = text.decode('utf-8')
        except UnicodeDecodeError as exc:
            raise DrainStateError('drain state file %s is corrupt: byte %d is not UTF-8 (%r); restore or remove '
                                  'it by hand, it is never overwritten'
                                  % (path, exc.start, text[exc.start:exc.start + 1])) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DrainStateError('drain state file %s is corrupt: not JSON (%s); restore or remove it by '
                              'hand, it is never overwritten' % (path, exc)) from None
    return validate_state(data, path)


def dump_state(state):
    return json.dumps(state, indent=2, sort_keys=True) + '\n'


def merge_state(existing, entries, now):
    """The state to write before stopping: the existing one (an earlier or interrupted drain)
    keeps every entry as recorded, with the prior state it had then; entries for consumers it
    does not list yet are appended. Returns (state, added entries)."""
    if existing is None:
        state = new_state(now)
    else:
        state = dict(existing, entries=list(existing['entries']), killed=list(existing.get('killed', [])))
    known = set(entry['key'] for entry in state['entries'])
    added = [entry for entry in entries if entry['key'] not in known]
    state['entries'].extend(added)
    state['phase'] = PHASE_STOPPING
    state['updated'] = now
    return state, added


def restore_order(state):
    """Entries to start again, in reverse stop order; consumers that were not active are left."""
    return [entry for entry in reversed(state['entries']) if entry['was_active']]


def enablement_change(entry, current):
    """'enable', 'disable' or None to put a unit's enabled state back as recorded.

    Only plain enabled/disabled states are put back; static, generated, masked and the like
    are not something a drain changes.
    """
    recorded = entry.get('was_enabled')
    if recorded not in _RESTORABLE_ENABLED_STATES or current not in _RESTORABLE_ENABLED_STATES:
        return None
    if recorded == current:
        return None
    return 'enable' if recorded == 'enabled' else 'disable'


# --- GPU memory ----------------------------------------------------------------------------------

def memory_targets(gpus, stopped_consumers, margin_mib):
    """{uuid: MiB} each GPU's used memory must fall to: what it used before, less what the
    stopped consumers held on it, plus margin_mib. GPUs nothing was stopped on, or whose memory
    nvidia-smi reads N/A (MIG), have no target."""
    freed = {}
    for consumer in stopped_consumers:
        for uuid, mib in (consumer.get('gpus') or {}).items():
            freed[uuid] = freed.get(uuid, 0) + mib
    targets = {}
    for gpu in gpus:
        if gpu['uuid'] in freed and gpu['memory_used_mib'] is not None:
            targets[gpu['uuid']] = max(0, gpu['memory_used_mib'] - freed[gpu['uuid']]) + margin_mib
    return targets


def unsettled_gpus(gpus, targets):
    """GPUs still above their target: [{index, uuid, used_mib, target_mib}]."""
    return [{'index': gpu['index'], 'uuid': gpu['uuid'], 'used_mib': gpu['memory_used_mib'],
             'target_mib': targets[gpu['uuid']]}
            for gpu in gpus
            if gpu['uuid'] in targets and gpu['memory_used_mib'] is not None
            and gpu['memory_used_mib'] > targets[gpu['uuid']]]


def vram_freed(before, after):
    """Memory freed per GPU between two parse_gpu_query answers, in index order."""
    after_by_uuid = dict((gpu['uuid'], gpu) for gpu in after)
    report = []
    for gpu in before:
        later = after_by_uuid.get(gpu['uuid'])
        before_mib = gpu['memory_used_mib']
        after_mib = later['memory_used_mib'] if later else None
        freed = before_mib - after_mib if before_mib is not None and after_mib is not None else None
        report.append({'index': gpu['index'], 'uuid': gpu['uuid'], 'used_before_mib': before_mib,
                       'used_after_mib': after_mib, 'freed_mib': freed})
    return report


def drain_summary(consumers, freed):
    """One line per consumer and per GPU that freed memory, for the operator."""
    lines = []
    for consumer in consumers:
        held = sum((consumer.get('gpus') or {}).values())
        held_text = '?' if consumer.get('memory_unknown') else str(held)
        lines.append('%s %s (%s MiB): %s' % (consumer['action'], consumer.get('name') or consumer['key'],
                                             held_text, consumer['reason']))
    for gpu in freed:
        if gpu['freed_mib']:
            lines.append('GPU %d freed %d MiB (%s -> %s MiB used)' % (
                gpu['index'], gpu['freed_mib'], gpu['used_before_mib'], gpu['used_after_mib']))
    return lines


# ---------------------------------------------------------------- service managers

# seconds a stop or start may take: systemd's default stop timeout (90 s) then a start's, with room
CHANGE_LIMIT_S = 300


class Backend(object):
    """What the drain asks of one service manager: whether a recorded entry runs, and the command
    that stops or starts it. commands runs an argv (BoundedRunner: run(argv, limit_s, check) ->
    (rc, stdout, stderr)); fail(msg, **extra) ends the module with the message and never returns.
    The command lines are built here, so the tests assert them without a module."""

    kind = None

    def __init__(self, path, commands, fail):
        self.path = path
        self.commands = commands
        self.fail = fail

    def run(self, command, ok_rcs=(0,), limit_s=None, check=None):
        rc, stdout, stderr = self.commands.run(command, limit_s=limit_s, check=check)
        if rc not in ok_rcs:
            self.fail('%s failed (rc=%d): %s' % (' '.join(command), rc, (stdout + stderr).strip()),
                      rc=rc, stdout=stdout, stderr=stderr, cmd=command)
        return stdout

    def change(self, verb, entry, state_file):
        """A stop or start, which may take the service's own stop/start timeout: bounded by
        CHANGE_LIMIT_S, so a service that never finishes fails the drain by name."""
        self.run(self.change_command(verb, entry), limit_s=CHANGE_LIMIT_S,
                 check='%s did not %s: check its stop/start timeout and its log; %s records what was changed so far'
                       % (entry['key'], verb, state_file))

    def change_command(self, verb, entry):
        raise NotImplementedError

    def is_running(self, entry):
        raise NotImplementedError


class SystemdBackend(Backend):
    """System units through systemctl."""

    kind = KIND_SYSTEMD

    def systemctl(self):
        if self.path is None:
            self.fail('systemctl not found: draining systemd services needs systemd')
        return self.path

    def properties(self, name):
        return parse_systemctl_show(self.run(
            [self.systemctl(), 'show', '--property=' + ','.join(SYSTEMCTL_SHOW_PROPERTIES), '--', name]))

    def is_running(self, entry):
        return unit_is_active(self.properties(entry['name']))

    def change_command(self, verb, entry):
        return [self.systemctl(), verb, '--', entry['name']]

    def active_services(self):
        return parse_active_units(self.run([self.systemctl(), 'list-units', '--type=service', '--state=active',
                                            '--plain', '--no-legend']))

    def stop_unit(self, unit, state_file):
        self.change('stop', {'key': '%s:%s' % (KIND_SYSTEMD, unit), 'name': unit}, state_file)

    def pending_enablement(self, entry):
        """'enable', 'disable' or None: what puts back the entry's enabled state (enablement_change)."""
        return enablement_change(entry, self.properties(entry['name']).get('UnitFileState'))

    def set_enablement(self, change, entry):
        self.run([self.systemctl(), change, '--', entry['name']])


class ContainerBackend(Backend):
    """Containers of one runtime (podman or docker) by id; path None: the runtime is not installed."""

    kind = KIND_CONTAINER

    def __init__(self, runtime, path, commands, fail):
        super(ContainerBackend, self).__init__(path, commands, fail)
        self.runtime = runtime

    def is_running(self, entry):
        if self.path is None:
            return False
        rc, stdout, unused_stderr = self.commands.run([self.path, 'inspect', '--format', '{{.State.Running}}', entry['id']])
        return rc == 0 and stdout.strip() == 'true'

    def change_command(self, verb, entry):
        if self.path is None:
            self.fail('cannot %s container %s: %s is not installed'
                      % ('restore' if verb == 'start' else verb, entry['id'], self.runtime))
        return [self.path, verb, entry['id']]

    def names(self):
        """{id: name} of the running containers ({} without the runtime or when it does not answer)."""
        if self.path is None:
            return {}
        rc, stdout, unused_stderr = self.commands.run([self.path, 'ps', '--no-trunc', '--format', '{{.ID}} {{.Names}}'])
        return parse_container_ps(stdout) if rc == 0 else {}


class SupervisorBackend(Backend):
    """supervisord programs through supervisorctl; path None: no supervisorctl on the host.
    config: the supervisord.conf supervisorctl is pointed at (-c), None for its default places."""

    kind = KIND_SUPERVISOR

    def __init__(self, path, commands, fail, config=None):
        super(SupervisorBackend, self).__init__(path, commands, fail)
        self.config = config

    def argv(self, *args):
        return supervisorctl_argv(self.path, self.config, *args)

    def states(self):
        """parse_supervisorctl_states of `supervisorctl status` ({} without supervisorctl or a
        running supervisord: then no program runs)."""
        if self.path is None:
            return {}
        rc, stdout, unused_stderr = self.commands.run(self.argv('status'))
        if rc not in SUPERVISORCTL_STATUS_RCS:
            return {}
        return parse_supervisorctl_states(stdout)

    def programs(self):
        """{pid: program} of the running programs."""
        return dict((program['pid'], name) for name, program in self.states().items()
                    if program['state'] == 'RUNNING' and program['pid'] is not None)

    def is_running(self, entry, programs=None):
        return entry['name'] in (self.programs() if programs is None else programs).values()

    def active_services(self):
        """The programs that run or are being started (stop_units' candidates)."""
        return active_programs(self.states())

    def change_command(self, verb, entry):
        if self.path is None:
            self.fail('cannot %s supervisord program %s: supervisorctl is not installed'
                      % ('restore' if verb == 'start' else verb, entry['name']))
        return self.argv(verb, entry['name'])

    def stop_unit(self, program, state_file):
        self.change('stop', {'key': '%s:%s' % (KIND_SUPERVISOR, program), 'name': program}, state_file)


class Backends(object):
    """The host's service managers, found once (get_bin_path(name) -> path or None): systemd,
    supervisord, and each container runtime of MANAGED_RUNTIMES. supervisorctl and
    supervisor_config: the supervisord the collection runs its programs under (role supervisor),
    else the supervisorctl on PATH with its default configuration."""

    def __init__(self, get_bin_path, commands, fail, supervisorctl=None, supervisor_config=None):
        self.systemd = SystemdBackend(get_bin_path('systemctl'), commands, fail)
        self.containers = dict((runtime, ContainerBackend(runtime, get_bin_path(runtime), commands, fail))
                               for runtime in MANAGED_RUNTIMES)
        self.supervisor = SupervisorBackend(get_bin_path(supervisorctl or 'supervisorctl'), commands, fail,
                                            supervisor_config if supervisorctl else None)

    @property
    def runtimes(self):
        """The container runtimes installed here."""
        return [runtime for runtime in MANAGED_RUNTIMES if self.containers[runtime].path is not None]

    def manager(self, name):
        """The backend of a service manager by its name in service_manager.MANAGERS."""
        return self.systemd if name == KIND_SYSTEMD else self.supervisor

    def of(self, entry):
        """The backend that manages a recorded entry (or a consumer to stop)."""
        if entry['kind'] == KIND_SYSTEMD:
            return self.systemd
        if entry['kind'] == KIND_CONTAINER:
            return self.containers.get(entry['runtime']) or ContainerBackend(entry['runtime'], None, None,
                                                                             self.systemd.fail)
        return self.supervisor

    def is_running(self, entry, programs=None):
        if entry['kind'] == KIND_SUPERVISOR:
            return self.supervisor.is_running(entry, programs)
        return self.of(entry).is_running(entry)


# ---------------------------------------------------------------- restore.yml's summary

def restore_report(nodes, state_file=DEFAULT_STATE_FILE):
    """One line per node of what playbooks/restore.yml did there, and the nodes not restored.

    nodes: [(node, result, error)] in inventory order: result is the restore task's registered
    result (None where the node never ran it), error the message of a failure caught after it.
    Returns {'lines': [...], 'not_restored': [...]}.
    """
    lines, not_restored = [], []
    for node, result, error in nodes:
        result = result if isinstance(result, dict) else {}
        if result.get('unreachable'):
            not_restored.append(node)
            lines.append('%s: unreachable, nothing restored; it stays drained. Run restore.yml again once it '
                         'answers, or on its console start what %s lists and remove that file'
                         % (node, result.get('state_file') or state_file))
        elif result.get('failed') or error:
            not_restored.append(node)
            lines.append('%s: not restored: %s' % (node, str(result.get('msg') or error or 'failed').strip()))
        elif result.get('skipped'):
            lines.append('%s: skipped (gpu_drain_enabled is false)' % node)
        elif not result:
            not_restored.append(node)
            lines.append('%s: not restored: the restore did not run there' % node)
        else:
            stopped = result.get('units_stopped') or []
            restored = result.get('restored') or []
            lines.append('%s: %s; %s' % (
                node,
                'stopped ' + ', '.join(stopped) if stopped else "none of the collection's services ran",
                'started again ' + ', '.join(restored) if restored else 'nothing was drained'))
    return {'lines': lines, 'not_restored': not_restored}
