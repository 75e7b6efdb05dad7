# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which service a process runs under, read from /proc: its systemd unit or its supervisord program.

The node's own process-to-service mapping, kept beside role service's rules (the seam of
tests/unit/test_seam_service_manager.py) so that a third manager adds its reader here; the GPU
residency (module_utils/nvidia_smi.py, modules gpu_residency and gpu_facts, the node's metrics
collector) calls these. Pure functions of the text of /proc files, standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def systemd_unit_from_cgroup(text):
    """The systemd service a process runs in, from the text of /proc/PID/cgroup, or None.

    Reads cgroup v2 ("0::/system.slice/gpulab-rpc.service") and the v1 name=systemd
    hierarchy. The innermost *.service wins, so a user service under user@1000.service
    is named, not the user manager.
    """
    paths = []
    for line in text.splitlines():
        parts = line.strip().split(':', 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        if (hierarchy_id == '0' and controllers == '') or controllers == 'name=systemd':
            paths.append(path)
    for path in paths:
        services = [part for part in path.split('/') if part.endswith('.service')]
        if services:
            return services[-1]
    return None


# supervisord sets it in every child's environment (supervisor/process.py Subprocess._spawn), which a
# wrapper script's exec keeps: the program a GPU process runs under, where no systemd unit names it.
SUPERVISOR_PROCESS_VARIABLE = 'SUPERVISOR_PROCESS_NAME'


def supervisor_program_from_environ(text):
    """The supervisord program a process runs under, from the text of /proc/PID/environ
    (NUL-separated NAME=value entries), or None."""
    prefix = SUPERVISOR_PROCESS_VARIABLE + '='
    for entry in text.split('\0'):
        if entry.startswith(prefix):
            return entry[len(prefix):] or None
    return None
