# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's files and directories in one module run (module file_set).

A deploy that changes nothing still runs every file task, and a template or copy task costs two
module runs on the node (a stat, then a file module for the attributes), each about 0.2 s, most
of it Python compiling the module's code. file_set checks and writes a list of entries in one
run. The rules are here, as pure functions over what the node reports: entry_problems() checks
the entries before anything is read, plan_entry() says what an entry needs given the path's
current state, and apply_entries() (the only part that touches the disk) carries the plans out in
four passes - directories, new files written and validated beside their targets, the renames,
then removals - so that a file that fails its validation leaves every target as it was.
"""

from __future__ import annotations

import os
import re
import stat

from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import (
    fsync_directory, remove_quietly, write_temp)

STATES = ('file', 'directory', 'absent')
MODE_PATTERN = re.compile(r'^0?[0-7]{3,4}$')
# Larger files are compared and written, but not shown in --diff.
DIFF_MAX_BYTES = 65536


def parse_mode(mode):
    """'0644' or '644' -> 0o644; None stays None (the mode is left as it is)."""
    if mode is None:
        return None
    return int(str(mode), 8)


def entry_problems(entries):
    """What is wrong with the entries, one message each naming the entry; [] when nothing is."""
    problems = []
    seen = set()
    for index, entry in enumerate(entries):
        path = entry.get('path') or ''
        name = 'files[%d] (%s)' % (index, path or 'no path')
        state = entry.get('state') or 'file'
        if not path.startswith('/'):
            problems.append('%s: path must be absolute' % name)
        elif os.path.normpath(path) != path.rstrip('/') or path == '/':
            problems.append('%s: path must be normalised (no "..", "." or doubled "/") and not /' % name)
        if path in seen:
            problems.append('%s: the path is listed twice' % name)
        seen.add(path)
        if state not in STATES:
            problems.append('%s: state must be one of %s, not %r' % (name, ', '.join(STATES), state))
        if state == 'file' and entry.get('content') is None:
            problems.append('%s: a file needs content' % name)
        if state != 'file' and entry.get('content') is not None:
            problems.append('%s: content is only for state file' % name)
        if state != 'file' and entry.get('validate'):
            problems.append('%s: validate is only for state file' % name)
        validate = entry.get('validate')
        if validate and '%s' not in validate:
            problems.append('%s: validate must contain %%s (the path of the new file)' % name)
        mode = entry.get('mode')
        if state != 'absent' and mode is None:
            problems.append('%s: a %s needs a mode, such as "0644"' % (name, state))
        if mode is not None and not (isinstance(mode, str) and MODE_PATTERN.match(mode)):
            problems.append('%s: mode must be a string of octal digits, such as "0644" (quoted in YAML), not %r'
                            % (name, mode))
        if state == 'absent' and (mode is not None or entry.get('owner') or entry.get('group')):
            problems.append('%s: an absent path takes no mode, owner or group' % name)
    return problems


def current_state(path):
    """What is at path, without following a final symbolic link:
    {'kind': missing|file|directory|link|other, 'mode', 'uid', 'gid', 'size'}."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {'kind': 'missing'}
    if stat.S_ISLNK(info.st_mode):
        kind = 'link'
    elif stat.S_ISREG(info.st_mode):
        kind = 'file'
    elif stat.S_ISDIR(info.st_mode):
        kind = 'directory'
    else:
        kind = 'other'
    return {'kind': kind, 'mode': stat.S_IMODE(info.st_mode), 'uid': info.st_uid, 'gid': info.st_gid,
            'size': info.st_size}


