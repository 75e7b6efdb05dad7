# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving intent (gpulab_serving_intent) on the two seed deployments: MiniMax-M2.7 Q8_0 over
three 96 GB GPUs on two nodes (llama.cpp), MiniMax-M2.5 FP8 over eight (vLLM), each choice with
the reason it prints; and the values an operator sets winning over the intent."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

import pytest
import yaml
from test_gguf_plan import MINIMAX_M2, ShapedModel
from test_layout_llama import OPTIONS, seed_devices
from test_layout_vllm import seed_vllm

from ansible_collections.gpulab.inference.plugins.module_utils import layout_auto as la
from ansible_collections.gpulab.inference.plugins.module_utils import layout_llama as ll
from ansible_collections.gpulab.inference.plugins.module_utils import layout_vllm as lv
from ansible_collections.gpulab.inference.plugins.module_utils import llama_server as ls
from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp

LLAMA = dict((k, v) for k, v in OPTIONS.items() if k != "parallel")


@pytest.fixture(scope="module")
def minimax():
    return ShapedModel(MINIMAX_M2, 200064)


# ---------------------------------------------------------------- llama.cpp

def test_seed_llama_interactive_is_one_slot_with_the_longest_context(minimax):
    choice = ll.choose_llama_serving(minimax, seed_devices(), "interactive", 4, **LLAMA)
    assert choice["parallel"] == 1 and choice["fits"] is True
    assert choice["parallel_reason"] == ("auto, serving intent interactive: one slot, so the one stream has the "
                                         "whole context and shares no batch")
    assert choice["plan"]["kv_streams"] == 1
    # the longest context for that slot: one block more fits under no whole-layer split
    ctx = choice["ctx_size"]
    assert 32768 < ctx <= 196608 and ctx % 256 == 0
    bigger = ll.choose_tensor_split(minimax, ll.steady_devices(seed_devices()), ctx_size=ctx + 256, parallel=1, **LLAMA)
    assert bigger["plan"]["fits"] is False
    assert ll.intent_record(choice) == {"intent": "interactive", "concurrency": 4, "parallel": 1,
                                        "parallel_reason": choice["parallel_reason"]}


def test_seed_llama_throughput_is_a_slot_per_stream(minimax):
    choice = ll.choose_llama_serving(minimax, seed_devices(), "throughput", 4, **LLAMA)
    assert choice["parallel"] == 4 and choice["plan"]["kv_streams"] == 4 and choice["fits"] is True
    assert choice["parallel_reason"] == ("auto, serving intent throughput: 4 slot(s), one per stream of "
                                         "gpulab_serving_concurrency, decoded in one batch")
    # the slots share the memory the single slot had: about the same total, a quarter each
    single = ll.choose_llama_serving(minimax, seed_devices(), "interactive", 4, **LLAMA)
    assert choice["ctx_size"] % (256 * 4) == 0
    assert 0.9 * single["ctx_size"] < choice["ctx_size"] < 1.1 * single["ctx_size"]
    assert choice["ctx_size"] // 4 >= ll.MIN_SLOT_CTX


def test_throughput_slots_may_each_reach_the_trained_context(minimax):
    # four idle H200s hold more than 196608 tokens: each slot gets the trained context (llama-server caps
    # a slot there), not a quarter of it
    devs = [{"name": "CUDA%d" % i, "free_mib": 143771} for i in range(4)]
    choice = ll.choose_llama_serving(minimax, devs, "throughput", 4, **LLAMA)
    assert choice["ctx_size"] == 4 * 196608
    assert choice["ctx_reason"] == ("auto: 786432 tokens, the model's trained context for each of the 4 slots "
                                    "(it fits with the margin)")


