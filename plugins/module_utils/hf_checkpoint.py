# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a Hugging Face checkpoint: the model's shape from config.json, the tensors a checkpoint of that
shape holds, the weight files an index names and a safetensors header.

Pure functions over parsed JSON and bytes (the modules read the files); vllm_plan judges layouts on
what they return, synthetic_hf writes checkpoints from it, model_header reads remote headers with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import struct

from ansible_collections.gpulab.inference.plugins.module_utils import model_family


class CheckpointError(ValueError):
    """Bad input: the message names the offending file or field and what to do."""


# safetensors dtype names -> bytes per element (safetensors/src/tensor.rs Dtype)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
TORCH_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "half": 2, "float": 4}
TORCH_DTYPE_SAFETENSORS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}

# Architectures whose checkpoint layout is known (config.json `architectures[0]`).
MOE_ARCHITECTURES = ("MiniMaxM2ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM",
                     "DeepseekV2ForCausalLM", "Glm4MoeForCausalLM", "GptOssForCausalLM", "Qwen3NextForCausalLM") + model_family.HF_SPARSE
MLA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")
DENSE_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")


# --- the model --------------------------------------------------------------------------------

def _int(config, key, where, default=None):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError("config.json of %s: %s is %r, expected a positive integer" % (where, key, value))
    return value


