# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Atomic file writes: a reader sees the old file or the new one, never a part of either.

Every module that writes a file goes through atomic_write (or write_temp and os.replace for a
set of files that replaces the old set together): a temporary file in the target's directory
(a rename across filesystems would not be atomic), flushed and fsynced before the rename, the
directory fsynced after it (so the rename survives a power cut), and the temporary file removed
on every way out.
"""

from __future__ import annotations

import json
import os
import tempfile


class AtomicWriteError(OSError):
    """The target cannot be written (a directory, a missing or unwritable directory).

    An OSError, so callers that already catch OSError report it unchanged."""


def temp_prefix(path):
    """Default prefix of the temporary files written for path: `.<name>.`, hidden beside it."""
    return '.%s.' % os.path.basename(path)


def path_problem(path):
    """Why no file can be written at path (None when one can)."""
    if not path:
        return 'no path given'
    directory = os.path.dirname(path) or '.'
    if os.path.isdir(path):
        return '%s is a directory; give the path of a file in it' % path
    if not os.path.isdir(directory):
        return '%s: directory %s does not exist; create it first' % (path, directory)
    if not os.access(directory, os.W_OK | os.X_OK):
        return '%s: directory %s is not writable by this user' % (path, directory)
    return None


def remove_quietly(path):
    """Remove path if it is there; a cleanup must not hide the error that caused it."""
    try:
        os.unlink(path)
    except OSError:
        pass


def fsync_directory(directory):
    """fsync a directory, so the renames in it are on disk."""
    fd = os.open(directory or '.', os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_data(stream, data):
    if callable(data):
        data(stream)
    elif isinstance(data, str):
        stream.write(data.encode('utf-8'))
    elif isinstance(data, (bytes, bytearray)):
        stream.write(data)
    else:
        raise TypeError('data must be str, bytes or a function writing to a binary stream, not %s'
                        % type(data).__name__)


def write_temp(path, data, mode=None, prefix=None, suffix='.tmp'):
    """Write data to a new temporary file beside path and return the temporary file's path.

    data: str (written as UTF-8), bytes, or a function given the open binary stream (for files
    written in chunks). mode: the file's permissions; None keeps mkstemp's 0600. The file is
    flushed and fsynced; on any error it is removed and the error raised.
    """
    problem = path_problem(path)
    if problem:
        raise AtomicWriteError(problem)
    directory = os.path.dirname(path) or '.'
    fd, temp_path = tempfile.mkstemp(prefix=temp_prefix(path) if prefix is None else prefix, suffix=suffix,
                                     dir=directory)
    try:
        with os.fdopen(fd, 'wb') as stream:
            _write_data(stream, data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temp_path, mode)
    except BaseException:
        remove_quietly(temp_path)
        raise
    return temp_path


def atomic_write(path, data, mode=None, prefix=None, suffix='.tmp'):
    """Replace path with data atomically (see write_temp for data, mode, prefix and suffix).

    Raises AtomicWriteError for a path that cannot be a file, OSError for a failed write or
    rename; no temporary file is left behind either way.
    """
    temp_path = write_temp(path, data, mode, prefix, suffix)
    try:
        os.replace(temp_path, path)
    except BaseException:
        remove_quietly(temp_path)
        raise
    fsync_directory(os.path.dirname(path))


def nice_json(value):
    """value as Ansible's to_nice_json writes it (indent 4, keys sorted), with a final newline: the
    layout of the records the roles wrote with it, so a module taking over the write rewrites none."""
    return json.dumps(value, indent=4, sort_keys=True, separators=(',', ': ')) + '\n'


def keep_file(path, text, check_mode=False, mode=0o644, directory_mode=0o755):
    """Make path hold text, written atomically only when its content differs (its directory made
    where missing); True when it was rewritten (in check mode, would be)."""
    try:
        with open(path, encoding='utf-8') as stream:
            if stream.read() == text:
                return False
    except (IOError, OSError, UnicodeDecodeError):
        pass
    if not check_mode:
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, directory_mode)
        atomic_write(path, text, mode=mode)
    return True


def free_space_problem(directory, free_bytes, needed_bytes, reclaimable_bytes=0):
    """The message when free space plus what stale temporary files hold cannot take a model written
    whole beside the old one (both synthetic models), else None."""
    if free_bytes + reclaimable_bytes >= needed_bytes:
        return None
    gib = float(1 << 30)
    text = "%s has %.3f GiB free" % (directory, free_bytes / gib)
    if reclaimable_bytes:
        text += " (%.3f GiB more once the temporary files of an interrupted run are removed)" % (reclaimable_bytes / gib)
    return "%s, the model needs %.3f GiB; free space or lower layers/experts" % (text, needed_bytes / gib)