def test_throughput_runs_fewer_slots_where_memory_cannot_give_each_enough(minimax):
    # the seed's GPUs with most of their memory kept by other services
    devs = seed_devices(worker_kept_mib=15000, head_kept_mib=(15000, 15000))
    choice = ll.choose_llama_serving(minimax, devs, "throughput", 16, **LLAMA)
    assert choice["fits"] is True and choice["parallel"] == 6 and choice["ctx_size"] == 26112
    assert choice["ctx_size"] // choice["parallel"] >= ll.MIN_SLOT_CTX
    assert choice["parallel_reason"].startswith("auto, serving intent throughput: %d slot(s) of the 16 of "
                                                "gpulab_serving_concurrency" % choice["parallel"])
    assert "a slot below 4096 tokens would cut conversations short" in choice["parallel_reason"]


def test_a_set_slot_count_wins_over_the_intent(minimax):
    choice = ll.choose_llama_serving(minimax, seed_devices(), "interactive", 4, parallel=3, **LLAMA)
    assert choice["parallel"] == 3 and choice["parallel_reason"] == "llama_server_parallel 3 as set"
    assert ll.llama_slots("throughput", 8, "2") == {"parallel": 2, "reason": "llama_server_parallel 2 as set"}


@pytest.mark.parametrize("intent, concurrency, parallel, message", [
    ("latency", 4, "auto", "gpulab_serving_intent is 'latency'; set interactive"),
    ("throughput", 0, "auto", "gpulab_serving_concurrency is 0; set the number of streams"),
    ("throughput", True, "auto", "gpulab_serving_concurrency is True"),
    ("throughput", 4, "many", "llama_server_parallel is 'many'; set a whole number of 1 or more, or auto"),
])
def test_bad_intent_settings_name_the_variable(intent, concurrency, parallel, message):
    with pytest.raises(la.AutoError, match=message):
        ll.llama_slots(intent, concurrency, parallel)


def test_the_head_reads_the_slots_the_memory_plan_set():
    record = {"intent": {"intent": "interactive", "concurrency": 4, "parallel": 1, "parallel_reason": "..."}}
    assert la.resolve_parallel_from_memory_plan("auto", record) == 1
    assert la.resolve_parallel_from_memory_plan(6, record) == 6
    with pytest.raises(la.AutoError, match="llama_server_parallel is auto: the memory plan resolves it"):
        la.resolve_parallel_from_memory_plan("auto", {"intent": None}, "/var/lib/gpulab/memory-plan.json")


def _seed_head_devices():
    """node-b's GPU over RPC, then node-a's two GPUs: the output layer lands on CUDA1, the head's own."""
    return [{"name": "RPC0", "kind": "rpc", "endpoint": "10.231.77.11:50052"},
            {"name": "CUDA0", "kind": "local"}, {"name": "CUDA1", "kind": "local"}]


def test_backend_sampling_follows_the_intent():
    devices, split = _seed_head_devices(), [20, 21, 22]
    interactive = ls.backend_sampling_choice("auto", devices, split, 62, intent="interactive")
    assert interactive["enabled"] is True
    assert interactive["reason"] == "auto, serving intent interactive: the output layer is on CUDA1 (a GPU of the head)"
    throughput = ls.backend_sampling_choice("auto", devices, split, 62, intent="throughput")
    assert throughput["enabled"] is False
    assert throughput["reason"].startswith("auto, serving intent throughput: off")
    # an operator's value wins, and interactive never samples on an RPC device
    assert ls.backend_sampling_choice(True, devices, split, 62, intent="throughput")["enabled"] is True
    rpc_last = [{"name": "CUDA0", "kind": "local"}, {"name": "RPC0", "kind": "rpc", "endpoint": "10.231.77.11:50052"}]
    assert ls.backend_sampling_choice("auto", rpc_last, [1, 1], 62, intent="interactive")["enabled"] is False


def test_the_head_refuses_slots_nothing_resolved():
    with pytest.raises(ls.LlamaServerError, match="llama_server_parallel is auto but nothing resolved it"):
        ls.server_argv("/bin/llama-server", "/m.gguf", {"ctx_size": 8192, "parallel": "auto"}, "", "1", False)
    assert ls.memory_options({"parallel": "auto", "ctx_size": "auto"})["parallel"] == "auto"


