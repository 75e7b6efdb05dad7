# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Random-weight Hugging Face model directories shaped like real architectures, so vLLM can load
them and every layout rule can be tried without downloading hundreds of GB.

A directory holds config.json, generation_config.json, the weights as safetensors (one file, or
shards with model.safetensors.index.json), and an offline byte-level BPE tokenizer
(tokenizer.json + tokenizer_config.json with a ChatML chat template).

The tensor names and shapes come from hf_checkpoint.checkpoint_tensors, the same table the planner
estimates memory from. FP8 block quantisation follows the layout of real FP8 checkpoints
(DeepSeek-V3, MiniMax-M2): config `quantization_config` {quant_method: fp8, fmt: e4m3,
activation_scheme: dynamic, weight_block_size: [128, 128]}, linear weights stored as F8_E4M3 with
a float32 `<weight>_scale_inv` per block (vllm/model_executor/layers/quantization/fp8.py).

safetensors is written here without the library: 8 bytes little-endian header length, the JSON
header (padded with spaces to 8 bytes), then the raw little-endian bytes of every tensor in header
order (safetensors/docs format). Pure Python, no numpy: random bytes become bf16 or FP8 values
through byte translation tables that bound their magnitude, so activations stay finite.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import random
import struct

from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write, free_space_problem

# bump when the bytes written for the same options change
GENERATOR_REVISION = 1
MARKER_NAME = "gpulab-synthetic.json"
INDEX_NAME = "model.safetensors.index.json"
CHUNK_ELEMENTS = 1 << 20

ARCHITECTURES = {
    # option value -> (config architectures[0], model_type)
    "minimax-m2": ("MiniMaxM2ForCausalLM", "minimax_m2"),
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "deepseek-v3": ("DeepseekV3ForCausalLM", "deepseek_v3"),
    "qwen3-moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "glm4-moe": ("Glm4MoeForCausalLM", "glm4_moe"),
    "gpt-oss": ("GptOssForCausalLM", "gpt_oss"),
    "qwen3-next": ("Qwen3NextForCausalLM", "qwen3_next"),
    # the text backbone in the released config class (vllm/transformers_utils/config.py: minimax_m3_vl), no vision tower
    "minimax-m3": ("MiniMaxM3SparseForCausalLM", "minimax_m3_vl"),
}
DENSE = ("llama", "qwen2")
QUANTIZATIONS = ("none", "fp8", "mxfp4")
# which quantisations each family's released checkpoints use (and vLLM loads for it)
# (vLLM's MiniMax-M3 loader renames weight_scale_inv to the ModelOpt MXFP8 weight_scale: no FP8 block checkpoint)
FAMILY_QUANTIZATIONS = {"gpt-oss": ("none", "mxfp4"), "qwen3-next": ("none",), "minimax-m3": ("none",)}
WEIGHTS = ("random", "sparse")

# Scaled down so one GPU (or a CPU test) loads it in seconds. MiniMax-M2 itself: 62 layers,
# hidden 3072, 48 heads, 8 KV heads, head dim 128, 256 experts (8 used), expert FFN 1536.
DEFAULTS = {
    "architecture": "minimax-m2",
    "layers": 2,
    "hidden_size": 512,
    "attention_heads": 4,
    "kv_heads": 2,
    "head_dim": 128,
    "experts": 8,
    "experts_used": 2,
    "expert_ffn_size": 384,
    "ffn_size": 1024,
    "max_position_embeddings": 4096,
    "quantization": "fp8",
    "weight_block_size": [128, 128],
    "seed": 42,
    "shard_max_mib": 0,
}
CONTENT_OPTIONS = tuple(sorted(DEFAULTS))

# The structure of the other families (their config.json keys), apart from DEFAULTS so that the
# options digest of a model written before them stays the same: a key enters the digest only
# when it differs from its default here.
FAMILY_DEFAULTS = {
    # 0: the tokenizer's own size rounded up to 64; a real model's (129280, 151936, ...) otherwise
    "vocab_size": 0,
    # DeepSeek-V3 / GLM-4.x: n_shared_experts of expert_ffn_size each; Qwen3-Next: one shared expert
    # of shared_experts x expert_ffn_size (shared_expert_intermediate_size)
    "shared_experts": 0,
    # first_k_dense_replace (MiniMax-M3: moe_layer_freq 0): the leading layers with a dense MLP of ffn_size
    "dense_layers": 0,
    "index_head_dim": 128,  # MiniMax-M3's MoE layers are block-sparse, with an indexer of this head size
    # DeepSeek-V3's multi-head latent attention (q_lora_rank 0: a plain q_proj)
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    # grouped top-k routing (n_group, topk_group): DeepSeek-V3 8 and 4
    "expert_groups": 1,
    "expert_groups_used": 1,
    # gpt-oss: layers alternate a sliding window of this many tokens with full attention
    "sliding_window": 128,
    # Qwen3-Next: every full_attention_interval-th layer is full attention, the rest gated delta net
    "full_attention_interval": 4,
    "linear_key_heads": 16,
    "linear_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel": 4,
    # "sparse": each safetensors file is its header and then a hole of the data's size (zeros on
    # read, no disk used): the shape of a checkpoint for planners and for vLLM's --load-format dummy
    "weights": "random",
}