def model_shape(config, where="the model"):
    """The numbers the rules need, from a parsed config.json (dict).

    Returns a dict: architecture, model_type, layers, hidden_size, heads, kv_heads, head_dim,
    vocab_size, experts (0 for a dense model), experts_used, expert_ffn_size, ffn_size (dense MLP),
    tie_word_embeddings, dtype (torch name), dtype_bytes, quant (None or dict method, block [n, k],
    modules_to_not_convert), max_position_embeddings.
    """
    if not isinstance(config, dict):
        raise CheckpointError("config.json of %s is not a JSON object" % where)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise CheckpointError("config.json of %s: architectures is %r, expected a list of class names such as "
                              "[\"MiniMaxM2ForCausalLM\"]" % (where, architectures))
    architecture = architectures[0] if architectures else ""
    heads = _int(text, "num_attention_heads", where)
    hidden = _int(text, "hidden_size", where)
    shape = {
        "architecture": architecture,
        "model_type": config.get("model_type", ""),
        "layers": _int(text, "num_hidden_layers", where),
        "hidden_size": hidden,
        "heads": heads,
        "kv_heads": _int(text, "num_key_value_heads", where, heads),
        "head_dim": _int(text, "head_dim", where, hidden // heads if hidden % heads == 0 else None),
        "vocab_size": _int(text, "vocab_size", where),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        "max_position_embeddings": _int(text, "max_position_embeddings", where) if text.get("max_position_embeddings")
        is not None else None,
        "attention_bias": bool(text.get("attention_bias", architecture == "Qwen2ForCausalLM")),
        "qk_norm": architecture in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM",
                                    "Qwen3NextForCausalLM") or bool(text.get("use_qk_norm")),
    }
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16"
    if dtype not in TORCH_DTYPE_BYTES:
        raise CheckpointError("config.json of %s: torch_dtype %r is not one of %s" % (where, dtype, sorted(TORCH_DTYPE_BYTES)))
    shape["dtype"] = dtype
    shape["dtype_bytes"] = TORCH_DTYPE_BYTES[dtype]
    # Experts: MiniMax-M2, Mixtral and gpt-oss name them num_local_experts with intermediate_size
    # per expert; Qwen3-MoE and Qwen3-Next num_experts with moe_intermediate_size; DeepSeek-V3,
    # Kimi-K2 and GLM-4.x MoE n_routed_experts with moe_intermediate_size
    # (vllm/model_executor/models/deepseek_v2.py DeepseekV2MoE, glm4_moe.py Glm4MoE).
    experts = text.get("num_local_experts") or text.get("num_experts") or text.get("n_routed_experts") or 0
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 0:
        # A count in quotes would otherwise plan an MoE model as a dense one.
        raise CheckpointError("config.json of %s: num_local_experts / num_experts is %r, expected a whole number "
                              "(0 or absent for a dense model)" % (where, experts))
    shape["experts"] = experts
    if shape["experts"]:
        shape["experts_used"] = _int(text, "num_experts_per_tok", where)
        key = "moe_intermediate_size" if "moe_intermediate_size" in text else "intermediate_size"
        shape["expert_ffn_size"] = _int(text, key, where)
        shape["ffn_size"] = 0
    else:
        shape["experts_used"] = 0
        shape["expert_ffn_size"] = 0
        shape["ffn_size"] = _int(text, "intermediate_size", where)
    # Dense leading layers (first_k_dense_replace: DeepSeek-V3, GLM-4.x MoE) have an MLP of
    # intermediate_size; shared experts (n_shared_experts of moe_intermediate_size each; Qwen3-Next's
    # one of shared_expert_intermediate_size) run for every token beside the routed ones.
    shape["dense_leading"] = _whole(text, "first_k_dense_replace", where) if shape["experts"] else 0
    m3 = architecture in model_family.HF_SPARSE
    if m3:  # MiniMax-M3 (nvidia/model.py _is_moe_layer): layers whose moe_layer_freq is 0 have a dense MLP
        freq = list(text.get("moe_layer_freq", model_family.M3_FREQ)[:shape["layers"]])
        shape["dense_leading"] = (freq + [1]).index(1)
        if freq != sorted(freq):
            raise CheckpointError("config.json of %s: moe_layer_freq %r is not dense layers, then MoE ones" % (where, freq))
    shape["dense_ffn_size"] = _int(text, "dense_intermediate_size" if m3 else "intermediate_size", where) if shape["dense_leading"] else 0
    shape["shared_experts"] = _whole(text, "n_shared_experts", where)
    shape["shared_expert_ffn_size"] = shape["expert_ffn_size"] * shape["shared_experts"]
    if text.get("shared_expert_intermediate_size"):
        shape["shared_experts"] = 1
        shape["shared_expert_ffn_size"] = _int(text, "shared_expert_intermediate_size", where)
    shape["mtp_layers"] = _whole(text, "num_nextn_predict_layers", where)
    if architecture == "Qwen3NextForCausalLM":
        shape["linear_attention"] = dict((key, _int(text, key, where)) for key in (
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim"))
    if architecture in MLA_ARCHITECTURES:
        shape["mla"] = dict((key, _int(text, key, where)) for key in (
            "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
        shape["mla"]["q_lora_rank"] = _whole(text, "q_lora_rank", where)
    try:
        shape["structure"] = model_family.hf_structure(text, architecture, shape["layers"], shape["kv_heads"],
                                                       shape["head_dim"])
    except model_family.FamilyError as exc:
        raise CheckpointError("config.json of %s: %s" % (where, str(exc).replace("config.json: ", "")))
    shape["quant"] = quantization(config.get("quantization_config"), where)
    return shape


def _whole(config, key, where):
    """A count that may be absent or null (0), else a whole number >= 0."""
    value = config.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError("config.json of %s: %s is %r, expected a whole number >= 0" % (where, key, value))
    return value


def quantization(qconfig, where="the model"):
    """The quantisation that matters to the rules: method and FP8 block [n, k], or None."""
    if not qconfig:
        return None
    if not isinstance(qconfig, dict):
        raise CheckpointError("config.json of %s: quantization_config is not an object" % where)
    method = qconfig.get("quant_method")
    block = qconfig.get("weight_block_size")
    if block is not None:
        if (not isinstance(block, list) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise CheckpointError("config.json of %s: quantization_config.weight_block_size is %r, "
                                  "expected two positive integers [n, k]" % (where, block))
    return {
        "method": method,
        "block": list(block) if block else None,
        "modules_to_not_convert": list(qconfig.get("modules_to_not_convert") or qconfig.get("ignored_layers") or []),
    }


# --- the checkpoint's tensors -----------------------------------------------------------------

def checkpoint_tensors(shape):
    """The tensors a Hugging Face checkpoint of this shape holds: a list of (name, dtype, dims).

    Used to estimate per-GPU weights when no safetensors are present, and by synthetic_hf to
    write them. FP8 block checkpoints (quant method fp8 with weight_block_size) store the linear
    weights of the decoder layers as F8_E4M3 with a float32 `<name>_scale_inv` per [n, k] block
    (vllm/model_executor/layers/quantization/fp8.py registers `weight_scale_inv`); embeddings,
    norms, the router and lm_head stay in the model's dtype.
    """
    architecture = shape["architecture"]
    if architecture not in MOE_ARCHITECTURES + DENSE_ARCHITECTURES:
        raise CheckpointError(
            "architecture %r has no known checkpoint layout (known: %s); give the model's safetensors files "
            "so their headers are read instead" % (architecture, ", ".join(MOE_ARCHITECTURES + DENSE_ARCHITECTURES)))
    dt = TORCH_DTYPE_SAFETENSORS[shape["dtype"]]
    hidden, heads, kv_heads, head_dim = shape["hidden_size"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    quant = shape.get("quant") or {}
    block = quant.get("block") if quant.get("method") == "fp8" else None
    skipped = quant.get("modules_to_not_convert") or []
    mxfp4 = quant.get("method") == "mxfp4"
    tensors = [("model.embed_tokens.weight", dt, [shape["vocab_size"], hidden])]

    def linear(name, out_features, in_features):
        module = name.rsplit(".", 1)[0]
        if block and not any(s and (module.endswith("." + s) or ("." + s + ".") in module) for s in skipped):
            tensors.append((name, "F8_E4M3", [out_features, in_features]))
            tensors.append((name + "_scale_inv", "F32",
                            [-(-out_features // block[0]), -(-in_features // block[1])]))
        else:
            tensors.append((name, dt, [out_features, in_features]))

    def mlp(prefix, size):
        linear(prefix + "gate_proj.weight", size, hidden)
        linear(prefix + "up_proj.weight", size, hidden)
        linear(prefix + "down_proj.weight", hidden, size)

    for layer in range(shape["layers"]):
        p = "model.layers.%d." % layer
        tensors.append((p + "input_layernorm.weight", dt, [hidden]))
        tensors.append((p + "post_attention_layernorm.weight", dt, [hidden]))
        structure = shape.get("structure") or {}
        kind = (structure.get("layer_kinds") or [None] * (layer + 1))[layer]
        if architecture in MLA_ARCHITECTURES:
            _mla_attention(shape, p, dt, linear, tensors)
        elif kind == model_family.RECURRENT:
            _gated_delta_net(shape, p, dt, linear, tensors)
        else:
            # Qwen3-Next's full attention gates its output with a second half of q_proj
            q_width = heads * head_dim * (2 if architecture == "Qwen3NextForCausalLM" else 1)
            linear(p + "self_attn.q_proj.weight", q_width, hidden)
            linear(p + "self_attn.k_proj.weight", kv_heads * head_dim, hidden)
            linear(p + "self_attn.v_proj.weight", kv_heads * head_dim, hidden)
            linear(p + "self_attn.o_proj.weight", hidden, heads * head_dim)
        index = (structure.get("index_values") or [0] * (layer + 1))[layer]
        if index:  # MiniMax-M3's indexer: Q a head per KV head, one K head, per-head norms (nvidia/model.py MiniMaxM3SparseAttention)
            linear(p + "self_attn.index_q_proj.weight", kv_heads * index, hidden)
            linear(p + "self_attn.index_k_proj.weight", index, hidden)
            tensors += [(p + "self_attn.index_%s_norm.weight" % x, dt, [index]) for x in "qk"]
        if architecture == "GptOssForCausalLM":
            # attention sinks, one per head; biases on q/k/v/o (vllm gpt_oss.py OAIAttention)
            tensors.append((p + "self_attn.sinks", "F32", [heads]))
            tensors.append((p + "self_attn.o_proj.bias", dt, [hidden]))
        if shape["attention_bias"] and kind != model_family.RECURRENT and architecture not in MLA_ARCHITECTURES:
            for proj, width in (("q_proj", heads), ("k_proj", kv_heads), ("v_proj", kv_heads)):
                tensors.append((p + "self_attn.%s.bias" % proj, dt, [width * head_dim]))
        if architecture == "MiniMaxM2ForCausalLM":
            # per-layer Q/K norms over every head (vllm/model_executor/models/minimax_m2.py)
            tensors.append((p + "self_attn.q_norm.weight", dt, [heads * head_dim]))
            tensors.append((p + "self_attn.k_norm.weight", dt, [kv_heads * head_dim]))
        elif shape["qk_norm"] and kind != model_family.RECURRENT:
            tensors.append((p + "self_attn.q_norm.weight", dt, [head_dim]))
            tensors.append((p + "self_attn.k_norm.weight", dt, [head_dim]))
        experts, ffn = shape["experts"], shape["expert_ffn_size"]
        if layer < shape.get("dense_leading", 0):
            mlp(p + "mlp.", shape["dense_ffn_size"])
        elif architecture == "GptOssForCausalLM":
            _gpt_oss_experts(shape, p, dt, mxfp4, tensors)
        elif architecture in MLA_ARCHITECTURES + ("Glm4MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3MoeForCausalLM"):
            tensors.append((p + "mlp.gate.weight", dt, [experts, hidden]))
            if architecture not in ("Qwen3NextForCausalLM", "Qwen3MoeForCausalLM"):
                tensors.append((p + "mlp.gate.e_score_correction_bias", "F32", [experts]))
            for e in range(experts):
                mlp(p + "mlp.experts.%d." % e, ffn)
            if shape["shared_expert_ffn_size"]:
                # DeepSeek / GLM: mlp.shared_experts; Qwen3-Next: mlp.shared_expert with a gate
                name = "shared_expert" if architecture == "Qwen3NextForCausalLM" else "shared_experts"
                mlp(p + "mlp.%s." % name, shape["shared_expert_ffn_size"])
                if architecture == "Qwen3NextForCausalLM":
                    tensors.append((p + "mlp.shared_expert_gate.weight", dt, [1, hidden]))
        elif architecture in ("MiniMaxM2ForCausalLM", "MixtralForCausalLM") + model_family.HF_SPARSE:
            moe = p + "block_sparse_moe."
            m3 = architecture in model_family.HF_SPARSE
            # MiniMax-M3's router is float32 (nvidia/model.py MiniMaxM3MoE: GateLinear params_dtype)
            tensors.append((moe + "gate.weight", "F32" if m3 else dt, [experts, hidden]))
            if architecture != "MixtralForCausalLM":
                tensors.append((moe + "e_score_correction_bias", "F32", [experts]))
            for e in range(experts):
                linear(moe + "experts.%d.w1.weight" % e, ffn, hidden)
                linear(moe + "experts.%d.w2.weight" % e, hidden, ffn)
                linear(moe + "experts.%d.w3.weight" % e, ffn, hidden)
            if m3 and shape["shared_expert_ffn_size"]:
                # MiniMaxM3MoE.shared_experts: a MiniMaxM3MLP of intermediate_size x n_shared_experts
                mlp(moe + "shared_experts.", shape["shared_expert_ffn_size"])
        else:
            mlp(p + "mlp.", shape["ffn_size"])
    tensors.append(("model.norm.weight", dt, [hidden]))
    if not shape["tie_word_embeddings"]:
        tensors.append(("lm_head.weight", dt, [shape["vocab_size"], hidden]))
    return tensors


def _mla_attention(shape, p, dt, linear, tensors):
    """DeepSeek-V2/V3 and Kimi-K2 attention (vllm/model_executor/models/deepseek_v2.py
    DeepseekV2MLAAttention): low-rank Q (q_a_proj, q_a_layernorm, q_b_proj; q_proj without
    q_lora_rank), the latent KV (kv_a_proj_with_mqa: kv_lora_rank + rope, kv_a_layernorm,
    kv_b_proj to the heads' nope K and V), o_proj from the heads' V."""
    mla, hidden, heads = shape["mla"], shape["hidden_size"], shape["heads"]
    q_head = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    if mla["q_lora_rank"]:
        linear(p + "self_attn.q_a_proj.weight", mla["q_lora_rank"], hidden)
        tensors.append((p + "self_attn.q_a_layernorm.weight", dt, [mla["q_lora_rank"]]))
        linear(p + "self_attn.q_b_proj.weight", heads * q_head, mla["q_lora_rank"])
    else:
        linear(p + "self_attn.q_proj.weight", heads * q_head, hidden)
    linear(p + "self_attn.kv_a_proj_with_mqa.weight", mla["kv_lora_rank"] + mla["qk_rope_head_dim"], hidden)
    tensors.append((p + "self_attn.kv_a_layernorm.weight", dt, [mla["kv_lora_rank"]]))
    linear(p + "self_attn.kv_b_proj.weight", heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"]),
           mla["kv_lora_rank"])
    linear(p + "self_attn.o_proj.weight", hidden, heads * mla["v_head_dim"])


def _gated_delta_net(shape, p, dt, linear, tensors):
    """Qwen3-Next's linear-attention layer (vllm/model_executor/models/qwen3_next.py
    Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba, conv1d over Q, K and V, A_log, dt_bias,
    a gated norm over the value head, out_proj."""
    cfg = shape["linear_attention"]
    hidden = shape["hidden_size"]
    key_dim = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    value_dim = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    linear(p + "linear_attn.in_proj_qkvz.weight", key_dim * 2 + value_dim * 2, hidden)
    linear(p + "linear_attn.in_proj_ba.weight", cfg["linear_num_value_heads"] * 2, hidden)
    tensors.append((p + "linear_attn.conv1d.weight", dt, [key_dim * 2 + value_dim, 1, cfg["linear_conv_kernel_dim"]]))
    tensors.append((p + "linear_attn.A_log", "F32", [cfg["linear_num_value_heads"]]))
    tensors.append((p + "linear_attn.dt_bias", dt, [cfg["linear_num_value_heads"]]))
    tensors.append((p + "linear_attn.norm.weight", "F32", [cfg["linear_value_head_dim"]]))
    linear(p + "linear_attn.out_proj.weight", hidden, value_dim)


# OCP MX block: 32 values share one E8M0 scale; two FP4 values a byte
MXFP4_BLOCK = 32


def _gpt_oss_experts(shape, p, dt, mxfp4, tensors):
    """gpt-oss's fused experts (vllm/model_executor/models/gpt_oss.py MLPBlock, weights named as
    the released checkpoint): router with bias; gate_up (interleaved) and down, with biases; MXFP4
    stores each as U8 `_blocks` [.., k / 32, 16] and U8 `_scales` [.., k / 32]."""
    experts, ffn, hidden = shape["experts"], shape["expert_ffn_size"], shape["hidden_size"]
    m = p + "mlp."
    tensors.append((m + "router.weight", dt, [experts, hidden]))
    tensors.append((m + "router.bias", dt, [experts]))
    for name, rows, k in (("gate_up_proj", 2 * ffn, hidden), ("down_proj", hidden, ffn)):
        if mxfp4:
            tensors.append((m + "experts.%s_blocks" % name, "U8", [experts, rows, k // MXFP4_BLOCK, MXFP4_BLOCK // 2]))
            tensors.append((m + "experts.%s_scales" % name, "U8", [experts, rows, k // MXFP4_BLOCK]))
        else:
            tensors.append((m + "experts.%s" % name, dt, [experts, k, rows]))
        tensors.append((m + "experts.%s_bias" % name, dt, [experts, rows]))


def tensor_nbytes(dtype, dims):
    count = 1
    for d in dims:
        count *= d
    return count * DTYPE_BYTES[dtype]


DTYPE_NAME_PATTERN = re.compile(r"\A[A-Z][A-Z0-9_]{0,15}\Z")
SAFETENSORS_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.+-]{0,250}\.safetensors\Z")


def index_files(index, where):
    """The weight files a model.safetensors.index.json names, sorted; each must be a plain file name
    in the model directory (the index comes with a download: no path, no ../)."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError("%s has no weight_map" % where)
    files = set()
    for tensor, name in weight_map.items():
        if not isinstance(name, str) or not SAFETENSORS_NAME_PATTERN.match(name):
            raise CheckpointError("%s: weight_map names %r for tensor %r, which is not a .safetensors file name in the "
                                  "model directory; re-download the model" % (where, name, tensor))
        files.add(name)
    return sorted(files)


def _whole_number(value):
    """An int and not a bool (JSON's true is no offset)."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_safetensors_header(data, where):
    """Parse a safetensors header: 8 bytes little-endian length, then that much JSON.

    `data` holds at least the first 8 + length bytes. Returns {name: (dtype, dims, nbytes)};
    nbytes comes from data_offsets, so it is exact whatever the dtype.
    """
    if len(data) < 8:
        raise CheckpointError("%s is not a safetensors file: shorter than its 8-byte header length" % where)
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise CheckpointError("%s: safetensors header says %d bytes of JSON but the file has %d" % (where, length, len(data) - 8))
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError("%s: safetensors header is not JSON: %s" % (where, exc))
    if not isinstance(header, dict):
        raise CheckpointError("%s: safetensors header is a JSON %s, not an object of tensors; the file is not a "
                              "safetensors checkpoint (re-download it)" % (where, type(header).__name__))
    tensors = {}
    # A full-size checkpoint has ~100,000 entries: each check is a type test (`type(v) is int`
    # refuses bools too), and each dtype name is matched once.
    dtypes = set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            dtype, dims = info["dtype"], list(info["shape"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError("%s: safetensors entry %r lacks dtype, shape or data_offsets" % (where, name))
        if not (_whole_number(start) and _whole_number(end) and 0 <= start <= end
                and all(_whole_number(d) and d >= 0 for d in dims)):
            raise CheckpointError(
                "%s: safetensors entry %r has shape %r and data_offsets %r; expected whole numbers "
                ">= 0 with end >= start (re-download the file)" % (where, name, info["shape"], info["data_offsets"]))
        # Any dtype name (newer safetensors has F8_E8M0, F4, ...): sizes come from data_offsets.
        if not isinstance(dtype, str) or dtype not in dtypes:
            if not isinstance(dtype, str) or not DTYPE_NAME_PATTERN.match(dtype):
                raise CheckpointError("%s: safetensors entry %r has dtype %r, not a safetensors dtype name (e.g. BF16, "
                                      "F8_E4M3); re-download the file" % (where, name, dtype))
            dtypes.add(dtype)
        tensors[name] = (dtype, dims, end - start)
    return tensors