# ---------------------------------------------------------------- vLLM

def test_seed_vllm_interactive_takes_tp8_with_expert_parallel():
    summary, shape, hw, opts = seed_vllm()
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, intent="interactive", limit=None)
    # TP=8 without EP would be the lowest latency, but its FP8 expert shards break vLLM's block rule
    assert choice["layout"].label() == "TP=8+EP"
    assert choice["reason"].startswith("auto: TP=8+EP uses all 8 GPUs and passes vLLM's rules")
    assert choice["reason"].endswith(lv.INTENT_LAYOUT_REASONS["interactive"])
    assert "pairs TP with latency" in choice["reason"]
    rejected = dict((r["label"], r) for r in choice["rejected"])
    assert rejected["TP=8"]["rules"] == ["expert_shard_vs_block"]
    # the data-parallel layouts are valid but ranked lower, and say so
    lower = dict((a["label"], a) for a in choice["alternatives"])
    assert "TP=4+DP=2+EP" in lower
    assert lower["TP=4+DP=2+EP"]["findings"][0].startswith("valid, ranked lower for interactive serving")


def test_seed_vllm_throughput_keeps_tp8_with_expert_parallel_where_dp_would_not_pay():
    summary, shape, hw, opts = seed_vllm()
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, intent="throughput", limit=None)
    # MiniMax-M2.5 has 8 KV heads: TP=8 holds each once, so DP attention gains no KV room, replicates the
    # attention weights and leaves each engine one request at 196608 tokens. The proven seed layout stays.
    assert choice["layout"].label() == "TP=8+EP"
    assert choice["reason"].startswith("auto: TP=8+EP uses all 8 GPUs and passes vLLM's rules; 26.9 GiB of "
                                       "weights and 55.2 GiB of KV cache per GPU")
    assert "pairs DP attention and EP experts with throughput" in choice["reason"]
    assert choice["reason"].endswith(
        "TP=1+DP=8+EP ranked lower: TP over 8 GPUs holds each KV head once (8 KV heads), so DP attention would only "
        "replicate the attention weights (31.1 against 26.9 GiB per GPU) and each of its 8 engines would hold 1 "
        "request(s) at max_model_len 196608, below the margin of 2; TP=8+EP holds 9 requests at max_model_len")
    # DP without EP tensor-shards every expert over 8 GPUs: the FP8 block rule refuses it
    rejected = dict((r["label"], r) for r in choice["rejected"])
    assert rejected["TP=1+DP=8"]["rules"] == ["expert_shard_vs_block"]
    lower = [a["label"] for a in choice["alternatives"]]
    assert "TP=1+DP=8+EP" in lower and "TP=2+DP=4+EP" in lower


def test_data_parallel_engines_each_hold_the_whole_attention_and_pass_the_block_rules_at_tp1():
    summary, shape, hw, opts = seed_vllm()
    dp = vp.check_layout(summary, shape, hw, vp.Layout(1, 1, 8, True), opts)
    tp = vp.check_layout(summary, shape, hw, vp.Layout(8, 1, 1, True), opts)
    assert dp["valid"] and tp["valid"]
    by_dp, by_tp = dp["estimate"]["weights_by_role_mib"], tp["estimate"]["weights_by_role_mib"]
    # experts: 256 / (TP x DP) = 32 whole experts a GPU either way
    assert by_dp["expert"] == by_tp["expert"]
    # attention and the vocabulary: each DP engine (TP=1) holds all of them, 8x a TP=8 rank's share
    assert by_dp["column"] == pytest.approx(8 * by_tp["column"], rel=1e-3)
    assert by_dp["row"] == pytest.approx(8 * by_tp["row"], rel=1e-3)
    assert by_dp["kv"] == pytest.approx(8 * by_tp["kv"], rel=1e-3)
    assert by_dp["vocab"] > 7.9 * by_tp["vocab"]
    # TP=1 shards nothing, so no FP8 block rule can fail; each engine's KV cache is its own
    assert not [f for f in dp["findings"] if f["rule"] in ("linear_shard_vs_block", "expert_shard_vs_block")]
    assert dp["estimate"]["kv_tokens_total"] == 8 * dp["estimate"]["kv_tokens_per_gpu"]
    assert dp["estimate"]["concurrency_at_max_model_len"] == 8
    assert not lv.tp_replicates_kv(shape, opts, 8)
    assert lv.tp_replicates_kv(shape, opts, 16)


