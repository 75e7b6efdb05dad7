# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama.cpp autopilot (module_utils/layout_llama.py): the whole-layer split with the most headroom, the
context, the memory plan's record and drift, GPUs that devices share."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

import pytest
from test_gguf_plan import E2E_MODEL, H200_IDLE_RPC_MIB, MINIMAX_M2, ShapedModel

from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import layout_llama as ll


# an idle RTX PRO 6000 (nvidia-smi capture), the seed's ~96 GB GPUs
IDLE_MIB = 97248
OPTIONS = dict(parallel=1, margin_mib=1024, cuda_context_mib=720)


@pytest.fixture(scope="module")
def minimax():
    return ShapedModel(MINIMAX_M2, 200064)


def seed_devices(worker_kept_mib=10240, head_kept_mib=(5120, 0)):
    """RPC0 (node-b's GPU) first, then node-a's two GPUs, as llama.cpp orders them; each GPU's
    free memory is what the kept services leave."""
    return [{"name": "RPC0", "host": "node-b", "free_mib": IDLE_MIB - worker_kept_mib},
            {"name": "CUDA0", "host": "node-a", "free_mib": IDLE_MIB - head_kept_mib[0]},
            {"name": "CUDA1", "host": "node-a", "free_mib": IDLE_MIB - head_kept_mib[1]}]


# ---------------------------------------------------------------- llama.cpp: the split

def test_seed_llama_cpp_auto_split_is_whole_layers_with_the_most_headroom(minimax):
    devs = seed_devices()
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=32768, **OPTIONS)
    counts = choice["tensor_split"]
    assert all(c == int(c) for c in counts) and sum(counts) == 63  # 62 layers and the output layer
    plan = choice["plan"]
    assert plan["fits"] is True
    # the worker keeps 10 GiB for its live service: it gets fewer layers than the head's GPUs
    assert counts[0] < counts[1] and counts[0] < counts[2]
    # the seed's resident figures (80.0 / 75.7 / 80.0 GiB) are in this range per GPU
    assert all(70 * 1024 < r["total_mib"] < 86 * 1024 for r in plan["devices"]), plan["devices"]
    smallest = min(r["headroom_mib"] for r in plan["devices"])
    assert choice["smallest_headroom_mib"] == pytest.approx(smallest, abs=0.01)
    assert "whole-layer split %s" % ",".join("%d" % c for c in counts) in choice["reason"]
    # the 1:1:1 split the seed ran keeps less on its tightest device, and says so
    equal = [r for r in choice["rejected"] if r["label"] == "equal"][0]
    assert equal["layer_ranges"] == ["0-20", "21-41", "42-61+out"]
    assert equal["smallest_headroom_mib"] < smallest
    assert equal["findings"][-1] == "less room on its tightest device than auto"
    assert equal["details"][-1] == "%.0f MiB less on its tightest device than auto" % (
        choice["smallest_headroom_mib"] - equal["smallest_headroom_mib"])


def test_the_search_beats_every_other_whole_layer_split(minimax):
    """Exhaustive over every split of 63 slots on three devices: none keeps more on its tightest device."""
    devs = seed_devices(worker_kept_mib=24576, head_kept_mib=(0, 3072))
    options = dict(OPTIONS, ctx_size=16384)
    choice = ll.choose_tensor_split(minimax, devs, **options)
    costs = ll._Costs(minimax, gp.model_facts(minimax), gp.normalise_devices(devs), options)
    best = max(min(costs.headroom(0, 0, a), costs.headroom(1, a, b), costs.headroom(2, b, 63))
               for a in range(64) for b in range(a, 64))
    assert choice["smallest_headroom_mib"] == pytest.approx(best, abs=0.01)


def test_search_costs_match_the_planner(minimax):
    """The dynamic programme's headroom per device is plan_layout's for the same split."""
    devs = seed_devices()
    options = dict(OPTIONS, ctx_size=8192)
    costs = ll._Costs(minimax, gp.model_facts(minimax), gp.normalise_devices(devs), options)
    plan = gp.plan_layout(minimax, devs, split=[18, 22, 23], **options)
    assert [r["layer_range"] for r in plan["devices"]] == ["0-17", "18-39", "40-61"]
    assert [r["headroom_mib"] for r in plan["devices"]] == pytest.approx(
        [costs.headroom(0, 0, 18), costs.headroom(1, 18, 40), costs.headroom(2, 40, 63)], abs=0.01)


