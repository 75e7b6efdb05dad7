# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's auto settings read back from the memory plan's record (module_utils/layout_auto.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la


# ---------------------------------------------------------------- the head takes the memory plan's values

RECORD = {"model_path": "/m/x.gguf", "tensor_split": [20.0, 21.0, 22.0], "options": {"ctx_size": 131072}}


def test_auto_values_come_from_the_memory_plan():
    assert la.resolve_from_memory_plan("auto", "auto", RECORD, "/m/x.gguf") == ([20, 21, 22], 131072)
    assert la.resolve_from_memory_plan([1, 1, 1], "auto", RECORD, "/m/x.gguf") == ([1, 1, 1], 131072)
    # nothing auto: the record is not needed
    assert la.resolve_from_memory_plan("equal", 8192, None, "/m/x.gguf") == ("equal", 8192)


@pytest.mark.parametrize("record, message", [
    (None, "llama_server_tensor_split and llama_server_ctx_size are auto: the memory plan resolves them"),
    (dict(RECORD, model_path="/m/other.gguf"), "plans /m/other.gguf, not /m/x.gguf; run the memory plan again"),
    (dict(RECORD, tensor_split="auto"), "holds no tensor_split list ('auto')"),
    (dict(RECORD, options={"ctx_size": "auto"}), "holds no resolved ctx_size ('auto')"),
])
def test_a_memory_plan_that_cannot_resolve_auto_is_named(record, message):
    with pytest.raises(la.AutoError, match=re.escape(message)):
        la.resolve_from_memory_plan("auto", "auto", record, "/m/x.gguf", "/var/lib/gpulab/memory-plan.json")