def test_throughput_takes_data_parallel_attention_where_tp_would_replicate_the_mla_cache():
    from test_hf_checkpoint import DEEPSEEK_V3

    from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
    shape = hf.model_shape(DEEPSEEK_V3)
    tensors = dict((n, (dt, dims, hf.tensor_nbytes(dt, dims))) for n, dt, dims in hf.checkpoint_tensors(shape))
    summary = vp.summarize(tensors, shape)
    hw = vp.hardware([{"name": "h", "gpus": [{"index": i, "memory_total_mib": 143771} for i in range(8)]}])
    opts = {"gpu_memory_utilization": 0.9, "max_model_len": 32768, "kv_cache_dtype": "auto", "reserve_mib": 4096}
    # the MLA latent is whole on every TP rank: TP=8 keeps 8 copies of each token's cache, DP one
    assert lv.tp_replicates_kv(shape, opts, 8)
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, intent="throughput")
    assert choice["layout"].label() == "TP=1+DP=8+EP"
    assert "ranked lower" not in choice["reason"].split("(MLA)")[-1]
    # one engine for latency
    assert lv.choose_vllm_layout(summary, shape, hw, opts, intent="interactive")["layout"].dp == 1
    # DP pays only with the margin: an engine that holds one request at max_model_len does not
    result = {"layout": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 8,
                         "enable_expert_parallel": True}, "estimate": {"concurrency_at_max_model_len": 8}}
    assert not lv.data_parallel_pays(result, shape, opts)
    assert lv.data_parallel_pays(dict(result, estimate={"concurrency_at_max_model_len": 16}), shape, opts)
    no_ep = dict(result, layout=dict(result["layout"], enable_expert_parallel=False))
    assert not lv.data_parallel_pays(dict(no_ep, estimate={"concurrency_at_max_model_len": 16}), shape, opts)


def test_without_an_intent_the_layout_is_ranked_by_kv_capacity_as_before():
    summary, shape, hw, opts = seed_vllm()
    assert lv.choose_vllm_layout(summary, shape, hw, opts)["layout"].label() == "TP=8+EP"


def test_interactive_keeps_tensor_parallel_within_a_node():
    nodes = [{"name": n, "gpus": [{"index": i, "memory_total_mib": 97887} for i in range(8)]} for n in ("a", "b")]
    summary, shape, hw, opts = seed_vllm(nodes=nodes)
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, intent="interactive")
    assert choice["layout"].tp <= 8 and choice["layout"].pp == 1
    assert choice["layout"].label() == "TP=8+DP=2+EP"


def test_vllm_interactive_batches():
    batch = lv.vllm_batch_choice("interactive", 4)
    assert (batch["max_num_seqs"], batch["max_num_batched_tokens"]) == (8, 8192)
    assert batch["cudagraph_capture_sizes"] == [1, 2, 4, 8] and batch["max_cudagraph_capture_size"] is None
    assert batch["set_by_intent"] == ["max_num_seqs", "max_num_batched_tokens", "cudagraph_capture_sizes"]
    assert batch["reasons"]["cudagraph_capture_sizes"].startswith("auto, interactive: graphs for 1 2 4 8, every decode "
                                                                  "batch up to max_num_seqs 8")
    assert lv.vllm_batch_arguments(batch) == ["--max-num-seqs", "8", "--max-num-batched-tokens", "8192",
                                              "--cudagraph-capture-sizes", "1", "2", "4", "8"]