# The released models' shapes (their config.json), for full-size headers and reduced-depth runs.
FAMILIES = {
    # deepseek-ai/DeepSeek-V3 (Kimi-K2 differs only in counts: 384 experts, 64 heads, 1 dense layer)
    "deepseek-v3": {"architecture": "deepseek-v3", "layers": 61, "hidden_size": 7168, "attention_heads": 128,
                    "kv_heads": 128, "head_dim": 128, "experts": 256, "experts_used": 8, "expert_ffn_size": 2048,
                    "ffn_size": 18432, "shared_experts": 1, "dense_layers": 3, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "expert_groups": 8, "expert_groups_used": 4, "vocab_size": 129280,
                    "max_position_embeddings": 163840, "quantization": "fp8"},
    # Qwen/Qwen3-235B-A22B
    "qwen3-moe": {"architecture": "qwen3-moe", "layers": 94, "hidden_size": 4096, "attention_heads": 64,
                  "kv_heads": 4, "head_dim": 128, "experts": 128, "experts_used": 8, "expert_ffn_size": 1536,
                  "ffn_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960, "quantization": "none"},
    # zai-org/GLM-4.5
    "glm4-moe": {"architecture": "glm4-moe", "layers": 92, "hidden_size": 5120, "attention_heads": 96,
                 "kv_heads": 8, "head_dim": 128, "experts": 160, "experts_used": 8, "expert_ffn_size": 1536,
                 "ffn_size": 12288, "shared_experts": 1, "dense_layers": 3, "vocab_size": 151552,
                 "max_position_embeddings": 131072, "quantization": "none"},
    # openai/gpt-oss-120b
    "gpt-oss": {"architecture": "gpt-oss", "layers": 36, "hidden_size": 2880, "attention_heads": 64,
                "kv_heads": 8, "head_dim": 64, "experts": 128, "experts_used": 4, "expert_ffn_size": 2880,
                "ffn_size": 2880, "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072,
                "quantization": "mxfp4"},
    # Qwen/Qwen3-Next-80B-A3B-Instruct
    "qwen3-next": {"architecture": "qwen3-next", "layers": 48, "hidden_size": 2048, "attention_heads": 16,
                   "kv_heads": 2, "head_dim": 256, "experts": 512, "experts_used": 10, "expert_ffn_size": 512,
                   "ffn_size": 5120, "shared_experts": 1, "full_attention_interval": 4, "linear_key_heads": 16,
                   "linear_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                   "linear_conv_kernel": 4, "vocab_size": 151936, "max_position_embeddings": 262144,
                   "quantization": "none"},
    # MiniMaxAI/MiniMax-M2
    "minimax-m2": {"architecture": "minimax-m2", "layers": 62, "hidden_size": 3072, "attention_heads": 48,
                   "kv_heads": 8, "head_dim": 128, "experts": 256, "experts_used": 8, "expert_ffn_size": 1536,
                   "vocab_size": 200064, "max_position_embeddings": 196608, "quantization": "fp8"},
    # MiniMax-M3 as issue 52 and vLLM's MiniMaxM3TextConfig defaults give it
    "minimax-m3": {"architecture": "minimax-m3", "layers": 60, "hidden_size": 6144, "attention_heads": 64,
                   "kv_heads": 4, "head_dim": 128, "experts": 128, "experts_used": 4, "expert_ffn_size": 3072,
                   "ffn_size": 12288, "shared_experts": 1, "dense_layers": 3, "index_head_dim": 128,
                   "vocab_size": 200064, "max_position_embeddings": 524288, "quantization": "none"},
}


def family_options(family, layers=None, **overrides):
    """A released model's options (FAMILIES), at its own depth or at `layers` (reduced depth keeps
    every width, so each layer's weights and cache are the real ones). With fewer layers than the
    model's dense leading ones, one dense layer is kept before the MoE ones; Qwen3-Next keeps
    whole groups of full_attention_interval layers."""
    if family not in FAMILIES:
        raise SyntheticHFError("family %r is not one of %s" % (family, ", ".join(sorted(FAMILIES))))
    opts = dict(FAMILIES[family])
    if layers is not None:
        opts["layers"] = layers
        if opts.get("dense_layers", 0) >= layers:
            opts["dense_layers"] = 1 if layers > 1 else 0
    opts.update(overrides)
    return opts


# Tokenizer: the 256 byte symbols of GPT-2's byte-level mapping, then these added tokens.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Not special, so they survive detokenization: the reasoning and tool-call parsers of
# vllm/parser/minimax_m2.py look for them in the text and in the vocabulary.
MARKUP_TOKENS = ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
VOCAB_MULTIPLE = 64

# ChatML; a reasoning model's turn opens with <think> (MiniMax-M2's template does the same, which
# is why vLLM's minimax_m2_append_think parser prepends it to the answer).
CHAT_TEMPLATE = (
    "{%% for message in messages %%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%% endfor %%}"
    "{%% if add_generation_prompt %%}{{ '<|im_start|>assistant\\n%s' }}{%% endif %%}"
)
REASONING_ARCHITECTURES = ("minimax-m2",)


class SyntheticHFError(ValueError):
    """Options or files that cannot produce a model; the message names the value."""


def _positive(opts, key):
    value = opts[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SyntheticHFError("%s is %r, expected a positive integer" % (key, value))


MAX_LAYERS = 512
MAX_EXPERTS = 1024


def validate_options(options):
    """Merge options over DEFAULTS and FAMILY_DEFAULTS and check them; returns the merged dict."""
    opts = dict(DEFAULTS)
    opts.update(FAMILY_DEFAULTS)
    opts.update(dict((k, v) for k, v in options.items() if v is not None))
    unknown = sorted(set(opts) - set(DEFAULTS) - set(FAMILY_DEFAULTS))
    if unknown:
        raise SyntheticHFError("unknown option(s) %s; known: %s" % (", ".join(unknown),
                                                                    ", ".join(sorted(set(DEFAULTS) | set(FAMILY_DEFAULTS)))))
    arch = opts["architecture"]
    if arch not in ARCHITECTURES:
        raise SyntheticHFError("architecture %r is not one of %s" % (arch, ", ".join(sorted(ARCHITECTURES))))
    if opts["quantization"] not in FAMILY_QUANTIZATIONS.get(arch, ("none", "fp8")):
        raise SyntheticHFError("quantization %r is not one of %s for architecture %s"
                               % (opts["quantization"], ", ".join(FAMILY_QUANTIZATIONS.get(arch, ("none", "fp8"))), arch))
    if opts["weights"] not in WEIGHTS:
        raise SyntheticHFError("weights %r is not one of %s" % (opts["weights"], ", ".join(WEIGHTS)))
    for key in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_position_embeddings"):
        _positive(opts, key)
    # The plan lists every tensor before the free-space check: a count beyond any real model would
    # exhaust memory first. The same ceilings as synthetic_gguf (llama.cpp's).
    for key, ceiling in (("layers", MAX_LAYERS), ("experts", MAX_EXPERTS)):
        if isinstance(opts[key], int) and opts[key] > ceiling:
            raise SyntheticHFError("%s %d is above %d, more than any model has; give a real model's shape"
                                   % (key, opts[key], ceiling))
    if opts["attention_heads"] % opts["kv_heads"]:
        raise SyntheticHFError("attention_heads %d is not a multiple of kv_heads %d (grouped-query attention)"
                               % (opts["attention_heads"], opts["kv_heads"]))
    for key in ("vocab_size", "shared_experts", "dense_layers", "q_lora_rank"):
        if isinstance(opts[key], bool) or not isinstance(opts[key], int) or opts[key] < 0:
            raise SyntheticHFError("%s is %r, expected a whole number >= 0" % (key, opts[key]))
    if arch not in DENSE:
        for key in ("experts", "experts_used", "expert_ffn_size"):
            _positive(opts, key)
        if opts["experts_used"] > opts["experts"]:
            raise SyntheticHFError("experts_used %d exceeds experts %d" % (opts["experts_used"], opts["experts"]))
    if arch in DENSE or opts["dense_layers"] or arch in ("qwen3-moe", "qwen3-next"):
        _positive(opts, "ffn_size")
    if opts["dense_layers"] > opts["layers"]:
        raise SyntheticHFError("dense_layers %d exceeds layers %d" % (opts["dense_layers"], opts["layers"]))
    if opts["dense_layers"] and arch not in ("deepseek-v3", "glm4-moe", "minimax-m3"):
        raise SyntheticHFError("dense_layers (first_k_dense_replace) is a DeepSeek-V3 / GLM-4.x MoE / MiniMax-M3 key, not %s" % arch)
    if arch == "deepseek-v3":
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "expert_groups",
                    "expert_groups_used"):
            _positive(opts, key)
        if opts["kv_heads"] != opts["attention_heads"]:
            raise SyntheticHFError("kv_heads %d must equal attention_heads %d for deepseek-v3 (MLA: every head "
                                   "reads the one latent)" % (opts["kv_heads"], opts["attention_heads"]))
        # vllm/model_executor/layers/fused_moe/layer.py grouped_topk: the experts fall in n_group
        # equal groups, topk_group of them are picked
        if opts["experts"] % opts["expert_groups"] or opts["expert_groups_used"] > opts["expert_groups"]:
            raise SyntheticHFError("experts %d must split into expert_groups %d, with expert_groups_used %d at most "
                                   "that many" % (opts["experts"], opts["expert_groups"], opts["expert_groups_used"]))
    if arch == "gpt-oss":
        _positive(opts, "sliding_window")
        for key in ("hidden_size", "expert_ffn_size"):
            if opts[key] % hf.MXFP4_BLOCK:
                raise SyntheticHFError("%s %d is not a multiple of the MXFP4 block %d" % (key, opts[key], hf.MXFP4_BLOCK))
    if arch == "minimax-m3":
        _positive(opts, "index_head_dim")
    if arch == "qwen3-next":
        for key in ("full_attention_interval", "linear_key_heads", "linear_value_heads", "linear_key_head_dim",
                    "linear_value_head_dim", "linear_conv_kernel", "shared_experts"):
            _positive(opts, key)
    block = opts["weight_block_size"]
    if (not isinstance(block, (list, tuple)) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise SyntheticHFError("weight_block_size is %r, expected two positive integers [n, k]" % (block,))
    opts["weight_block_size"] = list(block)
    if opts["quantization"] == "fp8":
        # vLLM's FP8 MoE method needs each expert's FFN (unsharded at TP 1) to be a multiple of block n
        # (vllm/model_executor/layers/quantization/fp8.py Fp8MoEMethod.create_weights)
        # and the merged Q/K/V and gate/up weights need every part but the last to be one too
        # (vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape)
        sizes = [("hidden_size", opts["hidden_size"])]
        if arch == "deepseek-v3":
            # q_a_proj and kv_a_proj_with_mqa are merged (fused_qkv_a_proj): q_lora_rank is the part before the last
            if opts["q_lora_rank"]:
                sizes.append(("q_lora_rank", opts["q_lora_rank"]))
        else:
            sizes += [("attention_heads x head_dim", opts["attention_heads"] * opts["head_dim"]),
                      ("kv_heads x head_dim", opts["kv_heads"] * opts["head_dim"])]
        if arch not in DENSE:
            sizes.append(("expert_ffn_size", opts["expert_ffn_size"]))
        if arch in DENSE or opts["dense_layers"]:
            sizes.append(("ffn_size", opts["ffn_size"]))
        for key, size in sizes:
            if size % block[0]:
                raise SyntheticHFError("%s %d is not a multiple of the FP8 block %d; vLLM cannot load it even on one GPU"
                                       % (key, size, block[0]))
    if not isinstance(opts["seed"], int):
        raise SyntheticHFError("seed is %r, expected an integer" % (opts["seed"],))
    if not isinstance(opts["shard_max_mib"], int) or opts["shard_max_mib"] < 0:
        raise SyntheticHFError("shard_max_mib is %r, expected 0 (one file) or a size in MiB" % (opts["shard_max_mib"],))
    return opts


# --- tokenizer --------------------------------------------------------------------------------

def byte_symbols():
    """GPT-2's reversible byte -> printable character mapping, used by ByteLevel pre-tokenizers."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def chat_template(architecture):
    return CHAT_TEMPLATE % ("<think>\\n" if architecture in REASONING_ARCHITECTURES else "")


def tokenizer_files(architecture="minimax-m2"):
    """tokenizer.json and tokenizer_config.json for a byte-level BPE over 256 byte symbols (no
    merges: one token per byte) plus the added tokens. Returns (files dict, token count)."""
    symbols = byte_symbols()
    vocab = dict((symbols[b], b) for b in range(256))
    added = []
    for i, token in enumerate(SPECIAL_TOKENS + MARKUP_TOKENS):
        added.append({"id": 256 + i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": token in SPECIAL_TOKENS})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": None,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template(architecture),
        "added_tokens_decoder": dict((str(a["id"]), dict((k, v) for k, v in a.items() if k != "id")) for a in added),
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}, 256 + len(added)


def token_id(token):
    return 256 + list(SPECIAL_TOKENS + MARKUP_TOKENS).index(token)


# --- config -----------------------------------------------------------------------------------

def model_config(opts, n_tokens):
    """config.json as the real model's (key names as in the published MiniMax-M2 / Llama / Qwen2 configs)."""
    architecture, model_type = ARCHITECTURES[opts["architecture"]]
    vocab_size = max(opts.get("vocab_size") or 0, -(-n_tokens // VOCAB_MULTIPLE) * VOCAB_MULTIPLE)
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": opts["hidden_size"],
        "num_hidden_layers": opts["layers"],
        "num_attention_heads": opts["attention_heads"],
        "num_key_value_heads": opts["kv_heads"],
        "head_dim": opts["head_dim"],
        "vocab_size": vocab_size,
        "max_position_embeddings": opts["max_position_embeddings"],
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": token_id(EOS_TOKEN),
        "pad_token_id": token_id(PAD_TOKEN),
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_cache": True,
    }
    if opts["architecture"] == "minimax-m2":
        config.update({
            "intermediate_size": opts["expert_ffn_size"],
            "num_local_experts": opts["experts"],
            "num_experts_per_tok": opts["experts_used"],
            "scoring_func": "sigmoid",
            "use_routing_bias": True,
            "use_qk_norm": True,
            "qk_norm_type": "per_layer",
            "rotary_dim": opts["head_dim"] // 2,
            "rope_theta": 5000000,
            "partial_rotary_factor": 0.5,
            "router_aux_loss_coef": 0.001,
            "output_router_logits": False,
            "attn_type_list": [1] * opts["layers"],
        })
    elif opts["architecture"] in FAMILY_CONFIGS:
        config.update(FAMILY_CONFIGS[opts["architecture"]](opts))
        # DeepSeek-V3's config.json has no head_dim: each part of its heads has a key of its own
        config = dict((k, v) for k, v in config.items() if not (k == "head_dim" and v is None))
    else:
        config.update({
            "intermediate_size": opts["ffn_size"],
            "rope_theta": 1000000.0,
            "attention_bias": opts["architecture"] == "qwen2",
        })
    if opts["quantization"] == "fp8":
        config["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": list(opts["weight_block_size"]),
            "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
        }
    elif opts["quantization"] == "mxfp4":
        # openai/gpt-oss-120b's: only the experts are MXFP4 (vllm/model_executor/layers/quantization/mxfp4.py)
        config["quantization_config"] = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                       "lm_head"],
        }
    if opts["architecture"] == "minimax-m3":
        config = dict([(k, config.pop(k)) for k in NESTED_TOP], text_config=config, vision_config=None)
    return config


def _deepseek_v3(opts):
    """deepseek-ai/DeepSeek-V3's keys (vllm/model_executor/models/deepseek_v2.py reads them)."""
    return {
        "num_key_value_heads": opts["attention_heads"],
        "head_dim": None,
        "intermediate_size": opts["ffn_size"],
        "moe_intermediate_size": opts["expert_ffn_size"],
        "n_routed_experts": opts["experts"],
        "n_shared_experts": opts["shared_experts"],
        "num_experts_per_tok": opts["experts_used"],
        "first_k_dense_replace": opts["dense_layers"],
        "moe_layer_freq": 1,
        "kv_lora_rank": opts["kv_lora_rank"],
        "q_lora_rank": opts["q_lora_rank"] or None,
        "qk_rope_head_dim": opts["qk_rope_head_dim"],
        "qk_nope_head_dim": opts["qk_nope_head_dim"],
        "v_head_dim": opts["v_head_dim"],
        "n_group": opts["expert_groups"],
        "topk_group": opts["expert_groups_used"],
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "rope_theta": 10000,
        # the multi-token-prediction layer is left out: vLLM serves without it unless speculating
        "num_nextn_predict_layers": 0,
        "attention_bias": False,
    }


def _qwen3_moe(opts):
    """Qwen/Qwen3-235B-A22B's keys (vllm/model_executor/models/qwen3_moe.py)."""
    return {
        "intermediate_size": opts["ffn_size"],
        "moe_intermediate_size": opts["expert_ffn_size"],
        "num_experts": opts["experts"],
        "num_experts_per_tok": opts["experts_used"],
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    }


def _glm4_moe(opts):
    """zai-org/GLM-4.5's keys (vllm/model_executor/models/glm4_moe.py)."""
    return {
        "intermediate_size": opts["ffn_size"],
        "moe_intermediate_size": opts["expert_ffn_size"],
        "n_routed_experts": opts["experts"],
        "n_shared_experts": opts["shared_experts"],
        "num_experts_per_tok": opts["experts_used"],
        "first_k_dense_replace": opts["dense_layers"],
        "n_group": opts["expert_groups"],
        "topk_group": opts["expert_groups_used"],
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "partial_rotary_factor": 0.5,
        "use_qk_norm": True,
        "attention_bias": True,
        "rope_theta": 1000000,
        "num_nextn_predict_layers": 0,
    }


def _gpt_oss(opts):
    """openai/gpt-oss-120b's keys (vllm/model_executor/models/gpt_oss.py): even layers slide."""
    return {
        "intermediate_size": opts["expert_ffn_size"],
        "num_local_experts": opts["experts"],
        "num_experts_per_tok": opts["experts_used"],
        "experts_per_token": opts["experts_used"],
        "sliding_window": opts["sliding_window"],
        "layer_types": ["sliding_attention" if il % 2 == 0 else "full_attention" for il in range(opts["layers"])],
        "attention_bias": True,
        "swiglu_limit": 7.0,
        "rope_theta": 150000,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "original_max_position_embeddings": 4096, "truncate": False},
        "initial_context_length": 4096,
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
    }


