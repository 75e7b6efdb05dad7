# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Random-weight GGUF models shaped like real architectures, to prove a cluster end to end.

Shapes and metadata keys follow llama.cpp's loader (src/models/minimax-m2.cpp,
src/llama-model.cpp load_hparams, conversion/minimax.py); shard names and keys follow
tools/gguf-split. Pure Python (no numpy): random bytes from a seeded PRNG become int8 quants
(Q8_0) or indices into a bounded fp16 table (F16), scaled so activations stay finite.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math
import os
import random
import re
import struct

from ansible_collections.gpulab.inference.plugins.module_utils import atomic_file, gguf

# bump when the bytes this module writes for the same options change
GENERATOR_REVISION = 1

KEY_OPTIONS_SHA256 = "gpulab.synthetic.options_sha256"
KEY_OPTIONS_JSON = "gpulab.synthetic.options"
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS_COUNT = "split.tensors.count"

QUANTIZATIONS = {
    # option value -> (ggml type of 2-D weights, general.file_type = llama_ftype)
    "Q8_0": (gguf.GGML_Q8_0, 7),
    "F16": (gguf.GGML_F16, 1),
}
ARCHITECTURES = ("minimax-m2", "deepseek2", "qwen3moe", "glm4moe", "gpt-oss", "qwen3next", "minimax-m3")
EXPERT_GATING_SIGMOID = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024
UINT32_MAX = (1 << 32) - 1  # the architecture keys are GGUF UINT32 values
SPLIT_COUNT_MAX = (1 << 16) - 1  # split.count is a GGUF UINT16 (tools/gguf-split)
ROW_BLOCK_VALUES = 32  # Q8_0 block: every weight row length must be a multiple of it

# Scaled down so a 2-core CPU runs it; MiniMax-M2 itself is 62 layers, hidden 3072, 48 heads,
# 8 KV heads, head dim 128, 256 experts (8 used), expert FFN 1536, vocab 200064.
DEFAULTS = {
    "architecture": "minimax-m2",
    "layers": 4,
    "hidden_size": 512,
    "attention_heads": 8,
    "kv_heads": 2,
    "head_dim": 128,
    "experts": 8,
    "experts_used": 2,
    "expert_ffn_size": 256,
    "context_length": 4096,
    "quantization": "Q8_0",
    "vocab_gguf": None,
    "chat_template": None,
    "seed": 42,
    "shards": 1,
}
# options that change the bytes written (path and force do not)
CONTENT_OPTIONS = tuple(sorted(k for k in DEFAULTS if k != "vocab_gguf"))

# minimal ChatML-style template, used when neither the option nor the vocabulary gives one
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CHUNK_BYTES = 4 << 20


class SyntheticModelError(Exception):
    """Options or files that cannot produce a model; the message names the value."""


# ---------------------------------------------------------------- options

def validate_options(options):
    """Check option values before anything is written; return a complete options dict."""
    opts = dict(DEFAULTS)
    opts.update(dict((k, v) for k, v in options.items() if v is not None))
    if opts["architecture"] not in ARCHITECTURES:
        raise SyntheticModelError("architecture=%r is not supported; use one of: %s"
                                  % (opts["architecture"], ", ".join(ARCHITECTURES)))
    if opts["quantization"] not in QUANTIZATIONS:
        raise SyntheticModelError("quantization=%r is not supported; use one of: %s"
                                  % (opts["quantization"], ", ".join(sorted(QUANTIZATIONS))))
    for name in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "experts",
                 "experts_used", "expert_ffn_size", "context_length", "shards"):
        value = opts[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SyntheticModelError("%s=%r must be a positive integer" % (name, value))
    for name in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "experts",
                 "experts_used", "expert_ffn_size", "context_length"):
        if opts[name] > UINT32_MAX:
            raise SyntheticModelError("%s=%d does not fit the GGUF UINT32 key it is written to (at most %d)"
                                      % (name, opts[name], UINT32_MAX))
    if opts["shards"] > SPLIT_COUNT_MAX:
        raise SyntheticModelError("shards=%d does not fit split.count, a GGUF UINT16 (at most %d)"
                                  % (opts["shards"], SPLIT_COUNT_MAX))
    if isinstance(opts["seed"], bool) or not isinstance(opts["seed"], int) or opts["seed"] < 0:
        raise SyntheticModelError("seed=%r must be a non-negative integer" % (opts["seed"],))
    if opts["layers"] > LLAMA_MAX_LAYERS:
        raise SyntheticModelError("layers=%d exceeds llama.cpp's limit of %d" % (opts["layers"], LLAMA_MAX_LAYERS))
    if opts["experts"] > LLAMA_MAX_EXPERTS:
        raise SyntheticModelError("experts=%d exceeds llama.cpp's limit of %d" % (opts["experts"], LLAMA_MAX_EXPERTS))
    if opts["experts_used"] > opts["experts"]:
        raise SyntheticModelError("experts_used=%d is larger than experts=%d; lower experts_used or raise experts"
                                  % (opts["experts_used"], opts["experts"]))
    for name in ("hidden_size", "head_dim", "expert_ffn_size"):
        if opts[name] % ROW_BLOCK_VALUES:
            raise SyntheticModelError("%s=%d is not divisible by %d (the Q8_0 block size every weight row "
                                      "must fill); use a multiple of %d"
                                      % (name, opts[name], ROW_BLOCK_VALUES, ROW_BLOCK_VALUES))
    if opts["architecture"] == "deepseek2" and opts["head_dim"] % (2 * ROW_BLOCK_VALUES):
        raise SyntheticModelError("head_dim=%d: deepseek2 splits it into rotary and non-rotary halves, each a "
                                  "multiple of %d; use a multiple of %d"
                                  % (opts["head_dim"], ROW_BLOCK_VALUES, 2 * ROW_BLOCK_VALUES))
    if opts["attention_heads"] % opts["kv_heads"]:
        raise SyntheticModelError("attention_heads=%d is not divisible by kv_heads=%d (grouped-query "
                                  "attention shares each KV head among a whole number of heads)"
                                  % (opts["attention_heads"], opts["kv_heads"]))
    if opts["chat_template"] is not None and not isinstance(opts["chat_template"], str):
        raise SyntheticModelError("chat_template must be a string, got %r" % (opts["chat_template"],))
    return opts