def test_vllm_throughput_batches():
    batch = lv.vllm_batch_choice("throughput", 64)
    assert (batch["max_num_seqs"], batch["max_num_batched_tokens"]) == (1024, 8192)
    assert batch["cudagraph_capture_sizes"] is None and batch["max_cudagraph_capture_size"] == 512
    assert "get_batch_defaults" in batch["reasons"]["max_num_seqs"]
    assert lv.vllm_batch_arguments(batch) == ["--max-num-seqs", "1024", "--max-num-batched-tokens", "8192",
                                              "--max-cudagraph-capture-size", "512"]
    assert lv.vllm_batch_choice("throughput", 2048)["max_num_seqs"] == 2048


def test_vllm_values_set_win_over_the_intent():
    batch = lv.vllm_batch_choice("interactive", 4, max_num_seqs="16", max_num_batched_tokens=4096,
                                 cudagraph_capture_sizes=[8, 1, 4, 2, 16])
    assert (batch["max_num_seqs"], batch["max_num_batched_tokens"]) == (16, 4096)
    assert batch["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16] and batch["set_by_intent"] == []
    assert batch["reasons"]["max_num_seqs"] == "vllm_server_max_num_seqs 16 as set"
    eager = lv.vllm_batch_choice("interactive", 4, enforce_eager=True)
    assert eager["cudagraph_capture_sizes"] is None and "enforce_eager" in eager["reasons"]["cudagraph_capture_sizes"]
    assert lv.vllm_batch_arguments(eager) == ["--max-num-seqs", "8", "--max-num-batched-tokens", "8192"]
    with pytest.raises(la.AutoError, match="vllm_server_max_num_seqs is 0; set a whole number of 1 or more, or auto"):
        lv.vllm_batch_choice("throughput", 4, max_num_seqs=0)


def test_the_batch_flags_reach_the_command_line_and_are_vllm_0_24_names():
    summary, shape, hw, opts = seed_vllm()
    batch = lv.vllm_batch_choice("interactive", 4)
    launch = {"host": "127.0.0.1", "port": 8000, "batch_args": lv.vllm_batch_arguments(batch)}
    args = vp.serve_arguments("/srv/m", vp.Layout(8, 1, 1, True), opts, hw, launch)["args"]
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert args[args.index("--cudagraph-capture-sizes"):args.index("--cudagraph-capture-sizes") + 5] == [
        "--cudagraph-capture-sizes", "1", "2", "4", "8"]
    from test_layout_vllm import FIXTURES
    known = set(line.strip() for line in (FIXTURES / "vllm-0.24.0-serve-options.txt").read_text().splitlines()
                if line.startswith("--"))
    throughput = lv.vllm_batch_arguments(lv.vllm_batch_choice("throughput", 4))
    for flag in [a for a in lv.vllm_batch_arguments(batch) + throughput if a.startswith("--")]:
        assert flag in known, flag


# ---------------------------------------------------------------- every knob stays the operator's
#
# Each value the intent sets, under both intents: the role variable an operator sets reaches the
# planner (the role's task hands it over) and wins there. A knob the intent overrides, or a role
# that stops handing the variable on, fails its case.

ROLES = Path(__file__).resolve().parents[4] / "roles"


def role_task(path, module):
    """The task in roles/<path> that calls gpulab.inference.<module>: (its arguments, its vars)."""
    tasks = yaml.safe_load((ROLES / path).read_text())
    (task,) = [t for t in tasks if "gpulab.inference." + module in t]
    return task["gpulab.inference." + module], task.get("vars") or {}


def common_option(name):
    """What role common's gpulab_llama_server_memory_options (handed to gguf_plan and llama_server_plan as
    `server`) says for one option."""
    common = yaml.safe_load((ROLES / "common" / "defaults" / "main" / "llama-server.yml").read_text())
    return common["gpulab_llama_server_memory_options"][name]


def memory_plan_server(name):
    arguments, _vars = role_task("memory_plan/tasks/plan.yml", "gguf_plan")
    assert arguments["server"] == "{{ gpulab_llama_server_memory_options }}"
    return common_option(name)


def head_server(name):
    arguments, task_vars = role_task("llama_server/tasks/validate.yml", "llama_server_plan")
    assert arguments["server"] == "{{ gpulab_llama_server_memory_options | combine(__llama_server_options) }}"
    return task_vars["__llama_server_options"][name]


def vllm_plan_argument(name):
    arguments, _vars = role_task("vllm_server/tasks/validate.yml", "vllm_plan")
    return arguments[name]


def llama_serving(minimax, intent, **set_values):
    return ll.choose_llama_serving(minimax, seed_devices(), intent, 4, **dict(LLAMA, **set_values))


def vllm_batch(intent, **set_values):
    batch = lv.vllm_batch_choice(intent, 4, **set_values)
    return batch, lv.vllm_batch_arguments(batch)


def _after(argv, flag):
    return argv[argv.index(flag) + 1]


def vllm_layout(intent, **set_values):
    """The layout chosen with some values set and the rest auto."""
    summary, shape, hw, opts = seed_vllm()
    given = dict((k, "auto") for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                                       "enable_expert_parallel"))
    given.update(set_values)
    return lv.choose_vllm_layout(summary, shape, hw, opts, given, intent=intent)["layout"]


