#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_drain
short_description: Stop the services that hold GPU memory, and start exactly those again later
version_added: 0.1.0
description:
  - With O(state=drained), finds the processes that hold GPU memory (C(nvidia-smi --query-compute-apps),
    plus processes holding a C(/dev/nvidia<N>) device open that nvidia-smi does not list) and
    stops what runs them - a systemd service, a podman or docker container, a supervisord
    program - unless it matches O(keep) or is one of the collection's inference units (O(own_units)).
  - Before stopping anything it writes O(state_file) (atomically, synced to disk) with every
    service it is about to stop and whether it was active and enabled; then it stops them, waits
    until the GPUs' used memory has fallen by what they held, and reports the memory freed per GPU.
  - With O(state=restored), starts exactly what O(state_file) lists, in reverse order, checks that
    each is running again, puts back its enabled state, then removes the file. No file, nothing to do.
  - A second drain keeps the recorded services with the prior state recorded then, and adds only
    consumers that appeared since; a state file left by an interrupted drain is resumed the same way.
    A state file that cannot be read fails the task and is never overwritten.
  - Processes that no service manager can start again (a login session, a transient unit, a
    user's unit, a rootless container) are reported and left running unless O(kill_unmanaged=true).
author:
  - gpulab.inference contributors (@gpulab)
options:
  state:
    description:
      - V(drained) stops the GPU consumers that are not kept; V(restored) starts again what a drain stopped.
    type: str
    choices: [drained, restored]
    default: drained
  keep:
    description:
      - Consumers to leave running, as shell-style patterns (C(fnmatch), case-sensitive) matched against
        a systemd unit's name with and without C(.service), a container's name and id, or a
        supervisord program's name.
      - A pattern that matches no consumer gives a warning.
    type: list
    elements: str
    default: []
  own_units:
    description:
      - The collection's inference units (patterns); never stopped by a drain, as the deployment
        manages them itself. A supervisord program matches by its name plus C(.service).
      - Required with O(state=drained); role C(gpu_drain) passes role C(common)'s
        C(gpulab_own_unit_patterns), the one list of them.
    type: list
    elements: str
  stop_units:
    description:
      - With O(state=restored), the collection's units to stop before anything is started again
        (unit patterns, in order), so the restored services find their GPU memory free. Role
        C(gpu_drain) passes the collection's inference units.
      - Under O(service_manager=supervisor) they are the supervisord programs that stand for these
        units (C(gpulab-rpc-server-0) for C(gpulab-rpc-server@0.service)), stopped through supervisorctl.
    type: list
    elements: str
    default: []
  service_manager:
    description:
      - The manager that runs the collection's services on this host, as role C(service) decides it
        (role C(common)'s C(gpulab_service_manager_active)); the units of O(stop_units) are stopped
        through it. Drained consumers are always started again by the manager that ran them.
      - A host without the named manager's tool still gets its drained services back; the task then
        fails, naming what it could not stop.
    type: str
    choices: [systemd, supervisor]
    default: systemd
  supervisorctl_path:
    description:
      - The supervisorctl of the supervisord the collection runs (role C(supervisor)), used with
        O(supervisor_config) for the programs a drain stops and starts and for O(stop_units).
      - Unset, the supervisorctl on E(PATH) with its default configuration.
    type: path
  supervisor_config:
    description:
      - The configuration file that O(supervisorctl_path) reads (C(-c)); ignored without O(supervisorctl_path).
    type: path
  kill_unmanaged:
    description:
      - Kill (SIGTERM, then SIGKILL after O(wait_timeout_s)) the GPU processes that nothing can start
        again. They are listed in the state file under C(killed) but not restored.
    type: bool
    default: false
  state_file:
    description:
      - The drain state file, written before anything is stopped. Its directory is created (root, mode 0755)
        when missing; one that cannot be created or written fails every drain before anything is stopped.
    type: path
    default: /var/lib/gpulab/drain-state.json
  wait_timeout_s:
    description:
      - Seconds to wait, after stopping, for the GPUs' used memory to fall; the task fails after
        that (the state file stays, so a restore starts everything again).
      - On restore, seconds to wait for each service to run again.
    type: int
    default: 120
  wait_margin_mib:
    description:
      - Memory, in MiB, a GPU may use above what it used before less what the stopped consumers held.
    type: int
    default: 512
  ignore_processes:
    description:
      - Process names (C(/proc/PID/comm)) holding C(/dev/nvidia<N>) that are not consumers, such as driver daemons and monitors.
    type: list
    elements: str
    default: [nvidia-persistenced, nvidia-fabricmanager, nv-hostengine, nvidia-smi, nvidia-cuda-mps-control]
  nvidia_smi_path:
    description:
      - The C(nvidia-smi) to run, as a command name looked up in E(PATH) or as an absolute path.
    type: str
    default: nvidia-smi
  nvidia_smi_timeout_s:
    description:
      - Seconds one C(nvidia-smi) call may take. A GPU that hangs NVML fails the drain with a message
        naming it, instead of hanging the play; services already stopped are in the state file.
    type: int
    default: 30
  proc_root:
    description:
      - Where the process file system is mounted (tests point it elsewhere).
    type: path
    default: /proc
attributes:
  check_mode:
    support: full
    description: Reports what would be stopped or started; writes and stops nothing.
  diff_mode:
    support: none
    description: The state file is reported in RV(drain_state) instead.
notes:
  - Services that get started again by something else (a timer, a socket, a C(Restart=always) parent)
    while drained are stopped again by the next drain and still restored once.
  - Units are stopped with C(systemctl stop), so their enabled state never changes during a drain;
    restore puts back C(enabled)/C(disabled) only if something changed it meanwhile.
seealso:
  - module: gpulab.inference.gpu_residency
"""

EXAMPLES = r"""
- name: Stop every GPU service except the speech recognition one
  gpulab.inference.gpu_drain:
    state: drained
    keep: [whisper-asr]
    own_units: "{{ gpulab_own_unit_patterns }}"
  register: gpu_drain

- name: Start again what the drain stopped
  gpulab.inference.gpu_drain:
    state: restored

- name: On a host without systemd, stop the collection's supervisord programs, then restore
  gpulab.inference.gpu_drain:
    state: restored
    stop_units: "{{ gpulab_own_unit_patterns }}"
    service_manager: supervisor
    supervisorctl_path: /opt/gpulab/supervisor/bin/supervisorctl
    supervisor_config: /etc/gpulab/supervisord.conf

- name: Drain, also killing GPU processes started by hand
  gpulab.inference.gpu_drain:
    own_units: "{{ gpulab_own_unit_patterns }}"
    kill_unmanaged: true
    state_file: /var/lib/gpulab/drain-state.json
"""

RETURN = r"""
consumers:
  description: The GPU consumers found by a drain and what was decided for each.
  returned: state=drained
  type: list
  elements: dict
  contains:
    key:
      description: Identity of the consumer, as recorded in the state file.
      type: str
      sample: systemd:gpu-embed.service
    kind:
      description: V(systemd), V(container), V(supervisor), V(user_unit) or V(process).
      type: str
      sample: systemd
    name:
      description: Unit, container or program name; absent for a bare process.
      type: str
      sample: gpu-embed.service
    pids:
      description: Its processes holding a GPU.
      type: list
      elements: int
      sample: [4242]
    gpus:
      description: MiB held per GPU uuid.
      type: dict
      sample: {GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd: 2048}
    action:
      description: V(stop), V(keep), V(own), V(kill) or V(report).
      type: str
      sample: stop
    reason:
      description: Why.
      type: str
      sample: not kept
stopped:
  description: Keys of the consumers this run stopped (or would stop in check mode).
  returned: state=drained
  type: list
  elements: str
  sample: [systemd:gpu-embed.service]
killed:
  description: Pids this run killed (O(kill_unmanaged=true)).
  returned: state=drained
  type: list
  elements: int
  sample: []
unmatched_keep:
  description: Keep patterns that matched no consumer.
  returned: state=drained
  type: list
  elements: str
  sample: []
vram_freed:
  description: Used memory per GPU before and after the drain, in MiB.
  returned: state=drained
  type: list
  elements: dict
  sample:
    - {index: 0, uuid: GPU-fdf55793-3a7a-d742-fbd7-efd736274ebd, used_before_mib: 6144, used_after_mib: 2048, freed_mib: 4096}
summary:
  description: One line per consumer (action, name, MiB held, reason) and per GPU that freed memory.
  returned: state=drained
  type: list
  elements: str
  sample: ["stop gpu-embed.service (2048 MiB): not kept", "GPU 0 freed 2048 MiB (6144 -> 4096 MiB used)"]
units_stopped:
  description: Units (or supervisord programs) of O(stop_units) this run stopped (or would stop in check mode).
  returned: state=restored
  type: list
  elements: str
  sample: [gpulab-llama-server.service]
restored:
  description: Keys of the consumers this run started again (or would start in check mode), in order.
  returned: state=restored
  type: list
  elements: str
  sample: [systemd:gpu-notebook.service, systemd:gpu-embed.service]
drain_state:
  description: The content of the state file after this run (null when there is none).
  returned: always
  type: dict
state_file:
  description: Path of the state file.
  returned: always
  type: str
  sample: /var/lib/gpulab/drain-state.json
"""

import datetime
import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write
from ansible_collections.gpulab.inference.plugins.module_utils.bounded_command import BoundedRunner
from ansible_collections.gpulab.inference.plugins.module_utils.service_manager import services_matching
from ansible_collections.gpulab.inference.plugins.module_utils.gpu_drain import (
    ACTION_KILL,
    ACTION_STOP,
    KIND_CONTAINER,
    KIND_SUPERVISOR,
    KIND_SYSTEMD,
    PHASE_DRAINED,
    Backends,
    DrainStateError,
    container_name,
    container_root,
    decide,
    drain_summary,
    dump_state,
    group_consumers,
    hidden_processes,
    memory_targets,
    merge_state,
    nvidia_device_minor,
    owner_of,
    parse_state,
    parse_stat_ppid,
    restore_order,
    state_entry,
    unit_is_active,
    unmatched_patterns,
    unsettled_gpus,
    vram_freed,
)
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi import (
    COMPUTE_APPS_QUERY_ARGS,
    GPU_QUERY_ARGS,
    NvidiaSmiParseError,
    parse_compute_apps_query,
    parse_gpu_query,
)
from ansible_collections.gpulab.inference.plugins.module_utils.nvidia_smi_runner import NvidiaSmiRunner

POLL_INTERVAL_S = 1


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


class GpuDrain:
    """Drains or restores one host: the flow, /proc and nvidia-smi here; every decision, and each
    service manager (module_utils.gpu_drain.Backends: systemd, supervisord, podman, docker), there."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.check_mode = module.check_mode
        self.proc_root = module.params['proc_root']
        self.state_file = module.params['state_file']
        self.changed = False
        self.state = None
        self.consumers = []
        self.stopped = []
        self.killed = []
        self.restored = []
        self.units_stopped = []
        self.unmatched_keep = []
        self.freed = []
        self.backends = None
        self.smi = None
        self.commands = BoundedRunner(module, partial_result=lambda: self.result)

    @property
    def result(self):
        result = {'changed': self.changed, 'state_file': self.state_file, 'drain_state': self.state}
        if self.params['state'] == 'drained':
            result.update(consumers=self.consumers, stopped=self.stopped, killed=self.killed,
                          unmatched_keep=self.unmatched_keep, vram_freed=self.freed,
                          summary=drain_summary(self.consumers, self.freed))
        else:
            result.update(restored=self.restored, units_stopped=self.units_stopped)
        return result

    # --- service managers (module_utils.gpu_drain: one backend class each) -------------------------

    def fail(self, msg, **extra):
        self.module.fail_json(msg=msg, **dict(self.result, **extra))

    def find_tools(self):
        self.backends = Backends(self.module.get_bin_path, self.commands, self.fail,
                                 self.params['supervisorctl_path'], self.params['supervisor_config'])

    def is_running(self, entry, programs=None):
        return self.backends.is_running(entry, programs)

    def stop(self, entry):
        self.backends.of(entry).change('stop', entry, self.state_file)

    def start(self, entry):
        self.backends.of(entry).change('start', entry, self.state_file)

    # --- nvidia-smi and /proc ---------------------------------------------------------------------

    def query_gpus(self):
        stdout = self.smi.run(GPU_QUERY_ARGS)[1]
        try:
            return parse_gpu_query(stdout)
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg=str(exc), stdout=stdout)

    def query_processes(self):
        stdout = self.smi.run(COMPUTE_APPS_QUERY_ARGS)[1]
        try:
            return parse_compute_apps_query(stdout)
        except NvidiaSmiParseError as exc:
            self.module.fail_json(msg=str(exc), stdout=stdout)

    def read_proc(self, pid, name):
        try:
            # A process names itself (comm, stat): any bytes, not necessarily UTF-8.
            with open(os.path.join(self.proc_root, str(pid), name), encoding='utf-8', errors='replace') as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def lineage(self, pid):
        """The pid and its ancestors up to (not including) pid 1."""
        pids = []
        while pid > 1 and pid not in pids and len(pids) < 64:
            pids.append(pid)
            stat = self.read_proc(pid, 'stat')
            if stat is None:
                break
            try:
                pid = parse_stat_ppid(stat)
            except ValueError:
                break
        return pids

    def device_holders(self):
        """{pid: {'name', 'devices'}} of the processes holding /dev/nvidia<N> open."""
        holders = {}
        try:
            entries = os.listdir(self.proc_root)
        except OSError:
            return holders
        for entry in entries:
            if not entry.isdigit():
                continue
            fd_dir = os.path.join(self.proc_root, entry, 'fd')
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue
            devices = set()
            for fd in fds:
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if nvidia_device_minor(target) is not None:
                    devices.add(target)
            if devices:
                name = (self.read_proc(entry, 'comm') or '').strip()
                holders[int(entry)] = {'name': name, 'devices': sorted(devices)}
        return holders

    def find_consumers(self, processes):
        supervisor = self.backends.supervisor.programs()
        own_pids = set(self.lineage(os.getpid()))
        listed = set(process['pid'] for process in processes)
        processes = processes + hidden_processes(
            self.device_holders(), listed, self.params['ignore_processes'], own_pids)
        root = container_root(self.read_proc('self', 'cgroup') or '')
        located = []
        for process in processes:
            cgroup = self.read_proc(process['pid'], 'cgroup')
            if cgroup is None:
                continue  # exited since the query
            located.append(dict(process, owner=owner_of(cgroup, self.lineage(process['pid']), supervisor, root)))
        consumers = group_consumers(located)
        runtimes = self.backends.runtimes
        names = dict((runtime, self.backends.containers[runtime].names()) for runtime in runtimes)
        for consumer in consumers:
            unit = None
            if consumer['kind'] == KIND_CONTAINER:
                consumer['runtime_present'] = consumer['runtime'] in runtimes
                consumer['name'] = container_name(consumer['id'], names.get(consumer['runtime'], {}))
            elif consumer['kind'] == KIND_SYSTEMD and self.backends.systemd.path is not None:
                unit = self.backends.systemd.properties(consumer['name'])
                consumer['unit'] = unit
            consumer['action'], consumer['reason'] = decide(
                consumer, self.params['keep'], self.params['own_units'], self.params['kill_unmanaged'], unit)
        return consumers

    # --- the state file ---------------------------------------------------------------------------

    def load_state(self):
        if not os.path.exists(self.state_file):
            return None
        try:
            with open(self.state_file, 'rb') as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            self.module.fail_json(msg='cannot read drain state file %s: %s' % (self.state_file, exc))
        try:
            return parse_state(text, self.state_file)
        except DrainStateError as exc:
            self.module.fail_json(msg=str(exc), state_file=self.state_file)

    def prepare_state_dir(self):
        """Create the state file's directory (root, 0755) when missing, and refuse one that cannot be
        written, on every drain: a bad state_file stops the run before anything is stopped, also on a
        node with nothing to stop yet. In check mode a missing directory is only reported."""
        directory = os.path.dirname(self.state_file) or '.'
        if not os.path.isdir(directory):
            self.changed = True
            if self.check_mode:
                return
            try:
                os.makedirs(directory, 0o755)
                os.chmod(directory, 0o755)
            except OSError as exc:
                self.fail_state_dir(directory, exc.strerror or str(exc))
        if not os.access(directory, os.W_OK | os.X_OK):
            self.fail_state_dir(directory, 'not writable')

    def fail_state_dir(self, directory, reason):
        self.module.fail_json(
            msg='drain state directory %s cannot be created or written (%s). Nothing was stopped. Set state_file '
                '(role gpu_drain: gpu_drain_state_file) to a writable place on a disk that survives reboots.'
                % (directory, reason), state_file=self.state_file)

    def write_state(self, state):
        # Atomic and fsynced: a crash mid-drain must leave the previous state readable for restore.
        try:
            atomic_write(self.state_file, dump_state(state), 0o644, prefix='.drain-state.', suffix='')
        except (IOError, OSError) as exc:
            self.module.fail_json(msg='cannot write drain state file %s: %s' % (self.state_file, exc), **self.result)
        self.state = state

    # --- drain ------------------------------------------------------------------------------------

    def drain(self):
        self.prepare_state_dir()
        existing = self.load_state()
        self.state = existing
        self.find_tools()
        # Every call is bounded: a wedged GPU fails the drain (naming the GPU) instead of hanging it,
        # also after services were stopped, when the play's rescue then restores them.
        self.smi = NvidiaSmiRunner(self.module, self.params['nvidia_smi_path'], self.params['nvidia_smi_timeout_s'],
                                   partial_result=lambda: self.result, timeout_option='nvidia_smi_timeout_s')
        if self.smi.find() is None:
            self.module.fail_json(msg='nvidia-smi (%s) not found: draining GPUs needs the NVIDIA driver; '
                                      'install it or set nvidia_smi_path' % self.params['nvidia_smi_path'])
        before = self.query_gpus()
        self.consumers = self.find_consumers(self.query_processes())
        self.unmatched_keep = unmatched_patterns(self.params['keep'], self.consumers)
        for pattern in self.unmatched_keep:
            self.module.warn('keep pattern %r matches no GPU consumer on this host' % pattern)
        for consumer in self.consumers:
            if consumer['action'] in ('report', 'kill'):
                self.module.warn('GPU process(es) %s (%s): %s' % (
                    ', '.join(str(pid) for pid in consumer['pids']), consumer['key'], consumer['reason']))

        to_stop = [consumer for consumer in self.consumers if consumer['action'] == ACTION_STOP]
        to_kill = [pid for consumer in self.consumers if consumer['action'] == ACTION_KILL for pid in consumer['pids']]
        new_entries = []
        for consumer in to_stop:
            unit = consumer.get('unit') or {}
            new_entries.append(state_entry(consumer, was_active=True if consumer['kind'] != KIND_SYSTEMD
                                           else unit_is_active(unit), was_enabled=unit.get('UnitFileState')))
        now = utc_now()
        state, unused_added = merge_state(existing, new_entries, now)
        # An earlier (or interrupted) drain's entries that run again, or were never stopped.
        programs = (self.backends.supervisor.programs()
                    if any(e['kind'] == KIND_SUPERVISOR for e in state['entries']) else {})
        new_keys = set(entry['key'] for entry in new_entries)
        # A recorded consumer that is kept now (the keep list changed) is not stopped again.
        left_running = set(consumer['key'] for consumer in self.consumers if consumer['action'] != ACTION_STOP)
        pending = [entry for entry in state['entries']
                   if entry['key'] in new_keys
                   or (entry['key'] not in left_running and self.is_running(entry, programs))]
        if to_kill:
            state['killed'].extend({'pid': pid, 'at': now} for pid in to_kill)
        if not pending and not to_kill and (existing is None or existing['phase'] == PHASE_DRAINED):
            self.freed = vram_freed(before, before)
            return
        self.changed = True
        self.stopped = [entry['key'] for entry in pending]
        self.killed = to_kill
        if self.check_mode:
            self.state = state
            return
        self.write_state(state)
        for entry in pending:
            self.stop(entry)
        self.kill(to_kill, signal.SIGTERM)
        stopped_consumers = [consumer for consumer in self.consumers
                             if consumer['key'] in set(self.stopped) or consumer['action'] == ACTION_KILL]
        after = self.wait_for_memory(before, stopped_consumers, to_kill)
        state['phase'] = PHASE_DRAINED
        state['updated'] = utc_now()
        self.write_state(state)
        self.freed = vram_freed(before, after)

    def kill(self, pids, sig):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass  # already gone

    def wait_for_memory(self, before, stopped_consumers, killed):
        targets = memory_targets(before, stopped_consumers, self.params['wait_margin_mib'])
        deadline = time.monotonic() + self.params['wait_timeout_s']
        while True:
            after = self.query_gpus()
            unsettled = unsettled_gpus(after, targets)
            if not unsettled:
                return after
            if time.monotonic() >= deadline:
                if killed:
                    self.kill(killed, signal.SIGKILL)
                self.module.fail_json(
                    msg='GPU memory did not fall within %d s: %s. The stopped services are recorded in %s; '
                        'state=restored starts them again' % (
                            self.params['wait_timeout_s'],
                            '; '.join('GPU %d uses %d MiB, expected at most %d' % (gpu['index'], gpu['used_mib'], gpu['target_mib'])
                                      for gpu in unsettled), self.state_file),
                    **self.result)
            time.sleep(POLL_INTERVAL_S)

    # --- restore ----------------------------------------------------------------------------------

    def restore(self):
        existing = self.load_state()
        self.state = existing
        self.find_tools()
        systemd = self.backends.systemd
        # The collection's services go first, so what was drained finds its memory free; a host
        # where their manager cannot be reached still gets its drained services back.
        unstopped = self.stop_own_services() if self.params['stop_units'] else None
        failures = []
        for entry in restore_order(existing) if existing is not None else []:
            if not self.is_running(entry):
                self.restored.append(entry['key'])
                if not self.check_mode:
                    self.start(entry)
                    if not self.wait_running(entry):
                        failures.append(entry['key'])
            if entry['kind'] == KIND_SYSTEMD:
                change = systemd.pending_enablement(entry)
                if change:
                    self.changed = True
                    if not self.check_mode:
                        systemd.set_enablement(change, entry)
        if failures:
            self.changed = True
            self.module.fail_json(
                msg='started but not running after %d s: %s; %s is kept, so a later restore tries again%s'
                    % (self.params['wait_timeout_s'], ', '.join(failures), self.state_file,
                       '; ' + unstopped if unstopped else ''), **self.result)
        if existing is not None:
            self.changed = True
            if not self.check_mode:
                os.unlink(self.state_file)
                self.state = None
        if unstopped:
            self.module.fail_json(msg=unstopped + (
                '; the drained services were started again' if existing is not None else ''), **self.result)

    def stop_own_services(self):
        """Stops the running services of stop_units under service_manager; returns why it could
        not (its tool is missing), else None."""
        manager = self.params['service_manager']
        backend = self.backends.manager(manager)
        if backend.path is None:
            return ('%s not found, so the collection\'s services (%s) were not stopped: service_manager is %s; '
                    'set gpulab_service_manager to the manager that runs them on this host'
                    % (self.params['supervisorctl_path'] or 'supervisorctl' if manager == 'supervisor' else 'systemctl',
                       ', '.join(self.params['stop_units']), manager))
        self.units_stopped = services_matching(backend.active_services(), self.params['stop_units'], manager)
        for name in self.units_stopped:
            self.changed = True
            if not self.check_mode:
                backend.stop_unit(name, self.state_file)
        return None

    def wait_running(self, entry):
        deadline = time.monotonic() + self.params['wait_timeout_s']
        while True:
            if self.is_running(entry):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', default='drained', choices=['drained', 'restored']),
            keep=dict(type='list', elements='str', default=[]),
            own_units=dict(type='list', elements='str'),
            stop_units=dict(type='list', elements='str', default=[]),
            service_manager=dict(type='str', default='systemd', choices=['systemd', 'supervisor']),
            supervisorctl_path=dict(type='path'),
            supervisor_config=dict(type='path'),
            kill_unmanaged=dict(type='bool', default=False),
            state_file=dict(type='path', default='/var/lib/gpulab/drain-state.json'),
            wait_timeout_s=dict(type='int', default=120),
            wait_margin_mib=dict(type='int', default=512),
            ignore_processes=dict(type='list', elements='str',
                                  default=['nvidia-persistenced', 'nvidia-fabricmanager', 'nv-hostengine',
                                           'nvidia-smi', 'nvidia-cuda-mps-control']),
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            nvidia_smi_timeout_s=dict(type='int', default=30),
            proc_root=dict(type='path', default='/proc'),
        ),
        required_if=[('state', 'drained', ('own_units',))],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    for option in ('wait_timeout_s', 'wait_margin_mib'):
        if module.params[option] < 0:
            module.fail_json(msg='%s is %d; give 0 or more' % (option, module.params[option]))
    drain = GpuDrain(module)
    if module.params['state'] == 'drained':
        drain.drain()
    else:
        drain.restore()
    module.exit_json(**drain.result)


if __name__ == '__main__':
    main()
