# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """The fabric option of the plans of llama.cpp RPC processes (servers and head)."""

    DOCUMENTATION = r"""
options:
  fabric:
    description:
      - The node's C(/etc/gpulab/roce/fabric.json) (role C(roce)), or nothing where the role did not run. With a RoCE v2
        GID for llama.cpp, the plan adds its C(GGML_RDMA_*) environment and the directives a hardened service needs
        to reach the verbs device (C(DeviceAllow), C(AF_NETLINK), C(LimitMEMLOCK)).
    type: dict
"""