KNOBS = [
    # (role variable, the template the role hands the planner, the check that the set value won)
    ("llama_server_parallel", lambda: memory_plan_server("parallel"),
     lambda m, intent: llama_serving(m, intent, parallel=3)["parallel"] == 3
     and la.resolve_parallel_from_memory_plan(3, None) == 3),
    # the head's own command line: the same options dict, a set slot count printed as set
    ("llama_server_parallel", lambda: common_option("parallel"),
     lambda m, intent: _after(ls.server_argv("/bin/llama-server", "/m.gguf", {"ctx_size": 8192, "parallel": 3}, "", "1",
                                             False), "--parallel") == "3"),
    ("llama_server_ctx_size", lambda: memory_plan_server("ctx_size"),
     lambda m, intent: llama_serving(m, intent, ctx_size=8192)["ctx_size"] == 8192),
    ("llama_server_backend_sampling", lambda: head_server("backend_sampling"),
     lambda m, intent: all(ls.backend_sampling_choice(v, _seed_head_devices(), [20, 21, 22], 62, intent=intent)
                           ["enabled"] is v for v in (True, False))),
    ("vllm_server_max_num_seqs", lambda: vllm_plan_argument("max_num_seqs"),
     lambda m, intent: vllm_batch(intent, max_num_seqs=48)[1][:2] == ["--max-num-seqs", "48"]
     and "max_num_seqs" not in vllm_batch(intent, max_num_seqs=48)[0]["set_by_intent"]),
    ("vllm_server_max_num_batched_tokens", lambda: vllm_plan_argument("max_num_batched_tokens"),
     lambda m, intent: vllm_batch(intent, max_num_batched_tokens=2048)[1][2:4] == ["--max-num-batched-tokens", "2048"]),
    ("vllm_server_cudagraph_capture_sizes", lambda: vllm_plan_argument("cudagraph_capture_sizes"),
     lambda m, intent: vllm_batch(intent, cudagraph_capture_sizes=[3, 1])[1][4:] == ["--cudagraph-capture-sizes", "1", "3"]),
    ("vllm_server_tensor_parallel_size", lambda: vllm_plan_argument("tensor_parallel_size"),
     lambda m, intent: vllm_layout(intent, tensor_parallel_size=4).tp == 4),
    ("vllm_server_data_parallel_size", lambda: vllm_plan_argument("data_parallel_size"),
     lambda m, intent: vllm_layout(intent, data_parallel_size=2).dp == 2),
    ("vllm_server_pipeline_parallel_size", lambda: vllm_plan_argument("pipeline_parallel_size"),
     lambda m, intent: vllm_layout(intent, pipeline_parallel_size=2).pp == 2),
    # expert parallel off: interactive would not use it anyway; throughput would, and must not
    ("vllm_server_enable_expert_parallel", lambda: vllm_plan_argument("enable_expert_parallel"),
     lambda m, intent: vllm_layout(intent, tensor_parallel_size=4, pipeline_parallel_size=2,
                                   enable_expert_parallel=False).label() == "TP=4+PP=2"),
]