def shard_paths(path, shards):
    """Files of a model: `path` itself, or gguf-split names `<stem>-0000i-of-0000n.gguf`."""
    if not path.endswith(".gguf"):
        raise SyntheticModelError("path=%r must end with .gguf" % (path,))
    if shards == 1:
        return [path]
    if shards > 99999:
        raise SyntheticModelError("shards=%d exceeds gguf-split's limit of 99999" % shards)
    stem = path[:-len(".gguf")]
    return ["%s-%05d-of-%05d.gguf" % (stem, i + 1, shards) for i in range(shards)]


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def options_digest(opts, vocab_sha256):
    """sha256 over everything that decides the written bytes, and the canonical JSON hashed."""
    content = dict((k, opts[k]) for k in CONTENT_OPTIONS)
    content["vocab_gguf_sha256"] = vocab_sha256
    content["generator_revision"] = GENERATOR_REVISION
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest(), canonical


# ---------------------------------------------------------------- vocabulary

def builtin_vocab():
    """Byte-fallback SentencePiece vocabulary: <unk>, <s>, </s> and the 256 byte tokens.

    Enough for llama.cpp to tokenize any text (one token per byte) without a tokenizer file.
    """
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    token_types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE
    return [
        ("tokenizer.ggml.model", gguf.GGUFValue(gguf.STRING, "llama")),
        ("tokenizer.ggml.pre", gguf.GGUFValue(gguf.STRING, "default")),
        ("tokenizer.ggml.tokens", gguf.GGUFValue(gguf.ARRAY, tokens, gguf.STRING)),
        ("tokenizer.ggml.scores", gguf.GGUFValue(gguf.ARRAY, [0.0] * len(tokens), gguf.FLOAT32)),
        ("tokenizer.ggml.token_type", gguf.GGUFValue(gguf.ARRAY, token_types, gguf.INT32)),
        ("tokenizer.ggml.unknown_token_id", gguf.GGUFValue(gguf.UINT32, 0)),
        ("tokenizer.ggml.bos_token_id", gguf.GGUFValue(gguf.UINT32, 1)),
        ("tokenizer.ggml.eos_token_id", gguf.GGUFValue(gguf.UINT32, 2)),
        ("tokenizer.ggml.add_bos_token", gguf.GGUFValue(gguf.BOOL, True)),
    ]


def load_vocab(vocab_gguf):
    """tokenizer.* metadata of a (vocabulary-only) GGUF, in file order."""
    if not os.path.isfile(vocab_gguf):
        raise SyntheticModelError("vocab_gguf=%r does not exist on the target; point it at a vocabulary GGUF "
                                  "such as llama.cpp's models/ggml-vocab-qwen2.gguf" % (vocab_gguf,))
    try:
        parsed = gguf.read_gguf(vocab_gguf)
    except gguf.GGUFError as exc:
        raise SyntheticModelError("vocab_gguf: %s" % exc)
    vocab = [(k, v) for k, v in parsed.metadata.items() if k.startswith("tokenizer.")]
    tokens = parsed.metadata.get("tokenizer.ggml.tokens")
    if tokens is None or tokens.value_type != gguf.ARRAY or not tokens.value:
        raise SyntheticModelError("vocab_gguf=%r has no tokenizer.ggml.tokens array; it is not a vocabulary GGUF"
                                  % (vocab_gguf,))
    if tokens.item_type != gguf.STRING:
        raise SyntheticModelError("vocab_gguf=%r: metadata tokenizer.ggml.tokens is an array of GGUF %s, not of strings; "
                                  "it is not a vocabulary GGUF" % (vocab_gguf, gguf.VALUE_TYPE_NAMES[tokens.item_type]))
    template = parsed.metadata.get("tokenizer.chat_template")
    if template is not None and template.value_type != gguf.STRING:
        raise SyntheticModelError("vocab_gguf=%r: metadata tokenizer.chat_template is a GGUF %s, not a string"
                                  % (vocab_gguf, gguf.VALUE_TYPE_NAMES[template.value_type]))
    return vocab


def vocab_size(vocab):
    return len(dict(vocab)["tokenizer.ggml.tokens"].value)


# ---------------------------------------------------------------- shapes and metadata

class TensorPlan:
    """One tensor to generate: where it goes and how its values look."""

    __slots__ = ("info", "fill", "fan_in")

    def __init__(self, name, dims, ggml_type, fill, fan_in=1):
        self.info = gguf.TensorInfo(name, dims, ggml_type)
        self.fill = fill  # "random" or a constant float
        self.fan_in = fan_in


