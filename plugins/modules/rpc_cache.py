#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rpc_cache
short_description: Bound the RPC servers' weight cache, and refuse a disk too full for the model
description:
  - The weight cache of C(rpc-server --cache) is C(<llama_cache>/rpc/), one file per weight tensor
    named by its hash (16 hex digits); rpc-server never removes one.
  - O(state=present) lists those files, finds the ones a process holds open (C(/proc/*/fd)), and
    compares the model (O(model_manifest), this node's share in O(memory_plan)) with the one its
    O(record) names. It removes, oldest first by the later of access and modification time, what
    no current model uses until the cache fits its bound - with room for what a new model adds.
    A file held open is never removed, nor, while the model is unchanged, one written or read
    since that model was deployed.
  - When the new model's tensors (the memory plan's weights on this node's RPC devices) would
    leave less than O(min_free_gib) free on the cache's filesystem even after the prune, it fails
    with the numbers and removes nothing.
  - The record (C(gpulab_rpc_cache_file)) is rewritten only when the model, the directory or a
    bound setting changed, so a deploy that changes none of them changes nothing.
  - O(state=query) reads the record and reports the cache's size against its bound; it changes
    nothing (the status playbook's reading).
version_added: "0.3.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Reports what it would remove and the refusal; removes and writes nothing.
  diff_mode:
    support: none
    description: The cache's files are binary.
options:
  state:
    description: V(present) checks and prunes; V(query) only reports.
    type: str
    choices: [present, query]
    default: present
  llama_cache:
    description: The servers' C(LLAMA_CACHE) (C(llama_rpc_server_cache_dir)); the files are in its C(rpc/). Required for O(state=present).
    type: path
  record:
    description: The record of the last run (C(gpulab_rpc_cache_file)).
    type: path
    required: true
  max_gib:
    description: The bound in GiB (C(llama_rpc_server_cache_max_gib)); null - O(disk_fraction) of the space the cache may use.
    type: float
  disk_fraction:
    description: Without O(max_gib), the bound is this fraction of the filesystem's free space plus what the cache holds.
    type: float
    default: 0.5
  min_free_gib:
    description: GiB that must stay free on the cache's filesystem once the new model's tensors are written.
    type: float
    default: 1.0
  model_manifest:
    description: The head's model manifest (C(gpulab_model_manifest)), parsed; empty when there is none.
    type: dict
    default: {}
  memory_plan:
    description: The head's memory plan (C(gpulab_memory_plan_file)), parsed; empty when there is none.
    type: dict
    default: {}
  host:
    description: This node's inventory name, as the memory plan names it.
    type: str
    default: ""
  verify:
    description:
      - For O(state=present), read every cache file no process holds open and remove those whose bytes do not hash
        (FNV-1a, 64 bits, as rpc-server names them) to their name, before the prune. rpc-server writes a file in place
        without checking the write, so a disk that filled while it wrote leaves one cut short under its final name,
        which it later serves as the whole tensor. Reads the whole cache (pure Python, about 5 MB/s on one core,
        some minutes a GiB).
    type: bool
    default: false
  enabled:
    description:
      - For O(state=query), whether the servers run with the cache (C(llama_rpc_server_cache_enabled)); V(false) says
        the cache is off, and still counts what an earlier deploy left in the record's directory.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Bound the weight cache before anything is drained
  gpulab.inference.rpc_cache:
    llama_cache: /var/cache/gpulab/rpc
    record: /var/lib/gpulab/rpc-cache.json
    max_gib: 200
    model_manifest: "{{ head_model_manifest }}"
    memory_plan: "{{ head_memory_plan }}"
    host: "{{ inventory_hostname }}"

- name: Read the cache's size for a status line
  gpulab.inference.rpc_cache:
    state: query
    record: /var/lib/gpulab/rpc-cache.json
    enabled: "{{ llama_rpc_server_cache_enabled }}"
"""

RETURN = r"""
corrupt:
  description: With O(verify), the files removed because their bytes do not hash to their name (cut short).
  returned: state=present
  type: list
  elements: str
path:
  description: The cache's directory.
  returned: always
  type: str
size_bytes:
  description: Bytes the cache held before the prune (O(state=query) - now).
  returned: always
  type: int
status:
  description:
    - What status.yml and the report show - C(enabled), C(path), C(size_bytes), C(size_gib), C(files), C(max_bytes),
      C(bound_gib), C(free_bytes), C(over_bound) and a one-line C(summary). Without a record, C(path), C(max_bytes) and
      C(bound_gib) are null.
  returned: state=query
  type: dict
  sample:
    enabled: true
    path: /var/cache/gpulab/rpc/rpc
    size_bytes: 13958643712
    size_gib: 13.0
    files: 291
    max_bytes: 53687091200
    bound_gib: 50.0
    free_bytes: 412316860416
    over_bound: false
    summary: /var/cache/gpulab/rpc/rpc holds 13.00 GiB in 291 files, bound 50.00 GiB
files:
  description: Number of cache files.
  returned: always
  type: int
max_bytes:
  description: The bound in bytes.
  returned: always
  type: int
free_bytes:
  description: Free bytes on the cache's filesystem.
  returned: always
  type: int
removed:
  description: Names of the files removed (in check mode - that would be).
  returned: state=present
  type: list
  elements: str
removed_bytes:
  description: Their bytes.
  returned: state=present
  type: int
left_bytes:
  description: Bytes the cache holds after the prune.
  returned: state=present
  type: int
need_bytes:
  description: Bytes a changed model may add (0 when the model is unchanged).
  returned: state=present
  type: int
in_use:
  description: Names kept because a process holds them open or the current model used them.
  returned: state=present
  type: list
  elements: str
model_changed:
  description: The model or this node's share differs from the record's.
  returned: state=present
  type: bool
over_bound:
  description:
    - The cache stays over its bound after the prune because what is left is in use (O(state=query) - it is over its
      bound now).
  returned: always
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import rpc_cache as rc
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write


def list_files(directory):
    """[{name, size_bytes, atime, mtime}] of rpc-server's files in directory ([] when absent)."""
    entries = []
    try:
        scan = os.scandir(directory)
    except FileNotFoundError:
        return entries
    with scan:
        for item in scan:
            if not rc.is_cache_file(item.name) or not item.is_file(follow_symlinks=False):
                continue
            info = item.stat(follow_symlinks=False)
            entries.append({'name': item.name, 'size_bytes': info.st_size,
                            'atime': info.st_atime, 'mtime': info.st_mtime})
    return entries


def fd_targets():
    """Where every open file descriptor of every process points (those we may read)."""
    targets = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        fd_dir = '/proc/%s/fd' % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                targets.append(os.readlink('%s/%s' % (fd_dir, fd)))
            except OSError:
                continue
    return targets


def free_bytes(directory):
    """Free bytes on the filesystem that holds directory (or its nearest existing parent)."""
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def read_text(path):
    try:
        with open(path, encoding='utf-8') as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError):
        return None


class RpcCache:
    """One run: the settings, the listing, the decision, and the result built in one place."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.changed = False

    def fail(self, msg, **extra):
        self.module.fail_json(msg='rpc_cache on %s: %s' % (self.params['host'] or 'this node', msg), **extra)

    def query(self):
        record = rc.parse_record(read_text(self.params['record']))
        files, free = [], None
        if record is not None:
            files = list_files(record['path'])
            free = free_bytes(record['path'])
        status = rc.cache_status(record, files, free, self.params['enabled'])
        self.module.exit_json(changed=False, status=status, **dict(
            (name, status[name]) for name in ('path', 'size_bytes', 'files', 'max_bytes', 'free_bytes', 'over_bound')))

    def verify(self, directory):
        """Remove (outside check mode) the cache files no process holds open whose bytes do not hash to
        their name; their names."""
        held = rc.open_names(fd_targets(), directory)
        corrupt = []
        for entry in list_files(directory):
            if entry['name'] in held:
                continue
            path = os.path.join(directory, entry['name'])
            try:
                with open(path, 'rb') as stream:
                    value = rc.fnv1a64(iter(lambda: stream.read(1 << 20), b''))
            except OSError as error:
                self.fail('%s cannot be read: %s' % (path, error.strerror or error))
            if rc.name_matches(entry['name'], value):
                continue
            corrupt.append(entry['name'])
            self.module.warn('%s: %s holds %d bytes that do not hash to its name (cut short while written); removed, '
                             'rpc-server is sent the tensor again' % (self.params['host'] or 'this node', path,
                                                                      entry['size_bytes']))
            if not self.module.check_mode:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as error:
                    self.fail('%s cannot be removed: %s' % (path, error.strerror or error))
        return corrupt

    def present(self):
        params = self.params
        try:
            rc.check_settings(params['max_gib'], params['disk_fraction'], params['min_free_gib'])
            directory = rc.files_dir(params['llama_cache'])
            need = rc.need_bytes(params['memory_plan'], params['host'])
            key = rc.model_key(params['model_manifest'], params['memory_plan'], params['host'])
        except rc.RpcCacheError as error:
            self.fail(str(error))
        old = rc.parse_record(read_text(params['record']))
        corrupt = self.verify(directory) if params['verify'] else []
        files = list_files(directory)
        size = sum(entry['size_bytes'] for entry in files)
        free = free_bytes(directory)
        bound = rc.max_bytes(params['max_gib'], params['disk_fraction'], free, size)
        now = round(time.time(), 3)
        plan = rc.prune_plan(files, bound, rc.open_names(fd_targets(), directory), old, key, now, need, free,
                             int(params['min_free_gib'] * rc.GIB))
        numbers = dict((name, plan[name]) for name in ('size_bytes', 'files', 'max_bytes', 'free_bytes', 'need_bytes'))
        if plan['problem']:
            self.fail('%s: %s' % (directory, plan['problem']), path=directory, **numbers)
        new = rc.record(directory, key, plan['since'], params['max_gib'], params['disk_fraction'], params['min_free_gib'])
        rewrite = old is None or any(old.get(field) != new[field] for field in rc.RECORD_FIELDS)
        self.changed = bool(plan['remove']) or rewrite or bool(corrupt)
        if not self.module.check_mode:
            for name in plan['remove']:
                try:
                    os.unlink(os.path.join(directory, name))
                except FileNotFoundError:
                    continue
                except OSError as error:
                    self.fail('%s cannot be removed: %s' % (os.path.join(directory, name), error.strerror or error))
            if rewrite:
                # A full disk or a read-only state directory: the node and the file named, the old record
                # kept whole (atomic_write leaves no part of the new one).
                try:
                    os.makedirs(os.path.dirname(params['record']), 0o755, exist_ok=True)
                    atomic_write(params['record'], rc.record_text(new), 0o644)
                except OSError as error:
                    self.fail('the record %s cannot be written: %s' % (params['record'], error.strerror or error),
                              path=directory, **numbers)
        if plan['model_exceeds_bound']:
            self.module.warn('the model\'s tensors for this node (%s) exceed the cache\'s bound (%s): the cache will '
                             'hold them all once loaded; raise llama_rpc_server_cache_max_gib or disable the cache'
                             % (rc.gib(plan['need_bytes']), rc.gib(plan['max_bytes'])))
        self.module.exit_json(changed=self.changed, path=directory, removed=plan['remove'], corrupt=corrupt,
                              removed_bytes=plan['removed_bytes'], left_bytes=plan['left_bytes'], in_use=plan['in_use'],
                              model_changed=plan['model_changed'], over_bound=plan['over_bound'], **numbers)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', choices=['present', 'query'], default='present'),
            llama_cache=dict(type='path'),
            record=dict(type='path', required=True),
            max_gib=dict(type='float'),
            disk_fraction=dict(type='float', default=0.5),
            min_free_gib=dict(type='float', default=1.0),
            model_manifest=dict(type='dict', default={}),
            memory_plan=dict(type='dict', default={}),
            host=dict(type='str', default=''),
            enabled=dict(type='bool', default=True),
            verify=dict(type='bool', default=False),
        ),
        required_if=[('state', 'present', ['llama_cache'])],
        supports_check_mode=True,
    )


def main():
    cache = RpcCache(build_module())
    if cache.params['state'] == 'query':
        cache.query()
    cache.present()


if __name__ == '__main__':
    main()
