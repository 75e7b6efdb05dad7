"""The Hugging Face checkpoint reader (hf_checkpoint): a model's shape from config.json, the tensors a
checkpoint of that shape holds, an index's weight files and safetensors headers, bad input named."""

import json
from pathlib import Path

import struct

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh

FIXTURES = Path(__file__).resolve().parents[2] / 'fixtures' / 'vllm'


def config(name):
    return json.loads((FIXTURES / name).read_text())


def test_minimax_shape_and_fp8_block_from_config():
    shape = hf.model_shape(config('minimax-m2.5-config.json'))
    assert (shape['architecture'], shape['layers'], shape['experts'], shape['experts_used']) == (
        'MiniMaxM2ForCausalLM', 62, 256, 8)
    assert shape['quant']['method'] == 'fp8' and shape['quant']['block'] == [128, 128]
    assert shape['ffn_size'] == 0 and shape['dtype_bytes'] == 2


def test_fp8_block_checkpoint_stores_linear_weights_with_a_scale_per_block():
    shape = hf.model_shape(config('minimax-m2.5-config.json'))
    tensors = dict((name, (dtype, dims)) for name, dtype, dims in hf.checkpoint_tensors(shape))
    w1 = tensors['model.layers.0.block_sparse_moe.experts.0.w1.weight']
    assert w1[0] == 'F8_E4M3'
    assert tensors['model.layers.0.block_sparse_moe.experts.0.w1.weight_scale_inv'] == (
        'F32', [-(-w1[1][0] // 128), -(-w1[1][1] // 128)])
    assert tensors['model.embed_tokens.weight'][0] == 'BF16'
    assert hf.tensor_nbytes('F8_E4M3', [3, 4]) == 12 and hf.tensor_nbytes('BF16', [3, 4]) == 24


def test_unknown_architecture_has_no_checkpoint_layout():
    shape = hf.model_shape(dict(config('llama-3.1-8b-config.json'), architectures=['Gemma3ForCausalLM']))
    with pytest.raises(hf.CheckpointError, match="architecture 'Gemma3ForCausalLM' has no known checkpoint layout"):
        hf.checkpoint_tensors(shape)


def test_index_files_are_plain_names_in_the_model_directory():
    index = {'weight_map': {'a': 'model-00002-of-00002.safetensors', 'b': 'model-00001-of-00002.safetensors',
                            'c': 'model-00001-of-00002.safetensors'}}
    assert hf.index_files(index, 'index') == ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    with pytest.raises(hf.CheckpointError, match="weight_map names '../x.safetensors' for tensor 'a'"):
        hf.index_files({'weight_map': {'a': '../x.safetensors'}}, 'index')
    with pytest.raises(hf.CheckpointError, match='index has no weight_map'):
        hf.index_files({}, 'index')


@pytest.mark.parametrize('change,match', [
    ({'num_attention_heads': 0}, 'num_attention_heads is 0'),
    ({'num_hidden_layers': 'x'}, "num_hidden_layers is 'x'"),
    ({'torch_dtype': 'int8'}, "torch_dtype 'int8'"),
    ({'quantization_config': {'quant_method': 'fp8', 'weight_block_size': [128]}}, 'weight_block_size is \\[128\\]'),
    ({'num_attention_heads': -48}, 'num_attention_heads is -48'),
    ({'hidden_size': 3072.5}, 'hidden_size is 3072.5'),
    ({'num_local_experts': '256'}, "num_local_experts / num_experts is '256'"),
    ({'num_local_experts': -1}, 'num_local_experts / num_experts is -1'),
    ({'architectures': 'MiniMaxM2ForCausalLM'}, "architectures is 'MiniMaxM2ForCausalLM', expected a list"),
    ({'architectures': [7]}, 'architectures is \\[7\\]'),
    ({'max_position_embeddings': '196608'}, "max_position_embeddings is '196608'"),
    ({'max_position_embeddings': 0}, 'max_position_embeddings is 0'),
])
def test_bad_config_values_name_the_key(change, match):
    cfg = dict(config('minimax-m2.5-config.json'), **change)
    with pytest.raises(hf.CheckpointError, match=match):
        hf.model_shape(cfg, 'model')


def test_safetensors_header_parse_gives_exact_sizes():
    plan = sh.ModelPlan(sh.validate_options({}))
    header, size = sh.safetensors_header(plan.tensors)
    parsed = hf.parse_safetensors_header(header, 'model.safetensors')
    assert len(parsed) == len(plan.tensors)
    assert sum(t[2] for t in parsed.values()) == size == plan.weights_bytes
    assert parsed['model.layers.0.block_sparse_moe.experts.0.w1.weight'] == ('F8_E4M3', [384, 512], 384 * 512)
    assert parsed['model.layers.0.block_sparse_moe.experts.0.w1.weight_scale_inv'] == ('F32', [3, 4], 48)


@pytest.mark.parametrize('data,match', [
    (b'\x01\x00', 'shorter than its 8-byte header length'),
    (b'\xff\x00\x00\x00\x00\x00\x00\x00{}', 'header says 255 bytes'),
    (b'\x02\x00\x00\x00\x00\x00\x00\x00{x', 'header is not JSON'),
    (b'\x0b\x00\x00\x00\x00\x00\x00\x00{"a": {}}  ', "entry 'a' lacks dtype"),
    (struct.pack('<Q', 2) + b'[]', 'safetensors header is a JSON list, not an object'),
    (struct.pack('<Q', 18) + b'[{"dtype": "F32"}]', 'safetensors header is a JSON list'),
    (struct.pack('<Q', 3) + b'"x"', 'safetensors header is a JSON str'),
    (struct.pack('<Q', 1) + b'7', 'safetensors header is a JSON int'),
    (struct.pack('<Q', 12) + b'{"a": "F32"}', "entry 'a' lacks dtype"),
    (struct.pack('<Q', 58) + b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}', "entry 'a' lacks dtype"),
    (struct.pack('<Q', 62) + b'{"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}', "entry 'a' has shape \\[-2\\]"),
    (struct.pack('<Q', 63) + b'{"a": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}}', "entry 'a' has shape"),
    (struct.pack('<Q', 61) + b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}', 'expected whole numbers >= 0 with end >= start'),
    (struct.pack('<Q', 63) + b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.5]}}', 'data_offsets \\[0, 8.5\\]'),
    (struct.pack('<Q', 61) + b'{"a": {"dtype": "f33", "shape": [2], "data_offsets": [0, 8]}}', "entry 'a' has dtype 'f33', not a safetensors dtype name"),
    (struct.pack('<Q', 63) + b'{"a": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}', "entry 'a' has dtype \\['F32'\\]"),
])
def test_bad_safetensors_headers(data, match):
    with pytest.raises(hf.CheckpointError, match=match):
        hf.parse_safetensors_header(data, 'f.safetensors')


# DeepSeek-V3 (and Kimi-K2, the same DeepseekV3ForCausalLM layout), as its config.json says it
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "intermediate_size": 18432,
    "n_shared_experts": 1, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}


