# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules of the RPC servers' weight cache (`rpc-server --cache`): which files are the cache,
its bound, which files a prune removes, and when a disk is too full to start.

Layout, from llama.cpp 0c1e570 (tools/rpc/rpc-server.cpp, ggml/src/ggml-rpc/ggml-rpc.cpp):
rpc-server keeps its cache in `$LLAMA_CACHE/rpc/`. A weight tensor above HASH_THRESHOLD (10 MiB)
that the client sends with the cache flag is written in place, without a temporary name, as
`<fnv-1a 64 of its bytes, 16 lower-case hex digits>`; SET_TENSOR_HASH reads that file whole.
A missing file answers "not cached" and the client sends the tensor again, so a file no process
holds open can be removed while a server runs; one open (being read or written) must stay.
Nothing in rpc-server bounds the directory: without a prune every model or quantisation change
adds a full copy of its weights.

Pure functions: the module (plugins/modules/rpc_cache.py) lists the directory, reads /proc and
statvfs, and removes what `prune_plan` names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import numbers
import os
import re

CACHE_SUBDIR = 'rpc'
HASH_THRESHOLD_BYTES = 10 << 20
GIB = 1 << 30
MIB = 1 << 20
RECORD_SCHEMA = 'gpulab.inference.rpc_cache/1'
_NAME = re.compile(r'\A[0-9a-f]{16}\Z')
# What the record keeps; it changes only with the model, the bound's settings or the directory,
# so a deploy that changes none of them writes nothing.
RECORD_FIELDS = ('managed_by', 'schema', 'path', 'model', 'since', 'max_gib', 'disk_fraction', 'min_free_gib')


class RpcCacheError(Exception):
    """A setting or a file that cannot be used; the message names it."""


def files_dir(llama_cache):
    """The directory rpc-server keeps its files in for LLAMA_CACHE=llama_cache."""
    if not llama_cache or not os.path.isabs(llama_cache):
        raise RpcCacheError('llama_rpc_server_cache_dir is %r; set an absolute path' % (llama_cache,))
    return os.path.join(os.path.normpath(llama_cache), CACHE_SUBDIR)


def is_cache_file(name):
    """A name rpc-server writes (16 lower-case hex digits); anything else there is not its own."""
    return bool(_NAME.match(name))


