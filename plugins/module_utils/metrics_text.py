# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus's text exposition format, as the node exporter's textfile collector reads it.

Pure functions (families in, text out) and one atomic write: the collector writes a file whole
or not at all, since the node exporter reads `*.prom` files at every scrape and a torn file fails
that scrape's textfile metrics. Standard library only: the collector runs this on the nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import re
import tempfile

METRIC_NAME = re.compile(r'\A[a-zA-Z_:][a-zA-Z0-9_:]*\Z')
LABEL_NAME = re.compile(r'\A[a-zA-Z_][a-zA-Z0-9_]*\Z')
KINDS = ('gauge', 'counter', 'untyped')


class MetricsTextError(ValueError):
    """A family that the exposition format cannot carry; the message names it."""


def escape_label_value(value):
    """A label value as the format quotes it: backslash, double quote and newline escaped."""
    return str(value).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def format_value(value):
    """A sample value: integers as written, floats in Python's shortest round-trip form, NaN and
    the infinities as the format spells them. A bool is refused (True is not a measurement)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricsTextError('sample value %r is not a number' % (value,))
    if isinstance(value, float):
        if math.isnan(value):
            return 'NaN'
        if math.isinf(value):
            return '+Inf' if value > 0 else '-Inf'
        return repr(value)
    return str(value)


def family(name, help_text, kind, samples):
    """One metric family: [(labels dict, value)] samples under one name, HELP and TYPE."""
    if not METRIC_NAME.match(name or ''):
        raise MetricsTextError('metric name %r is not a Prometheus metric name' % (name,))
    if kind not in KINDS:
        raise MetricsTextError('metric %s: type %r is not one of %s' % (name, kind, ', '.join(KINDS)))
    checked = []
    for labels, value in samples:
        for label in labels:
            if not LABEL_NAME.match(label) or label.startswith('__'):
                raise MetricsTextError('metric %s: label name %r is not a Prometheus label name' % (name, label))
        checked.append((dict(labels), format_value(value)))
    keys = [tuple(sorted(labels.items())) for labels, dummy in checked]
    if len(set(keys)) != len(keys):
        raise MetricsTextError('metric %s: two samples with the same labels' % name)
    return {'name': name, 'help': ' '.join(str(help_text).split()), 'type': kind, 'samples': checked}


def render(families):
    """The text of a .prom file: each family's HELP, TYPE and samples, families in the given order."""
    names = [item['name'] for item in families]
    if len(set(names)) != len(names):
        raise MetricsTextError('metric families listed twice: %s'
                               % ', '.join(sorted(set(name for name in names if names.count(name) > 1))))
    lines = []
    for item in families:
        lines.append('# HELP %s %s' % (item['name'], item['help'].replace('\\', '\\\\')))
        lines.append('# TYPE %s %s' % (item['name'], item['type']))
        for labels, value in item['samples']:
            text = ','.join('%s="%s"' % (key, escape_label_value(labels[key])) for key in sorted(labels))
            lines.append('%s%s %s' % (item['name'], '{%s}' % text if text else '', value))
    return '\n'.join(lines) + '\n' if lines else ''


def write_atomic(path, text, mode=0o644):
    """Write text to path through a hidden temporary file beside it and a rename: the textfile
    collector reads only names ending in .prom, so it never sees the temporary file."""
    directory = os.path.dirname(path) or '.'
    handle, temporary = tempfile.mkstemp(prefix='.', suffix='.tmp', dir=directory)
    try:
        with os.fdopen(handle, 'w') as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
