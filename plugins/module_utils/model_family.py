# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attention and expert structure of a model family, as each engine stores it.

Pure functions. gguf_structure reads a GGUF's metadata as llama.cpp 0c1e570 does; hf_structure
reads a config.json as vLLM does. Both answer the same questions:

- attention: "gqa" (grouped-query), "mla" (multi-head latent attention), "swa" (sliding-window
  layers alternating with full attention), "msa" (block-sparse attention whose sparse layers also
  cache one indexer key and value per token), "hybrid" (recurrent layers with a fixed state beside
  full attention layers), or None when the family is not modelled (weights only);
- per layer: its kind ("full", "swa", "recurrent" or None for a layer without a cache, such as a
  multi-token-prediction layer) and the K and V values one token takes in it;
- the recurrent state per sequence of a recurrent layer (values; R/conv and S/temporal);
- experts: routed, used per token, shared, and the dense leading layers.

A family the engine keeps in a memory type of its own (block-sparse, DSA indexer caches) is not
modelled: `modelled` is False and `reason` says so, so no planner prints a wrong KV figure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GQA = "gqa"
MLA = "mla"
MSA = "msa"
SWA = "swa"
HYBRID = "hybrid"

FULL = "full"
SLIDING = "swa"
RECURRENT = "recurrent"

# llama.cpp architectures whose memory is the plain llama_kv_cache (src/llama-model.cpp
# llama_model::create_memory, `default:` branch, neither recurrent nor hybrid nor SWA): every layer
# holds n_head_kv x key_length K and n_head_kv x value_length V values per token.
GGUF_PLAIN = frozenset((
    "llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "minimax-m2", "glm4moe", "glm4", "mistral3",
    "deepseek", "deepseek2", "gemma", "phi3", "granite", "granitemoe", "olmo2", "olmoe", "ernie4_5-moe",
    "bailingmoe2", "hunyuan-moe", "dots1", "mixtral",
))
# src/models/openai-moe.cpp load_arch_hparams: sliding_window and load_swa_pattern(ml, 2)
GGUF_SWA = frozenset(("gpt-oss",))
# src/models/qwen3next.cpp load_arch_hparams: ssm.* keys and the recurrent layer pattern
GGUF_HYBRID = frozenset(("qwen3next",))
# src/llama-kv-cache-msa.cpp llama_kv_cache_msa: the plain cache of every layer plus an indexer
# cache (n_head_kv 1, key indexer.key_length, value value_length) of the layers create_memory's
# filter_idx keeps (il >= leading_dense_block_count), same cells and streams
GGUF_MSA = frozenset(("minimax-m3",))
# create_memory gives these a memory type of their own (llama_kv_cache_dsa, _dsa_iswa, _dsv4,
# llama_memory_hybrid_idx): not modelled here.
GGUF_OWN_MEMORY = {
    "deepseek32": "llama_kv_cache_dsa (sparse attention with an indexer key cache)",
    "glm-dsa": "llama_kv_cache_dsa (sparse attention with an indexer key cache)",
    "deepseek4": "llama_kv_cache_dsv4",
    "glm5-next": "llama_memory_hybrid_idx",
}


class FamilyError(ValueError):
    """Metadata that contradicts itself; the message names the key."""


