# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp's layer placement (load_tensors' rules) and n_gpu_layers, as module_utils/llama_layers.py gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import llama_layers


# ---------------------------------------------------------------- placement (load_tensors)


def test_equal_split_over_two_devices_puts_the_output_with_the_last_layer():
    # 4 layers + output = 5 units at 0, .2, .4, .6, .8 against split points .5, 1
    assert llama_layers.assign_layers(4, [1, 1], "all") == [0, 0, 0, 1, 1]


def test_split_points_are_upper_bound_not_lower_bound():
    # 32 layers + output = 33 units: layer 8 sits at 8/33 = 0.2424 < 0.25, so it stays on device 0
    placement = llama_layers.assign_layers(32, [0.25, 0.75], "all")
    assert placement.count(0) == 9 and placement[8] == 0 and placement[9] == 1
    # a unit exactly on a split point goes to the next device (std::upper_bound: first point > x)
    assert llama_layers.assign_layers(2, [1, 2], "all") == [0, 1, 1]


def test_n_gpu_layers_offloads_the_last_layers():
    # i_gpu_start = 4 + 1 - 2 = 3: layers 0-2 on the CPU; layer 3 and the output split 0 / .5
    assert llama_layers.assign_layers(4, [1, 1], 2) == [None, None, None, 0, 1]
    assert llama_layers.assign_layers(4, [1, 1], 0) == [None] * 5
    assert llama_layers.assign_layers(4, [1, 1], 99) == llama_layers.assign_layers(4, [1, 1], "all") == llama_layers.assign_layers(4, [1, 1], -1)


def test_a_zero_entry_gets_no_layer():
    assert llama_layers.assign_layers(4, [0, 1, 0], "all") == [1] * 5
    assert llama_layers.assign_layers(4, [3, 0, 1], "all") == [0, 0, 0, 0, 2]


def test_split_points_are_float32_like_llama_cpp():
    points = llama_layers.split_points([1, 1, 1])
    assert points[-1] == 1.0
    assert points[0] == llama_layers.f32(1.0 / 3)
    assert points[0] != 1.0 / 3


def test_n_gpu_layers_input():
    assert llama_layers.gpu_layers("all", 62) == 63
    assert llama_layers.gpu_layers("12", 62) == 12
    with pytest.raises(llama_layers.PlanError, match=r"n_gpu_layers 'most' must be a number of layers, all or auto"):
        llama_layers.gpu_layers("most", 62)
