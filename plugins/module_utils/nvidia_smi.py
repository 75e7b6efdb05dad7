# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for nvidia-smi answers, shared by gpu_facts and gpu_residency.

No AnsibleModule in here: every function takes text and returns data, or raises
NvidiaSmiParseError naming the field and the line at fault, so that unit tests can
feed captured output directly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.cuda import CudaError, compute_cap_arch
from ansible_collections.gpulab.inference.plugins.module_utils.service_process import (
    supervisor_program_from_environ, systemd_unit_from_cgroup)

# The command lines the modules issue; the fake nvidia-smi of the container lab answers
# exactly these, so change them together (tests/unit/.../test_nvidia_smi.py runs both).
GPU_QUERY_FIELDS = (
    'index', 'uuid', 'name', 'pci.bus_id', 'driver_version', 'compute_cap',
    'memory.total', 'memory.used', 'memory.free', 'utilization.gpu',
)
MIG_QUERY_FIELDS = ('index', 'mig.mode.current')
COMPUTE_APPS_QUERY_FIELDS = ('pid', 'process_name', 'gpu_uuid', 'used_memory')
CSV_FORMAT_ARG = '--format=csv,noheader,nounits'

GPU_QUERY_ARGS = ['--query-gpu=' + ','.join(GPU_QUERY_FIELDS), CSV_FORMAT_ARG]
MIG_QUERY_ARGS = ['--query-gpu=' + ','.join(MIG_QUERY_FIELDS), CSV_FORMAT_ARG]
COMPUTE_APPS_QUERY_ARGS = ['--query-compute-apps=' + ','.join(COMPUTE_APPS_QUERY_FIELDS), CSV_FORMAT_ARG]
# CUDA version: no --query-gpu field carries it (checked against `--help-query-gpu` of
# 580.159.04). `nvidia-smi --version` prints it as "CUDA Version : 13.0" in about 25 ms on
# an H200, as cheap as a field query and far cheaper than `-q -x` (about 100 ms, 27 kB)
# or scraping the table header of plain `nvidia-smi`.
VERSION_ARGS = ['--version']
# Asked of one GPU (`-i <bus id>`) when a call has hung, to find the GPU that hangs it.
PROBE_ARGS = ['--query-gpu=index,pci.bus_id', CSV_FORMAT_ARG]

# Printed (on stdout, exit status 18) by every nvidia-smi call after a driver upgrade
# without reboot: the userspace NVML no longer matches the loaded kernel module.
NVML_MISMATCH_TEXT = 'Driver/library version mismatch'
NVML_MISMATCH_RC = 18

MIB_PER_GIB = 1024

_NOT_AVAILABLE_RE = re.compile(r'^(N/A|\[[A-Za-z][A-Za-z ./-]*\])\Z')
_VERSION_RE = re.compile(r'^\d+(\.\d+)+\Z')
_KERNEL_MODULE_RE = re.compile(
    r'^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)(?:\s|$)')
_NVML_LIBRARY_RE = re.compile(r'^NVML library version:\s*(\S+)', re.MULTILINE)
_SMI_VERSION_LINE_RE = re.compile(r'^\s*([A-Za-z][A-Za-z -]*?)\s*:\s*(\S.*?)\s*\Z')


class NvidiaSmiParseError(ValueError):
    """nvidia-smi (or the driver's version file) answered something this parser cannot read."""


def is_not_available(value):
    """True for nvidia-smi's markers of a value it cannot read: N/A, [N/A], [Not Supported], ..."""
    return bool(_NOT_AVAILABLE_RE.match(value.strip()))


def _optional_int(value, field, line):
    value = value.strip()
    if is_not_available(value):
        return None
    try:
        return int(value)
    except ValueError:
        raise NvidiaSmiParseError(
            'nvidia-smi field %s is %r, expected an integer or N/A, in line: %r'
            % (field, value, line)) from None


def has_undecodable_bytes(text):
    """True when text holds bytes that were not UTF-8 (decoded as lone surrogates, the way
    AnsibleModule.run_command hands them over)."""
    return any(u'\udc80' <= char <= u'\udcff' for char in text)


def printable(text):
    """text with undecodable bytes written as \\xNN, safe to return as JSON."""
    return ''.join('\\x%02x' % (ord(char) - 0xdc00) if u'\udc80' <= char <= u'\udcff' else char for char in text)