def plan_entry(entry, current, uid=None, gid=None, current_content=None):
    """The steps entry needs, given current (current_state()), the owner's uid and the group's gid
    (None: left as they are) and, for a file, its present bytes (None when not read).

    Returns (steps, problem): steps out of 'mkdir', 'write', 'chmod', 'chown', 'remove', in that
    order; problem a sentence when the path holds something this entry must not replace (a
    directory where a file belongs, a link, a device), else None.
    """
    state = entry.get('state') or 'file'
    path = entry['path']
    kind = current['kind']
    if state == 'absent':
        if kind == 'missing':
            return [], None
        if kind == 'directory':
            return [], '%s is a directory; file_set removes files only' % path
        return ['remove'], None
    wanted = 'directory' if state == 'directory' else 'file'
    if kind not in ('missing', wanted):
        return [], '%s is a %s, not a %s; move it away or choose another path' % (
            path, 'symbolic link' if kind == 'link' else kind, 'regular file' if wanted == 'file' else wanted)
    steps = []
    if kind == 'missing':
        steps.append('mkdir' if wanted == 'directory' else 'write')
    elif wanted == 'file' and current_content != entry['content'].encode('utf-8'):
        steps.append('write')
    # A new file or directory (a new inode) gets every attribute; an old one those that differ.
    new = bool(steps)
    mode = parse_mode(entry.get('mode'))
    if mode is not None and (new or current.get('mode') != mode):
        steps.append('chmod')
    if (uid is not None or gid is not None) and (
            new or (uid is not None and current.get('uid') != uid) or (gid is not None and current.get('gid') != gid)):
        steps.append('chown')
    return steps, None


def diff_of(path, before, after):
    """An Ansible diff of a file's text, or None for a binary or large one."""
    if len(before or b'') > DIFF_MAX_BYTES or len(after) > DIFF_MAX_BYTES:
        return None
    try:
        return {'before_header': path, 'after_header': path,
                'before': (before or b'').decode('utf-8'), 'after': after.decode('utf-8')}
    except UnicodeDecodeError:
        return None


def read_small(path, limit):
    """The bytes of the regular file at path when at most limit + 1 bytes long, else None (then it
    differs from any content of at most limit bytes)."""
    with open(path, 'rb') as stream:
        data = stream.read(limit + 1)
    return data if len(data) <= limit else None


def _set_attributes(path, mode, uid, gid, steps):
    if 'chown' in steps:
        os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid, follow_symlinks=False)
    if 'chmod' in steps and mode is not None:
        os.chmod(path, mode)


def _make_directory(path, mode, uid, gid):
    """Create path and any missing parent, each with the entry's attributes (as the file module does)."""
    missing = []
    head = path
    while head and head != '/' and not os.path.lexists(head):
        missing.append(head)
        head = os.path.dirname(head)
    for directory in reversed(missing):
        os.mkdir(directory)
        _set_attributes(directory, mode, uid, gid, ('chmod', 'chown'))


def apply_entries(entries, plans, run_validate):
    """Carry out plans (one (steps, uid, gid) per entry) on the disk.

    run_validate(command, path) -> error text or None checks a new file before it replaces its
    target. Every new file is written and validated before the first rename: an error there
    removes the new files and raises RuntimeError with the reason, and no target has changed.
    """
    for entry, (steps, uid, gid) in zip(entries, plans):
        if 'mkdir' in steps:
            _make_directory(entry['path'], parse_mode(entry.get('mode')), uid, gid)
        elif (entry.get('state') or 'file') == 'directory':
            _set_attributes(entry['path'], parse_mode(entry.get('mode')), uid, gid, steps)
    temps = {}
    try:
        for index, (entry, (steps, uid, gid)) in enumerate(zip(entries, plans)):
            if 'write' not in steps:
                continue
            temp = write_temp(entry['path'], entry['content'], parse_mode(entry.get('mode')))
            temps[index] = temp
            _set_attributes(temp, None, uid, gid, ('chown',) if 'chown' in steps else ())
            if entry.get('validate'):
                error = run_validate(entry['validate'], temp)
                if error:
                    raise RuntimeError('%s failed validation (%s): %s' % (entry['path'], entry['validate'], error))
    except BaseException:
        for temp in temps.values():
            remove_quietly(temp)
        raise
    try:
        for index, (entry, (steps, uid, gid)) in enumerate(zip(entries, plans)):
            if index in temps:
                os.replace(temps[index], entry['path'])
                del temps[index]
                fsync_directory(os.path.dirname(entry['path']))
            elif (entry.get('state') or 'file') == 'file':
                _set_attributes(entry['path'], parse_mode(entry.get('mode')), uid, gid, steps)
    finally:
        for temp in temps.values():
            remove_quietly(temp)
    for entry, (steps, unused_uid, unused_gid) in zip(entries, plans):
        if 'remove' in steps:
            os.unlink(entry['path'])