def test_deepseek_v3_shape_sees_routed_and_shared_experts_and_dense_layers():
    shape = hf.model_shape(DEEPSEEK_V3)
    assert (shape["experts"], shape["experts_used"], shape["expert_ffn_size"]) == (256, 8, 2048)
    assert (shape["dense_leading"], shape["dense_ffn_size"], shape["shared_expert_ffn_size"]) == (3, 18432, 2048)
    assert shape["structure"]["attention"] == "mla" and shape["mtp_layers"] == 1


def test_deepseek_v3_checkpoint_tensors():
    shape = hf.model_shape(dict(DEEPSEEK_V3, num_hidden_layers=4))
    tensors = dict((name, (dt, dims)) for name, dt, dims in hf.checkpoint_tensors(shape))
    # dense layer 0: an MLP of 18432; MoE layer 3: 256 experts of 2048 and one shared expert
    assert tensors["model.layers.0.mlp.gate_proj.weight"] == ("F8_E4M3", [18432, 7168])
    assert tensors["model.layers.3.mlp.experts.255.down_proj.weight"] == ("F8_E4M3", [7168, 2048])
    assert tensors["model.layers.3.mlp.shared_experts.up_proj.weight"] == ("F8_E4M3", [2048, 7168])
    # the latent: kv_a_proj_with_mqa to 512 + 64, kv_b_proj to 128 heads x (128 + 128)
    assert tensors["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == ("F8_E4M3", [576, 7168])
    assert tensors["model.layers.1.self_attn.kv_b_proj.weight"] == ("F8_E4M3", [32768, 512])
    # q_b_proj: 128 heads x (128 + 64) from the 1536 rank; its scales per [128, 128] block
    assert tensors["model.layers.1.self_attn.q_b_proj.weight_scale_inv"] == ("F32", [192, 12])
    assert "model.layers.0.mlp.experts.0.up_proj.weight" not in tensors


def test_gpt_oss_mxfp4_experts_are_blocks_and_scales():
    cfg = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 2,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
           "num_local_experts": 128, "num_experts_per_tok": 4, "intermediate_size": 2880, "sliding_window": 128,
           "attention_bias": True, "quantization_config": {"quant_method": "mxfp4"}}
    shape = hf.model_shape(cfg)
    tensors = dict((name, (dt, dims)) for name, dt, dims in hf.checkpoint_tensors(shape))
    # 2 x 2880 rows, 2880 / 32 = 90 blocks of 16 bytes (32 FP4 values)
    assert tensors["model.layers.0.mlp.experts.gate_up_proj_blocks"] == ("U8", [128, 5760, 90, 16])
    assert tensors["model.layers.0.mlp.experts.down_proj_scales"] == ("U8", [128, 2880, 90])
    assert shape["structure"]["layer_kinds"][:2] == ["swa", "full"]
