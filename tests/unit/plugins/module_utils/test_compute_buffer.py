# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""compute_buffer: ggml-alloc's allocator, the scheduler's copies, and each family's graph against
the compute buffers llama.cpp 0c1e570 logged for the synthetic GGUFs of
tests/integration_llama/test_family_plan_llama.py (docs/benchmarks.md)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import compute_buffer as cb
from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

import model_tables

MIB = 1024.0 * 1024.0


# ---------------------------------------------------------------- the allocator

def test_the_allocator_takes_the_best_fitting_free_block_and_merges_freed_neighbours():
    alloc = cb._DynAllocator()
    offsets = [alloc.alloc(size) for size in (100, 64, 300, 64)]
    assert offsets == [0, 128, 192, 512]  # sizes rounded up to 32 bytes
    alloc.free(128, 64)
    alloc.free(512, 64)  # the tail block: merged into the free end
    alloc.free(0, 100)
    assert alloc.blocks[0] == [0, 192]  # 0-128 and 128-192 merged
    assert alloc.alloc(150) == 0  # the best fit among the blocks before the end
    assert alloc.max_size == 576


def _chain(graph, n):
    x = graph.inp((n,), cb.F32, "x")
    y = graph.new((n,), cb.F32, "MUL_MAT", (x,))
    z = graph.same("RMS_NORM", y)
    w = graph.same("MUL", z, graph.external((n,), cb.F32, 0))
    out = graph.new((n,), cb.F32, "MUL_MAT", (w,))
    out.output = True
    graph.expand(out)
    return graph


def test_in_place_ops_reuse_their_only_parent_and_outputs_are_kept():
    graph = cb.Graph()
    graph.dev = 0
    _chain(graph, 1024)
    buffers = cb.allocate(*cb.schedule(graph, 1))
    # x's copy on device 0 and y; RMS_NORM and MUL write into y; out takes the block the copy left
    assert buffers[0] == 2 * 4096
    assert buffers[cb.CPU] == 4096


def test_pipeline_parallelism_keeps_four_copies_of_every_split_input():
    graph = cb.Graph()
    graph.dev = 0
    _chain(graph, 1024)
    # four copies of x on the CPU (the graph input) and four on device 0 (the split input), never
    # freed, so y and out sit beside them
    assert cb.allocate(*cb.schedule(graph, 4)) == {cb.CPU: 4 * 4096, 0: 4 * 4096 + 2 * 4096}


def test_a_view_keeps_its_source_until_the_views_reader_ran():
    graph = cb.Graph()
    graph.dev = 0
    x = graph.inp((256, 4), cb.F32, "x")
    a = graph.new((256, 4), cb.F32, "MUL_MAT", (x,))
    v = graph.view_nd(a, (256, 2), (a.nb[1],))
    b = graph.new((256, 4), cb.F32, "MUL_MAT", (x,))
    c = graph.new((256, 2), cb.F32, "MUL_MAT", (v, b))
    graph.expand(c)
    # x's copy, a (kept for its view's reader c) and b at once; c takes the block x's copy left
    assert cb.allocate(*cb.schedule(graph, 1))[0] == 3 * 4096


# ---------------------------------------------------------------- the families against llama.cpp

class FamilyModel:
    """A synthetic GGUF's metadata and tensor infos (synthetic_model) without a file."""

    def __init__(self, arch, n_vocab=151936, **options):
        opts = sm.validate_options(dict(FAMILY_SHAPE, architecture=arch, **options))
        tensors, metadata = sm.ARCH_BUILDERS[arch]
        self.path = "/models/%s.gguf" % arch
        self.metadata = dict((k, v.value) for k, v in metadata(opts))
        self.metadata["general.architecture"] = arch
        self.metadata["%s.vocab_size" % arch] = n_vocab
        self.tensors = [(plan.info, 0) for plan in tensors(opts, n_vocab)]
        self.size_bytes = sum(gguf.ggml_nbytes(i.ggml_type, i.dims) for i, _s in self.tensors)

    def get(self, key, default=None):
        return self.metadata.get(key, default)


# tests/integration_llama/test_family_plan_llama.py's shape, server options and what sched_reserve
# logged with them (MiB: the first RPC device, the second, the head's CPU buffer), 2026-12-07
FAMILY_SHAPE = {"layers": 4, "hidden_size": 256, "attention_heads": 4, "kv_heads": 2, "head_dim": 64, "experts": 4,
                "experts_used": 2, "expert_ffn_size": 128, "quantization": "F16"}