def test_a_worker_keeping_24_gib_fits_only_with_a_weighted_split(minimax):
    devs = seed_devices(worker_kept_mib=24576, head_kept_mib=(0, 0))
    equal = gp.plan_layout(minimax, devs, split="equal", ctx_size=32768, **OPTIONS)
    assert equal["fits"] is False and equal["overflowing"] == ["RPC0"]
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=32768, **OPTIONS)
    assert choice["plan"]["fits"] is True
    assert choice["tensor_split"][0] < 21
    rejected = dict((r["label"], r) for r in choice["rejected"])
    assert rejected["equal"]["fits"] is False
    assert rejected["equal"]["findings"][0] == "RPC0 would overflow"
    assert rejected["equal"]["details"][0].startswith("RPC0 would overflow by ")


def test_a_model_that_fits_no_split_says_so(minimax):
    devs = seed_devices(worker_kept_mib=60000, head_kept_mib=(60000, 60000))
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=4096, **OPTIONS)
    assert choice["plan"]["fits"] is False
    assert choice["reason"].startswith("auto: no whole-layer split fits")


def test_unknown_memory_falls_back_to_the_equal_split(minimax):
    devs = [{"name": "RPC0", "free_mib": None, "cuda": False}, {"name": "RPC1", "free_mib": None, "cuda": False}]
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=4096, **OPTIONS)
    assert choice["tensor_split"] == [1.0, 1.0]
    assert "memory of RPC0, RPC1 is unknown" in choice["reason"]


def test_cpu_servers_get_the_equal_split_whether_their_memory_is_published_yet_or_not(minimax):
    """A lab's first deploy knows no servers.json, its second does: both must choose alike."""
    first = [{"name": "RPC0", "free_mib": None, "cuda": False}, {"name": "RPC1", "free_mib": None, "cuda": False}]
    second = [{"name": "RPC0", "free_mib": None, "total_mib": 50000, "cuda": False},
              {"name": "RPC1", "free_mib": None, "total_mib": 200000, "cuda": False}]
    choices = [ll.choose_tensor_split(minimax, devs, ctx_size=4096, **OPTIONS) for devs in (first, second)]
    assert [choice["tensor_split"] for choice in choices] == [[1.0, 1.0], [1.0, 1.0]]
    assert choices[0]["reason"] == choices[1]["reason"]


def test_partial_offload_splits_only_the_offloaded_layers(minimax):
    devs = seed_devices()
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=4096, n_gpu_layers=40, **OPTIONS)
    assert sum(choice["tensor_split"]) == 40
    assert choice["plan"]["cpu"]["layer_range"] == "0-22"


# ---------------------------------------------------------------- llama.cpp: the context

def test_seed_auto_context_is_the_largest_that_fits(minimax):
    devs = seed_devices()
    result = ll.choose_ctx_and_split(minimax, devs, ctx_size="auto", split="auto", **OPTIONS)
    ctx = result["ctx_size"]
    assert result["fits"] is True and ctx % 256 == 0
    assert 32768 < ctx < 196608
    # one block more does not fit under any whole-layer split (free memory seen in whole 256 MiB steps)
    bigger = ll.choose_tensor_split(minimax, ll.steady_devices(devs), ctx_size=ctx + 256, **OPTIONS)
    assert bigger["plan"]["fits"] is False
    assert "the largest context that fits with the margin (trained 196608)" in result["ctx_reason"]


def test_auto_context_is_capped_by_the_trained_context(minimax):
    devs = [{"name": "CUDA%d" % i, "free_mib": 143771} for i in range(4)]  # four idle H200
    result = ll.choose_ctx_and_split(minimax, devs, parallel=4, margin_mib=OPTIONS["margin_mib"],
                                     cuda_context_mib=OPTIONS["cuda_context_mib"])
    assert result["ctx_size"] == 196608
    assert result["plan"]["kv_streams"] == 4 and result["plan"]["kv_cells"] == 49152
    assert "trained context" in result["ctx_reason"]


