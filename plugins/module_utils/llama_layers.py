# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How llama.cpp places layers on devices and which KV cache types it takes: load_tensors' rules,
shared by the memory plan (gguf_plan) and the head's command line (llama_server), which needs them
without the planner."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct

# common/arg.cpp kv_cache_types: --cache-type-k / --cache-type-v values -> ggml type id
CACHE_TYPES = {
    "f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6, "q5_1": 7,
}


class PlanError(ValueError):
    """Bad input: the message names the option or value and what to do."""


def f32(value):
    """Round to IEEE single precision, as llama.cpp's float arithmetic does."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def split_points(values):
    """Cumulative split points normalised to 1, in float32 as load_tensors computes them."""
    points = []
    total = 0.0
    for value in values:
        total = f32(total + f32(value))
        points.append(total)
    return [f32(p / total) for p in points]


def gpu_layers(n_gpu_layers, n_layer):
    """n_gpu_layers as llama_model::n_gpu_layers(): 'all'/'auto'/negative -> n_layer + 1."""
    if n_gpu_layers in (None, "all", "auto") or (isinstance(n_gpu_layers, int) and n_gpu_layers < 0):
        return n_layer + 1
    if isinstance(n_gpu_layers, bool):
        raise PlanError("n_gpu_layers %r must be a number of layers, all or auto" % (n_gpu_layers,))
    try:
        return int(n_gpu_layers)
    except (TypeError, ValueError):
        raise PlanError("n_gpu_layers %r must be a number of layers, all or auto" % (n_gpu_layers,))


def assign_layers(n_layer, splits, n_gpu_layers):
    """Device index (or None for the CPU) of layers 0..n_layer-1 and of the output layer (last
    entry), as load_tensors' get_layer_buft_list does."""
    n_devices = len(splits)
    ngl = gpu_layers(n_gpu_layers, n_layer)
    points = split_points(splits)
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act_gpu_layers = min(ngl, n_layer + 1) if n_devices else 0
    placement = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act_gpu_layers:
            placement.append(None)
            continue
        position = f32(float(il - i_gpu_start) / act_gpu_layers)
        index = 0
        while index < n_devices and not points[index] > position:  # std::upper_bound
            index += 1
        placement.append(min(index, n_devices - 1))
    return placement