def _required_text(value, field, line):
    value = value.strip()
    if not value or is_not_available(value):
        raise NvidiaSmiParseError(
            'nvidia-smi field %s is empty or N/A (%r) in line: %r' % (field, value, line))
    if has_undecodable_bytes(value):
        raise NvidiaSmiParseError(
            'nvidia-smi field %s holds bytes that are not UTF-8 (%s) in line: %s; check the driver '
            'and the GPU (nvidia-smi -q)' % (field, printable(value), printable(line)))
    return value


def _data_lines(output):
    """Non-blank lines of a noheader CSV answer (an empty answer means no rows)."""
    return [line for line in output.splitlines() if line.strip()]


def _gpu_query_row(line, field_names):
    """One --query-gpu CSV line as {field name: text}; a wrong field count names the fields."""
    fields = [field.strip() for field in line.split(',')]
    if len(fields) != len(field_names):
        raise NvidiaSmiParseError(
            'nvidia-smi --query-gpu answered %d fields, expected %d (%s), in line: %r'
            % (len(fields), len(field_names), ','.join(field_names), line))
    return dict(zip(field_names, fields))


def parse_gpu_query(output):
    """Parse the answer to GPU_QUERY_ARGS into a list of GPU dicts, ordered by index."""
    gpus = []
    for line in _data_lines(output):
        row = _gpu_query_row(line, GPU_QUERY_FIELDS)
        index = _optional_int(row['index'], 'index', line)
        if index is None:
            raise NvidiaSmiParseError('nvidia-smi field index is N/A in line: %r' % (line,))
        compute_cap = None if is_not_available(row['compute_cap']) else row['compute_cap']
        try:
            cuda_arch = None if compute_cap is None else compute_cap_arch(compute_cap)
        except CudaError:
            raise NvidiaSmiParseError(
                'nvidia-smi field compute_cap is %r, expected MAJOR.MINOR such as 9.0, in line: %r'
                % (compute_cap, line)) from None
        gpus.append({
            'index': index,
            'uuid': _required_text(row['uuid'], 'uuid', line),
            'name': _required_text(row['name'], 'name', line),
            'pci_bus_id': _required_text(row['pci.bus_id'], 'pci.bus_id', line),
            'driver_version': _required_text(row['driver_version'], 'driver_version', line),
            'compute_cap': compute_cap,
            'cuda_arch': cuda_arch,
            'memory_total_mib': _optional_int(row['memory.total'], 'memory.total', line),
            'memory_used_mib': _optional_int(row['memory.used'], 'memory.used', line),
            'memory_free_mib': _optional_int(row['memory.free'], 'memory.free', line),
            'utilization_gpu_pct': _optional_int(row['utilization.gpu'], 'utilization.gpu', line),
        })
    indices = [gpu['index'] for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise NvidiaSmiParseError('nvidia-smi --query-gpu listed a GPU index twice: %s' % (indices,))
    return sorted(gpus, key=lambda gpu: gpu['index'])


def parse_mig_query(output):
    """Parse the answer to MIG_QUERY_ARGS into {index: "Enabled" | "Disabled" | None}."""
    modes = {}
    for line in _data_lines(output):
        row = _gpu_query_row(line, MIG_QUERY_FIELDS)
        index = _optional_int(row['index'], 'index', line)
        mode = None if is_not_available(row['mig.mode.current']) else row['mig.mode.current']
        if mode not in (None, 'Enabled', 'Disabled'):
            raise NvidiaSmiParseError(
                'nvidia-smi field mig.mode.current is %r, expected Enabled, Disabled or N/A, '
                'in line: %r' % (row['mig.mode.current'], line))
        modes[index] = mode
    return modes


def parse_compute_apps_query(output):
    """Parse the answer to COMPUTE_APPS_QUERY_ARGS into a list of process dicts.

    An empty answer (no process holds a compute context) gives an empty list. The process
    name is the executable's path and may itself hold commas, so the line is split on the
    first and the last two separators only.
    """
    processes = []
    for line in _data_lines(output):
        head = line.split(',', 1)
        tail = head[1].rsplit(',', 2) if len(head) == 2 else []
        if len(tail) != 3:
            raise NvidiaSmiParseError(
                'nvidia-smi --query-compute-apps answered fewer than %d fields (%s) in line: %r'
                % (len(COMPUTE_APPS_QUERY_FIELDS), ','.join(COMPUTE_APPS_QUERY_FIELDS), line))
        pid = _optional_int(head[0], 'pid', line)
        if pid is None:
            raise NvidiaSmiParseError('nvidia-smi field pid is N/A in line: %r' % (line,))
        processes.append({
            'pid': pid,
            'process_name': printable(tail[0].strip()),
            'gpu_uuid': _required_text(tail[1], 'gpu_uuid', line),
            'used_memory_mib': _optional_int(tail[2], 'used_memory', line),
        })
    return processes


def parse_smi_version(output):
    """Parse `nvidia-smi --version` into {'smi_version', 'nvml_version', 'driver_version', 'cuda_version'}.

    Keys the tool did not print are None (older nvidia-smi print fewer lines).
    """
    wanted = {
        'nvidia-smi version': 'smi_version',
        'nvml version': 'nvml_version',
        'driver version': 'driver_version',
        'cuda version': 'cuda_version',
    }
    result = dict.fromkeys(wanted.values())
    for line in _data_lines(output):
        match = _SMI_VERSION_LINE_RE.match(line)
        if match and match.group(1).lower() in wanted:
            result[wanted[match.group(1).lower()]] = match.group(2)
    for key in ('driver_version', 'cuda_version'):
        # A vGPU host, or a driver without CUDA, prints "Not Found" or "N/A".
        if result[key] in ('N/A', 'Not Found'):
            result[key] = None
        if result[key] is not None and not _VERSION_RE.match(result[key]):
            raise NvidiaSmiParseError(
                'nvidia-smi --version printed %s %r, expected digits and dots, in: %r'
                % (key, result[key], output))
    return result


def parse_kernel_module_version(text):
    """Version of the loaded NVIDIA kernel module from /proc/driver/nvidia/version.

    Reads both the proprietary ("NVIDIA UNIX x86_64 Kernel Module  580.159.04 ...") and the
    open ("NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...") formats.
    """
    for line in text.splitlines():
        if line.startswith('NVRM version:'):
            match = _KERNEL_MODULE_RE.match(line)
            if match:
                return match.group(1)
            raise NvidiaSmiParseError(
                'cannot find the kernel module version in the NVRM line %r' % (line,))
    raise NvidiaSmiParseError(
        'no "NVRM version:" line in the driver version file (first line: %r)'
        % (text.splitlines()[0] if text.strip() else '',))


def is_nvml_mismatch(stdout, stderr=''):
    """True when nvidia-smi refused to start because NVML and the kernel module differ."""
    return NVML_MISMATCH_TEXT in (stdout or '') or NVML_MISMATCH_TEXT in (stderr or '')


def parse_nvml_library_version(text):
    """The "NVML library version: 580.95" nvidia-smi prints after a mismatch, or None."""
    match = _NVML_LIBRARY_RE.search(text or '')
    return match.group(1) if match else None


def merge_mig_modes(gpus, mig_modes):
    """Return copies of the GPU dicts with mig_mode set from parse_mig_query's answer."""
    return [dict(gpu, mig_mode=mig_modes.get(gpu['index'])) for gpu in gpus]


def driver_facts(gpus, smi_version, kernel_module_version):
    """Build the gpulab_gpu_driver fact when nvidia-smi answered.

    The userspace version comes from the GPU rows (NVML), falling back to `--version` when no
    GPU is listed. mismatch is true when it differs from the kernel module's version.
    """
    versions = sorted({gpu['driver_version'] for gpu in gpus})
    if len(versions) > 1:
        raise NvidiaSmiParseError('nvidia-smi reported several driver versions: %s' % (versions,))
    driver_version = versions[0] if versions else smi_version.get('driver_version')
    mismatch = bool(driver_version and kernel_module_version
                    and driver_version != kernel_module_version)
    return {
        'driver_version': driver_version,
        'cuda_version': smi_version.get('cuda_version'),
        'kernel_module_version': kernel_module_version,
        'mismatch': mismatch,
    }


def mib_to_gib(mib):
    """MiB to GiB, rounded to 2 decimals."""
    return round(mib / MIB_PER_GIB, 2)


def select_gpus(gpus, indices):
    """The GPUs whose index is in indices (all when indices is None), in index order.

    Raises ValueError naming the unknown indices and the existing ones.
    """
    if indices is None:
        return list(gpus)
    existing = [gpu['index'] for gpu in gpus]
    unknown = sorted(set(indices) - set(existing))
    if unknown:
        raise ValueError(
            'no GPU with index %s on this host; existing indices: %s'
            % (', '.join(str(i) for i in unknown),
               ', '.join(str(i) for i in existing) or 'none'))
    wanted = set(indices)
    return [gpu for gpu in gpus if gpu['index'] in wanted]


def build_residency(gpus, processes, indices=None, cgroups=None, environs=None):
    """Combine the GPU and compute-apps answers into the residency report.

    gpus: parse_gpu_query's list; processes: parse_compute_apps_query's list; indices: the GPU
    indices to consider (None: all); cgroups: {pid: text of /proc/PID/cgroup or None when the
    process has exited since the query}; environs: {pid: text of /proc/PID/environ, or None when
    it cannot be read}, for the unit or program it runs under (module_utils/service_process.py).
    A process on a GPU uuid that the GPU query did not list is kept (gpu_index None) only when
    all GPUs are considered; the caller may warn about it. A pid missing from cgroups counts
    as exited.
    """
    cgroups = cgroups or {}
    environs = environs or {}
    selected = select_gpus(gpus, indices)
    index_by_uuid = dict((gpu['uuid'], gpu['index']) for gpu in gpus)
    selected_uuids = set(gpu['uuid'] for gpu in selected)

    report_gpus = [{
        'index': gpu['index'],
        'uuid': gpu['uuid'],
        'name': gpu['name'],
        'memory_used_mib': gpu['memory_used_mib'],
        'memory_total_mib': gpu['memory_total_mib'],
        'memory_free_mib': gpu['memory_free_mib'],
    } for gpu in selected]

    report_processes = []
    for process in processes:
        known = process['gpu_uuid'] in index_by_uuid
        if indices is not None and process['gpu_uuid'] not in selected_uuids:
            continue
        cgroup_text = cgroups.get(process['pid'])
        report_processes.append({
            'pid': process['pid'],
            'process_name': process['process_name'],
            'gpu_index': index_by_uuid[process['gpu_uuid']] if known else None,
            'gpu_uuid': process['gpu_uuid'],
            'used_memory_mib': process['used_memory_mib'],
            'systemd_unit': systemd_unit_from_cgroup(cgroup_text) if cgroup_text else None,
            'supervisor_program': supervisor_program_from_environ(environs[process['pid']])
            if environs.get(process['pid']) else None,
            'exited': cgroup_text is None,
        })

    # MIG parents report memory as N/A; they count as unknown, not as zero.
    used_mib = [gpu['memory_used_mib'] for gpu in selected if gpu['memory_used_mib'] is not None]
    return {
        'gpus': report_gpus,
        'processes': report_processes,
        'aggregate_used_gib': mib_to_gib(sum(used_mib)),
        'imbalance_gib': mib_to_gib(max(used_mib) - min(used_mib)) if used_mib else 0.0,
    }


def timeout_message(command, timeout_s, probes, option='timeout_s'):
    """Why a call to nvidia-smi did not answer, naming the GPUs that hang it.

    command: the nvidia-smi command line (a list); probes: [(PCI bus id, answered in time)] from
    asking every GPU the kernel module knows on its own (empty when it lists none); option: the
    module option that sets the timeout.
    """
    text = '%s did not answer within %d s (%s)' % (' '.join(command), timeout_s, option)
    hanging = [bus_id for bus_id, answered in probes if not answered]
    if hanging:
        return ('%s: GPU %s does not answer on its own either (nvidia-smi -i <bus id>); the driver waits '
                'on it. Reset it (nvidia-smi -r -i <bus id>) or reboot the node, or raise %s if it is '
                'only slow.' % (text, ', '.join(hanging), option))
    if probes:
        return ('%s, yet each of its GPUs (%s) answers on its own: the driver is busy or slow; retry, '
                'or raise %s.' % (text, ', '.join(bus_id for bus_id, _answered in probes), option))
    return ('%s, and the kernel module lists no GPU under /proc/driver/nvidia/gpus to ask one by one: '
            'check the driver (dmesg, nvidia-bug-report.sh) or reboot the node.' % text)


def missing_gpus_message(required, gpu_count):
    """The failure when a node must have GPUs and nvidia-smi listed none; None when it is fine."""
    if required and gpu_count == 0:
        return ('nvidia-smi answered but lists no GPU, and required=true: check that the GPUs are '
                'seen by the driver (nvidia-smi -L, dmesg), or set required=false for a CPU node')
    return None


SNAPSHOT_GPU_KEYS = ('index', 'uuid', 'name', 'pci_bus_id', 'compute_cap', 'cuda_arch', 'memory_total_mib')


def inventory_snapshot(gpus, driver):
    """What identifies a node's GPUs and driver, for /var/lib/gpulab/gpu-inventory.json.

    Live values (memory used, utilisation) are left out, so the file changes only when the
    hardware or the driver does (a driver upgrade, a swapped card).
    """
    return {
        'managed_by': 'gpulab.inference',
        'driver_version': driver.get('driver_version'),
        'kernel_module_version': driver.get('kernel_module_version'),
        'cuda_version': driver.get('cuda_version'),
        'gpu_count': len(gpus),
        'gpus': [dict((key, gpu.get(key)) for key in SNAPSHOT_GPU_KEYS) for gpu in gpus],
    }


SNAPSHOT_DRIVER_KEYS = ('driver_version', 'kernel_module_version', 'cuda_version')
_INVENTORY_TEXT = re.compile(r'\A[\x20-\x7e]{1,200}\Z')
_INVENTORY_COMPUTE_CAP = re.compile(r'\A[0-9]{1,2}\.[0-9]{1,2}\Z')
_INVENTORY_CUDA_ARCH = re.compile(r'\A[0-9]{2,4}[a-z]?\Z')


def parse_inventory(text, source):
    """A node's gpu-inventory.json (inventory_snapshot as gpu_preflight wrote it), checked field by
    field: {gpus, gpu_count, driver}. source names the file in messages; every error says to run
    gpu_preflight again, which rewrites the file from nvidia-smi."""
    def fail(what):
        raise NvidiaSmiParseError('%s %s; run gpu_preflight on the node again (it rewrites the file)' % (source, what))

    try:
        data = json.loads(text)
    except ValueError as exc:
        fail('is not JSON (%s)' % exc)
    if not isinstance(data, dict) or data.get('managed_by') != 'gpulab.inference':
        fail('is not a GPU inventory of gpulab.inference (no managed_by)')
    gpus = data.get('gpus')
    if not isinstance(gpus, list):
        fail('has no gpus list')
    checked, seen = [], set()
    for position, gpu in enumerate(gpus):
        where = 'gpus entry %d' % position
        if not isinstance(gpu, dict):
            fail('%s is not an object' % where)
        index = gpu.get('index')
        if isinstance(index, bool) or not isinstance(index, int) or index < 0 or index in seen:
            fail('%s index %r is not a GPU index (a whole number from 0, each once)' % (where, index))
        seen.add(index)
        for key, pattern in (('uuid', _INVENTORY_TEXT), ('name', _INVENTORY_TEXT), ('pci_bus_id', _INVENTORY_TEXT),
                             ('compute_cap', _INVENTORY_COMPUTE_CAP), ('cuda_arch', _INVENTORY_CUDA_ARCH)):
            value = gpu.get(key)
            if value is not None and not (isinstance(value, str) and pattern.match(value)):
                fail('%s %s %r is not what nvidia-smi reports' % (where, key, value))
        memory = gpu.get('memory_total_mib')
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 0):
            fail('%s memory_total_mib %r is not a whole number of MiB' % (where, memory))
        checked.append(dict((key, gpu.get(key)) for key in SNAPSHOT_GPU_KEYS))
    if data.get('gpu_count') != len(checked):
        fail('says gpu_count %r but lists %d GPU(s)' % (data.get('gpu_count'), len(checked)))
    driver = {}
    for key in SNAPSHOT_DRIVER_KEYS:
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and _INVENTORY_TEXT.match(value)):
            fail('%s %r is not a version' % (key, value))
        driver[key] = value
    return {'gpus': sorted(checked, key=lambda gpu: gpu['index']), 'gpu_count': len(checked), 'driver': driver}


def _or_dash(value):
    return '-' if value is None or value == '' else value


def gpu_table(gpus, driver):
    """A node's GPUs as printable lines: a summary, a header, one row per GPU (N/A shown as -)."""
    lines = [
        '%d GPU(s), driver %s (kernel module %s), CUDA %s' % (
            len(gpus), _or_dash(driver.get('driver_version')), _or_dash(driver.get('kernel_module_version')),
            _or_dash(driver.get('cuda_version'))),
        '%-4s %-58s %-6s %-5s %21s %5s' % ('GPU', 'name', 'cc', 'arch', 'memory used/total', 'util'),
    ]
    for gpu in gpus:
        arch = 'sm_%s' % gpu['cuda_arch'] if gpu.get('cuda_arch') else '-'
        lines.append('%-4s %-58s %-6s %-5s %10s/%6s MiB %4s%%' % (
            gpu['index'], gpu['name'], _or_dash(gpu.get('compute_cap')), arch, _or_dash(gpu.get('memory_used_mib')),
            _or_dash(gpu.get('memory_total_mib')), _or_dash(gpu.get('utilization_gpu_pct'))))
    return lines