def test_auto_context_with_a_set_split(minimax):
    devs = seed_devices(worker_kept_mib=0, head_kept_mib=(0, 0))
    result = ll.choose_ctx_and_split(minimax, devs, ctx_size="auto", split=[1, 1, 1], **OPTIONS)
    assert result["tensor_split"] == [1.0, 1.0, 1.0]
    assert result["split_reason"] == "llama_server_tensor_split [1, 1, 1] as set"
    assert result["fits"] is True


def test_a_set_context_is_kept_and_checked(minimax):
    devs = seed_devices()
    result = ll.choose_ctx_and_split(minimax, devs, ctx_size=262144, split="auto", **OPTIONS)
    assert result["ctx_size"] == 262144
    assert result["fits"] is False
    assert "beyond the model's trained context 196608" in result["ctx_reason"]


def test_no_context_fits_names_the_overflow(minimax):
    devs = seed_devices(worker_kept_mib=60000, head_kept_mib=(60000, 60000))
    result = ll.choose_ctx_and_split(minimax, devs, **OPTIONS)
    assert result["fits"] is False
    assert result["ctx_reason"].startswith("auto: not even 256 tokens")


def test_auto_context_without_a_trained_context_is_refused(minimax):
    class NoContext(ShapedModel):
        pass
    model = NoContext(MINIMAX_M2, 200064)
    model.metadata.pop("minimax-m2.context_length")
    with pytest.raises(la.AutoError, match="set llama_server_ctx_size"):
        ll.choose_ctx_and_split(model, seed_devices(), **OPTIONS)


def test_unknown_memory_takes_the_trained_context_capped(minimax):
    devs = [{"name": "RPC0", "free_mib": None, "cuda": False}]
    result = ll.choose_ctx_and_split(minimax, devs, parallel=4, margin_mib=OPTIONS["margin_mib"],
                                     cuda_context_mib=OPTIONS["cuda_context_mib"])
    assert result["ctx_size"] == 8192
    assert "capped at 8192" in result["ctx_reason"]


def test_a_few_mib_of_drift_give_the_same_choice_and_a_real_change_a_new_one(minimax):
    devs = seed_devices()
    first = ll.choose_ctx_and_split(minimax, devs, **OPTIONS)
    drifted = [dict(d, free_mib=d["free_mib"] - 3) for d in devs]
    again = ll.choose_ctx_and_split(minimax, drifted, **OPTIONS)
    assert (again["ctx_size"], again["tensor_split"]) == (first["ctx_size"], first["tensor_split"])
    assert again["split_reason"] == first["split_reason"]
    grown = [dict(devs[0], free_mib=devs[0]["free_mib"] - 4096)] + devs[1:]
    changed = ll.choose_ctx_and_split(minimax, grown, **OPTIONS)
    assert (changed["ctx_size"], changed["tensor_split"]) != (first["ctx_size"], first["tensor_split"])


def test_steady_devices_round_free_memory_down_to_whole_steps():
    assert ll.steady_devices([{"name": "a", "free_mib": 1000.5}, {"name": "b", "free_mib": None}]) == [
        {"name": "a", "free_mib": 768.0}, {"name": "b", "free_mib": None}]


def test_the_memory_plan_keeps_the_choice_and_drift_does_not_rewrite_it(minimax):
    devs = seed_devices()
    first = ll.choose_ctx_and_split(minimax, devs, **OPTIONS)
    drifted = ll.choose_ctx_and_split(minimax, [dict(d, free_mib=d["free_mib"] - 3) for d in devs], **OPTIONS)
    record = gp.choice_record(first)
    assert record == gp.choice_record(drifted)
    assert (record["ctx_size"], record["tensor_split"]) == (first["ctx_size"], first["tensor_split"])
    assert record["split_reason"].startswith("auto: whole-layer split")
    equal = [r for r in record["rejected"] if r["label"] == "equal"][0]
    assert sorted(equal) == sorted(gp.CHOICE_REJECTED_FIELDS)
    assert equal["findings"][-1] == "less room on its tightest device than auto"
    json.dumps(record)  # memory-plan.json holds it as it is
    plan = gp.plan_record("/m.gguf", {"architecture": "minimax-m2"}, first["plan"], dict(OPTIONS), choice=first)
    assert plan["choice"] == record
    assert gp.plan_record("/m.gguf", {}, first["plan"], dict(OPTIONS))["choice"] is None


