# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """The gpu_inventory option of the modules that read the node's GPUs in their own run."""

    DOCUMENTATION = r"""
options:
  gpu_inventory:
    description:
      - Read the node's GPUs in this module run from C(gpu-inventory.json), the file role C(gpu_preflight) writes
        (C(gpulab_gpu_inventory_file)), as M(gpulab.inference.gpu_inventory) does; in check mode on a node
        without it, from C(nvidia-smi). Given, it takes the place of the GPU list option.
      - A missing or invalid file fails, naming it and the role that writes it.
    type: dict
    suboptions:
      path:
        description: The inventory file.
        type: path
        required: true
      nvidia_smi_path:
        description: The C(nvidia-smi) read in check mode when the file is missing.
        type: str
        default: nvidia-smi
      driver_version_file:
        description: The kernel module's version file, read with C(nvidia-smi) in check mode when the file is missing.
        type: path
        default: /proc/driver/nvidia/version
      timeout_s:
        description: Seconds each C(nvidia-smi) call may take (check mode without the file only).
        type: int
        default: 30
"""
