# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_family: the cache structure per family, with the expected figures worked by hand from
llama.cpp 0c1e570 (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp,
llama-hparams.cpp) and vLLM (kv_cache_interface.py, v1/core/kv_cache_utils.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import gguf_plan as gp
from ansible_collections.gpulab.inference.plugins.module_utils import model_family as mf


def meta_of(keys):
    return lambda name, default=None: keys.get(name, default)


# DeepSeek-V3 as convert_hf_to_gguf.py writes it with MLA: one KV "head" of key 576
# (kv_lora_rank 512 + rope 64) and value 512; key_length_mla 192, value_length_mla 128.
DEEPSEEK_V3 = {"block_count": 61, "embedding_length": 7168, "attention.head_count": 128,
               "attention.head_count_kv": 1, "attention.key_length": 576, "attention.value_length": 512,
               "attention.key_length_mla": 192, "attention.value_length_mla": 128,
               "leading_dense_block_count": 3, "expert_count": 256, "expert_used_count": 8,
               "expert_shared_count": 1}
GPT_OSS_120B = {"block_count": 36, "embedding_length": 2880, "attention.head_count": 64,
                "attention.head_count_kv": 8, "attention.key_length": 64, "attention.value_length": 64,
                "attention.sliding_window": 128, "expert_count": 128, "expert_used_count": 4}
QWEN3_NEXT = {"block_count": 48, "embedding_length": 2048, "attention.head_count": 16,
              "attention.head_count_kv": 2, "attention.key_length": 256, "attention.value_length": 256,
              "ssm.conv_kernel": 4, "ssm.inner_size": 4096, "ssm.state_size": 128, "ssm.group_count": 16,
              "ssm.time_step_rank": 32, "full_attention_interval": 4, "expert_count": 512,
              "expert_used_count": 10}
GLM_45 = {"block_count": 93, "nextn_predict_layers": 1, "embedding_length": 5120, "attention.head_count": 96,
          "attention.head_count_kv": 8, "attention.key_length": 128, "attention.value_length": 128,
          "leading_dense_block_count": 3, "expert_count": 160, "expert_used_count": 8, "expert_shared_count": 1}


def facts_of(arch, keys):
    return {"architecture": arch, "layers": keys["block_count"], "structure": mf.gguf_structure(arch, meta_of(keys))}


def test_deepseek_v3_gguf_keeps_only_the_latent_k():
    s = mf.gguf_structure("deepseek2", meta_of(DEEPSEEK_V3))
    assert s["attention"] == mf.MLA
    assert set(s["k_values"]) == {576} and set(s["v_values"]) == {0}
    assert (s["dense_leading"], s["shared_experts"], s["experts"]) == (3, 1, 256)
    # 61 layers x 576 values x 2 bytes (f16), no V (has_v = !is_mla)
    assert gp.kv_bytes_per_token(facts_of("deepseek2", DEEPSEEK_V3)) == 70272


def test_legacy_deepseek2_without_mla_keys_is_grouped_query():
    keys = dict(DEEPSEEK_V3, **{"attention.head_count_kv": 128, "attention.key_length": 192,
                                "attention.value_length": 128})
    del keys["attention.key_length_mla"], keys["attention.value_length_mla"]
    s = mf.gguf_structure("deepseek2", meta_of(keys))
    assert s["attention"] == mf.GQA
    # K 128 heads x 192, V 128 x 128
    assert (s["k_values"][0], s["v_values"][0]) == (24576, 16384)


def test_gpt_oss_alternates_window_and_full_layers():
    s = mf.gguf_structure("gpt-oss", meta_of(GPT_OSS_120B))
    # set_swa_pattern(2, false): il % 2 < 1 slides, so even layers
    assert s["layer_kinds"][:4] == [mf.SLIDING, mf.FULL, mf.SLIDING, mf.FULL]
    assert mf.layer_summary(s) == {mf.SLIDING: 18, mf.FULL: 18}
    # 36 layers x (8 x 64 K + 8 x 64 V) x 2 bytes
    assert gp.kv_bytes_per_token(facts_of("gpt-oss", GPT_OSS_120B)) == 73728


def test_sliding_window_cells_follow_the_iswa_cache():
    # GGML_PAD(min(32768, 128 x 1 + 512), 256) = 768 per stream
    assert gp.swa_cells(32768, 128, 1, False) == 768
    # unified with 4 sequences: min(8192, 128 x 4 + 512 = 1024) -> 1024
    assert gp.swa_cells(8192, 128, 4, True) == 1024
    # never more than the full cache; --swa-full gives the full cache
    assert gp.swa_cells(512, 128, 1, False) == 512
    assert gp.swa_cells(32768, 128, 1, False, swa_full=True) == 32768


def test_gpt_oss_cache_bytes_per_layer():
    facts = facts_of("gpt-oss", GPT_OSS_120B)
    sizes = gp.cache_bytes_per_layer(facts, 32768, 1, 1, 1)
    # full layer: 512 values x 2 bytes x 32768 cells = 33554432 for K and for V
    assert sizes[1] == (33554432, 33554432, 0)
    # sliding layer: 768 cells -> 512 x 2 x 768 = 786432
    assert sizes[0] == (786432, 786432, 0)


def test_qwen3_next_keeps_a_fixed_state_in_three_of_four_layers():
    s = mf.gguf_structure("qwen3next", meta_of(QWEN3_NEXT))
    assert mf.layer_summary(s) == {mf.RECURRENT: 36, mf.FULL: 12}
    assert s["layer_kinds"][3] == mf.FULL and s["layer_kinds"][0] == mf.RECURRENT
    # n_embd_r = (4 - 1) x (4096 + 2 x 16 x 128) = 24576; n_embd_s = 128 x 4096 = 524288
    assert (s["state_r_values"], s["state_s_values"]) == (24576, 524288)
    facts = facts_of("qwen3next", QWEN3_NEXT)
    # 36 layers x (24576 + 524288) x 4 bytes
    assert gp.state_bytes_per_sequence(facts) == 79036416
    # 12 layers x (2 x 256 K + 2 x 256 V) x 2 bytes
    assert gp.kv_bytes_per_token(facts) == 24576
    sizes = gp.cache_bytes_per_layer(facts, 4096, 2, 1, 1)
    # the state rows are max(1, n_seq_max) = 2 sequences: 548864 x 4 x 2
    assert sizes[0] == (0, 0, 4390912)
    # a full layer: 512 values x 2 bytes x 4096 cells x 2 streams
    assert sizes[3] == (8388608, 8388608, 0)


def test_glm_nextn_layer_holds_no_cache():
    s = mf.gguf_structure("glm4moe", meta_of(GLM_45))
    assert s["layer_kinds"][92] is None and s["layer_kinds"][91] == mf.FULL
    # 92 trunk layers x (8 x 128 x 2) values x 2 bytes
    assert gp.kv_bytes_per_token(facts_of("glm4moe", GLM_45)) == 376832


# MiniMax-M3 as conversion/minimax.py MiniMaxM3Model writes it (issue 52's shape)
MINIMAX_M3 = {"block_count": 60, "embedding_length": 6144, "attention.head_count": 64, "attention.head_count_kv": 4,
              "attention.key_length": 128, "attention.value_length": 128, "leading_dense_block_count": 3,
              "attention.indexer.head_count": 4, "attention.indexer.key_length": 128, "expert_count": 128,
              "expert_used_count": 4, "expert_shared_count": 1}


def test_minimax_m3_gguf_adds_the_indexer_cache_to_its_sparse_layers():
    s = mf.gguf_structure("minimax-m3", meta_of(MINIMAX_M3))
    assert s["attention"] == mf.MSA and set(s["layer_kinds"]) == {mf.FULL}
    # llama_kv_cache_msa: 4 x 128 K and V in every layer, plus the indexer's one head of 128 K and
    # one of value_length V in the 57 layers from leading_dense_block_count on
    assert s["k_values"] == [512] * 3 + [640] * 57 and s["v_values"] == [512] * 3 + [640] * 57
    assert (s["dense_leading"], s["shared_experts"], s["experts_used"]) == (3, 1, 4)
    # (3 x 1024 + 57 x 1280) values x 2 bytes (f16)
    assert gp.kv_bytes_per_token(facts_of("minimax-m3", MINIMAX_M3)) == 152064
    with pytest.raises(mf.FamilyError, match="minimax-m3.attention.indexer.key_length is None"):
        mf.gguf_structure("minimax-m3", meta_of(dict(MINIMAX_M3, **{"attention.indexer.key_length": None})))


def test_families_with_a_memory_of_their_own_are_not_modelled():
    s = mf.gguf_structure("deepseek32", meta_of({}))
    assert not s["modelled"]
    assert mf.not_modelled_message(s).startswith("family deepseek32 is not modelled: weights only")
    facts = {"layers": 3, "structure": s}
    assert gp.cache_bytes_per_layer(facts, 4096, 1, 1, 1) == [(0, 0, 0)] * 3
    assert not mf.gguf_structure("some-new-arch", meta_of({}))["modelled"]


def test_contradicting_metadata_is_named():
    with pytest.raises(mf.FamilyError, match="nextn_predict_layers 5 exceeds block_count 4"):
        mf.gguf_structure("glm4moe", meta_of(dict(GLM_45, block_count=4, nextn_predict_layers=5)))


DEEPSEEK_V3_CONFIG = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}
GPT_OSS_CONFIG = {"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18}
QWEN3_NEXT_CONFIG = {"full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_num_key_heads": 16,
                     "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128}


def test_vllm_mla_latent_per_layer():
    s = mf.hf_structure(DEEPSEEK_V3_CONFIG, "DeepseekV3ForCausalLM", 61, 128, 56)
    # get_head_size with MLA: kv_lora_rank + qk_rope_head_dim = 576; no V
    assert set(s["k_values"]) == {576} and set(s["v_values"]) == {0}
    assert mf.vllm_group_layers(s) == 61


def test_vllm_groups_of_hybrid_models():
    swa = mf.hf_structure(GPT_OSS_CONFIG, "GptOssForCausalLM", 36, 8, 64)
    # 18 sliding + 18 full: group_size 18, 2 groups -> 36 layers' worth of tokens
    assert mf.vllm_group_layers(swa) == 36
    hybrid = mf.hf_structure(QWEN3_NEXT_CONFIG, "Qwen3NextForCausalLM", 48, 2, 256)
    # 12 full + 36 linear: 36 >= 12 x 1.5, group_size 12: 1 + 3 groups of 12 -> 48
    assert mf.vllm_group_layers(hybrid) == 48
    # gated delta net state: conv (4 - 1) x (2 x 16 x 128 + 32 x 128) = 24576, temporal 32 x 128 x 128
    assert (hybrid["state_r_values"], hybrid["state_s_values"]) == (24576, 524288)
    # gpt-oss-20b with a drafter: 12 sliding + 13 full, 13 < 18, group_size 13: 2 groups of 13
    mixed = {"layer_kinds": [mf.SLIDING] * 12 + [mf.FULL] * 13}
    assert mf.vllm_group_layers(mixed) == 26


M3_TEXT = {"sparse_attention_config": {"sparse_index_dim": 128, "sparse_num_index_heads": 4,
                                       "sparse_attention_freq": [0] * 3 + [1] * 57}}


def test_vllm_minimax_m3_keeps_full_kv_everywhere_and_indexer_keys_on_sparse_layers():
    s = mf.hf_structure(M3_TEXT, "MiniMaxM3SparseForCausalLM", 60, 4, 128)
    # FullAttentionSpec on all 60 layers, an MLAAttentionSpec of one 128-value key on the 57 sparse ones
    assert s["attention"] == mf.MSA and set(s["layer_kinds"]) == {mf.FULL} and mf.vllm_group_layers(s) == 60
    assert s["index_values"] == [0] * 3 + [128] * 57 and set(s["k_values"]) == {512}
    # without sparse_attention_config the config class's default (the same 60 layers) applies
    assert mf.hf_structure({}, "MiniMaxM3SparseForConditionalGeneration", 4, 4, 128)["index_values"] == [0, 0, 0, 128]
    assert mf.hf_structure({"sparse_attention_config": {}}, "MiniMaxM3SparseForCausalLM", 2, 4, 128)["index_values"] == [0, 0]
    bad = {"sparse_attention_config": dict(M3_TEXT["sparse_attention_config"], sparse_num_index_heads=8)}
    with pytest.raises(mf.FamilyError, match="sparse_num_index_heads 8 is not the 4 KV heads"):
        mf.hf_structure(bad, "MiniMaxM3SparseForCausalLM", 60, 4, 128)


def test_vllm_unknown_architecture_is_not_modelled():
    s = mf.hf_structure({}, "MiniMaxM3ForCausalLM", 60, 4, 128)
    assert not s["modelled"] and "not modelled" in mf.not_modelled_message(s)