def _count(value, key, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FamilyError("metadata %s is %r, expected a whole number >= %d" % (key, value, minimum))
    return value


def _per_layer(value, n_layer, key):
    if isinstance(value, list):
        if len(value) != n_layer:
            raise FamilyError("metadata %s has %d entries for %d layers" % (key, len(value), n_layer))
        return [_count(v, key) for v in value]
    return [_count(value, key)] * n_layer


def not_modelled(family, reason):
    return {"family": family, "modelled": False, "attention": None, "reason": reason,
            "layer_kinds": [], "k_values": [], "v_values": [], "window": 0,
            "state_r_values": 0, "state_s_values": 0}


def modelled(family, attention, kinds, k_per_layer, v_per_layer, window=0, r_values=0, s_values=0):
    """The structure of a family whose cache is sized: K and V values per token of each attention
    layer (FULL, SLIDING; k_per_layer and v_per_layer give one figure per layer), 0 elsewhere."""
    cached = [kind in (FULL, SLIDING) for kind in kinds]
    return {"family": family, "modelled": True, "attention": attention, "reason": None, "layer_kinds": kinds,
            "k_values": [k if c else 0 for c, k in zip(cached, k_per_layer)],
            "v_values": [v if c else 0 for c, v in zip(cached, v_per_layer)],
            "window": window, "state_r_values": r_values, "state_s_values": s_values}


def not_modelled_message(structure):
    """The line a plan prints for a family it cannot size the cache of."""
    return "family %s is not modelled: weights only (%s)" % (structure["family"], structure["reason"])


def gguf_structure(arch, meta):
    """The cache structure llama.cpp 0c1e570 builds for a GGUF. meta(key, default) reads metadata
    key `<arch>.<key>`.

    src/llama-model.cpp load_hparams: n_layer_all = block_count, n_layer() = n_layer_all -
    nextn_predict_layers (src/llama-hparams.cpp), head_count_kv defaults to head_count, key_length
    and value_length to n_embd / n_head. create_memory filters the nextn (MTP) layers out of the cache
    (`il < hparams.n_layer()`), src/llama-kv-cache.cpp llama_kv_cache::llama_kv_cache makes per
    layer K = n_embd_k_gqa(il) = key_length x head_count_kv(il) values per cell and V =
    value_length x head_count_kv(il), and no V at all when hparams.is_mla() (has_v = !is_mla).
    """
    family = arch
    if arch in GGUF_OWN_MEMORY:
        return not_modelled(family, "llama.cpp keeps it in %s" % GGUF_OWN_MEMORY[arch])
    if arch not in GGUF_PLAIN | GGUF_SWA | GGUF_HYBRID | GGUF_MSA:
        return not_modelled(family, "no cache rule for llama.cpp architecture %s" % arch)
    n_all = _count(meta("block_count", None), arch + ".block_count", 1)
    nextn = _count(meta("nextn_predict_layers", 0), arch + ".nextn_predict_layers")
    if nextn > n_all:
        raise FamilyError("metadata %s.nextn_predict_layers %d exceeds block_count %d" % (arch, nextn, n_all))
    n_trunk = n_all - nextn
    heads = _per_layer(meta("attention.head_count", None), n_all, arch + ".attention.head_count")
    heads_kv = _per_layer(meta("attention.head_count_kv", list(heads)), n_all, arch + ".attention.head_count_kv")
    n_embd = _count(meta("embedding_length", None), arch + ".embedding_length", 1)
    head_max = max(heads) or 1
    key_len = _count(meta("attention.key_length", n_embd // head_max), arch + ".attention.key_length")
    value_len = _count(meta("attention.value_length", key_len), arch + ".attention.value_length")
    # src/llama-hparams.cpp is_mla(): key_length_mla and value_length_mla both set (deepseek2 GGUFs
    # converted with the split wk_b / wv_b); the cache then holds only K: kv_lora_rank + n_rot values
    mla = arch == "deepseek2" and bool(meta("attention.key_length_mla", 0)) and bool(meta("attention.value_length_mla", 0))
    kinds = [FULL if il < n_trunk else None for il in range(n_all)]
    window = 0
    r_values = s_values = 0
    attention = MLA if mla else GQA
    if arch in GGUF_SWA:
        # src/models/openai-moe.cpp: n_swa = attention.sliding_window; load_swa_pattern(ml, 2):
        # an array sliding_window_pattern gives is_swa per layer, else set_swa_pattern(n, false)
        # (src/llama-hparams.cpp) makes layer il sliding when il % n < n - 1: even layers of gpt-oss
        window = _count(meta("attention.sliding_window", None), arch + ".attention.sliding_window", 1)
        pattern = meta("attention.sliding_window_pattern", 2)
        if isinstance(pattern, list):
            flags = [bool(p) for p in pattern] + [False] * n_all
        else:
            n = _count(pattern, arch + ".attention.sliding_window_pattern")
            flags = [n == 0 or il % n < n - 1 for il in range(n_all)]
        kinds = [SLIDING if (k == FULL and flags[il]) else k for il, k in enumerate(kinds)]
        attention = SWA
    elif arch in GGUF_HYBRID:
        # src/models/qwen3next.cpp: recurrent layers from attention.recurrent_layers, else
        # (il + 1) % full_attention_interval != 0 (default 4); the state per sequence and layer is
        # n_embd_r() = (ssm_d_conv - 1) x (ssm_d_inner + 2 x ssm_n_group x ssm_d_state) and
        # n_embd_s() = ssm_d_state x ssm_d_inner values (src/llama-hparams.cpp), F32 rows of
        # max(1, n_seq_max) (src/llama-memory-recurrent.cpp, create_memory's hybrid branch)
        recurrent = meta("attention.recurrent_layers", None)
        if isinstance(recurrent, list):
            flags = [bool(v) for v in _per_layer(recurrent, n_all, arch + ".attention.recurrent_layers")]
        else:
            interval = _count(meta("full_attention_interval", 4), arch + ".full_attention_interval", 1)
            flags = [(il + 1) % interval != 0 for il in range(n_all)]
        kinds = [RECURRENT if (k == FULL and flags[il]) else k for il, k in enumerate(kinds)]
        d_conv = _count(meta("ssm.conv_kernel", None), arch + ".ssm.conv_kernel")
        d_inner = _count(meta("ssm.inner_size", None), arch + ".ssm.inner_size")
        d_state = _count(meta("ssm.state_size", None), arch + ".ssm.state_size")
        n_group = _count(meta("ssm.group_count", None), arch + ".ssm.group_count")
        r_values = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        s_values = d_state * d_inner
        attention = HYBRID
    dense = _count(meta("leading_dense_block_count", 0), arch + ".leading_dense_block_count")
    k_values = [key_len * h for h in heads_kv]
    v_values = [0 if mla else value_len * h for h in heads_kv]
    if arch in GGUF_MSA:
        index_key = _count(meta("attention.indexer.key_length", None), arch + ".attention.indexer.key_length", 1)
        k_values = [k + (index_key if il >= dense else 0) for il, k in enumerate(k_values)]
        v_values = [v + (value_len if il >= dense else 0) for il, v in enumerate(v_values)]
        attention = MSA
    experts = _count(meta("expert_count", 0), arch + ".expert_count")
    structure = modelled(family, attention, kinds, k_values, v_values, window, r_values, s_values)
    structure.update({
        "mtp_layers": nextn,
        "experts": experts,
        "experts_used": _count(meta("expert_used_count", 0), arch + ".expert_used_count") if experts else 0,
        "shared_experts": _count(meta("expert_shared_count", 0), arch + ".expert_shared_count"),
        # src/models/deepseek2.cpp, glm4-moe.cpp, minimax-m3.cpp: layers below leading_dense_block_count
        # have a dense FFN
        "dense_leading": dense,
    })
    return structure


def layer_summary(structure):
    """{kind: layer count} of the layers that hold a cache or a state."""
    counts = {}
    for kind in structure["layer_kinds"]:
        if kind:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def describe(structure, bytes_per_token, state_bytes_per_sequence):
    """One line for a table: the attention kind, the cache per token and the fixed state."""
    if not structure["modelled"]:
        return not_modelled_message(structure)
    counts = layer_summary(structure)
    parts = ["%d %s" % (counts[k], k) for k in (FULL, SLIDING, RECURRENT) if counts.get(k)]
    text = "%s attention (%s layers): %d bytes of cache per token" % (
        structure["attention"], " + ".join(parts), bytes_per_token)
    if structure.get("window"):
        text += " (sliding layers keep a %d-token window)" % structure["window"]
    if state_bytes_per_sequence:
        text += ", %d bytes of recurrent state per sequence" % state_bytes_per_sequence
    return text


# --- config.json, as vLLM reads it --------------------------------------------------------------

HF_GQA = ("MiniMaxM2ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "LlamaForCausalLM",
          "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Glm4MoeForCausalLM")
HF_MLA = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "KimiK2ForCausalLM")
HF_SWA = ("GptOssForCausalLM",)
HF_HYBRID = ("Qwen3NextForCausalLM",)
# vllm/model_executor/models/registry.py: both names build vllm/models/minimax_m3 (nvidia/model.py)
HF_SPARSE = ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")
HF_OWN = {"DeepseekV32ForCausalLM": "sparse attention with an indexer cache"}
M3_FREQ = [0] * 3 + [1] * 57  # vllm/transformers_utils/configs/minimax_m3.py MiniMaxM3TextConfig: 3 dense, 57 MoE + sparse


def _cfg_int(config, key, default=None, minimum=0):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FamilyError("config.json: %s is %r, expected a whole number >= %d" % (key, value, minimum))
    return value


def hf_structure(config, architecture, layers, kv_heads, head_dim):
    """The cache structure vLLM builds for a config.json (text part).

    - MLA (vllm/model_executor/models/deepseek_v2.py DeepseekV2MLAAttention; vllm/v1/kv_cache_interface.py
      MLAAttentionSpec; vllm/config/model.py ModelConfig.get_head_size: kv_lora_rank +
      qk_rope_head_dim when use_mla, get_total_num_kv_heads: 1): one latent "K" of kv_lora_rank +
      qk_rope_head_dim values per token and layer, no V, the same on every TP rank.
    - SWA (vllm/model_executor/models/gpt_oss.py OAIAttention: sliding_window on the layers
      layer_types names "sliding_attention"; vllm/v1/kv_cache_interface.py SlidingWindowSpec).
    - hybrid (vllm/model_executor/models/qwen3_next.py Qwen3NextGatedDeltaNet; layer_types or
      full_attention_interval; vllm/model_executor/layers/mamba/mamba_utils.py
      MambaStateShapeCalculator.gated_delta_net_state_shape: conv state (conv_kernel - 1) x
      (2 x key heads x key head dim + value heads x value head dim), temporal state value heads x
      key head dim x value head dim).
    - msa (MiniMax-M3, vllm/models/minimax_m3): every layer's full K/V (nvidia/model.py get_kv_cache_spec) and the block-
      sparse layers' index keys, `index_values` (common/indexer.py MiniMaxM3IndexerCache: one head, whole on each TP rank).
    """
    if architecture in HF_OWN:
        return not_modelled(architecture, "vLLM keeps it in %s" % HF_OWN[architecture])
    if architecture not in HF_GQA + HF_MLA + HF_SWA + HF_HYBRID + HF_SPARSE:
        return not_modelled(architecture, "no cache rule for architecture %s" % (architecture or "(none)"))
    kinds, attention, window, r_values, s_values, index_values = [FULL] * layers, GQA, 0, 0, 0, [0] * layers
    k_per = v_per = kv_heads * head_dim
    if architecture in HF_MLA:
        attention = MLA
        k_per = _cfg_int(config, "kv_lora_rank", None, 1) + _cfg_int(config, "qk_rope_head_dim", None, 1)
        v_per = 0
    elif architecture in HF_SWA:
        attention = SWA
        window = _cfg_int(config, "sliding_window", None, 1)
        types = config.get("layer_types")
        if isinstance(types, list) and len(types) == layers:
            kinds = [SLIDING if t == "sliding_attention" else FULL for t in types]
        else:
            # gpt-oss without layer_types: even layers slide (vllm gpt_oss.py: layer_idx % 2 == 0)
            kinds = [SLIDING if il % 2 == 0 else FULL for il in range(layers)]
    elif architecture in HF_HYBRID:
        attention = HYBRID
        types = config.get("layer_types")
        if isinstance(types, list) and len(types) == layers:
            kinds = [RECURRENT if t == "linear_attention" else FULL for t in types]
        else:
            interval = _cfg_int(config, "full_attention_interval", 4, 1)
            kinds = [FULL if (il + 1) % interval == 0 else RECURRENT for il in range(layers)]
        conv, k_heads, v_heads, k_dim, v_dim = (_cfg_int(config, "linear_" + key, None, 1) for key in (
            "conv_kernel_dim", "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim"))
        r_values = (conv - 1) * (2 * k_heads * k_dim + v_heads * v_dim)
        s_values = v_heads * k_dim * v_dim
    elif architecture in HF_SPARSE:
        attention = MSA
        sparse = config.get("sparse_attention_config", {"sparse_index_dim": 128, "sparse_num_index_heads": 4, "sparse_attention_freq": M3_FREQ}) or {}
        # nvidia/model.py _sparse_attention_layer_ids (freq not 0); linear.py MinimaxM3QKVParallelLinearWithIndexer: index heads == KV heads
        freq = list(sparse.get("sparse_attention_freq") or []) + [0] * layers
        index = _cfg_int(sparse, "sparse_index_dim", None, 1) if any(freq[:layers]) else 0
        if index and _cfg_int(sparse, "sparse_num_index_heads", None, 1) != kv_heads:
            raise FamilyError("config.json: sparse_num_index_heads %r is not the %d KV heads" % (sparse["sparse_num_index_heads"], kv_heads))
        index_values = [index if f else 0 for f in freq[:layers]]
    return dict(modelled(architecture, attention, kinds, [k_per] * layers, [v_per] * layers, window, r_values, s_values),
                index_values=index_values)


def vllm_group_layers(structure):
    """Layers vLLM's KV cache groups span: vllm/v1/core/kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size takes group_size = the fewest layers of one type (the
    most when max < min x 1.5) and cdiv(count, group_size) groups per type; bytes per token of a
    cache of groups x group_size attention layers, since every group's page is one attention page
    (the tokens vLLM reports for several types: vllm_plan.kv_capacity)."""
    counts = [c for c in layer_summary(structure).values() if c]
    if not counts:
        return 0
    if len(counts) == 1:
        return counts[0]
    smallest, largest = min(counts), max(counts)
    group = largest if largest < smallest * 1.5 else smallest
    return sum(-(-c // group) for c in counts) * group
