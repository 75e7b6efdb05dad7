# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Getting a model's files onto the nodes that need it: which files a model is, what each node
still lacks, what it may resume, whether it has room, and how a transfer reports its progress.

Pure functions; the modules model_source, model_files, model_fetch and model_serve do the I/O.

A model is a list of files relative to one directory, each {name, size_bytes, sha256}: the
shards of a split GGUF (`<prefix>-00001-of-0000N.gguf` .. N) or a Hugging Face checkpoint
(config.json, the safetensors its index names, tokenizer files). sha256 comes from the source
(a `SHA256SUMS` file beside the files) or, when the source has none, is computed once on the
first node and recorded in the model manifest (/etc/gpulab/model.json), which later runs and the
other nodes check against.
"""

from __future__ import annotations

import json
import posixpath
import re

SHA256_RE = re.compile(r'\A[0-9a-f]{64}\Z')
GGUF_SHARD_RE = re.compile(r'\A(?P<prefix>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf\Z')
# A Hugging Face checkpoint: config.json is required, the weights come from the index (or the
# one model.safetensors), and these are taken when the source has them.
HF_CONFIG = 'config.json'
HF_INDEX = 'model.safetensors.index.json'
HF_SINGLE = 'model.safetensors'
HF_OPTIONAL = (
    'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json',
    'vocab.json', 'merges.txt', 'tokenizer.model', 'chat_template.jinja', 'added_tokens.json',
    'preprocessor_config.json',
)
# A file being transferred is written as <name>.part and renamed only when complete and verified.
PART_SUFFIX = '.part'
SUMS_NAME = 'SHA256SUMS'


class ModelTransferError(ValueError):
    """Input that cannot describe a model or a transfer; the message names the value."""


# -- the files of a model -------------------------------------------------------------------

def check_name(name, what='file name'):
    """A file name relative to the model directory, without '..', absolute parts or a '.part'
    suffix (that suffix is the transfer's own)."""
    if not isinstance(name, str) or not name:
        raise ModelTransferError('%s must be a non-empty string, not %r' % (what, name))
    normal = posixpath.normpath(name)
    if normal != name or name.startswith('/') or name == '.' or name.split('/')[0] == '..' \
            or '\\' in name or '\n' in name or '\0' in name:
        raise ModelTransferError('%s %r must be a plain path inside the model directory' % (what, name))
    if name.endswith(PART_SUFFIX):
        raise ModelTransferError('%s %r ends with %s, the suffix of files still in transfer' % (what, name, PART_SUFFIX))
    return name


def gguf_shard_names(first):
    """The files of a GGUF model given its file name: every shard of a split model (the name
    must be the first shard, `-00001-of-0000N.gguf`), or the one file."""
    check_name(first, 'GGUF file')
    if not first.endswith('.gguf'):
        raise ModelTransferError('GGUF file %r does not end with .gguf' % first)
    match = GGUF_SHARD_RE.match(first)
    if not match:
        return [first]
    number, count = int(match.group('no')), int(match.group('count'))
    if count < 1 or number != 1:
        raise ModelTransferError('%r is shard %d of %d: give the first shard (-00001-of-%05d.gguf)'
                                 % (first, number, count, count))
    return ['%s-%05d-of-%05d.gguf' % (match.group('prefix'), index, count) for index in range(1, count + 1)]


def hf_weight_names(index_text, where=HF_INDEX):
    """The safetensors files a Hugging Face index names (its weight_map's values), sorted."""
    try:
        index = json.loads(index_text)
    except ValueError as error:
        raise ModelTransferError('%s is not JSON: %s' % (where, error))
    weight_map = index.get('weight_map') if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelTransferError('%s has no weight_map naming the safetensors files' % where)
    names = sorted(set(weight_map.values()))
    for name in names:
        check_name(name, '%s weight file' % where)
    return names


def hf_file_names(present, index_text=None):
    """The files of a Hugging Face checkpoint among present (the names the source has):
    config.json, the index and the weights it names (or model.safetensors), and the optional
    tokenizer and generation files that are there."""
    present = set(present)
    if HF_CONFIG not in present:
        raise ModelTransferError('no %s: a Hugging Face checkpoint is a directory with config.json' % HF_CONFIG)
    names = [HF_CONFIG]
    if index_text is not None:
        weights = hf_weight_names(index_text)
        missing = [name for name in weights if name not in present]
        if missing:
            raise ModelTransferError('%s names %s, missing at the source' % (HF_INDEX, ', '.join(missing)))
        names += [HF_INDEX] + weights
    elif HF_SINGLE in present:
        names.append(HF_SINGLE)
    else:
        raise ModelTransferError('neither %s nor %s: the checkpoint has no weights' % (HF_INDEX, HF_SINGLE))
    names += sorted(name for name in HF_OPTIONAL if name in present)
    return names


def parse_sha256sums(text, where=SUMS_NAME):
    """{name: sha256} from `sha256sum` output (`<hex>  <name>` or `<hex> *<name>`); blank
    lines and # comments are skipped, anything else is an error naming the line."""
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        parts = stripped.split(None, 1)
        digest = parts[0].lower()
        if len(parts) != 2 or not SHA256_RE.match(digest):
            raise ModelTransferError('%s line %d is not "<sha256>  <file>": %r' % (where, number, line))
        name = parts[1].strip()
        name = name[1:] if name.startswith('*') else name
        name = name[2:] if name.startswith('./') else name
        check_name(name, '%s line %d file' % (where, number))
        if sums.get(name, digest) != digest:
            raise ModelTransferError('%s lists %s twice with different sha256' % (where, name))
        sums[name] = digest
    return sums


def check_files(files, where='files'):
    """Validate a model's file list: [{name, size_bytes, sha256 or None}], names unique.
    Returns a normalised copy (sha256 lower case)."""
    if not isinstance(files, list) or not files:
        raise ModelTransferError('%s must be a non-empty list of {name, size_bytes, sha256}' % where)
    seen = set()
    result = []
    for position, entry in enumerate(files):
        label = '%s[%d]' % (where, position)
        if not isinstance(entry, dict):
            raise ModelTransferError('%s must be a mapping, not %r' % (label, entry))
        name = check_name(entry.get('name'), label + '.name')
        if name in seen:
            raise ModelTransferError('%s: %s is listed twice' % (label, name))
        seen.add(name)
        size = entry.get('size_bytes')
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ModelTransferError('%s.size_bytes of %s must be a whole number >= 0, not %r' % (label, name, size))
        digest = entry.get('sha256')
        if digest is not None:
            if not isinstance(digest, str) or not SHA256_RE.match(digest.lower()):
                raise ModelTransferError('%s.sha256 of %s must be 64 hex digits or null, not %r' % (label, name, digest))
            digest = digest.lower()
        result.append({'name': name, 'size_bytes': size, 'sha256': digest})
    return result


def with_sums(files, sums):
    """files with the sha256 of sums filled in where a file has none; a conflicting sum is an error."""
    result = []
    for entry in files:
        digest = sums.get(entry['name'])
        if digest and entry.get('sha256') and entry['sha256'] != digest:
            raise ModelTransferError('%s: sha256 %s at the source, %s in %s' % (entry['name'], entry['sha256'], digest, SUMS_NAME))
        result.append(dict(entry, sha256=entry.get('sha256') or digest))
    return result


def source_kind(source):
    """'head' (already on the head), 'url' (http:// or https://, the lab's mirror) or
    'controller' (an absolute path on the controller)."""
    if not isinstance(source, str) or not source:
        raise ModelTransferError('model_source is empty: give a path on the controller, an http(s) URL or head')
    if source == 'head':
        return 'head'
    lower = source.lower()
    if lower.startswith('http://') or lower.startswith('https://'):
        if any(char.isspace() for char in source) or '#' in source or '?' in source:
            raise ModelTransferError('model_source %r: a mirror URL without spaces, query or fragment' % source)
        return 'url'
    if '://' in source:
        raise ModelTransferError('model_source %r: only http:// and https:// mirrors are fetched' % source)
    if not source.startswith('/'):
        raise ModelTransferError('model_source %r: a path on the controller must be absolute' % source)
    return 'controller'


def split_source(source):
    """(base, name): the directory (or URL directory) and the file a GGUF source names, or
    (source, None) for a directory (a Hugging Face checkpoint, named by its trailing path)."""
    trimmed = source.rstrip('/')
    if trimmed.lower().endswith('.gguf'):
        base, name = trimmed.rsplit('/', 1)
        return base, name
    return trimmed, None


def file_url(base, name, hf_layout=False):
    """The URL of one file of a model under a mirror base URL. hf_layout: a Hugging Face-style
    endpoint, `<base>/resolve/main/<name>`."""
    quoted = '/'.join(_quote(part) for part in name.split('/'))
    return '%s/%s%s' % (base.rstrip('/'), 'resolve/main/' if hf_layout else '', quoted)


def _quote(part):
    safe = set('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~')
    return ''.join(char if char in safe else ''.join('%%%02X' % byte for byte in char.encode('utf-8')) for char in part)


# -- what a node holds and what it still needs -----------------------------------------------

def record_matches(record, entry, size, mtime_ns):
    """A file on disk is the one a manifest record describes: same size and mtime as when it
    was verified, and that record's sha256 is the one wanted (None wanted: any verified one)."""
    if not isinstance(record, dict) or not record.get('sha256'):
        return False
    if record.get('size_bytes') != size or record.get('mtime_ns') != mtime_ns or size != entry['size_bytes']:
        return False
    return entry.get('sha256') in (None, record['sha256'])


def resume_offset(part_size, size_bytes):
    """Where a transfer of a file of size_bytes resumes given its .part (None: no .part);
    a .part larger than the file is not ours to continue and starts again."""
    if part_size is None or part_size > size_bytes:
        return 0
    return part_size


def plan_node(files, present, records, parts, hashed=None):
    """What one node does with each file.

    present: {name: (size, mtime_ns)} of the files under their final names; records: {name:
    record} from the node's model manifest (sha256, size_bytes, mtime_ns); parts: {name: size}
    of .part files; hashed: {name: sha256} of files read back just now. Each entry of the result
    is the file's entry with `action`:
    - keep: verified before and unchanged since (record matches), or hashed now and right;
    - verify: the right size but not verified since it was written: hash it (then plan again
      with hashed);
    - fetch: missing, the wrong size, or known to differ from the source (its record or its hash
      says another sha256: the file changed at the source); `offset` says where the .part resumes.
    """
    hashed = hashed or {}
    plan = []
    for entry in files:
        name = entry['name']
        item = dict(entry, offset=0)
        if name in present:
            size, mtime_ns = present[name]
            record = records.get(name)
            if record_matches(record, entry, size, mtime_ns):
                item.update(action='keep', sha256=entry.get('sha256') or record['sha256'])
                plan.append(item)
                continue
            if name in hashed and size == entry['size_bytes']:
                if verify_problem(entry, hashed[name], size) is None:
                    item.update(action='keep', sha256=hashed[name])
                    plan.append(item)
                    continue
            elif size == entry['size_bytes'] and not _known_other(record, entry, size, mtime_ns):
                item['action'] = 'verify'
                plan.append(item)
                continue
        item.update(action='fetch', offset=resume_offset(parts.get(name), entry['size_bytes']))
        plan.append(item)
    return plan


def _known_other(record, entry, size, mtime_ns):
    """The record says this unchanged file has another sha256 than the source now lists."""
    return (isinstance(record, dict) and record.get('size_bytes') == size and record.get('mtime_ns') == mtime_ns
            and bool(entry.get('sha256')) and bool(record.get('sha256')) and record['sha256'] != entry['sha256'])


def plan_summary(plan):
    """Totals of a node's plan: bytes to move (resumed parts not counted again), bytes to read
    back for verification, and the files per action."""
    summary = {'fetch_bytes': 0, 'resumed_bytes': 0, 'verify_bytes': 0, 'keep': [], 'verify': [], 'fetch': []}
    for item in plan:
        summary[item['action']].append(item['name'])
        if item['action'] == 'fetch':
            summary['fetch_bytes'] += item['size_bytes'] - item['offset']
            summary['resumed_bytes'] += item['offset']
        elif item['action'] == 'verify':
            summary['verify_bytes'] += item['size_bytes']
    return summary


def space_needed(plan):
    """Bytes the node's filesystem must still take: the rest of every file to fetch (a file
    replaced keeps its old version until the new one is complete, so the whole new size counts).
    A file that fails verification is fetched again too, so its size counts as well."""
    return sum(item['size_bytes'] - item['offset'] for item in plan if item['action'] == 'fetch') \
        + sum(item['size_bytes'] for item in plan if item['action'] == 'verify')


def space_problem(host, directory, free_bytes, needed_bytes):
    """The refusal when a node cannot hold what it must fetch, else None."""
    if free_bytes >= needed_bytes:
        return None
    text = ('%s: %s has %s free (%d bytes), the model needs %s more (%d bytes); free space there or '
            'point model_dir at a larger disk')
    return text % (host, directory, format_bytes(free_bytes), free_bytes, format_bytes(needed_bytes), needed_bytes)


def verify_problem(entry, sha256, size):
    """Why a file read back is not the one wanted (None when it is)."""
    if size != entry['size_bytes']:
        return '%s is %d bytes, the source has %d' % (entry['name'], size, entry['size_bytes'])
    if entry.get('sha256') and sha256 != entry['sha256']:
        return '%s has sha256 %s, the source says %s' % (entry['name'], sha256, entry['sha256'])
    return None


# -- HTTP ranges (the fetch resumes, the node-to-node server answers them) --------------------

class RangeNotSatisfiable(ModelTransferError):
    """A Range header that selects no byte of the file (HTTP 416)."""


def parse_range(header, size):
    """(start, end) inclusive for a `Range: bytes=...` header over a file of size bytes, or
    None when the whole file is sent (no header, another unit, several ranges: a server may
    ignore those). A range past the end raises RangeNotSatisfiable."""
    if not header:
        return None
    header = header.strip()
    if not header.startswith('bytes=') or ',' in header:
        return None
    spec = header[len('bytes='):].strip()
    match = re.match(r'\A([0-9]*)-([0-9]*)\Z', spec)
    if not match or match.group(1) == match.group(2) == '':
        return None
    if match.group(1) == '':
        suffix = int(match.group(2))
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable('bytes=%s of a %d-byte file' % (spec, size))
        return max(0, size - suffix), size - 1
    start = int(match.group(1))
    end = int(match.group(2)) if match.group(2) else size - 1
    if start >= size or end < start:
        raise RangeNotSatisfiable('bytes=%s of a %d-byte file' % (spec, size))
    return start, min(end, size - 1)


def content_range(start, end, size):
    """The Content-Range header of a partial answer."""
    return 'bytes %d-%d/%d' % (start, end, size)


def parse_content_range(header):
    """(start, end, size) of a `Content-Range: bytes a-b/n` header (size None for `*`); raises
    ModelTransferError for anything else."""
    match = re.match(r'\Abytes ([0-9]+)-([0-9]+)/([0-9]+|\*)\Z', (header or '').strip())
    if not match:
        raise ModelTransferError('Content-Range %r is not "bytes <start>-<end>/<size>"' % header)
    total = None if match.group(3) == '*' else int(match.group(3))
    return int(match.group(1)), int(match.group(2)), total


def response_start(status, content_range_header, offset):
    """Where the body of an answer to a request from offset starts: offset for a 206 whose
    Content-Range starts there, 0 for a 200 (the server ignored the range: start again)."""
    if status == 200:
        return 0
    if status == 206:
        start = parse_content_range(content_range_header)[0]
        if start != offset:
            raise ModelTransferError('asked for bytes from %d, the server answered from %d' % (offset, start))
        return offset
    raise ModelTransferError('HTTP %d' % status)


# -- progress -------------------------------------------------------------------------------

def format_bytes(count):
    """1536 -> '1.5 KiB'; binary units, one decimal."""
    value = float(count)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(value) < 1024 or unit == 'TiB':
            return '%d B' % count if unit == 'B' else '%.1f %s' % (value, unit)
        value /= 1024
    return '%.1f TiB' % value  # pragma: no cover (the loop returns at TiB)


def format_duration(seconds):
    """3725 -> '1:02:05'."""
    seconds = max(0, int(round(seconds)))
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def progress(done_bytes, total_bytes, elapsed_s, current=None):
    """The state of a transfer: bytes, percent, rate (of the bytes moved in this run) and time
    left. done_bytes counts only what this run moved; total_bytes what it must move."""
    rate = done_bytes / elapsed_s if elapsed_s > 0 else 0.0
    left = total_bytes - done_bytes
    eta = left / rate if rate > 0 else None
    return {
        'done_bytes': done_bytes,
        'total_bytes': total_bytes,
        'percent': round(100.0 * done_bytes / total_bytes, 1) if total_bytes else 100.0,
        'rate_bytes_s': round(rate, 1),
        'eta_s': None if eta is None else round(eta, 1),
        'current': current,
    }


def progress_line(state):
    """One line for the operator: '1.2 GiB of 3.4 GiB (35.3%), 110.0 MiB/s, 0:00:20 left (x.gguf)'."""
    line = '%s of %s (%.1f%%)' % (format_bytes(state['done_bytes']), format_bytes(state['total_bytes']), state['percent'])
    if state['rate_bytes_s']:
        line += ', %s/s' % format_bytes(int(state['rate_bytes_s']))
    if state['eta_s'] is not None and state['done_bytes'] < state['total_bytes']:
        line += ', %s left' % format_duration(state['eta_s'])
    if state.get('current'):
        line += ' (%s)' % state['current']
    return line
