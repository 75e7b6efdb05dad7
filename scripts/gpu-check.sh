#!/usr/bin/env bash
# Runs the collection on one real NVIDIA GPU host without systemd (a CI-style accelerator box):
# gpu_facts, the llama_cpp_build role with CUDA auto-detected, then llama-bench on a synthetic
# MiniMax-M2-shaped model, locally and through a ggml-rpc-server on loopback.
# Usage: scripts/gpu-check.sh ARCHIVE OUTDIR   (ansible-core importable by python3)
set -euo pipefail
archive=$(realpath "$1") out=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/gpulab-gpu-check.XXXXXX)
mkdir -p "$work/collections/ansible_collections/gpulab" "$out"
ln -s "$repo" "$work/collections/ansible_collections/gpulab/inference"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_ROLES_PATH=$repo/roles
touch "$work/ansible.cfg"
export ANSIBLE_CONFIG=$work/ansible.cfg ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default ANSIBLE_CALLBACK_RESULT_FORMAT=yaml
export PATH=/usr/local/cuda/bin:$PATH
cat >"$work/hosts.yml" <<INV
gpu_nodes:
  children:
    inference_head:
      hosts:
        gpu-host:
          ansible_connection: local
          ansible_python_interpreter: $(command -v python3)
          gpulab_fabric_address: 127.0.0.1
          llama_cpp_source: archive
          llama_cpp_archive_src: $archive
          llama_cpp_build_number: "0"
          llama_cpp_build_commit: 0c1e570
          llama_cpp_distribute_controller_cache: $work/controller-cache
INV
python3 -m ansible.cli.adhoc -i "$work/hosts.yml" gpu-host -m gpulab.inference.gpu_facts -o | tee "$out/gpu_facts.txt"
start=$(date +%s)
python3 -m ansible.cli.playbook -i "$work/hosts.yml" "$repo/playbooks/build.yml" 2>&1 | tee "$out/build.log" | grep -E '^(TASK|PLAY RECAP|ok:|changed:|fatal:|  )' | grep -E 'fatal|RECAP|gpu-host *:|\[[0-9]+/[0-9]+\]' || true
echo "build.yml wall: $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
start=$(date +%s)
python3 -m ansible.cli.playbook -i "$work/hosts.yml" "$repo/playbooks/build.yml" >"$out/build-again.log" 2>&1
echo "build.yml again: $(( $(date +%s) - start ))s, $(grep -E 'gpu-host *:' "$out/build-again.log" | tail -n 1)" | tee -a "$out/summary.txt"
cp /opt/gpulab/llama.cpp/current/BUILD_INFO.json "$out/"
bin=/opt/gpulab/llama.cpp/current/bin
"$bin/llama-server" --version 2>&1 | tail -n 2 | tee -a "$out/summary.txt"
python3 -m ansible.cli.adhoc -i "$work/hosts.yml" gpu-host -m gpulab.inference.synthetic_gguf \
  -a "path=$work/m.gguf layers=16 hidden_size=3072 attention_heads=48 kv_heads=8 experts=64 experts_used=8 expert_ffn_size=1536 shards=2" -o | cut -c1-400 | tee -a "$out/summary.txt"
model=$(ls "$work"/m-00001-of-*.gguf)
"$bin/llama-bench" -m "$model" -fa 1 -p 512 -n 128 -r 3 -o md 2>"$out/bench-local.err" | tee "$out/bench-local.md"
"$bin/ggml-rpc-server" -H 127.0.0.1 -p 50052 >"$out/rpc.log" 2>&1 &
rpc=$!
sleep 3
"$bin/llama-bench" -m "$model" -fa 1 -p 512 -n 128 -r 3 -o md --rpc 127.0.0.1:50052 -dev RPC0 2>"$out/bench-rpc.err" | tee "$out/bench-rpc.md"
kill "$rpc" || true
