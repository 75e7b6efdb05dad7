"""Released models' GGUF tensor tables, without their data, for the planners' tests: the names,
shapes and types llama.cpp's convert_hf_to_gguf.py writes, and the metadata llama.cpp reads."""

from ansible_collections.gpulab.inference.plugins.module_utils import gguf

Q2_K = 10


def deepseek_v3_q2_k():
    """DeepSeek-V3 (deepseek2, MLA with the split attn_k_b / attn_v_b): the weights in Q2_K (84 bytes
    per 256 values; attn_k_b, whose rows of 128 are shorter than a K-quant block, in Q8_0), norms
    and router in F32. Returns (metadata [(key, GGUFValue)], [TensorInfo])."""
    q8, f32 = gguf.GGML_Q8_0, gguf.GGML_F32
    n_embd, n_vocab, n_head, n_ff, n_ff_exp, n_expert = 7168, 129280, 128, 18432, 2048, 256
    q_lora, kv_lora, nope, rope, v_head = 1536, 512, 128, 64, 128
    arch = "deepseek2"
    metadata = [("general.architecture", gguf.GGUFValue(gguf.STRING, arch))]
    for key, value in (("block_count", 61), ("context_length", 163840), ("embedding_length", n_embd),
                       ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                       ("attention.head_count_kv", 1), ("attention.key_length", kv_lora + rope),
                       ("attention.value_length", kv_lora), ("attention.key_length_mla", nope + rope),
                       ("attention.value_length_mla", v_head), ("attention.q_lora_rank", q_lora),
                       ("attention.kv_lora_rank", kv_lora), ("rope.dimension_count", rope),
                       ("expert_count", n_expert), ("expert_used_count", 8), ("expert_shared_count", 1),
                       ("leading_dense_block_count", 3), ("expert_feed_forward_length", n_ff_exp),
                       ("vocab_size", n_vocab)):
        metadata.append(("%s.%s" % (arch, key), gguf.GGUFValue(gguf.UINT32, value)))
    infos = [("token_embd.weight", (n_embd, n_vocab), Q2_K)]
    for il in range(61):
        b = "blk.%d." % il
        infos += [(b + "attn_norm.weight", (n_embd,), f32), (b + "attn_q_a_norm.weight", (q_lora,), f32),
                  (b + "attn_kv_a_norm.weight", (kv_lora,), f32), (b + "attn_q_a.weight", (n_embd, q_lora), Q2_K),
                  (b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), Q2_K),
                  (b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q2_K),
                  (b + "attn_k_b.weight", (nope, kv_lora, n_head), q8),
                  (b + "attn_v_b.weight", (kv_lora, v_head, n_head), Q2_K),
                  (b + "attn_output.weight", (n_head * v_head, n_embd), Q2_K), (b + "ffn_norm.weight", (n_embd,), f32)]
        if il < 3:
            infos += [(b + "ffn_gate.weight", (n_embd, n_ff), Q2_K), (b + "ffn_up.weight", (n_embd, n_ff), Q2_K),
                      (b + "ffn_down.weight", (n_ff, n_embd), Q2_K)]
        else:
            infos += [(b + "ffn_gate_inp.weight", (n_embd, n_expert), f32), (b + "exp_probs_b.bias", (n_expert,), f32),
                      (b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q2_K),
                      (b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q2_K),
                      (b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), Q2_K),
                      (b + "ffn_gate_shexp.weight", (n_embd, n_ff_exp), Q2_K),
                      (b + "ffn_up_shexp.weight", (n_embd, n_ff_exp), Q2_K),
                      (b + "ffn_down_shexp.weight", (n_ff_exp, n_embd), Q2_K)]
    infos += [("output_norm.weight", (n_embd,), f32), ("output.weight", (n_embd, n_vocab), Q2_K)]
    return metadata, [gguf.TensorInfo(name, dims, kind) for name, dims, kind in infos]


def write_deepseek_v3_q2_k(path):
    """The table as a GGUF file of the model's size over a hole; returns the size in bytes."""
    metadata, infos = deepseek_v3_q2_k()
    with open(path, "wb") as stream:
        return gguf.write_gguf_headers(stream, metadata, infos)