# ---------------------------------------------------------------- llama.cpp: devices sharing a GPU

H200_MIB = 143771


def test_auto_never_overcommits_a_gpu_two_devices_share(minimax):
    """One H200 holding an RPC server beside llama-server (RPC0 and CUDA0 both on GPU 0): the
    MiniMax model (about 226 GiB) would fit were each device judged against the whole GPU."""
    devs = [{"name": "RPC0", "host": "h200", "gpu_index": 0, "free_mib": H200_MIB},
            {"name": "CUDA0", "host": "h200", "gpu_index": 0, "free_mib": H200_MIB}]
    choice = ll.choose_tensor_split(minimax, devs, ctx_size=4096, **OPTIONS)
    assert choice["plan"]["fits"] is False
    assert choice["smallest_headroom_mib"] < 0
    assert "no whole-layer split fits" in choice["reason"]
    # told apart, the two devices would hold it
    apart = [dict(devs[0], gpu_index=1), devs[1]]
    assert ll.choose_tensor_split(minimax, apart, ctx_size=4096, **OPTIONS)["plan"]["fits"] is True


def test_the_search_with_a_shared_gpu_beats_every_other_split(minimax):
    """Exhaustive: RPC0 on the head's GPU 0, RPC1 on a worker, CUDA0 on the head's GPU 0 again (not
    next to each other in llama.cpp's order); the shared GPU's headroom counts both its devices."""
    devs = [{"name": "RPC0", "host": "node-a", "gpu_index": 0, "free_mib": 165000},
            {"name": "RPC1", "host": "node-b", "gpu_index": 0, "free_mib": IDLE_MIB - 10240},
            {"name": "CUDA0", "host": "node-a", "gpu_index": 0, "free_mib": 165000}]
    options = dict(OPTIONS, ctx_size=16384)
    choice = ll.choose_tensor_split(minimax, devs, **options)
    costs = ll._Costs(minimax, gp.model_facts(minimax), gp.normalise_devices(devs), options)

    def smallest(a, b):
        shared = 165000 - 1024 - costs.used_mib(0, 0, a) - costs.used_mib(2, b, 63)
        return min(shared, costs.headroom(1, a, b))

    best = max(smallest(a, b) for a in range(64) for b in range(a, 64))
    assert choice["plan"]["fits"] is True
    assert choice["smallest_headroom_mib"] == pytest.approx(best, abs=0.01)
    rows = choice["plan"]["devices"]
    assert rows[0]["headroom_mib"] == rows[2]["headroom_mib"]
    assert rows[0]["headroom_mib"] == pytest.approx(165000 - 1024 - rows[0]["total_mib"] - rows[2]["total_mib"],
                                                    abs=0.05)


def test_a_device_the_split_leaves_without_layers_holds_its_idle_context():
    """Issue 34's H200: RPC0 and CUDA0 on one GPU, every layer went to the head, and the idle RPC
    server held 518 MiB that the plan had at 0. The search counts it as plan_layout does."""
    model = ShapedModel(E2E_MODEL, 151936)
    devs = [{"name": "RPC0", "host": "h200", "gpu_index": 0, "free_mib": H200_MIB},
            {"name": "CUDA0", "host": "h200", "gpu_index": 0, "free_mib": H200_MIB}]
    options = dict(OPTIONS)
    options.update(ctx_size=8192, parallel=4)
    bare = ll.choose_tensor_split(model, devs, **options)
    choice = ll.choose_tensor_split(model, devs, cuda_idle_context_mib=H200_IDLE_RPC_MIB, **options)
    # one process computes: two would each add a full context and a compute buffer
    assert choice["tensor_split"] == bare["tensor_split"] == [0.0, 17.0]
    rpc, head = choice["plan"]["devices"]
    assert (rpc["layer_range"], rpc["context_mib"], rpc["total_mib"]) == ("", 518.0, 518.0)
    assert head["total_mib"] == bare["plan"]["devices"][1]["total_mib"]
    assert choice["smallest_headroom_mib"] == pytest.approx(H200_MIB - 1024 - 518 - head["total_mib"], abs=0.01)
    assert choice["smallest_headroom_mib"] == pytest.approx(bare["smallest_headroom_mib"] - 518, abs=0.01)