F16_2_SLOTS = dict(ctx_size=2048, parallel=2)
Q8_FA_1_SLOT = dict(ctx_size=3000, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
NO_FA_3_SLOTS = dict(ctx_size=5000, parallel=3, ubatch=256, flash_attn="off")
LOGGED = [
    ("minimax-m2", F16_2_SLOTS, (8.54, 7.54, 6.55)),
    ("qwen3moe", F16_2_SLOTS, (8.54, 7.54, 6.55)),
    ("glm4moe", F16_2_SLOTS, (8.56, 7.54, 6.55)),
    ("deepseek2", F16_2_SLOTS, (9.30, 8.65, 6.53)),
    ("gpt-oss", F16_2_SLOTS, (11.57, 8.05, 9.58)),
    ("qwen3next", F16_2_SLOTS, (6.65, 8.55, 6.55)),
    # minimax-m3 with flash attention: its block-sparse graph (a batch of one stream per slot, decode)
    ("minimax-m3", F16_2_SLOTS, (18.70, 17.63, 8.63)),
    ("minimax-m2", Q8_FA_1_SLOT, (16.19, 15.66, 14.67)),
    ("glm4moe", Q8_FA_1_SLOT, (16.69, 15.66, 14.67)),
    ("deepseek2", Q8_FA_1_SLOT, (17.30, 16.65, 14.53)),
    ("gpt-oss", Q8_FA_1_SLOT, (19.34, 16.18, 17.83)),
    ("qwen3next", Q8_FA_1_SLOT, (6.58, 16.68, 14.67)),
    ("minimax-m3", Q8_FA_1_SLOT, (50.09, 53.26, 16.77)),
    ("minimax-m2", NO_FA_3_SLOTS, (17.14, 16.89, 9.34)),
    ("glm4moe", NO_FA_3_SLOTS, (17.41, 16.89, 9.34)),
    ("deepseek2", NO_FA_3_SLOTS, (17.30, 16.45, 8.33)),
    ("gpt-oss", NO_FA_3_SLOTS, (20.18, 16.89, 12.37)),
    ("qwen3next", NO_FA_3_SLOTS, (3.34, 17.14, 9.34)),
    # minimax-m3 without flash attention attends densely
    ("minimax-m3", NO_FA_3_SLOTS, (17.41, 16.89, 9.34)),
]


@pytest.mark.parametrize("arch, options, logged", LOGGED, ids=["%s-%d" % (c[0], i) for i, c in enumerate(LOGGED)])
def test_each_familys_compute_buffers_are_what_llama_cpp_reserved(arch, options, logged):
    model = FamilyModel(arch)
    devs = [{"name": "RPC0", "free_mib": 1 << 20}, {"name": "RPC1", "free_mib": 1 << 20}]
    plan = gp.plan_layout(model, devs, split="1,1", margin_mib=0, **options)
    assert all(row["compute_modelled"] for row in plan["devices"])
    planned = tuple(row["compute_mib_estimate"] for row in plan["devices"]) + (plan["cpu"]["compute_mib"],)
    assert planned == pytest.approx(logged, abs=0.005)


def test_one_device_keeps_one_copy_of_its_inputs():
    model = FamilyModel("qwen3moe")
    one = gp.plan_layout(model, [{"name": "RPC0"}], margin_mib=0, **F16_2_SLOTS)
    two = gp.plan_layout(model, [{"name": "RPC0"}, {"name": "RPC1"}], margin_mib=0, **F16_2_SLOTS)
    assert gp.pipeline_copies(1, "all", 4, True) == 1 and gp.pipeline_copies(2, "all", 4, True) == 4
    assert gp.pipeline_copies(2, 4, 4, True) == 1 and gp.pipeline_copies(2, "all", 4, False) == 1
    assert one["devices"][0]["compute_mib_estimate"] < two["devices"][0]["compute_mib_estimate"]


def test_a_family_without_a_graph_keeps_the_estimate():
    model = FamilyModel("qwen3moe")
    model.metadata = dict((k.replace("qwen3moe.", "qwen3."), v) for k, v in model.metadata.items())
    model.metadata["general.architecture"] = "qwen3"
    plan = gp.plan_layout(model, [{"name": "RPC0"}], margin_mib=0, **F16_2_SLOTS)
    assert plan["devices"][0]["compute_modelled"] is False and plan["cpu"]["compute_mib"] is None
    assert plan["devices"][0]["compute_mib_estimate"] > 0


# ---------------------------------------------------------------- representative layers

def _deepseek_v3(tmp_path):
    path = str(tmp_path / "DeepSeek-V3-Q2_K.gguf")
    model_tables.write_deepseek_v3_q2_k(path)
    return gguf.read_gguf_model(path)


def test_representative_layers_are_the_first_three_of_each_run():
    kinds = ["d"] * 3 + ["m"] * 7
    assert cb.representative_layers([0] * 5 + [1] * 5 + [1], kinds) == {0, 1, 2, 3, 4, 5, 6, 7}
    assert cb.representative_layers([0] * 10 + [0], ["s", "f"] * 5) == set(range(10))


@pytest.mark.parametrize("layout", ["three", "partial", "one-layer"])
def test_building_the_representative_layers_gives_what_the_whole_graph_gives(layout, tmp_path):
    """DeepSeek-V3 (61 layers, 3 dense) and 62-layer MiniMax-M2 and M3: each device's buffer from the
    representative layers equals the one from every layer."""
    shape = dict(layers=62, hidden_size=3072, attention_heads=48, kv_heads=8, head_dim=128, experts=8, experts_used=8,
                 expert_ffn_size=1536)
    for model in (_deepseek_v3(tmp_path), FamilyModel("minimax-m2", 200064, **shape), FamilyModel("minimax-m3", 200064, **shape)):
        facts = gp.model_facts(model)
        n = facts["layers"]
        placement = {"three": [0] * 20 + [1] * 20 + [2] * (n - 40) + [2],
                     "partial": [None] * 5 + [0] * (n - 5) + [0],
                     "one-layer": [0] + [1] + [2] * (n - 2) + [2]}[layout]
        copies = 1 if layout == "partial" else 4
        for parallel in (1, 4):
            cells, streams = gp.kv_cells(16384, parallel, 0)
            args = (cells, streams, parallel, parallel == 1, 512, 1, 1, cells)
            built = gp.compute_buffers(model, facts, placement, copies, *args)
            every = cb.representative_layers
            try:
                cb.representative_layers = lambda devs, kinds: set(range(len(devs) - 1))
                whole = gp.compute_buffers(model, facts, placement, copies, *args)
            finally:
                cb.representative_layers = every
            assert built == whole
