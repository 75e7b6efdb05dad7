# The GPU harnesses' named llama.cpp models (sourced by scripts/gpu-e2e.sh and
# scripts/gpu-served-speed.sh): sets named_options (JSON options of synthetic_gguf) and named_stem
# from $model_name. MiniMax-M2-shaped, Q8_0, 2 shards:
#   m2-16  16 layers, hidden 3072, 48 heads / 8 KV heads, 64 experts / 8 used, expert FFN 1536: 15.98 GiB
#   m2-62  the real model's depth: 62 layers, hidden 3072, 48 / 8 heads, 16 experts / 8 used, expert FFN
#          1536: about 19 GB; a token reads the same 8 experts per layer as the real model's 256 / 8.
# shellcheck shell=bash disable=SC2034,SC2154
case $model_name in
  m2-16) named_options='{"layers": 16, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8, "experts": 64, "experts_used": 8, "expert_ffn_size": 1536, "shards": 2}'
    named_stem=e2e-minimax-m2 ;;
  m2-62) named_options='{"layers": 62, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8, "experts": 16, "experts_used": 8, "expert_ffn_size": 1536, "shards": 2}'
    named_stem=e2e-minimax-m2-62 ;;
  *) echo "the model name is $model_name; use m2-16 or m2-62" >&2; exit 2 ;;
esac