def _qwen3_next(opts):
    """Qwen/Qwen3-Next-80B-A3B's keys (vllm/model_executor/models/qwen3_next.py)."""
    interval = opts["full_attention_interval"]
    return {
        "intermediate_size": opts["ffn_size"],
        "moe_intermediate_size": opts["expert_ffn_size"],
        "shared_expert_intermediate_size": opts["shared_experts"] * opts["expert_ffn_size"],
        "num_experts": opts["experts"],
        "num_experts_per_tok": opts["experts_used"],
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "full_attention_interval": interval,
        "layer_types": ["full_attention" if (il + 1) % interval == 0 else "linear_attention"
                        for il in range(opts["layers"])],
        "linear_conv_kernel_dim": opts["linear_conv_kernel"],
        "linear_key_head_dim": opts["linear_key_head_dim"],
        "linear_value_head_dim": opts["linear_value_head_dim"],
        "linear_num_key_heads": opts["linear_key_heads"],
        "linear_num_value_heads": opts["linear_value_heads"],
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000,
        "attention_bias": False,
    }


def _minimax_m3(opts):
    """MiniMax-M3's text keys (vllm/transformers_utils/configs/minimax_m3.py MiniMaxM3TextConfig, read by
    vllm/models/minimax_m3/nvidia/model.py): the leading dense layers attend fully, the MoE ones block-sparsely."""
    freq = [0] * opts["dense_layers"] + [1] * (opts["layers"] - opts["dense_layers"])
    # the multi-token-prediction module is left out (num_mtp_modules 0): vLLM serves without it unless speculating
    return {"intermediate_size": opts["expert_ffn_size"], "dense_intermediate_size": opts["ffn_size"],
            "shared_intermediate_size": opts["shared_experts"] * opts["expert_ffn_size"], "num_local_experts": opts["experts"],
            "num_experts_per_tok": opts["experts_used"], "n_shared_experts": opts["shared_experts"], "scoring_func": "sigmoid",
            "use_routing_bias": True, "routed_scaling_factor": 2.0, "hidden_act": "swigluoai", "swiglu_alpha": 1.702,
            "swiglu_beta": 1.0, "swiglu_limit": 7.0, "use_gemma_norm": True, "attention_output_gate": False, "use_qk_norm": True,
            "qk_norm_type": "per_head", "rope_theta": 5000000, "rotary_dim": opts["head_dim"] // 2, "partial_rotary_factor": 0.5,
            "num_mtp_modules": 0, "moe_layer_freq": freq, "sparse_attention_config": {
                "use_sparse_attention": True, "sparse_index_dim": opts["index_head_dim"], "sparse_num_index_heads": opts["kv_heads"],
                "sparse_topk_blocks": 16, "sparse_block_size": 128, "sparse_disable_index_value": freq,
                "sparse_score_type": "max", "sparse_init_block": 0, "sparse_local_block": 1, "sparse_attention_freq": freq}}