def minimax_m2_tensors(opts, n_vocab):
    """Tensors llama.cpp's llama_model_minimax_m2::load_arch_tensors creates, ggml dim order."""
    weight_type = QUANTIZATIONS[opts["quantization"]][0]
    n_embd = opts["hidden_size"]
    n_q = opts["head_dim"] * opts["attention_heads"]
    n_kv = opts["head_dim"] * opts["kv_heads"]
    n_ff = opts["expert_ffn_size"]
    n_expert = opts["experts"]

    def weight(name, dims):
        return TensorPlan(name, dims, weight_type, "random", dims[0])

    def norm(name, dims):
        return TensorPlan(name, dims, gguf.GGML_F32, 1.0)

    plan = [weight("token_embd.weight", (n_embd, n_vocab))]
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        plan.extend([
            norm(blk + "attn_norm.weight", (n_embd,)),
            weight(blk + "attn_q.weight", (n_embd, n_q)),
            weight(blk + "attn_k.weight", (n_embd, n_kv)),
            weight(blk + "attn_v.weight", (n_embd, n_kv)),
            weight(blk + "attn_output.weight", (n_q, n_embd)),
            norm(blk + "attn_q_norm.weight", (n_q,)),
            norm(blk + "attn_k_norm.weight", (n_kv,)),
            norm(blk + "ffn_norm.weight", (n_embd,)),
            # the router stays F32, as llama-quant leaves ffn_gate_inp unquantized
            TensorPlan(blk + "ffn_gate_inp.weight", (n_embd, n_expert), gguf.GGML_F32, "random", n_embd),
            TensorPlan(blk + "exp_probs_b.bias", (n_expert,), gguf.GGML_F32, 0.0),
            weight(blk + "ffn_gate_exps.weight", (n_embd, n_ff, n_expert)),
            weight(blk + "ffn_down_exps.weight", (n_ff, n_embd, n_expert)),
            weight(blk + "ffn_up_exps.weight", (n_embd, n_ff, n_expert)),
        ])
    plan.append(norm("output_norm.weight", (n_embd,)))
    plan.append(weight("output.weight", (n_embd, n_vocab)))
    return plan