def _number(value, variable, positive=False, upper=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RpcCacheError('%s is %r; set a number' % (variable, value))
    if value < 0 or (positive and value == 0) or (upper is not None and value > upper):
        bounds = '(0, %s]' % upper if upper is not None else ('greater than 0' if positive else '0 or more')
        raise RpcCacheError('%s is %r; set a number %s' % (variable, value, bounds))
    return value


def check_settings(max_gib, disk_fraction, min_free_gib):
    """The role's three settings checked, each refusal naming its variable."""
    if max_gib is not None:
        _number(max_gib, 'llama_rpc_server_cache_max_gib', positive=True)
    _number(disk_fraction, 'llama_rpc_server_cache_disk_fraction', positive=True, upper=1)
    _number(min_free_gib, 'llama_rpc_server_cache_min_free_gib')


def max_bytes(max_gib, disk_fraction, free_bytes, cache_bytes):
    """The bound: llama_rpc_server_cache_max_gib when set, else disk_fraction of the space the
    cache may use on its filesystem (what is free plus what the cache holds already), so the
    cache's own growth does not shrink its bound."""
    if max_gib is not None:
        return int(max_gib * GIB)
    return int(disk_fraction * (free_bytes + cache_bytes))


def _plan_devices(memory_plan, host):
    devices = memory_plan.get('devices')
    if not isinstance(devices, list):
        raise RpcCacheError('the memory plan has no devices list')
    mine = []
    for index, device in enumerate(devices):
        if not isinstance(device, dict):
            raise RpcCacheError('the memory plan\'s devices[%d] is not an object' % index)
        if device.get('kind') == 'rpc' and device.get('host') == host:
            mine.append(device)
    return mine


def need_bytes(memory_plan, host):
    """The most a model load adds to this host's cache: the weights the memory plan puts on its
    RPC devices (every tensor above the threshold becomes one file). 0 without a plan."""
    if not memory_plan:
        return 0
    total = 0
    for device in _plan_devices(memory_plan, host):
        weights = device.get('weights_mib')
        if isinstance(weights, bool) or not isinstance(weights, numbers.Real) or weights < 0:
            raise RpcCacheError('the memory plan\'s device %s has weights_mib %r, not a number'
                                % (device.get('name'), weights))
        total += int(weights * MIB)
    return total


def model_key(model_manifest, memory_plan, host):
    """What decides the tensors this host's servers receive, as one sha256: the model's files
    (the head's model manifest, without the times it recorded) and this host's share of the
    layers (its devices in the memory plan). A new key is a model change for this host."""
    model = dict(model_manifest or {})
    files = model.pop('files', None) or []
    keep = dict((key, model.get(key)) for key in ('source', 'origin', 'path', 'shard_paths', 'size_bytes',
                                                  'synthetic_options_sha256', 'architecture'))
    keep['files'] = sorted((entry.get('name'), entry.get('size_bytes'), entry.get('sha256'))
                           for entry in files if isinstance(entry, dict))
    share = []
    if memory_plan:
        share = [dict((key, device.get(key)) for key in ('name', 'layer_range', 'output_layer', 'split'))
                 for device in _plan_devices(memory_plan, host)]
    text = json.dumps({'model': keep, 'share': share}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def parse_record(text):
    """The record of the last run (a dict), or None when there is none or it is not one of ours
    (then the next run treats the model as changed, which only prunes more)."""
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get('schema') != RECORD_SCHEMA:
        return None
    if not isinstance(record.get('model'), str) or isinstance(record.get('since'), bool) \
            or not isinstance(record.get('since'), numbers.Real):
        return None
    return record


FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
_MASK = (1 << 64) - 1


def fnv1a64(chunks, value=FNV_OFFSET):
    """rpc-server's hash of a tensor's bytes (ggml-rpc.cpp fnv_hash: FNV-1a, 64 bits), over an
    iterable of byte strings; a cache file's name is this, as 16 lower-case hex digits."""
    for chunk in chunks:
        for byte in bytearray(chunk):
            value = ((value ^ byte) * FNV_PRIME) & _MASK
    return value


def name_matches(name, value):
    """Whether a cache file named name holds the bytes that hash to value. rpc-server writes the file
    in place with no check of the write: a disk that fills meanwhile leaves a file cut short under
    its final name, which SET_TENSOR_HASH later reads whole into the tensor (the request carries no
    size) and answers as cached: the model then runs with that tensor's tail missing."""
    return name == '%016x' % value


def open_names(fd_targets, directory):
    """Names of cache files that a process holds open, from the targets of /proc/*/fd links."""
    prefix = directory.rstrip('/') + '/'
    names = set()
    for target in fd_targets:
        if target.startswith(prefix):
            name = target[len(prefix):]
            if name.endswith(' (deleted)'):
                continue
            if is_cache_file(name):
                names.add(name)
    return names


def last_use(entry):
    """When a file was last written or read (atime moves under relatime only once a day after
    a read, so a file read again soon after looks older than it is: it is pruned a little early)."""
    return max(entry['atime'], entry['mtime'])


def gib(count):
    return '%.1f GiB' % (count / float(GIB))


def prune_plan(files, bound, open_now, record, key, now, need, free, min_free):
    """Which files to remove, oldest first, and whether the start must be refused.

    files: [{name, size_bytes, atime, mtime}] of the cache; bound: its bound in bytes; open_now:
    names a process holds open; record: the last run's (parse_record) or None; key: this run's
    model_key; now: epoch seconds; need: need_bytes; free: free bytes on the cache's filesystem;
    min_free: bytes to leave free there.

    Never removed: a file held open, and while the model is unchanged a file written or read
    since it was deployed (the current model's). When the model changed, what it will add
    (need) is made room for within the bound; the rest is removed oldest first until the cache
    fits. A disk that cannot take the new model's files even after the prune is refused, and
    then nothing is removed: the refusal comes before any change."""
    changed = record is None or record.get('model') != key
    since = now if changed else record['since']
    kept_open = set(entry['name'] for entry in files if entry['name'] in open_now)
    current = set() if changed else set(entry['name'] for entry in files if last_use(entry) >= since)
    protected = kept_open | current
    total = sum(entry['size_bytes'] for entry in files)
    adds = need if changed else 0
    target = max(0, bound - adds)
    left = total
    remove = []
    for entry in sorted((e for e in files if e['name'] not in protected), key=lambda e: (last_use(e), e['name'])):
        if left <= target:
            break
        remove.append(entry['name'])
        left -= entry['size_bytes']
    freed = total - left
    problem = None
    if free + freed - adds < min_free:
        problem = ('the disk is too full to start: the model\'s tensors for this node need up to %s (the memory '
                   'plan\'s weights on its RPC devices), its filesystem has %s free, %s more after pruning what no '
                   'current model uses (the cache holds %s, %s of it open or in use, bound %s), and %s must stay free '
                   '(llama_rpc_server_cache_min_free_gib). Free space there, or lower llama_rpc_server_cache_max_gib, '
                   'or set llama_rpc_server_cache_enabled false'
                   % (gib(adds), gib(free), gib(freed), gib(total),
                      gib(sum(e['size_bytes'] for e in files if e['name'] in protected)), gib(bound), gib(min_free)))
        remove, left, freed = [], total, 0
    return {
        'model_changed': changed,
        'since': since,
        'size_bytes': total,
        'files': len(files),
        'max_bytes': bound,
        'target_bytes': target,
        'need_bytes': adds,
        'free_bytes': free,
        'remove': remove,
        'removed_bytes': freed,
        'left_bytes': left,
        'in_use': sorted(protected),
        'over_bound': left > target,
        'model_exceeds_bound': adds > bound,
        'problem': problem,
    }


def cache_status(record, files, free, enabled=True):
    """What status.yml and the report show of a worker's cache, from the record (parse_record),
    the listing of its directory (files: [{name, size_bytes, ...}], [] without a record) and the
    free bytes on its filesystem. The bound is the one the last deploy used (the record's
    settings); a cache that is off may still hold the files of an earlier deploy, so they are
    counted all the same."""
    size = sum(entry['size_bytes'] for entry in files)
    status = {'enabled': bool(enabled), 'path': None, 'size_bytes': size, 'size_gib': round(size / float(GIB), 2),
              'files': len(files), 'max_bytes': None, 'bound_gib': None, 'free_bytes': free, 'over_bound': False}
    if record is None:
        status['summary'] = ('off (llama_rpc_server_cache_enabled is false)' if not enabled else
                             'no record (gpulab_rpc_cache_file): no deploy has bounded the cache here yet')
        return status
    bound = max_bytes(record.get('max_gib'), record.get('disk_fraction'), free or 0, size)
    bound_gib, over_bound = round(bound / float(GIB), 2), size > bound
    status.update(path=record['path'], max_bytes=bound, bound_gib=bound_gib, over_bound=over_bound)
    held = '%s holds %.2f GiB in %d file%s' % (record['path'], size / float(GIB), len(files), '' if len(files) == 1 else 's')
    if not enabled:
        status['summary'] = 'off (llama_rpc_server_cache_enabled is false); %s from an earlier deploy' % held
    else:
        status['summary'] = '%s, bound %.2f GiB%s' % (held, bound_gib, '; over its bound' if over_bound else '')
    return status


def record(path, key, since, max_gib, disk_fraction, min_free_gib):
    """The record a run leaves (only the fields of RECORD_FIELDS)."""
    return {'managed_by': 'gpulab.inference', 'schema': RECORD_SCHEMA, 'path': path, 'model': key,
            'since': since, 'max_gib': max_gib, 'disk_fraction': disk_fraction, 'min_free_gib': min_free_gib}


def record_text(value):
    return json.dumps(value, indent=2, sort_keys=True) + '\n'