FAMILY_CONFIGS = {"deepseek-v3": _deepseek_v3, "qwen3-moe": _qwen3_moe, "glm4-moe": _glm4_moe, "gpt-oss": _gpt_oss,
                  "qwen3-next": _qwen3_next, "minimax-m3": _minimax_m3}
# config.json keys outside MiniMax-M3's text_config (vllm/transformers_utils/configs/minimax_m3.py MiniMaxM3Config)
NESTED_TOP = ("architectures", "model_type", "torch_dtype", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")


# --- weights ----------------------------------------------------------------------------------

def _bf16_high_table():
    """Random byte -> high byte of a bf16 (sign + top 7 exponent bits 59 or 60); with the low byte's
    top bit the exponent is 118..121, so magnitudes lie in [2^-9, 2^-5): never 0, inf or NaN."""
    return bytes(((b & 0x80) | (59 + (b & 1))) for b in range(256))


def _fp8_table():
    """Random byte -> e4m3 byte with exponent 5..8 (values 0.25 .. 3.75), never NaN."""
    return bytes(((b & 0x80) | ((5 + ((b >> 3) & 3)) << 3) | (b & 7)) for b in range(256))


BF16_HIGH = _bf16_high_table()
FP8_TABLE = _fp8_table()
BF16_ONE = struct.pack("<H", 0x3F80)
# dequantised FP8 weight = fp8 value x scale_inv: ~0.001 .. 0.015
FP8_SCALE_INV = struct.pack("<f", 0.004)
# E8M0 exponent byte (bias 127): 2^-7
MXFP4_SCALE = bytes([120])


def _random_bytes(rng, count):
    if count == 0:
        return b""
    return rng.getrandbits(count * 8).to_bytes(count, "little")


def tensor_chunks(name, dtype, dims, rng):
    """The tensor's bytes, in chunks: norms are ones, the router bias zeros, scales constant,
    everything else bounded random values."""
    count = 1
    for d in dims:
        count *= d
    done = 0
    while done < count:
        n = min(CHUNK_ELEMENTS, count - done)
        done += n
        if dtype == "F32":
            if name.endswith("_scale_inv"):
                yield FP8_SCALE_INV * n
            else:
                yield b"\0" * (4 * n)
        elif dtype == "U8":
            # MXFP4: random FP4 pairs (|value| <= 6) under one E8M0 scale of 2^-7 per 32 values
            yield MXFP4_SCALE * n if name.endswith("_scales") else _random_bytes(rng, n)
        elif dtype == "F8_E4M3":
            yield _random_bytes(rng, n).translate(FP8_TABLE)
        elif dtype == "BF16":
            if name.endswith("norm.weight"):
                yield BF16_ONE * n
            else:
                out = bytearray(2 * n)
                out[0::2] = _random_bytes(rng, n)
                out[1::2] = _random_bytes(rng, n).translate(BF16_HIGH)
                yield bytes(out)
        else:
            raise SyntheticHFError("no generator for dtype %s of %s" % (dtype, name))


def safetensors_header(entries, metadata=None):
    """entries: [(name, dtype, dims)] in file order. Returns (header bytes with its length
    prefix, data size)."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, dtype, dims in entries:
        size = hf.tensor_nbytes(dtype, dims)
        header[name] = {"dtype": dtype, "shape": list(dims), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def shard_tensors(tensors, shard_max_bytes):
    """Split the tensor list into files of at most shard_max_bytes (a larger tensor gets its own
    file); 0 keeps one file. Returns [(file name, [entries])], names as transformers writes them."""
    if not shard_max_bytes:
        return [("model.safetensors", list(tensors))]
    groups, current, size = [], [], 0
    for entry in tensors:
        nbytes = hf.tensor_nbytes(entry[1], entry[2])
        if current and size + nbytes > shard_max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(entry)
        size += nbytes
    if current:
        groups.append(current)
    if len(groups) == 1:
        return [("model.safetensors", groups[0])]
    total = len(groups)
    return [("model-%05d-of-%05d.safetensors" % (i + 1, total), g) for i, g in enumerate(groups)]


class ModelPlan:
    """Everything that will be written, computed before any byte is."""

    def __init__(self, opts):
        self.opts = opts
        self.tokenizer, self.n_tokens = tokenizer_files(opts["architecture"])
        self.config = model_config(opts, self.n_tokens)
        self.shape = hf.model_shape(self.config)
        self.tensors = hf.checkpoint_tensors(self.shape)
        self.shards = shard_tensors(self.tensors, opts["shard_max_mib"] << 20)
        self.options_sha256 = options_digest(opts)
        self.weights_bytes = sum(hf.tensor_nbytes(dt, dims) for _n, dt, dims in self.tensors)
        # scales are no parameters; an MXFP4 block byte holds two
        self.n_params = sum(_count(dims) * (2 if name.endswith("_blocks") else 1) for name, _dt, dims in self.tensors
                            if not name.endswith(("_scale_inv", "_scales")))

    def json_files(self):
        files = dict(self.tokenizer)
        files["config.json"] = self.config
        files["generation_config.json"] = {"eos_token_id": self.config["eos_token_id"],
                                           "pad_token_id": self.config["pad_token_id"]}
        if len(self.shards) > 1:
            weight_map = {}
            for file_name, entries in self.shards:
                for name, _dt, _dims in entries:
                    weight_map[name] = file_name
            files[INDEX_NAME] = {"metadata": {"total_size": self.weights_bytes}, "weight_map": weight_map}
        return files

    def file_names(self):
        return sorted(list(self.json_files()) + [name for name, _e in self.shards] + [MARKER_NAME])

    def marker(self):
        return {"managed_by": "gpulab.inference.synthetic_hf", "options_sha256": self.options_sha256,
                "options": self.opts, "generator_revision": GENERATOR_REVISION,
                "files": sorted(list(self.json_files()) + [name for name, _e in self.shards])}


def _count(dims):
    count = 1
    for d in dims:
        count *= d
    return count


def options_digest(opts):
    options = dict((k, opts[k]) for k in CONTENT_OPTIONS)
    options.update((k, opts[k]) for k in FAMILY_DEFAULTS if k in opts and opts[k] != FAMILY_DEFAULTS[k])
    canonical = json.dumps({"revision": GENERATOR_REVISION, "options": options}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def existing_state(directory, plan):
    """'absent' (no model there), 'current' (same options, every file present), 'stale'
    (written by this module with other options) or 'foreign' (a model this module did not write)."""
    marker_path = os.path.join(directory, MARKER_NAME)
    if not os.path.exists(marker_path):
        if os.path.exists(os.path.join(directory, "config.json")):
            return "foreign"
        return "absent"
    try:
        with open(marker_path, "rb") as handle:
            marker = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError, UnicodeDecodeError):
        return "foreign"
    if not isinstance(marker, dict) or marker.get("managed_by") != "gpulab.inference.synthetic_hf":
        return "foreign"
    if marker.get("options_sha256") != plan.options_sha256:
        return "stale"
    if not all(os.path.isfile(os.path.join(directory, name)) for name in plan.file_names()):
        return "stale"
    return "current"


def _write_atomic(directory, name, chunks, mode):
    def write(stream):
        for chunk in chunks:
            stream.write(chunk)
    atomic_write(os.path.join(directory, name), write, mode)


def write_model(directory, plan, mode=0o644):
    """Write every file through a temporary file and a rename; the marker last, so an interrupted
    run is rewritten on the next one."""
    marker_path = os.path.join(directory, MARKER_NAME)
    if os.path.exists(marker_path):
        os.unlink(marker_path)
    rng = random.Random(plan.opts["seed"])
    sparse = plan.opts.get("weights") == "sparse"
    for file_name, entries in plan.shards:
        header, size = safetensors_header(entries)
        if sparse:
            def hole(stream, header=header, size=size):
                stream.write(header)
                # the data's place as a hole: the file has its full size, reads as zeros, uses no disk
                stream.truncate(len(header) + size)
            atomic_write(os.path.join(directory, file_name), hole, mode)
            continue

        def chunks(entries=entries, header=header):
            yield header
            for name, dtype, dims in entries:
                yield from tensor_chunks(name, dtype, dims, rng)
        _write_atomic(directory, file_name, chunks(), mode)
    for name, content in sorted(plan.json_files().items()):
        _write_atomic(directory, name, [(json.dumps(content, indent=2, sort_keys=True) + "\n").encode("utf-8")], mode)
    _write_atomic(directory, MARKER_NAME, [(json.dumps(plan.marker(), indent=2, sort_keys=True) + "\n").encode("utf-8")], mode)


def _json_bytes(content):
    return len((json.dumps(content, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def write_sizes(plan):
    """[(file name, bytes)] of every file write_model writes, in the order it writes them."""
    sizes = []
    for file_name, entries in plan.shards:
        header, data = safetensors_header(entries)
        # a sparse file's hole takes no space
        sizes.append((file_name, len(header) + (0 if plan.opts.get("weights") == "sparse" else data)))
    for name, content in sorted(plan.json_files().items()):
        sizes.append((name, _json_bytes(content)))
    sizes.append((MARKER_NAME, _json_bytes(plan.marker())))
    return sizes


def space_needed(new_sizes, old_sizes):
    """The most the directory grows while write_model runs: each file is written beside the one it
    replaces (old_sizes: {name: bytes} now there), which is freed only by the rename."""
    peak = grown = 0
    for name, size in new_sizes:
        peak = max(peak, grown + size)
        grown += size - old_sizes.get(name, 0)
    return peak


def check_free_space(directory, plan, old_sizes, free_bytes=None):
    """Refuse before writing when the filesystem of directory cannot take the model; free_bytes
    (for tests) replaces what statvfs says."""
    if free_bytes is None:
        stat = os.statvfs(directory)
        free_bytes = stat.f_bavail * stat.f_frsize
    problem = free_space_problem(directory, free_bytes, space_needed(write_sizes(plan), old_sizes))
    if problem:
        raise SyntheticHFError(problem)


def stale_files(directory, plan):
    """Weight files of an earlier layout written by this module that the new one does not use."""
    wanted = set(plan.file_names())
    names = []
    for name in os.listdir(directory):
        if name not in wanted and (name.endswith(".safetensors") or name == INDEX_NAME):
            names.append(name)
    return sorted(names)