@pytest.mark.parametrize("intent", la.INTENTS)
@pytest.mark.parametrize("variable, handed, wins", KNOBS, ids=["%s-%d" % (k[0], n) for n, k in enumerate(KNOBS)])
def test_a_set_role_variable_wins_over_the_intent(minimax, intent, variable, handed, wins):
    # the role hands the operator's own variable to the planner, not a value of its own
    assert handed().replace(" ", "") == "{{%s}}" % variable
    assert wins(minimax, intent), "%s set, %s: the intent's value won" % (variable, intent)


def test_without_a_set_value_the_intent_decides_each_knob(minimax):
    # the same checks fail where nothing is set: the knobs above are the intent's by default
    assert llama_serving(minimax, "interactive")["parallel"] == 1 != llama_serving(minimax, "throughput")["parallel"]
    assert vllm_batch("interactive")[1][:2] == ["--max-num-seqs", "8"]
    assert vllm_batch("throughput")[1][:2] == ["--max-num-seqs", "1024"]
    assert vllm_layout("throughput", tensor_parallel_size=4, pipeline_parallel_size=2).label() == "TP=4+PP=2+EP"
    for name in ("llama_server_parallel", "llama_server_ctx_size", "llama_server_backend_sampling"):
        defaults = yaml.safe_load((ROLES / ("common/defaults/main/llama-server.yml" if name != "llama_server_backend_sampling"
                                            else "llama_server/defaults/main.yml")).read_text())
        assert defaults[name] == "auto", name
    vllm_defaults = yaml.safe_load((ROLES / "vllm_server" / "defaults" / "main.yml").read_text())
    for name in ("max_num_seqs", "max_num_batched_tokens", "cudagraph_capture_sizes", "tensor_parallel_size",
                 "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel"):
        assert vllm_defaults["vllm_server_" + name] == "auto", name


def test_data_parallel_over_two_nodes_is_judged_against_tp_within_a_node():
    # two nodes of 8: TP=8+DP=2+EP is what TP within a node gives, and TP=8 shards MiniMax's 8 KV heads,
    # so DP does not "pay" here; TP over 16 (across nodes) would replicate, but is not the alternative
    nodes = [{"name": n, "gpus": [{"index": i, "memory_total_mib": 97887} for i in range(8)]} for n in ("a", "b")]
    summary, shape, hw, opts = seed_vllm(nodes=nodes)
    result = vp.check_layout(summary, shape, hw, vp.Layout(8, 1, 2, True), opts)
    assert lv.tp_replicates_kv(shape, opts, 16) and not lv.tp_replicates_kv(shape, opts, 8)
    assert not lv.data_parallel_pays(result, shape, opts, hw)
    # without the node size the check falls back to all the layout's GPUs
    assert lv.data_parallel_pays(result, shape, opts) is (result["estimate"]["concurrency_at_max_model_len"] // 2 >= 2)
    choice = lv.choose_vllm_layout(summary, shape, hw, opts, intent="throughput")
    assert choice["layout"].pp == 1 and choice["layout"].tp <= 8
