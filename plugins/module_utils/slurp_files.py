# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several files of a node read in one module run, each result shaped as ansible.builtin.slurp's
(content base64, or msg when it could not be read), so that the roles' existing filters and
`is defined` tests read them unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import errno
import os

# A role reads small documents this way (manifests, plans, BUILD_INFO.json), never a model.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


def slurp(path, max_bytes=DEFAULT_MAX_BYTES):
    """One file as slurp returns it: {content, encoding, source}, or {msg, source, missing} when it
    is absent, not a regular file, unreadable or larger than max_bytes."""
    result = {'source': path}
    try:
        if not os.path.isfile(path):
            missing = not os.path.exists(path)
            result.update(msg=('file not found: %s' if missing else 'not a regular file: %s') % path, missing=missing)
            return result
        with open(path, 'rb') as handle:
            data = handle.read(max_bytes + 1)
    except (IOError, OSError) as exc:
        result.update(msg='cannot read %s: %s' % (path, exc.strerror or exc), missing=exc.errno == errno.ENOENT)
        return result
    if len(data) > max_bytes:
        result.update(msg='%s is larger than %d bytes: not read' % (path, max_bytes), missing=False)
        return result
    result.update(content=base64.b64encode(data).decode('ascii'), encoding='base64')
    return result


def slurp_all(files, required=(), max_bytes=DEFAULT_MAX_BYTES):
    """({name: slurp result}, [problem]) for {name: path}; a problem for each name of `required`
    that could not be read, and for a required name that files does not give."""
    results = dict((name, slurp(path, max_bytes)) for name, path in sorted(files.items()))
    problems = []
    for name in required:
        if name not in results:
            problems.append('%s is required but files gives no path for it' % name)
        elif 'content' not in results[name]:
            problems.append('%s: %s' % (name, results[name]['msg']))
    return results, problems
