# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide whether a vLLM layout (TP x PP x DP, expert parallel) can run a Hugging Face model on
the given GPUs, before anything starts, and rank the layouts that can.

Everything here is a pure function over plain values: the plan module reads config.json and the
safetensors headers (hf_checkpoint reads the shape and the tensors) and hands them in; the service
files it leads to are vllm_service's. The rules are in one table, RULES, each with the vLLM
source file (vLLM 0.24.0) that enforces it or trips over it.

Memory arithmetic, per GPU:
  weights   = sum over the checkpoint's tensors of bytes x the share this GPU holds under the
              layout (sharded by TP, experts by EP or by TP x DP, layers by PP stage)
  budget    = memory x gpu_memory_utilization (vLLM's limit for its whole process)
  kv_cache  = budget - weights - reserve (activations, CUDA graphs, NCCL buffers: an estimate)
  kv_tokens = kv_cache / (layers on the stage x 2 (K and V) x KV heads on this GPU x head_dim
              x KV dtype bytes)
  concurrency at max_model_len = floor(kv_tokens / max_model_len) x DP (one engine per DP rank)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.gpulab.inference.plugins.module_utils import model_family
from ansible_collections.gpulab.inference.plugins.module_utils.endpoint_rule import EndpointError, listen_address, port_number
from ansible_collections.gpulab.inference.plugins.module_utils.hf_checkpoint import (
    DTYPE_BYTES,
    CheckpointError,
    checkpoint_tensors,
    model_shape,
    tensor_nbytes,
)

MIB = 1 << 20
GIB = 1 << 30

# Parser names registered in vLLM 0.24.0: vllm/reasoning/__init__.py
# (_REASONING_PARSERS_TO_REGISTER) and vllm/tool_parsers/__init__.py (_TOOL_PARSERS_TO_REGISTER).
VLLM_REASONING_PARSERS = frozenset((
    "deepseek_r1", "deepseek_v3", "deepseek_v4", "poolside_v1", "cohere_command3", "cohere_command4",
    "ernie45", "gemma4", "glm45", "glm47", "openai_gptoss", "granite", "holo2", "hunyuan_a13b", "hy_v3",
    "kimi_k2", "mimo", "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral", "nemotron_v3",
    "olmo3", "qwen3", "seed_oss", "step3", "step3p5",
))
VLLM_TOOL_PARSERS = frozenset((
    "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "cohere_command3", "cohere_command4",
    "ernie45", "glm45", "glm47", "granite-20b-fc", "granite", "granite4", "hermes", "poolside_v1",
    "hunyuan_a13b", "hy_v3", "internlm", "jamba", "lfm2", "kimi_k2", "llama3_json", "llama4_json",
    "llama4_pythonic", "longcat", "mimo", "minimax_m2", "minimax_m3", "minicpm5", "mistral", "olmo3",
    "openai", "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "step3p5",
    "xlam", "gigachat3", "functiongemma", "gemma4", "apertus",
))

# Per-model defaults: config.json `model_type` -> (reasoning parser, tool-call parser); None: none.
# MiniMax-M2's model card serves it with `--tool-call-parser minimax_m2 --reasoning-parser
# minimax_m2_append_think` (the answer keeps its <think> block in content for multi-turn use).
MODEL_PARSERS = {
    "minimax_m2": ("minimax_m2_append_think", "minimax_m2"),
    "qwen3": ("qwen3", "hermes"),
    "qwen3_moe": ("qwen3", "hermes"),
    "qwen2": (None, "hermes"),
    "llama": (None, "llama3_json"),
}

# --kv-cache-dtype values (vllm/config/cache.py CacheDType) -> bytes; auto = the model's dtype.
KV_CACHE_DTYPE_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

# vLLM pads the vocabulary of VocabParallelEmbedding / ParallelLMHead to a multiple of 64
# (vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE).
VOCAB_PADDING = 64

DEFAULT_RESERVE_MIB = 4096
INDEX_BYTES = 2  # MiniMax-M3's index keys: vllm/config/attention.py AttentionConfig.indexer_kv_dtype "bf16" (fp8: --attention-config)


class VllmPlanError(ValueError):
    """Bad input: the message names the offending value and what to do."""


# --- the layout -------------------------------------------------------------------------------

class Layout:
    """A requested layout; `ep` is --enable-expert-parallel."""

    def __init__(self, tp=1, pp=1, dp=1, ep=False):
        self.tp, self.pp, self.dp, self.ep = int(tp), int(pp), int(dp), bool(ep)

    @property
    def world(self):
        return self.tp * self.pp * self.dp

    @property
    def moe_shards(self):
        """vLLM flattens DP into the MoE group (vllm/model_executor/layers/fused_moe/config.py
        FusedMoEParallelConfig.make): without EP the experts are tensor-sharded over TP x DP GPUs,
        with EP each of those TP x DP GPUs holds whole experts (EP size = TP x DP)."""
        return self.tp * self.dp

    def as_dict(self):
        return {"tensor_parallel_size": self.tp, "pipeline_parallel_size": self.pp,
                "data_parallel_size": self.dp, "enable_expert_parallel": self.ep}

    def label(self):
        parts = ["TP=%d" % self.tp]
        if self.pp > 1:
            parts.append("PP=%d" % self.pp)
        if self.dp > 1:
            parts.append("DP=%d" % self.dp)
        if self.ep:
            parts.append("EP")
        return "+".join(parts)


def pp_partitions(layers, pp):
    """Layers per pipeline stage, as vllm/distributed/utils.py get_pp_indices splits them: the
    remainder goes to the stages before the last, from the second-to-last backwards."""
    partitions = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        partitions[-i] += 1
    return partitions


LAYER_RE = re.compile(r"^model\.layers\.([0-9]+)\.")


def tensor_role(name):
    """How vLLM places a checkpoint tensor: expert, q (column, sharded by TP), kv (sharded, or
    replicated once TP exceeds the KV heads), row (sharded by TP), vocab (sharded by TP),
    replicated (norms, router, biases of the router)."""
    if ".experts." in name:
        return "expert"
    # MiniMax-M3's index_q_proj shards as K/V, index_k_proj is replicated (linear.py MinimaxM3QKVParallelLinearWithIndexer)
    if re.search(r"\.(k_proj|v_proj|index_q_proj)\.", name):
        return "kv"
    # MLA (vllm/model_executor/models/deepseek_v2.py DeepseekV2MLAAttention): q_a_proj and
    # kv_a_proj_with_mqa are ReplicatedLinear (fused_qkv_a_proj with disable_tp), q_b_proj and
    # kv_b_proj ColumnParallelLinear; Qwen3-Next's delta net (qwen3_next.py): in_proj_qkvz,
    # in_proj_ba and conv1d column-parallel, out_proj row-parallel
    if re.search(r"\.(q_a_proj|kv_a_proj_with_mqa)\.", name):
        return "replicated"
    if re.search(r"\.(q_b_proj|kv_b_proj|in_proj_qkvz|in_proj_ba|conv1d)\.", name):
        return "column"
    if re.search(r"\.out_proj\.", name):
        return "row"
    if re.search(r"\.(q_proj|gate_proj|up_proj|w1|w3)\.", name) or ".shared_expert." in name:
        return "column"
    if re.search(r"\.(o_proj|down_proj|w2)\.", name):
        return "row"
    if name.startswith(("model.embed_tokens.", "lm_head.")):
        return "vocab"
    return "replicated"


def summarize(tensors, shape):
    """Sum the checkpoint's bytes by (role, place): place is a layer index, "embed" (first stage),
    "head" (lm_head and the final norm: last stage) or "all" (every stage). Tensors of layers past
    num_hidden_layers (MTP modules) are left out, as vLLM skips them when it serves without
    speculative decoding. tensors: {name: (dtype, dims, nbytes)}."""
    summary = {}
    for name, (_dtype, dims, nbytes) in tensors.items():
        match = LAYER_RE.match(name)
        if match:
            place = int(match.group(1))
            if place >= shape["layers"]:
                continue
        elif name.startswith("model.embed_tokens."):
            place = "embed"
        elif name.startswith(("lm_head.", "model.norm.")):
            place = "head"
        else:
            place = "all"
        key = (tensor_role(name), place)
        summary[key] = summary.get(key, 0) + nbytes + mxfp4_kernel_copy(name, dims, nbytes, shape)
    return summary


# On Hopper vLLM 0.24.0 picks the TRITON MXFP4 MoE backend; fused_moe/oracle/mxfp4.py
# convert_gpt_oss_weight_to_mxfp4_moe_kernel_format swizzles each expert scale into a new tensor
# (rows padded to 2 x 8 warps x 2 x 8 = 256, columns to 2: triton_kernels hopper_scale.py
# HopperMXScaleLayout.swizzle_data) while Mxfp4MoEMethod._setup_kernel keeps the loaded scales,
# and makes float32 copies of the bf16 expert biases. The value layout needs 16 x 32 bytes.
MXFP4_SCALE_ROWS = 256


def mxfp4_kernel_copy(name, dims, nbytes, shape):
    """Bytes vLLM holds beside an MXFP4 expert tensor once the Hopper kernel is set up."""
    if (shape.get("quant") or {}).get("method") != "mxfp4" or ".experts." not in name:
        return 0
    if name.endswith("_scales") and len(dims) >= 2:
        rows = -(-dims[-2] // MXFP4_SCALE_ROWS) * MXFP4_SCALE_ROWS
        cols = -(-dims[-1] // 2) * 2
        return int(nbytes // (dims[-2] * dims[-1]) * rows * cols)
    return nbytes if name.endswith("_bias") else 0


def weights_per_gpu(summary, shape, layout):
    """Bytes of weights on the fullest GPU, and the split by role.

    summary: summarize()'s answer. Returns (bytes, {role: bytes}, [bytes per PP stage]).
    """
    tp, experts = layout.tp, shape["experts"]
    if layout.ep and experts:
        expert_share = float(-(-experts // layout.moe_shards)) / experts
    else:
        expert_share = 1.0 / layout.moe_shards
    kv_share = float(max(1, shape["kv_heads"] // tp)) / shape["kv_heads"]
    padded_vocab = -(-shape["vocab_size"] // VOCAB_PADDING) * VOCAB_PADDING
    vocab_share = float(-(-padded_vocab // tp)) / shape["vocab_size"]
    shares = {"expert": expert_share, "kv": kv_share, "column": 1.0 / tp, "row": 1.0 / tp,
              "vocab": vocab_share, "replicated": 1.0}
    partitions = pp_partitions(shape["layers"], layout.pp)
    stage_of = []
    for stage, count in enumerate(partitions):
        stage_of.extend([stage] * count)
    last = layout.pp - 1
    stages = [dict((role, 0.0) for role in shares) for _stage in partitions]
    for (role, place), nbytes in summary.items():
        if place == "embed":
            targets = [0]
            # a tied lm_head on the last stage is a copy of the embedding
            if shape["tie_word_embeddings"] and layout.pp > 1:
                targets.append(last)
        elif place == "head":
            targets = [last]
        elif place == "all":
            targets = range(layout.pp)
        else:
            targets = [stage_of[place]]
        for stage in targets:
            stages[stage][role] += nbytes * shares[role]
    totals = [int(sum(s.values())) for s in stages]
    fullest = max(range(len(totals)), key=lambda i: totals[i])
    return totals[fullest], dict((k, int(v)) for k, v in stages[fullest].items()), totals


def kv_bytes_per_token(shape, layout, kv_cache_dtype, layers, start=0):
    """KV cache bytes one token takes, as vLLM counts the tokens it reports, on one GPU of a stage
    holding `layers` layers from `start`: K and V, the KV heads this GPU holds
    (vllm/config/model.py get_num_kv_heads: max(1, kv_heads // TP)).

    Per family (model_family.hf_structure): MLA keeps one latent of kv_lora_rank +
    qk_rope_head_dim values and no V, whole on every TP rank (get_num_kv_heads is 1;
    vllm/v1/kv_cache_interface.py MLAAttentionSpec). Sliding-window and hybrid models share pages
    between layer types: the tokens vLLM reports are those of model_family.vllm_group_layers
    attention layers; MiniMax-M3's index keys (`index_values`) join them in one group (kv_cache_utils.py
    get_kv_cache_groups: UniformTypeKVCacheSpecs). 0 when the family is not modelled."""
    dtype_bytes = KV_CACHE_DTYPE_BYTES[kv_cache_dtype] or shape["dtype_bytes"]
    structure = shape.get("structure")
    if structure is None:
        return layers * 2 * max(1, shape["kv_heads"] // layout.tp) * shape["head_dim"] * dtype_bytes
    if not structure["modelled"]:
        return 0
    stage = dict(structure, layer_kinds=structure["layer_kinds"][start:start + layers])
    span = model_family.vllm_group_layers(stage)
    if structure["attention"] == model_family.MLA:
        return span * structure["k_values"][0] * dtype_bytes
    index = sum(structure.get("index_values", [])[start:start + layers]) * INDEX_BYTES
    return span * 2 * max(1, shape["kv_heads"] // layout.tp) * shape["head_dim"] * dtype_bytes + index


# FLASH_ATTN's kernel block (MultipleOf(16)) and CacheConfig.block_size's default; `vllm serve`'s
# max_num_batched_tokens on a GPU of 70 GiB or more (vllm/engine/arg_utils.py, OPENAI_API_SERVER).
VLLM_BLOCK = 16
SERVE_BATCHED_TOKENS = 8192


def kv_capacity(shape, layout, kv_cache_dtype, layers, start, cache_bytes, max_model_len):
    """(tokens, sequences of max_model_len, recurrent state bytes per sequence) of a KV cache of
    cache_bytes, as vLLM 0.24.0 reports them. One layer type: cache / bytes per token. Several
    (sliding window, hybrid): kv_cache_utils.py get_kv_cache_capacity reports "GPU KV cache size"
    as max_model_len x concurrency, concurrency = num_blocks / the pages one request needs
    (get_max_concurrency_for_kv_cache_config: per group cdiv(max_model_len, block) for full
    attention, SlidingWindowSpec.max_admission_blocks_per_request cdiv(min(window - 1 +
    max_num_batched_tokens, max_model_len), block) + 1, one for a recurrent state: MambaSpec
    without prefix caching), num_blocks = cache / (page x group size): the groups of one slot
    share a tensor. A recurrent layer's page (gated_delta_net_state_shape, model dtype) sets the
    attention block (platforms/interface.py: block = 16 x cdiv(state, 16 x attention bytes per
    token)), and is padded up to the attention page."""
    per_token = kv_bytes_per_token(shape, layout, kv_cache_dtype, layers, start)
    structure = shape.get("structure")
    counts = model_family.layer_summary(dict(structure, layer_kinds=structure["layer_kinds"][start:start + layers])) \
        if structure and structure["modelled"] else {}
    if len(counts) < 2:
        tokens = max(0, cache_bytes) // per_token if per_token else 0
        return tokens, tokens // max_model_len, 0
    attn = 2 * max(1, shape["kv_heads"] // layout.tp) * shape["head_dim"] * (
        KV_CACHE_DTYPE_BYTES[kv_cache_dtype] or shape["dtype_bytes"])
    state = (structure["state_r_values"] + structure["state_s_values"]) // layout.tp * shape["dtype_bytes"]
    block = VLLM_BLOCK * -(-state // (VLLM_BLOCK * attn)) if state else VLLM_BLOCK
    smallest, largest = min(counts.values()), max(counts.values())
    group = largest if largest < smallest * 1.5 else smallest
    window = min(structure["window"] - 1 + SERVE_BATCHED_TOKENS, max_model_len)
    need = {model_family.FULL: -(-max_model_len // block), model_family.SLIDING: -(-window // block) + 1,
            model_family.RECURRENT: 1}
    pages = sum(-(-count // group) * need[kind] for kind, count in counts.items())
    concurrency = float(max(0, cache_bytes) // (block * attn * group)) / pages
    return int(concurrency * max_model_len), int(concurrency), block * attn * counts.get(model_family.RECURRENT, 0)


def budget_bytes(gpu_memory_mib, utilization, kept_mib=0):
    """What vLLM may hold on one GPU: memory x gpu_memory_utilization, and never more than the
    memory the kept services leave (vllm/v1/worker/gpu_worker.py init_device refuses to start
    when free memory is below memory x utilization)."""
    return int(min(gpu_memory_mib * utilization, gpu_memory_mib - (kept_mib or 0)) * MIB)


def startup_utilization(gpu_memory_mib, utilization, kept_mib=0):
    """The --gpu-memory-utilization that passes init_device's free-memory check next to the kept
    services: the operator's fraction, lowered (to whole thousandths) where they hold more."""
    if not kept_mib:
        return utilization
    room = int((gpu_memory_mib - kept_mib) * 1000 // gpu_memory_mib) / 1000.0
    return min(utilization, room)


def memory_estimate(summary, shape, layout, gpu_memory_mib, opts, kept_mib=0):
    """The per-GPU estimate: weights, budget, KV cache, KV tokens and concurrency.

    kv_cache_memory_bytes: the KV cache to pin with --kv-cache-memory-bytes, the smallest any
    stage leaves, in whole MiB (vLLM sizes every worker's cache from the one value)."""
    weights, by_role, stage_weights = weights_per_gpu(summary, shape, layout)
    budget = budget_bytes(gpu_memory_mib, opts["gpu_memory_utilization"], kept_mib)
    reserve = int(opts["reserve_mib"] * MIB)
    partitions = pp_partitions(shape["layers"], layout.pp)
    # every stage needs room for its own layers' KV; the tightest stage bounds the tokens
    kv_tokens = None
    kv_cache = None
    pinned = None
    for stage, stage_bytes in enumerate(stage_weights):
        stage_kv = budget - stage_bytes - reserve
        tokens, sequences, state = kv_capacity(shape, layout, opts["kv_cache_dtype"], partitions[stage],
                                               sum(partitions[:stage]), stage_kv, opts["max_model_len"])
        if kv_tokens is None or tokens < kv_tokens:
            kv_tokens, kv_cache, per_engine, state_bytes = tokens, stage_kv, sequences, state
        if pinned is None or stage_kv < pinned:
            pinned = stage_kv
    return {
        "weights_bytes": weights,
        "weights_gib": round(weights / float(GIB), 2),
        "weights_mib": round(weights / float(MIB), 1),
        "weights_by_role_mib": dict((k, round(v / float(MIB), 1)) for k, v in by_role.items() if v),
        "budget_gib": round(budget / float(GIB), 2),
        "reserve_gib": round(reserve / float(GIB), 2),
        "kv_cache_gib": round(kv_cache / float(GIB), 2),
        "kv_cache_memory_bytes": max(0, pinned) // MIB * MIB,
        "kv_bytes_per_token": kv_bytes_per_token(shape, layout, opts["kv_cache_dtype"], max(partitions)),
        "kv_tokens_per_gpu": int(kv_tokens),
        "recurrent_state_bytes_per_sequence": state_bytes,
        "kv_tokens_total": int(kv_tokens) * layout.dp,
        "concurrency_at_max_model_len": int(per_engine) * layout.dp,
        "gpu_memory_gib": round(gpu_memory_mib * MIB / float(GIB), 2),
    }


# --- the rules --------------------------------------------------------------------------------
# Each rule takes the context and returns a list of (level, message); level is "error" (vLLM
# refuses the layout or fails while loading) or "warning" (it runs, but not as well as it could).

def _finding(rule, level, message):
    return {"rule": rule["name"], "level": level, "message": message, "source": rule["source"]}


def rule_gpus(ctx):
    layout, hw = ctx["layout"], ctx["hardware"]
    total = hw["gpus_total"]
    uses = "TP %d x PP %d x DP %d = %d GPUs" % (layout.tp, layout.pp, layout.dp, layout.world)
    if layout.world > total:
        return [("error", "%s, but %s has only %d GPUs; shrink the layout" % (uses, hw["label"], total))]
    if layout.world < total:
        return [("warning", "%s of %d: %d GPUs stay idle; a larger TP or DP would use them"
                 % (uses, total, total - layout.world))]
    return []


def rule_nodes(ctx):
    layout, hw = ctx["layout"], ctx["hardware"]
    if hw["nodes"] > 1 and layout.world % hw["nodes"]:
        return [("error", "%s uses %d GPUs, which do not divide evenly over %d nodes (vLLM starts "
                 "world_size / nnodes workers per node)" % (layout.label(), layout.world, hw["nodes"]))]
    return []


def rule_attention_heads(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if shape["heads"] % layout.tp:
        return [("error", "the %d attention heads do not divide by TP %d; vLLM refuses it: use a TP that "
                 "divides %d" % (shape["heads"], layout.tp, shape["heads"]))]
    return []


def rule_kv_heads(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if (shape.get("structure") or {}).get("attention") == model_family.MLA:
        # the latent cache has one "head", whole on every rank (get_num_kv_heads: 1 with MLA)
        if layout.tp > 1:
            return [("warning", "MLA keeps the whole latent KV cache on each of the TP %d GPUs: KV cache per "
                     "token does not shrink with TP" % layout.tp)]
        return []
    kv, tp = shape["kv_heads"], layout.tp
    if kv >= tp and kv % tp:
        return [("error", "the %d KV heads do not divide by TP %d" % (kv, tp))]
    if kv < tp and tp % kv:
        return [("error", "TP %d exceeds the %d KV heads and is not a multiple of them, so they cannot "
                 "be replicated evenly" % (tp, kv))]
    if kv < tp:
        return [("warning", "TP %d exceeds the %d KV heads: each is replicated on %d GPUs, so KV cache "
                 "per token does not shrink beyond TP %d" % (tp, kv, tp // kv, kv))]
    return []


def rule_expert_parallel_needs_experts(ctx):
    if ctx["layout"].ep and not ctx["shape"]["experts"]:
        return [("error", "enable_expert_parallel is set but the model has no experts; turn it off")]
    return []


def rule_experts_vs_tp(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if shape["architecture"] in ("MiniMaxM2ForCausalLM",) + model_family.HF_SPARSE and layout.tp > shape["experts"]:
        return [("error", "TP %d is greater than the %d experts" % (layout.tp, shape["experts"]))]
    return []


def rule_experts_vs_ep(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if not (layout.ep and shape["experts"]):
        return []
    ep = layout.moe_shards
    if shape["experts"] < ep:
        return [("error", "EP size %d (TP x DP) exceeds the %d experts: some GPUs would hold no expert"
                 % (ep, shape["experts"]))]
    if shape["experts"] % ep:
        return [("warning", "the %d experts do not divide by EP size %d (TP x DP): vLLM places them "
                 "unevenly, the fullest GPU holds %d" % (shape["experts"], ep, -(-shape["experts"] // ep)))]
    return []


def rule_expert_shard_vs_block(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if not shape["experts"]:
        return []
    ffn = shape["expert_ffn_size"]
    shards = 1 if layout.ep else layout.moe_shards
    how = ("with expert parallelism experts are placed whole" if layout.ep
           else "without expert parallelism each expert is tensor-sharded over TP x DP = %d GPUs" % shards)
    if ffn % shards:
        return [("error", "the expert FFN size %d does not divide by %d (%s)" % (ffn, shards, how))]
    block = (shape["quant"] or {}).get("block")
    if not block:
        return []
    part = ffn // shards
    for size, edge in ((block[0], "n"), (block[1], "k")):
        if part % size and (edge == "n" or layout.tp > 1):
            return [("error", "expert FFN %d / %d = %d is not a multiple of the FP8 block size %d (%s); "
                     "vLLM fails while creating the weights. Enable expert parallelism or use a TP x DP "
                     "that keeps the shard a multiple of %d" % (ffn, shards, part, size, how, size))]
    return []


def rule_linear_shard_vs_block(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    block = (shape["quant"] or {}).get("block")
    tp = layout.tp
    if not block or tp == 1:
        return []
    shards = [("attention Q output", shape["heads"] * shape["head_dim"] // tp, block[0]),
              ("attention output input", shape["heads"] * shape["head_dim"] // tp, block[1])]
    mla = shape.get("mla")
    if mla:
        # deepseek_v2.py: q_b_proj and kv_b_proj are column-parallel over the heads, o_proj
        # row-parallel over the heads' V; the latent projections are replicated
        heads = shape["heads"] // tp
        shards = [("q_b_proj output", heads * (mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]), block[0]),
                  ("kv_b_proj output", heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"]), block[0]),
                  ("o_proj input", heads * mla["v_head_dim"], block[1])]
    elif shape["kv_heads"] >= tp:
        shards.append(("attention K/V output", shape["kv_heads"] // tp * shape["head_dim"], block[0]))
    if shape.get("dense_ffn_size"):
        shards.append(("dense MLP gate/up output", shape["dense_ffn_size"] // tp, block[0]))
        shards.append(("dense MLP down input", shape["dense_ffn_size"] // tp, block[1]))
    if shape.get("shared_expert_ffn_size"):
        shards.append(("shared expert gate/up output", shape["shared_expert_ffn_size"] // tp, block[0]))
    if shape["ffn_size"]:
        shards.append(("MLP gate/up output", shape["ffn_size"] // tp, block[0]))
        shards.append(("MLP down input", shape["ffn_size"] // tp, block[1]))
    bad = ["%s %d" % (what, size) for what, size, b in shards if size % b]
    if bad:
        return [("error", "with TP %d these FP8 weight shards are not multiples of the block %s: %s"
                 % (tp, block, ", ".join(bad)))]
    return []


def rule_mxfp4_expert_shard(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if (shape["quant"] or {}).get("method") != "mxfp4" or not shape["experts"] or layout.ep:
        return []
    part = shape["expert_ffn_size"] // layout.moe_shards
    if shape["expert_ffn_size"] % layout.moe_shards or part % 32:
        return [("error", "without expert parallelism each MXFP4 expert is split over TP x DP = %d GPUs: expert FFN "
                 "%d / %d is not a whole number of 32-value MX blocks (one E8M0 scale each); enable expert "
                 "parallelism or use fewer shards" % (layout.moe_shards, shape["expert_ffn_size"], layout.moe_shards))]
    return []


def rule_pipeline_layers(ctx):
    shape, layout = ctx["shape"], ctx["layout"]
    if layout.pp > shape["layers"]:
        return [("error", "PP %d exceeds the %d layers" % (layout.pp, shape["layers"]))]
    return []


def rule_max_model_len(ctx):
    shape, opts = ctx["shape"], ctx["opts"]
    limit = shape.get("max_position_embeddings")
    if isinstance(limit, int) and opts["max_model_len"] > limit:
        return [("error", "max_model_len %d exceeds the model's max_position_embeddings %d"
                 % (opts["max_model_len"], limit))]
    return []


def rule_memory(ctx):
    est, opts, layout = ctx["estimate"], ctx["opts"], ctx["layout"]
    if est is None:
        return []
    weights = est["weights_gib"]
    structure = ctx["shape"].get("structure") or {"modelled": True}
    if not structure["modelled"] and est["kv_cache_gib"] > 0:
        return [("warning", "%s; %.1f GiB is left for the KV cache, whose size per token is not known here"
                 % (model_family.not_modelled_message(structure), est["kv_cache_gib"]))]
    if est["kv_cache_gib"] <= 0:
        return [("error", "%s puts %.1f GiB (%.1f GB) of weights on a GPU; with %.1f GiB reserved for activations "
                 "that exceeds the %.1f GiB vLLM may use (%.1f GiB x gpu_memory_utilization %s): spread the weights "
                 "over more GPUs" % (layout.label(), weights, est["weights_bytes"] / 1e9, est["reserve_gib"],
                                     est["budget_gib"], est["gpu_memory_gib"], opts["gpu_memory_utilization"]))]
    if est["kv_tokens_per_gpu"] < opts["max_model_len"]:
        return [("error", "%s leaves %.1f GiB for the KV cache, %d tokens, fewer than max_model_len %d: "
                 "lower max_model_len or spread the weights over more GPUs"
                 % (layout.label(), est["kv_cache_gib"], est["kv_tokens_per_gpu"], opts["max_model_len"]))]
    return []


RULES = (
    {"name": "gpus", "check": rule_gpus, "source": "vllm/config/parallel.py (world_size_across_dp = TP x PP x DP)",
     "what": "TP x PP x DP fits the GPUs; idle GPUs are a warning"},
    {"name": "nodes", "check": rule_nodes, "source": "vllm/config/parallel.py (nnodes, world_size per node)",
     "what": "the layout divides evenly over the nodes"},
    {"name": "attention_heads", "check": rule_attention_heads,
     "source": "vllm/config/model.py ModelConfig.verify_with_parallel_config",
     "what": "attention heads divide by TP"},
    {"name": "kv_heads", "check": rule_kv_heads,
     "source": "vllm/model_executor/models/minimax_m2.py and llama.py (Attention __init__); vllm/models/minimax_m3/"
               "nvidia/model.py MiniMaxM3Attention.__init__ and MiniMaxM3SparseAttention.__init__; "
               "vllm/config/model.py get_num_kv_heads",
     "what": "KV heads divide by TP, or TP divides by KV heads (replicated)"},
    {"name": "expert_parallel_needs_experts", "check": rule_expert_parallel_needs_experts,
     "source": "vllm/config/model.py ModelConfig._verify_with_expert_parallelism",
     "what": "expert parallelism only for MoE models"},
    {"name": "experts_vs_tp", "check": rule_experts_vs_tp,
     "source": "vllm/model_executor/models/minimax_m2.py MiniMaxM2MoE.__init__; "
               "vllm/models/minimax_m3/nvidia/model.py MiniMaxM3MoE.__init__",
     "what": "TP not greater than the experts (MiniMax-M2, MiniMax-M3)"},
    {"name": "experts_vs_ep", "check": rule_experts_vs_ep,
     "source": "vllm/model_executor/layers/fused_moe/expert_map_manager.py determine_expert_map",
     "what": "experts spread over EP = TP x DP; uneven is a warning"},
    {"name": "expert_shard_vs_block", "check": rule_expert_shard_vs_block,
     "source": "vllm/model_executor/layers/quantization/fp8.py Fp8MoEMethod.create_weights; "
               "vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make",
     "what": "tensor-sharded expert FFN (no EP) a multiple of the FP8 block"},
    {"name": "linear_shard_vs_block", "check": rule_linear_shard_vs_block,
     "source": "vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape",
     "what": "TP shards of attention and dense MLP weights multiples of the FP8 block"},
    {"name": "mxfp4_expert_shard", "check": rule_mxfp4_expert_shard,
     "source": "vllm/model_executor/layers/quantization/mxfp4.py Mxfp4MoEMethod.create_weights (scales per "
               "32 values of intermediate_size_per_partition)",
     "what": "tensor-sharded MXFP4 expert FFN (no EP) a whole number of MX blocks"},
    {"name": "pipeline_layers", "check": rule_pipeline_layers, "source": "vllm/distributed/utils.py get_pp_indices",
     "what": "PP not greater than the layers"},
    {"name": "max_model_len", "check": rule_max_model_len,
     "source": "vllm/config/model.py ModelConfig.get_and_verify_max_len",
     "what": "max_model_len within max_position_embeddings"},
    {"name": "memory", "check": rule_memory,
     "source": "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; vllm/config/cache.py gpu_memory_utilization",
     "what": "weights fit memory x utilisation and leave KV cache for max_model_len"},
)


def check_layout(summary, shape, hardware, layout, opts):
    """Apply every rule. Returns {layout, valid, findings, estimate}."""
    estimate = None
    if layout.world <= hardware["gpus_total"] and layout.pp <= shape["layers"]:
        estimate = memory_estimate(summary, shape, layout, hardware["gpu_memory_mib"], opts,
                                   hardware.get("kept_mib", 0))
    ctx = {"shape": shape, "layout": layout, "hardware": hardware, "opts": opts, "estimate": estimate}
    findings = []
    for rule in RULES:
        for level, message in rule["check"](ctx):
            findings.append(_finding(rule, level, message))
    return {
        "layout": layout.as_dict(),
        "label": layout.label(),
        "valid": not any(f["level"] == "error" for f in findings),
        "findings": findings,
        "estimate": estimate,
    }


# --- inputs -----------------------------------------------------------------------------------

def hardware(nodes):
    """nodes: list of {name, gpus: [gpu facts with memory_total_mib]}. All nodes must have the
    same number of GPUs (vLLM starts the same number of workers on each); the smallest GPU
    bounds the memory."""
    if not nodes:
        raise VllmPlanError("no nodes given: pass at least one node with its GPUs (gpu_facts)")
    counts = {}
    memories = []
    kept = [0]
    for node in nodes:
        gpus = node.get("gpus") or []
        counts[node.get("name", "?")] = len(gpus)
        for gpu in gpus:
            memory = gpu.get("memory_total_mib")
            if not isinstance(memory, int) or memory <= 0:
                raise VllmPlanError("GPU %s on node %s has no memory_total_mib (%r); a GPU in MIG mode is "
                                    "not supported" % (gpu.get("index", "?"), node.get("name", "?"), memory))
            memories.append(memory)
            held = gpu.get("kept_mib", 0)
            if isinstance(held, bool) or not isinstance(held, int) or not 0 <= held < memory:
                raise VllmPlanError("GPU %s on node %s: kept_mib %r (memory of the services kept on it) is not a whole "
                                    "number of MiB below its %d MiB" % (gpu.get("index", "?"), node.get("name", "?"),
                                                                        held, memory))
            kept.append(held)
    if not memories:
        raise VllmPlanError("the nodes %s have no GPUs: run gpu_preflight (gpu_facts) first" % ", ".join(sorted(counts)))
    if len(set(counts.values())) > 1:
        raise VllmPlanError(
            "the nodes have different GPU counts (%s): a multi-node vLLM layout needs the same number of GPUs "
            "on every node; leave the odd node out of the group" % ", ".join("%s %d" % kv for kv in sorted(counts.items())))
    per_node = list(counts.values())[0]
    return {
        "nodes": len(nodes),
        "gpus_per_node": per_node,
        "gpus_total": per_node * len(nodes),
        "gpu_memory_mib": min(memories),
        # the most any kept service holds on one GPU: every GPU gets the same budget
        "kept_mib": max(kept),
        "label": "%d node(s) x %d GPUs of %d MiB" % (len(nodes), per_node, min(memories))
        + (", up to %d MiB kept for other services" % max(kept) if max(kept) else ""),
    }


def check_opts(opts):
    util = opts.get("gpu_memory_utilization")
    if not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise VllmPlanError("gpu_memory_utilization is %r, expected a fraction in (0, 1]" % (util,))
    if opts.get("kv_cache_dtype") not in KV_CACHE_DTYPE_BYTES:
        raise VllmPlanError("kv_cache_dtype %r is not one of %s" % (opts.get("kv_cache_dtype"), ", ".join(sorted(KV_CACHE_DTYPE_BYTES))))
    if not isinstance(opts.get("max_model_len"), int) or opts["max_model_len"] <= 0:
        raise VllmPlanError("max_model_len is %r, expected a positive number of tokens (the model's config.json has no "
                            "max_position_embeddings to default to)" % (opts.get("max_model_len"),))
    if not isinstance(opts.get("reserve_mib"), int) or opts["reserve_mib"] < 0:
        raise VllmPlanError("reserve_mib is %r, expected a non-negative integer" % (opts.get("reserve_mib"),))
    return opts


def check_layout_input(layout):
    for name, value in (("tensor_parallel_size", layout.tp), ("pipeline_parallel_size", layout.pp),
                        ("data_parallel_size", layout.dp)):
        if value < 1:
            raise VllmPlanError("%s is %d, expected 1 or more" % (name, value))
    return layout


def parsers(shape, reasoning_parser=None, tool_call_parser=None):
    """Resolve the reasoning and tool-call parsers: an override, else the model's default.
    '' turns one off. Unknown names fail here, not after vLLM has loaded for minutes."""
    default_reasoning, default_tool = MODEL_PARSERS.get(shape["model_type"], (None, None))
    reasoning = default_reasoning if reasoning_parser is None else (reasoning_parser or None)
    tool = default_tool if tool_call_parser is None else (tool_call_parser or None)
    if reasoning and reasoning not in VLLM_REASONING_PARSERS:
        raise VllmPlanError("reasoning parser %r is not one vLLM 0.24 registers; known: %s"
                            % (reasoning, ", ".join(sorted(VLLM_REASONING_PARSERS))))
    if tool and tool not in VLLM_TOOL_PARSERS:
        raise VllmPlanError("tool-call parser %r is not one vLLM 0.24 registers; known: %s"
                            % (tool, ", ".join(sorted(VLLM_TOOL_PARSERS))))
    return reasoning, tool


# --- ranking ----------------------------------------------------------------------------------

def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(shape, hardware):
    """Every TP x PP x DP (x EP for MoE models) that uses at most the GPUs, TP within a node
    first (NVLink), powers of two and divisors of the GPU count."""
    total = hardware["gpus_total"]
    sizes = sorted(set(_divisors(total)))
    layouts = []
    for tp in sizes:
        for pp in sizes:
            for dp in sizes:
                if tp * pp * dp > total:
                    continue
                for ep in ((False, True) if shape["experts"] else (False,)):
                    if ep and tp * dp == 1:
                        continue
                    layouts.append(Layout(tp, pp, dp, ep))
    return layouts


def rank_key(result):
    """Valid layouts first; then every GPU used; then fewer pipeline stages (a request crosses
    them one after another); then the most KV capacity (concurrency at max_model_len, then
    tokens); then fewer data-parallel engines (one API, one KV pool)."""
    layout = result["layout"]
    est = result["estimate"] or {}
    world = layout["tensor_parallel_size"] * layout["pipeline_parallel_size"] * layout["data_parallel_size"]
    return (not result["valid"], -world, layout["pipeline_parallel_size"],
            -est.get("concurrency_at_max_model_len", 0), -est.get("kv_tokens_total", 0),
            layout["data_parallel_size"])


def rank_layouts(summary, shape, hardware, opts, limit=10):
    results = [check_layout(summary, shape, hardware, layout, opts) for layout in candidate_layouts(shape, hardware)]
    ranked = sorted((r for r in results if r["valid"]), key=rank_key)
    return [{"label": r["label"], "layout": r["layout"], "estimate": r["estimate"],
             "warnings": [f["message"] for f in r["findings"] if f["level"] == "warning"]} for r in ranked[:limit]]


def plan_inputs(config, tensors, nodes, opts, where="the model"):
    """What every layout is judged on: (shape, summary, hardware, opts, tensors), each checked;
    opts' max_model_len defaults to the model's context, tensors to config.json's estimate."""
    try:
        shape = model_shape(config, where)
    except CheckpointError as exc:  # the checkpoint reader's errors are the plan's
        raise VllmPlanError(str(exc))
    opts = dict(opts)
    if opts.get("max_model_len") is None:
        # vLLM's default: the model's own context (vllm/config/model.py get_and_verify_max_len)
        opts["max_model_len"] = shape.get("max_position_embeddings")
    opts = check_opts(opts)
    hw = hardware(nodes)
    if tensors is None:
        try:
            tensors = dict((name, (dt, dims, tensor_nbytes(dt, dims))) for name, dt, dims in checkpoint_tensors(shape))
        except CheckpointError as exc:
            raise VllmPlanError(str(exc))
    return shape, summarize(tensors, shape), hw, opts, tensors


def plan(config, tensors, tensor_source, nodes, layout, opts, reasoning_parser=None, tool_call_parser=None, where="the model"):
    """The whole plan: the verdict on `layout`, the findings, the estimate and the ranking.

    config: parsed config.json; tensors: {name: (dtype, dims, nbytes)} or None (estimated from
    the config); tensor_source: where the sizes come from (safetensors, config, ...)."""
    shape, summary, hw, opts, tensors = plan_inputs(config, tensors, nodes, opts, where)
    check_layout_input(layout)
    reasoning, tool = parsers(shape, reasoning_parser, tool_call_parser)
    verdict = check_layout(summary, shape, hw, layout, opts)
    params = sum(int(math.ceil(float(nb) / DTYPE_BYTES.get(dt, 1))) for dt, _dims, nb in tensors.values())
    return {
        "valid": verdict["valid"],
        "layout": verdict["layout"],
        "label": verdict["label"],
        "findings": verdict["findings"],
        "errors": [f["message"] for f in verdict["findings"] if f["level"] == "error"],
        "warnings": [f["message"] for f in verdict["findings"] if f["level"] == "warning"],
        "estimate": verdict["estimate"],
        "ranked": rank_layouts(summary, shape, hw, opts),
        "hardware": hw,
        "model": {
            "architecture": shape["architecture"], "model_type": shape["model_type"], "layers": shape["layers"],
            "heads": shape["heads"], "kv_heads": shape["kv_heads"], "head_dim": shape["head_dim"],
            "experts": shape["experts"], "expert_ffn_size": shape["expert_ffn_size"],
            "quantization": shape["quant"], "parameters": params,
            "weights_bytes": sum(nb for _dt, _dims, nb in tensors.values()),
            "tensor_source": tensor_source,
        },
        "max_model_len": opts["max_model_len"],
        "reasoning_parser": reasoning,
        "tool_call_parser": tool,
    }


# --- the command line ---------------------------------------------------------------------------

DISTRIBUTED_BACKENDS = ("mp", "ray")


SERVED_MODEL_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,255}\Z")


def check_launch(launch):
    """Refuse launch settings vLLM would reject or a node could not use, before anything is read.

    launch: host, port, master_addr, master_port, dp_rpc_port, served_model_name (the module's
    options). The address and port rules are the endpoint rule's (listen_address, port_number).
    """
    try:
        listen_address(launch.get("host"), "host")
        if launch.get("master_addr") not in (None, ""):
            listen_address(launch["master_addr"], "master_addr")
        for key in ("port", "master_port", "dp_rpc_port"):
            port_number(launch.get(key), key)
    except EndpointError as exc:
        raise VllmPlanError(str(exc))
    name = launch.get("served_model_name")
    if name not in (None, "") and not (isinstance(name, str) and SERVED_MODEL_NAME_PATTERN.match(name)):
        raise VllmPlanError("served_model_name %r is not a model name (letters, digits and _ . : / @ + -, no spaces); "
                            "give e.g. minimax-m2" % (name,))
    return launch


def serve_arguments(model_path, layout, opts, hardware_info, launch):
    """The `vllm serve` arguments for one node, and what that node is.

    launch: host, port, served_model_name, node_rank, master_addr, master_port, dp_rpc_port,
    backend (mp or ray), reasoning_parser, tool_call_parser, enforce_eager, extra_args, batch_args
    (the serving intent's --max-num-seqs, --max-num-batched-tokens and CUDA graph sizes:
    layout_vllm.vllm_batch_arguments). One node: everything local. Several nodes (vLLM's own launcher, backend mp):
    - a replica (TP x PP) that fits one node and DP spread over the nodes: each node runs
      dp / nodes local engines (--data-parallel-size-local), followers --headless with their
      --data-parallel-start-rank, all meeting at --data-parallel-address / -rpc-port
      (vllm/entrypoints/cli/serve.py run_headless; vllm/config/parallel.py);
    - a replica larger than a node: --nnodes / --node-rank / --master-addr / --master-port,
      followers --headless (vllm/config/parallel.py nnodes, node_rank, master_addr).
    With Ray, the head starts vLLM with --distributed-executor-backend ray over a Ray cluster
    the other nodes join; they run no vLLM command of their own.
    Returns {role: head | follower | ray-worker, args: [...] (empty for a ray worker)}.
    """
    nodes = hardware_info["nodes"]
    rank = launch.get("node_rank", 0)
    if not isinstance(rank, int) or not 0 <= rank < nodes:
        raise VllmPlanError("node_rank %r is outside the %d node(s) of the layout" % (rank, nodes))
    backend = launch.get("backend") or "mp"
    if backend not in DISTRIBUTED_BACKENDS:
        raise VllmPlanError("distributed backend %r is not one of %s" % (backend, ", ".join(DISTRIBUTED_BACKENDS)))
    role = "head" if rank == 0 else "follower"
    if nodes > 1 and backend == "ray" and rank > 0:
        return {"role": "ray-worker", "args": []}
    args = ["serve", model_path,
            "--host", launch.get("host") or "127.0.0.1",
            "--port", str(launch.get("port") or 8000)]
    if launch.get("served_model_name"):
        args += ["--served-model-name", launch["served_model_name"]]
    args += ["--tensor-parallel-size", str(layout.tp),
             "--pipeline-parallel-size", str(layout.pp),
             "--data-parallel-size", str(layout.dp)]
    if layout.ep:
        args.append("--enable-expert-parallel")
    args += ["--gpu-memory-utilization", str(opts["gpu_memory_utilization"]),
             "--max-model-len", str(opts["max_model_len"]),
             "--kv-cache-dtype", opts["kv_cache_dtype"]]
    if opts.get("kv_cache_memory_bytes"):
        # The plan's KV cache, pinned: vLLM then skips its memory profiling and sizes the cache from
        # this value on every worker (vllm/v1/worker/gpu_worker.py determine_available_memory), so a
        # restart holds what was planned. gpu_memory_utilization still gates the start (init_device).
        args += ["--kv-cache-memory-bytes", str(int(opts["kv_cache_memory_bytes"]))]
    args += [str(a) for a in launch.get("batch_args") or []]
    if launch.get("reasoning_parser"):
        args += ["--reasoning-parser", launch["reasoning_parser"]]
    if launch.get("tool_call_parser"):
        args += ["--tool-call-parser", launch["tool_call_parser"], "--enable-auto-tool-choice"]
    if nodes > 1:
        master = launch.get("master_addr")
        if not master:
            raise VllmPlanError("a layout over %d nodes needs the head's address (master_addr): set "
                                "gpulab_fabric_address on the head" % nodes)
        if backend == "ray":
            args += ["--distributed-executor-backend", "ray"]
        elif layout.dp > 1 and layout.tp * layout.pp <= hardware_info["gpus_per_node"]:
            if layout.dp % nodes:
                raise VllmPlanError("DP %d does not divide over %d nodes: every node runs the same number of "
                                    "data-parallel engines" % (layout.dp, nodes))
            local = layout.dp // nodes
            args += ["--data-parallel-size-local", str(local),
                     "--data-parallel-address", master,
                     "--data-parallel-rpc-port", str(launch.get("dp_rpc_port") or 13345)]
            if rank > 0:
                args += ["--headless", "--data-parallel-start-rank", str(rank * local)]
        else:
            if layout.dp > 1:
                raise VllmPlanError("DP %d with a replica of TP %d x PP %d larger than one node's %d GPUs: "
                                    "vLLM's launcher does not combine the two; use Ray or a smaller replica"
                                    % (layout.dp, layout.tp, layout.pp, hardware_info["gpus_per_node"]))
            args += ["--nnodes", str(nodes), "--node-rank", str(rank),
                     "--master-addr", master, "--master-port", str(launch.get("master_port") or 29501)]
            if rank > 0:
                args.append("--headless")
    if launch.get("enforce_eager"):
        args.append("--enforce-eager")
    args += [str(a) for a in launch.get("extra_args") or []]
    return {"role": role, "args": args}
