# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The units of role monitoring's services (node exporter, metrics collector, Prometheus,
Alertmanager): every line decided here, from the role's description of the service, and rendered
by role service's one unit template (service_files.unit_file)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpulab.inference.plugins.module_utils import service_files


class MonitoringError(ValueError):
    """Bad input: the message names the variable to fix."""


def monitoring_unit(service, bin_dir, nft_file, hardening):
    """The unit of one monitoring service (service_files.unit_file).

    service: the role's entry of __monitoring_services (name, description, user (empty: root),
    firewall (load the exporter's nftables table before every start), hardening (directive: value
    over the shared hardening, None leaves it out), device_groups, writable); bin_dir: where its
    wrapper lies; nft_file: the table's rule file; hardening: gpulab_service_hardening.
    """
    error = MonitoringError
    if not isinstance(service, dict):
        raise error("a monitoring service is %r, not a mapping" % (service,))
    name = service_files.checked(service.get("name"), "the monitoring service's name", error)
    bin_dir = service_files.checked(bin_dir, "monitoring_bin_dir", error)
    user = service_files.checked(service.get("user"), "monitoring_prometheus_user or monitoring_node_exporter_user",
                                 error)
    if not isinstance(hardening, dict) or not isinstance(service.get("hardening") or {}, dict):
        raise error("gpulab_service_hardening and the service's hardening must be mappings of systemd directives to values")
    sandbox = dict(hardening)
    sandbox.update(service.get("hardening") or {})
    section_unit = [service_files.directive("Description", service.get("description"), "the monitoring service's description",
                                            error),
                    "Wants=network-online.target", "After=network-online.target", "StartLimitIntervalSec=0"]
    section_service = ["Type=simple"]
    if boolean(service.get("firewall") or False, strict=False):
        section_service += [
            "# The table that admits only the Prometheus host is loaded (replaced whole) before every start, as",
            "# root: without it the exporter does not start.",
            "ExecStartPre=+/usr/sbin/nft -f %s" % service_files.checked(nft_file, "monitoring_nft_file", error)]
    section_service.append("ExecStart=%s/%s" % (bin_dir, name))
    if user:
        section_service += ["User=%s" % user, "Group=%s" % user]
    section_service += ["Restart=always", "RestartSec=5"]
    section_service += service_files.hardening(sandbox, "gpulab_service_hardening", error)
    section_service += service_files.device_allow(service.get("device_groups"), "gpulab_cuda_device_groups", error)
    section_service += [service_files.directive("ReadWritePaths", path, "monitoring_data_dir or monitoring_textfile_dir",
                                                error) for path in service.get("writable") or []]
    comments = ["Runs %s/%s (role monitoring); restarts forever, without a start limit." % (bin_dir, name)]
    return service_files.unit_file(comments, section_unit, section_service, ["WantedBy=multi-user.target"], error)