def minimax_m2_metadata(opts):
    """Architecture keys read by load_hparams and llama_model_minimax_m2::load_arch_hparams."""
    arch = "minimax-m2"

    def u32(value):
        return gguf.GGUFValue(gguf.UINT32, value)

    def f32(value):
        return gguf.GGUFValue(gguf.FLOAT32, value)

    return [
        (arch + ".context_length", u32(opts["context_length"])),
        (arch + ".embedding_length", u32(opts["hidden_size"])),
        (arch + ".block_count", u32(opts["layers"])),
        # the loader sizes the expert tensors from feed_forward_length (n_ff)
        (arch + ".feed_forward_length", u32(opts["expert_ffn_size"])),
        (arch + ".expert_feed_forward_length", u32(opts["expert_ffn_size"])),
        (arch + ".attention.head_count", u32(opts["attention_heads"])),
        (arch + ".attention.head_count_kv", u32(opts["kv_heads"])),
        (arch + ".attention.key_length", u32(opts["head_dim"])),
        (arch + ".attention.value_length", u32(opts["head_dim"])),
        (arch + ".attention.layer_norm_rms_epsilon", f32(1e-6)),
        # MiniMax-M2 rotates half of each head (rotary_dim 64 of head_dim 128)
        (arch + ".rope.dimension_count", u32(opts["head_dim"] // 2)),
        (arch + ".rope.freq_base", f32(5000000.0)),
        (arch + ".expert_count", u32(opts["experts"])),
        (arch + ".expert_used_count", u32(opts["experts_used"])),
        (arch + ".expert_gating_func", u32(EXPERT_GATING_SIGMOID)),
    ]


# ---------------------------------------------------------------- the other families
# Each follows its loader in llama.cpp 0c1e570 (src/models/<arch>.cpp load_arch_hparams and
# load_arch_tensors). Family-specific sizes derive from the common options: one dense leading
# layer and one shared expert where the family has them (deepseek2, glm4moe, qwen3next's shared
# expert), gpt-oss's 128-token window on every other layer, qwen3next's full attention every
# fourth layer; deepseek2's MLA ranks are hidden_size / 4 and its per-head parts head_dim / 2;
# minimax-m3's indexer one head of head_dim per KV head over 64-token blocks, the top 2 and the
# last one kept (MiniMax-M3 itself: 60 layers, 3 dense, 128 experts top-4 and one shared, 4 KV heads).
SYNTHETIC_SWA_WINDOW = 128
SYNTHETIC_MSA_BLOCK, SYNTHETIC_MSA_TOP_K, SYNTHETIC_MSA_LOCAL = 64, 2, 1
SYNTHETIC_FULL_ATTENTION_INTERVAL = 4


def _u32(value):
    return gguf.GGUFValue(gguf.UINT32, value)


def _f32(value):
    return gguf.GGUFValue(gguf.FLOAT32, value)


def _common_metadata(arch, opts, rope_dims):
    return [
        (arch + ".context_length", _u32(opts["context_length"])),
        (arch + ".embedding_length", _u32(opts["hidden_size"])),
        (arch + ".block_count", _u32(opts["layers"])),
        (arch + ".feed_forward_length", _u32(opts["expert_ffn_size"])),
        (arch + ".expert_feed_forward_length", _u32(opts["expert_ffn_size"])),
        (arch + ".attention.head_count", _u32(opts["attention_heads"])),
        (arch + ".attention.layer_norm_rms_epsilon", _f32(1e-6)),
        (arch + ".rope.dimension_count", _u32(rope_dims)),
        (arch + ".rope.freq_base", _f32(1000000.0)),
        (arch + ".expert_count", _u32(opts["experts"])),
        (arch + ".expert_used_count", _u32(opts["experts_used"])),
    ]


def _dense_leading(opts):
    return 1 if opts["layers"] > 1 else 0


def _dense_and_shared_keys(arch, opts):
    """The dense leading layers and one shared expert, sigmoid gating with normalised weights."""
    return [(arch + ".leading_dense_block_count", _u32(_dense_leading(opts))), (arch + ".expert_shared_count", _u32(1)),
            (arch + ".expert_weights_scale", _f32(1.0)), (arch + ".expert_weights_norm", gguf.GGUFValue(gguf.BOOL, True)),
            (arch + ".expert_gating_func", _u32(EXPERT_GATING_SIGMOID))]


def _builders(opts):
    weight_type = QUANTIZATIONS[opts["quantization"]][0]

    def weight(name, dims):
        return TensorPlan(name, dims, weight_type, "random", dims[0])

    def f32(name, dims, fill="random"):
        return TensorPlan(name, dims, gguf.GGML_F32, fill, dims[0])

    def norm(name, dims):
        return TensorPlan(name, dims, gguf.GGML_F32, 1.0)
    return weight, f32, norm


def _moe_ffn(blk, opts, weight, f32, shared=0, probs_bias=False):
    n_embd, n_ff, n_expert = opts["hidden_size"], opts["expert_ffn_size"], opts["experts"]
    plan = [TensorPlan(blk + "ffn_gate_inp.weight", (n_embd, n_expert), gguf.GGML_F32, "random", n_embd)]
    if probs_bias:
        plan.append(TensorPlan(blk + "exp_probs_b.bias", (n_expert,), gguf.GGML_F32, 0.0))
    plan += [
        weight(blk + "ffn_gate_exps.weight", (n_embd, n_ff, n_expert)),
        weight(blk + "ffn_down_exps.weight", (n_ff, n_embd, n_expert)),
        weight(blk + "ffn_up_exps.weight", (n_embd, n_ff, n_expert)),
    ]
    if shared:
        plan += [
            weight(blk + "ffn_gate_shexp.weight", (n_embd, n_ff * shared)),
            weight(blk + "ffn_down_shexp.weight", (n_ff * shared, n_embd)),
            weight(blk + "ffn_up_shexp.weight", (n_embd, n_ff * shared)),
        ]
    return plan


def _dense_ffn(blk, opts, weight):
    n_embd, n_ff = opts["hidden_size"], opts["expert_ffn_size"]
    return [weight(blk + "ffn_gate.weight", (n_embd, n_ff)), weight(blk + "ffn_down.weight", (n_ff, n_embd)),
            weight(blk + "ffn_up.weight", (n_embd, n_ff))]


def _ends(opts, n_vocab, weight, norm, body):
    n_embd = opts["hidden_size"]
    return ([weight("token_embd.weight", (n_embd, n_vocab))] + body
            + [norm("output_norm.weight", (n_embd,)), weight("output.weight", (n_embd, n_vocab))])


def _mla_sizes(opts):
    """(q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head) of a synthetic deepseek2."""
    half = opts["head_dim"] // 2
    rank = max(ROW_BLOCK_VALUES, opts["hidden_size"] // 4 // ROW_BLOCK_VALUES * ROW_BLOCK_VALUES)
    return rank, rank, half, half, half


def deepseek2_tensors(opts, n_vocab):
    """src/models/deepseek2.cpp load_arch_tensors with MLA (split wk_b / wv_b) and q_lora_rank."""
    weight, f32, norm = _builders(opts)
    n_embd, n_head = opts["hidden_size"], opts["attention_heads"]
    q_lora, kv_lora, nope, rope, v_head = _mla_sizes(opts)
    body = []
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        body += [
            norm(blk + "attn_norm.weight", (n_embd,)),
            norm(blk + "attn_q_a_norm.weight", (q_lora,)),
            norm(blk + "attn_kv_a_norm.weight", (kv_lora,)),
            weight(blk + "attn_q_a.weight", (n_embd, q_lora)),
            weight(blk + "attn_q_b.weight", (q_lora, n_head * (nope + rope))),
            weight(blk + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope)),
            weight(blk + "attn_k_b.weight", (nope, kv_lora, n_head)),
            weight(blk + "attn_v_b.weight", (kv_lora, v_head, n_head)),
            weight(blk + "attn_output.weight", (n_head * v_head, n_embd)),
            norm(blk + "ffn_norm.weight", (n_embd,)),
        ]
        if il < _dense_leading(opts):
            body += _dense_ffn(blk, opts, weight)
        else:
            body += _moe_ffn(blk, opts, weight, f32, shared=1, probs_bias=True)
    return _ends(opts, n_vocab, weight, norm, body)


def deepseek2_metadata(opts):
    """src/models/deepseek2.cpp load_arch_hparams: the MLA GGUF keeps one KV head whose key is
    kv_lora_rank + rope and value kv_lora_rank; key_length_mla / value_length_mla the heads."""
    arch = "deepseek2"
    q_lora, kv_lora, nope, rope, v_head = _mla_sizes(opts)
    return _common_metadata(arch, opts, rope) + [
        (arch + ".attention.head_count_kv", _u32(1)),
        (arch + ".attention.key_length", _u32(kv_lora + rope)),
        (arch + ".attention.value_length", _u32(kv_lora)),
        (arch + ".attention.key_length_mla", _u32(nope + rope)),
        (arch + ".attention.value_length_mla", _u32(v_head)),
        (arch + ".attention.q_lora_rank", _u32(q_lora)),
        (arch + ".attention.kv_lora_rank", _u32(kv_lora)),
    ] + _dense_and_shared_keys(arch, opts)


def _gqa_attention(blk, opts, weight, norm, q_factor=1, qk_norm=True):
    n_embd, hd = opts["hidden_size"], opts["head_dim"]
    n_q, n_kv = hd * opts["attention_heads"], hd * opts["kv_heads"]
    plan = [
        weight(blk + "attn_q.weight", (n_embd, n_q * q_factor)),
        weight(blk + "attn_k.weight", (n_embd, n_kv)),
        weight(blk + "attn_v.weight", (n_embd, n_kv)),
        weight(blk + "attn_output.weight", (n_q, n_embd)),
    ]
    if qk_norm:
        plan += [norm(blk + "attn_q_norm.weight", (hd,)), norm(blk + "attn_k_norm.weight", (hd,))]
    return plan


def _gqa_keys(arch, opts):
    return [(arch + ".attention.head_count_kv", _u32(opts["kv_heads"])),
            (arch + ".attention.key_length", _u32(opts["head_dim"])),
            (arch + ".attention.value_length", _u32(opts["head_dim"]))]


def qwen3moe_tensors(opts, n_vocab):
    """src/models/qwen3moe.cpp load_arch_tensors."""
    weight, f32, norm = _builders(opts)
    n_embd = opts["hidden_size"]
    body = []
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        body += [norm(blk + "attn_norm.weight", (n_embd,))] + _gqa_attention(blk, opts, weight, norm)
        body += [norm(blk + "ffn_norm.weight", (n_embd,))] + _moe_ffn(blk, opts, weight, f32)
    return _ends(opts, n_vocab, weight, norm, body)


def qwen3moe_metadata(opts):
    return _common_metadata("qwen3moe", opts, opts["head_dim"]) + _gqa_keys("qwen3moe", opts)


def glm4moe_tensors(opts, n_vocab, ffn_norm="post_attention_norm", sparse=None):
    """src/models/glm4-moe.cpp load_arch_tensors (no nextn layer); minimax-m3.cpp's are these with
    ffn_norm and the tensors sparse(blk) on each MoE layer."""
    weight, f32, norm = _builders(opts)
    n_embd = opts["hidden_size"]
    body = []
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        body += [norm(blk + "attn_norm.weight", (n_embd,))] + _gqa_attention(blk, opts, weight, norm)
        body.append(norm(blk + ffn_norm + ".weight", (n_embd,)))
        if il < _dense_leading(opts):
            body += _dense_ffn(blk, opts, weight)
        else:
            body += _moe_ffn(blk, opts, weight, f32, shared=1, probs_bias=True) + (sparse(blk) if sparse else [])
    return _ends(opts, n_vocab, weight, norm, body)


def glm4moe_metadata(opts):
    arch = "glm4moe"
    return _common_metadata(arch, opts, opts["head_dim"] // 2) + _gqa_keys(arch, opts) + _dense_and_shared_keys(arch, opts)


def gpt_oss_tensors(opts, n_vocab):
    """src/models/openai-moe.cpp load_arch_tensors: attention sinks, biases on the output and
    the experts (the experts are Q8_0 here, MXFP4 in the released GGUFs)."""
    weight, f32, norm = _builders(opts)
    n_embd, n_ff, n_expert = opts["hidden_size"], opts["expert_ffn_size"], opts["experts"]
    body = []
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        body += [norm(blk + "attn_norm.weight", (n_embd,)), norm(blk + "post_attention_norm.weight", (n_embd,))]
        body += _gqa_attention(blk, opts, weight, norm, qk_norm=False)
        body += [
            TensorPlan(blk + "attn_sinks.weight", (opts["attention_heads"],), gguf.GGML_F32, 0.0),
            TensorPlan(blk + "attn_output.bias", (n_embd,), gguf.GGML_F32, 0.0),
            TensorPlan(blk + "ffn_gate_inp.weight", (n_embd, n_expert), gguf.GGML_F32, "random", n_embd),
            TensorPlan(blk + "ffn_gate_inp.bias", (n_expert,), gguf.GGML_F32, 0.0),
            weight(blk + "ffn_gate_exps.weight", (n_embd, n_ff, n_expert)),
            weight(blk + "ffn_down_exps.weight", (n_ff, n_embd, n_expert)),
            weight(blk + "ffn_up_exps.weight", (n_embd, n_ff, n_expert)),
            TensorPlan(blk + "ffn_gate_exps.bias", (n_ff, n_expert), gguf.GGML_F32, 0.0),
            TensorPlan(blk + "ffn_down_exps.bias", (n_embd, n_expert), gguf.GGML_F32, 0.0),
            TensorPlan(blk + "ffn_up_exps.bias", (n_ff, n_expert), gguf.GGML_F32, 0.0),
        ]
    return _ends(opts, n_vocab, weight, norm, body)


def gpt_oss_metadata(opts):
    arch = "gpt-oss"
    return _common_metadata(arch, opts, opts["head_dim"]) + _gqa_keys(arch, opts) + [
        (arch + ".attention.sliding_window", _u32(SYNTHETIC_SWA_WINDOW)),
    ]


def _qwen3next_ssm(opts):
    """(d_conv, d_state = head dim, n_group = key heads, dt_rank = value heads, d_inner)."""
    heads_k = max(1, opts["kv_heads"])
    heads_v = opts["attention_heads"]
    return 4, opts["head_dim"], heads_k, heads_v, opts["head_dim"] * heads_v


def qwen3next_tensors(opts, n_vocab):
    """src/models/qwen3next.cpp load_arch_tensors: gated attention (Q twice as wide) every
    fourth layer, gated delta-net layers between, routed plus one shared expert everywhere."""
    weight, f32, norm = _builders(opts)
    n_embd, n_ff = opts["hidden_size"], opts["expert_ffn_size"]
    d_conv, head, n_k, n_v, d_inner = _qwen3next_ssm(opts)
    key_dim, value_dim = head * n_k, head * n_v
    body = []
    for il in range(opts["layers"]):
        blk = "blk.%d." % il
        body += [norm(blk + "attn_norm.weight", (n_embd,)), norm(blk + "post_attention_norm.weight", (n_embd,))]
        if (il + 1) % SYNTHETIC_FULL_ATTENTION_INTERVAL == 0:
            body += _gqa_attention(blk, opts, weight, norm, q_factor=2)
        else:
            body += [
                weight(blk + "attn_qkv.weight", (n_embd, key_dim * 2 + value_dim)),
                weight(blk + "attn_gate.weight", (n_embd, value_dim)),
                TensorPlan(blk + "ssm_conv1d.weight", (d_conv, key_dim * 2 + value_dim), gguf.GGML_F32, "random",
                           d_conv),
                TensorPlan(blk + "ssm_dt.bias", (n_v,), gguf.GGML_F32, 0.0),
                TensorPlan(blk + "ssm_a", (n_v,), gguf.GGML_F32, -1.0),
                weight(blk + "ssm_ba.weight", (n_embd, n_v * 2)),
                norm(blk + "ssm_norm.weight", (head,)),
                weight(blk + "ssm_out.weight", (value_dim, n_embd)),
            ]
        body += _moe_ffn(blk, opts, weight, f32)
        body += [
            TensorPlan(blk + "ffn_gate_inp_shexp.weight", (n_embd,), gguf.GGML_F32, "random", n_embd),
            weight(blk + "ffn_gate_shexp.weight", (n_embd, n_ff)),
            weight(blk + "ffn_up_shexp.weight", (n_embd, n_ff)),
            weight(blk + "ffn_down_shexp.weight", (n_ff, n_embd)),
        ]
    return _ends(opts, n_vocab, weight, norm, body)


def qwen3next_metadata(opts):
    arch = "qwen3next"
    d_conv, head, n_k, n_v, d_inner = _qwen3next_ssm(opts)
    return _common_metadata(arch, opts, opts["head_dim"] // 4) + _gqa_keys(arch, opts) + [
        (arch + ".expert_shared_feed_forward_length", _u32(opts["expert_ffn_size"])),
        (arch + ".ssm.conv_kernel", _u32(d_conv)),
        (arch + ".ssm.inner_size", _u32(d_inner)),
        (arch + ".ssm.state_size", _u32(head)),
        (arch + ".ssm.time_step_rank", _u32(n_v)),
        (arch + ".ssm.group_count", _u32(n_k)),
        (arch + ".full_attention_interval", _u32(SYNTHETIC_FULL_ATTENTION_INTERVAL)),
    ]


def minimax_m3_tensors(opts, n_vocab):
    """src/models/minimax-m3.cpp load_arch_tensors: glm4moe's layers with ffn_norm and the MSA indexer
    on the MoE layers (F32, as conversion/minimax.py MiniMaxM3Model.tensor_force_quant keeps it)."""
    _weight, f32, norm = _builders(opts)
    n_embd, hd = opts["hidden_size"], opts["head_dim"]
    return glm4moe_tensors(opts, n_vocab, "ffn_norm", lambda blk: [
        f32(blk + "indexer.q_proj.weight", (n_embd, hd * opts["kv_heads"])), f32(blk + "indexer.k_proj.weight", (n_embd, hd)),
        norm(blk + "indexer.q_norm.weight", (hd,)), norm(blk + "indexer.k_norm.weight", (hd,))])


def minimax_m3_metadata(opts):
    """llama_model_minimax_m3::load_arch_hparams; the keys conversion/minimax.py MiniMaxM3Model writes."""
    arch = "minimax-m3"
    return _common_metadata(arch, opts, opts["head_dim"] // 2) + _gqa_keys(arch, opts) + _dense_and_shared_keys(arch, opts) + [
        (arch + ".attention.indexer.head_count", _u32(opts["kv_heads"])),
        (arch + ".attention.indexer.key_length", _u32(opts["head_dim"])),
        (arch + ".attention.indexer.top_k", _u32(SYNTHETIC_MSA_TOP_K)),
        (arch + ".attention.indexer.block_size", _u32(SYNTHETIC_MSA_BLOCK)),
        (arch + ".attention.indexer.local_blocks", _u32(SYNTHETIC_MSA_LOCAL)),
    ]


ARCH_BUILDERS = {
    "minimax-m2": (minimax_m2_tensors, minimax_m2_metadata),
    "deepseek2": (deepseek2_tensors, deepseek2_metadata),
    "qwen3moe": (qwen3moe_tensors, qwen3moe_metadata),
    "glm4moe": (glm4moe_tensors, glm4moe_metadata),
    "gpt-oss": (gpt_oss_tensors, gpt_oss_metadata),
    "qwen3next": (qwen3next_tensors, qwen3next_metadata),
    "minimax-m3": (minimax_m3_tensors, minimax_m3_metadata),
}


def assign_shards(sizes, shards):
    """Shard index per tensor, in order: about equal bytes per shard, none empty (gguf-split keeps
    tensor order and puts every tensor whole into one file)."""
    if shards > len(sizes):
        raise SyntheticModelError("shards=%d is more than the model's %d tensors" % (shards, len(sizes)))
    total = float(sum(sizes))
    assignment = []
    current = 0
    in_current = 0
    cumulative = 0
    for index, size in enumerate(sizes):
        remaining_tensors = len(sizes) - index
        shards_after = shards - current - 1
        if in_current and shards_after and (
                cumulative + size / 2.0 > total * (current + 1) / shards
                or remaining_tensors == shards_after):
            current += 1
            in_current = 0
        assignment.append(current)
        in_current += 1
        cumulative += size
    return assignment


class ModelPlan:
    """Everything decided before writing: files, their metadata and tensors, totals."""

    def __init__(self, opts, path, vocab, vocab_sha256):
        self.opts = opts
        tensors_for, metadata_for = ARCH_BUILDERS[opts["architecture"]]
        self.n_vocab = vocab_size(vocab)
        self.tensors = tensors_for(opts, self.n_vocab)
        self.options_sha256, self.options_json = options_digest(opts, vocab_sha256)
        self.paths = shard_paths(path, opts["shards"])
        self.n_params = sum(t.info.n_elements for t in self.tensors)

        vocab = list(vocab)
        keys = dict(vocab)
        if opts["chat_template"] is not None:
            vocab = [(k, v) for k, v in vocab if k != "tokenizer.chat_template"]
            vocab.append(("tokenizer.chat_template", gguf.GGUFValue(gguf.STRING, opts["chat_template"])))
            self.chat_template_source = "option"
        elif "tokenizer.chat_template" in keys:
            self.chat_template_source = "vocab_gguf"
        else:
            vocab.append(("tokenizer.chat_template", gguf.GGUFValue(gguf.STRING, DEFAULT_CHAT_TEMPLATE)))
            self.chat_template_source = "default"

        arch = opts["architecture"]
        marker = [
            (KEY_OPTIONS_SHA256, gguf.GGUFValue(gguf.STRING, self.options_sha256)),
            (KEY_OPTIONS_JSON, gguf.GGUFValue(gguf.STRING, self.options_json)),
        ]
        main_metadata = [
            ("general.architecture", gguf.GGUFValue(gguf.STRING, arch)),
            ("general.type", gguf.GGUFValue(gguf.STRING, "model")),
            ("general.name", gguf.GGUFValue(gguf.STRING, "gpulab synthetic %s (random weights)" % arch)),
            ("general.file_type", gguf.GGUFValue(gguf.UINT32, QUANTIZATIONS[opts["quantization"]][1])),
            ("general.quantization_version", gguf.GGUFValue(gguf.UINT32, 2)),
        ] + metadata_for(opts) + marker + vocab

        shards = opts["shards"]
        assignment = assign_shards([t.info.nbytes for t in self.tensors], shards)
        self.files = []  # (path, metadata, [TensorPlan])
        for index, shard_path in enumerate(self.paths):
            # like gguf-split: all metadata in the first file, split keys in every file
            metadata = list(main_metadata) if index == 0 else list(marker)
            if shards > 1:
                metadata += [
                    (KEY_SPLIT_NO, gguf.GGUFValue(gguf.UINT16, index)),
                    (KEY_SPLIT_COUNT, gguf.GGUFValue(gguf.UINT16, shards)),
                    (KEY_SPLIT_TENSORS_COUNT, gguf.GGUFValue(gguf.INT32, len(self.tensors))),
                ]
            members = [t for t, s in zip(self.tensors, assignment) if s == index]
            self.files.append((shard_path, metadata, members))

    def file_sizes(self):
        """Exact bytes of each file (headers are encoded in memory, tensor data is counted)."""
        sizes = []
        for _path, metadata, members in self.files:
            infos = [t.info for t in members]
            header = gguf.encode_header(metadata, infos)
            sizes.append(len(header) + gguf.layout_tensors(infos))
        return sizes


# ---------------------------------------------------------------- tensor data

def _randbytes(rng, count):
    if hasattr(rng, "randbytes"):
        return rng.randbytes(count)
    return rng.getrandbits(count * 8).to_bytes(count, "little") if count else b""


def _table_translators(values, fmt):
    """Per-byte translate tables mapping a random byte to each byte of fmt-packed values[b]."""
    packed = [struct.pack(fmt, v) for v in values]
    width = len(packed[0])
    return [bytes(p[i] for p in packed) for i in range(width)]


def _value_table(std):
    """256 evenly spaced values with the given standard deviation (uniform on [-a, a])."""
    bound = std * math.sqrt(3.0)
    return [bound * (2.0 * b / 255.0 - 1.0) for b in range(256)]


def _from_table(rng, count, translators):
    width = len(translators)
    picks = _randbytes(rng, count)
    out = bytearray(count * width)
    for i, table in enumerate(translators):
        out[i::width] = picks.translate(table)
    return out


def tensor_chunks(plan, seed):
    """Bytes of one tensor, chunk by chunk; deterministic per (seed, tensor name)."""
    info = plan.info
    _name, block_values, block_bytes = gguf.GGML_TYPES[info.ggml_type]
    n_blocks = info.n_elements // block_values
    blocks_per_chunk = max(1, CHUNK_BYTES // block_bytes)
    if plan.fill != "random":
        fmt = "<f" if info.ggml_type == gguf.GGML_F32 else "<e"
        unit = struct.pack(fmt, plan.fill)
        for start in range(0, n_blocks, blocks_per_chunk):
            yield unit * min(blocks_per_chunk, n_blocks - start)
        return
    rng = random.Random("%d:%s" % (seed, info.name))
    std = 1.0 / math.sqrt(plan.fan_in)  # keeps each matmul's output near unit scale
    if info.ggml_type == gguf.GGML_Q8_0:
        # uniform int8 has std ~73.9; one fp16 scale per tensor gives the wanted std
        scale = struct.pack("<e", std / 73.9)
        for start in range(0, n_blocks, blocks_per_chunk):
            count = min(blocks_per_chunk, n_blocks - start)
            quants = _randbytes(rng, 32 * count)
            out = bytearray(34 * count)
            out[0::34] = scale[0:1] * count
            out[1::34] = scale[1:2] * count
            for j in range(32):
                out[2 + j::34] = quants[j::32]
            yield out
        return
    fmt = "<f" if info.ggml_type == gguf.GGML_F32 else "<e"
    translators = _table_translators(_value_table(std), fmt)
    for start in range(0, n_blocks, blocks_per_chunk):
        yield _from_table(rng, min(blocks_per_chunk, n_blocks - start), translators)


# ---------------------------------------------------------------- files

def existing_state(paths, options_sha256):
    """'absent', 'current' (every file ours with this options hash), or 'stale' (ours, other
    options). A file at a target path that is not a synthetic model raises SyntheticModelError."""
    present = [p for p in paths if os.path.exists(p)]
    if not present:
        return "absent"
    current = len(present) == len(paths)
    for path in present:
        try:
            parsed = gguf.read_gguf(path)
        except gguf.GGUFError as exc:
            raise SyntheticModelError("%s; remove the file or set force=true to overwrite it" % exc)
        marker = parsed.get(KEY_OPTIONS_SHA256)
        if marker is None:
            raise SyntheticModelError("%s exists and is not a synthetic model written by gpulab.inference.synthetic_gguf "
                                      "(no %s key); refusing to overwrite it: choose another path or set force=true"
                                      % (path, KEY_OPTIONS_SHA256))
        if marker != options_sha256:
            current = False
    return "current" if current else "stale"


def temp_prefix(path):
    """Prefix of the temporary files write_model writes `path` through."""
    return atomic_file.temp_prefix(path)


def is_temp_file_of(name, path):
    """True when the file name `name` (in path's directory) is a temporary file of write_model for
    `path` (tempfile.mkstemp: prefix, random letters, digits or _, suffix .tmp)."""
    return re.match(r"\A%s[A-Za-z0-9_]+\.tmp\Z" % re.escape(temp_prefix(path)), name) is not None


def stale_temp_files(paths):
    """[(path, bytes)] of temporary files an interrupted run left beside the model's files."""
    stale = []
    for model_path in paths:
        directory = os.path.dirname(os.path.abspath(model_path))
        try:
            names = sorted(os.listdir(directory))
        except (IOError, OSError):
            continue
        for name in names:
            candidate = os.path.join(directory, name)
            if is_temp_file_of(name, model_path) and os.path.isfile(candidate) and not os.path.islink(candidate):
                stale.append((candidate, os.path.getsize(candidate)))
    return stale


def existing_directory(path):
    """path itself, or its nearest ancestor that exists (where the free space will come from)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_free_space(directory, needed_bytes, reclaimable_bytes=0):
    """Fail before writing when the filesystem cannot hold the new files (written beside the
    old ones, which are replaced only at the end); reclaimable_bytes are held by stale
    temporary files that are removed first."""
    stat = os.statvfs(directory)
    problem = atomic_file.free_space_problem(directory, stat.f_bavail * stat.f_frsize, needed_bytes, reclaimable_bytes)
    if problem:
        raise SyntheticModelError(problem)


def _shard_writer(metadata, members, seed):
    """write(stream) for one shard: its header, then its tensors' data."""
    by_info = dict((id(t.info), t) for t in members)

    def write(stream):
        gguf.write_gguf(stream, metadata, [t.info for t in members], lambda info: tensor_chunks(by_info[id(info)], seed))
    return write


def write_model(plan, seed):
    """Write every file to a temp file beside it, then rename them all into place, so the shards
    are replaced together (a reader never sees new and old shards side by side)."""
    temps = []
    try:
        for path, metadata, members in plan.files:
            temps.append((atomic_file.write_temp(os.path.abspath(path), _shard_writer(metadata, members, seed), 0o644),
                          path))
        for temp_path, path in temps:
            os.replace(temp_path, path)
        for directory in sorted(set(os.path.dirname(os.path.abspath(path)) for _temp, path in temps)):
            atomic_file.fsync_directory(directory)
    finally:
        for temp_path, _path in temps:
            if os.path.exists(temp_path):
                os.unlink(temp_path)
