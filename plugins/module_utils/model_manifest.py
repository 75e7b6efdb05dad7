# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model manifest (/etc/gpulab/model.json, common's gpulab_model_manifest) and the one rule
for which model a serving role loads.

The rule, shared by llama_server, memory_plan and vllm_server (filter gpulab.inference.model_path):
a role's own model path wins when it is set; otherwise the manifest the model role wrote on
that node names the file (llama.cpp: the first GGUF shard) or directory (vLLM: the checkpoint);
otherwise the role stops, naming its variable and the manifest, before any change.
"""

from __future__ import annotations

import json

MANAGED_BY = 'gpulab.inference'


class ModelManifestError(ValueError):
    """No model to load, or a manifest that does not say which; the message says what to do."""


def parse_manifest(text, where):
    """The manifest as a dict; raises ModelManifestError naming where for anything that is not
    a manifest the model role wrote (JSON object, managed_by, a non-empty string path)."""
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise ModelManifestError('%s is not JSON (%s)' % (where, error))
    if not isinstance(manifest, dict) or manifest.get('managed_by') != MANAGED_BY:
        raise ModelManifestError('%s was not written by the model role (no "managed_by": "%s")' % (where, MANAGED_BY))
    path = manifest.get('path')
    if not isinstance(path, str) or not path.startswith('/'):
        raise ModelManifestError('%s names no model: "path" is %s, not an absolute path' % (where, json.dumps(path)))
    return manifest


def model_path(given, manifest_text, where, variable, unreadable=None):
    """The model a serving role loads: given (the role's own variable, named variable) when it
    is set, else the path of the manifest at where (manifest_text None when it could not be
    read, unreadable saying why)."""
    if given:
        if not isinstance(given, str) or not given.startswith('/'):
            raise ModelManifestError('%s=%r: give the absolute path of the model on the node' % (variable, given))
        return given
    advice = ('run playbooks/model.yml (role gpulab.inference.model, with model_source, model_path or '
              'model_synthetic set) first, or set %s' % variable)
    if manifest_text is None:
        raise ModelManifestError('No model to load: %s is empty and %s is missing (%s); %s'
                                 % (variable, where, unreadable or 'not found', advice))
    try:
        return parse_manifest(manifest_text, where)['path']
    except ModelManifestError as error:
        raise ModelManifestError('No model to load: %s is empty and %s; %s' % (variable, error, advice))


def file_records(files, stats):
    """The manifest's `files`: each file's name, size, sha256 and the mtime it had when it was
    verified (stats: {name: (size, mtime_ns)}), so a later run trusts an unchanged file without
    reading it again."""
    records = []
    for entry in files:
        size, mtime_ns = stats[entry['name']]
        records.append({'name': entry['name'], 'size_bytes': size, 'sha256': entry['sha256'], 'mtime_ns': mtime_ns})
    return records


def records_by_name(manifest):
    """{name: record} of a manifest's files ({} for a manifest without them, e.g. a synthetic model's)."""
    records = {}
    for record in manifest.get('files') or []:
        if isinstance(record, dict) and isinstance(record.get('name'), str):
            records[record['name']] = record
    return records