def test_search_costs_match_the_planner_for_a_device_without_layers(minimax):
    # a worker with 1800 MiB free beside two idle H200 (MiniMax, about 226 GiB, fits on the pair)
    devs = [{"name": "RPC0", "host": "node-b", "free_mib": 1800}, {"name": "CUDA0", "host": "node-a", "free_mib": H200_MIB},
            {"name": "CUDA1", "host": "node-a", "free_mib": H200_MIB}, {"name": "RPC1", "free_mib": None, "cuda": False}]
    options = dict(OPTIONS, ctx_size=8192, cuda_idle_context_mib=H200_IDLE_RPC_MIB)
    costs = ll._Costs(minimax, gp.model_facts(minimax), gp.normalise_devices(devs), options)
    assert (costs.used_mib(0, 0, 0), costs.used_mib(3, 63, 63)) == (518.0, 0.0)
    plan = gp.plan_layout(minimax, devs, split=[0, 31, 32, 0], **options)
    assert [r["context_mib"] for r in plan["devices"]] == [518.0, 720.0, 720.0, 0.0]
    assert [r["headroom_mib"] for r in plan["devices"][:3]] == pytest.approx(
        [costs.headroom(0, 0, 0), costs.headroom(1, 0, 31), costs.headroom(2, 31, 63)], abs=0.01)
    # the worker takes no layer and keeps 1800 - 1024 - 518, the tightest of the three
    choice = ll.choose_tensor_split(minimax, devs[:3], **options)
    assert choice["tensor_split"][0] == 0.0
    assert choice["smallest_headroom_mib"] == pytest.approx(1800 - 1024 - 518, abs=0.01)
    assert choice["plan"]["devices"][0]["headroom_mib"] == pytest.approx(258, abs=0.01)


@pytest.mark.parametrize("value, message", [
    (-1, "cuda_idle_context_mib -1 must be >= 0"), ("518 MiB", "cuda_idle_context_mib '518 MiB' is not a number")])
def test_a_bad_idle_context_is_named_before_the_search(minimax, value, message):
    with pytest.raises(gp.PlanError, match=re.escape(message)):
        ll.choose_ctx_and_split(minimax, seed_devices(), cuda_idle_context_mib=value, **OPTIONS)


def test_the_recorded_choice_holds_no_free_memory_figure(minimax):
    """The H200 run: a second deploy saw free memory a few steps away and memory-plan.json changed
    only because the reason said how many MiB the split keeps. The record names the choice; the
    figures are for the play's output."""
    devs = seed_devices()
    first = ll.choose_ctx_and_split(minimax, devs, ctx_size=32768, **OPTIONS)
    # 1 GiB more free on every device: the same split and context, other headroom figures
    roomier = ll.choose_ctx_and_split(minimax, [dict(d, free_mib=d["free_mib"] + 1024) for d in devs],
                                      ctx_size=32768, **OPTIONS)
    assert (roomier["ctx_size"], roomier["tensor_split"]) == (first["ctx_size"], first["tensor_split"])
    assert roomier["split_figures"] != first["split_figures"]
    assert gp.choice_record(roomier) == gp.choice_record(first)
    text = json.dumps(gp.choice_record(first))
    # the split by free memory is kept as the whole layers it places, not as free MiB proportions
    by_free = [r for r in gp.choice_record(first)["rejected"] if r["label"].startswith("by free memory")][0]
    assert sum(by_free["tensor_split"]) == 63 and all(isinstance(c, int) for c in by_free["tensor_split"])
    assert "MiB" not in text and "%.0f" % first["plan"]["devices"][0]["headroom_mib"] not in text
    assert re.match(r"the split keeps at least [0-9]+ MiB beyond the margin on every device \(tightest [A-Z]+[0-9]\)\Z",
                    first["split_figures"])
