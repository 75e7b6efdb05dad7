#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: synthetic_hf
short_description: Write a random-weight Hugging Face model directory shaped like a real architecture
description:
  - The twin of M(gpulab.inference.synthetic_gguf) for vLLM. Writes C(config.json),
    C(generation_config.json), the weights as safetensors (one file, or shards with
    C(model.safetensors.index.json)) and an offline byte-level BPE tokenizer (C(tokenizer.json),
    C(tokenizer_config.json) with a ChatML chat template), so vLLM loads it and every layout rule
    can be tried for real without downloading the real model.
  - O(quantization=fp8) writes the layout of real FP8 block checkpoints - C(quantization_config)
    with C(quant_method=fp8), C(fmt=e4m3), C(activation_scheme=dynamic) and
    C(weight_block_size), the decoder's linear weights as C(F8_E4M3) with a float32
    C(<weight>_scale_inv) tensor per block; embeddings, norms, the router and C(lm_head) stay bf16.
  - Pure Python on the target (no numpy, no safetensors library). Every file is written to a
    temporary file beside it and renamed into place.
  - Idempotent. The options are hashed into C(gpulab-synthetic.json); when it matches and every
    file is there nothing is written. Refuses to write into a directory holding a model this
    module did not write, unless O(force=true).
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
attributes:
  check_mode:
    support: full
    description: Reports what would be written (sizes are exact) without writing.
  diff_mode:
    support: none
    description: Model files are binary; no diff is produced.
options:
  path:
    description: The model directory; created (mode 0755) when its parent exists.
    type: path
    required: true
  architecture:
    description:
      - V(minimax-m2) - MiniMax-M2 (C(MiniMaxM2ForCausalLM)), sigmoid-routed experts with a routing
        bias, per-layer Q/K norms, checkpoint names C(block_sparse_moe.experts.N.w1/w2/w3).
      - V(llama) and V(qwen2) - dense C(LlamaForCausalLM) / C(Qwen2ForCausalLM) (Q/K/V biases).
      - V(deepseek-v3), V(qwen3-moe), V(glm4-moe), V(gpt-oss), V(qwen3-next), V(minimax-m3) - the other
        frontier MoE families; give their shape with O(family), which sets every key of their config.json.
    type: str
    choices: [deepseek-v3, glm4-moe, gpt-oss, llama, minimax-m2, minimax-m3, qwen2, qwen3-moe, qwen3-next]
    default: minimax-m2
  family:
    description:
      - A released model's shape and config.json keys (synthetic_hf.FAMILIES) - V(deepseek-v3)
        (DeepSeek-V3, MLA, 256 routed experts + 1 shared, 3 dense layers, FP8), V(qwen3-moe)
        (Qwen3-235B-A22B), V(glm4-moe) (GLM-4.5), V(gpt-oss) (gpt-oss-120b, MXFP4, sliding window),
        V(qwen3-next) (Qwen3-Next-80B-A3B, gated delta net), V(minimax-m2) (MiniMax-M2), V(minimax-m3)
        (MiniMax-M3, block-sparse attention with an indexer, 3 dense layers, a shared expert; bf16).
      - Its depth unless O(layers) is given (reduced depth keeps every width). Replaces
        O(architecture), the shape options and O(quantization); O(seed), O(shard_max_mib) and
        O(weights) still apply.
    type: str
    choices: [deepseek-v3, glm4-moe, gpt-oss, minimax-m2, minimax-m3, qwen3-moe, qwen3-next]
  weights:
    description:
      - V(random) writes bounded random values. V(sparse) writes each safetensors file as its
        header over a hole of the data's size (reads as zeros, takes no disk), the shape of a
        full-size checkpoint for the planners and for vLLM's C(--load-format dummy).
    type: str
    choices: [random, sparse]
    default: random
  layers:
    description: Decoder layers; 2 when unset (the family's own depth with O(family)). MiniMax-M2 has 62.
    type: int
  hidden_size:
    description: Hidden size; with O(quantization=fp8) a multiple of the block. MiniMax-M2 has 3072.
    type: int
    default: 512
  attention_heads:
    description: Query heads; a multiple of O(kv_heads). MiniMax-M2 has 48.
    type: int
    default: 4
  kv_heads:
    description: Key/value heads. MiniMax-M2 has 8.
    type: int
    default: 2
  head_dim:
    description: Size of one head. MiniMax-M2 has 128.
    type: int
    default: 128
  experts:
    description: Routed experts per layer (V(minimax-m2)). MiniMax-M2 has 256.
    type: int
    default: 8
  experts_used:
    description: Experts per token (V(minimax-m2)). MiniMax-M2 uses 8.
    type: int
    default: 2
  expert_ffn_size:
    description:
      - FFN size of one expert (V(minimax-m2), config C(intermediate_size)). MiniMax-M2 has 1536.
      - The default 384 is 3 FP8 blocks, so tensor parallelism 2 without expert parallelism fails
        in vLLM exactly as 1536 does at 8 (gpulab.inference.vllm_plan says so first).
    type: int
    default: 384
  ffn_size:
    description: MLP size of the dense architectures.
    type: int
    default: 1024
  max_position_embeddings:
    description: The model's context; vLLM's default C(--max-model-len).
    type: int
    default: 4096
  quantization:
    description:
      - V(fp8) writes FP8 block-quantised linear weights; V(none) keeps everything bf16.
      - V(mxfp4) (V(gpt-oss) only) writes its experts as MXFP4 blocks and E8M0 scales.
    type: str
    choices: [none, fp8, mxfp4]
    default: fp8
  weight_block_size:
    description: FP8 block [n, k]; real checkpoints use [128, 128].
    type: list
    elements: int
    default: [128, 128]
  seed:
    description: Seed of the pseudo-random weights; the same seed writes the same bytes.
    type: int
    default: 42
  shard_max_mib:
    description: Largest safetensors file in MiB; 0 writes one C(model.safetensors).
    type: int
    default: 0
  force:
    description: Rewrite even when up to date, and write into a directory holding a model this module did not write.
    type: bool
    default: false
notes:
  - The weights are random, so the output is gibberish; it proves loading, the layout and serving, not quality.
  - Weight files of an earlier shard layout written by this module are removed.
seealso:
  - module: gpulab.inference.vllm_plan
  - module: gpulab.inference.synthetic_gguf
"""

EXAMPLES = r"""
- name: Write the default MiniMax-M2-shaped FP8 model (2 layers, 8 experts)
  gpulab.inference.synthetic_hf:
    path: /var/lib/gpulab/models/synthetic-minimax-m2-fp8

- name: Write a dense Llama-shaped bf16 model in 2 shards
  gpulab.inference.synthetic_hf:
    path: /var/lib/gpulab/models/synthetic-llama
    architecture: llama
    quantization: none
    shard_max_mib: 8

- name: Write DeepSeek-V3's full shape as headers over holes, for plan.yml (627 GiB apparent, no disk)
  gpulab.inference.synthetic_hf:
    path: /srv/models/deepseek-v3-headers
    family: deepseek-v3
    weights: sparse
    shard_max_mib: 5000

- name: Write MiniMax-M2's real layer shape with fewer layers and experts
  gpulab.inference.synthetic_hf:
    path: /srv/models/synthetic-minimax-m2-wide
    layers: 4
    hidden_size: 3072
    attention_heads: 48
    kv_heads: 8
    experts: 16
    experts_used: 8
    expert_ffn_size: 1536
    shard_max_mib: 4096
"""

RETURN = r"""
path:
  description: The model directory, what C(vllm serve) is given.
  returned: always
  type: str
  sample: /var/lib/gpulab/models/synthetic-minimax-m2-fp8
files:
  description: Every file of the model, names relative to O(path).
  returned: always
  type: list
  elements: str
  sample: [config.json, generation_config.json, gpulab-synthetic.json, model.safetensors, tokenizer.json, tokenizer_config.json]
weights_bytes:
  description: Bytes of tensor data over all safetensors files (the index's C(total_size)).
  returned: always
  type: int
  sample: 12845056
size_bytes:
  description: Bytes of every file.
  returned: always
  type: int
  sample: 13123584
n_params:
  description: Number of weights (tensor elements, scales not counted).
  returned: always
  type: int
  sample: 12000000
tensor_count:
  description: Number of tensors, scales included.
  returned: always
  type: int
  sample: 91
vocab_size:
  description: Embedding rows (the tokenizer's tokens rounded up to 64).
  returned: always
  type: int
  sample: 320
architecture:
  description: C(architectures[0]) of C(config.json).
  returned: always
  type: str
  sample: MiniMaxM2ForCausalLM
model_type:
  description: C(model_type) of C(config.json).
  returned: always
  type: str
  sample: minimax_m2
removed:
  description: Weight files of an earlier layout that were removed.
  returned: always
  type: list
  elements: str
  sample: []
options_sha256:
  description: Hash of the options, stored in C(gpulab-synthetic.json).
  returned: always
  type: str
  sample: 4d5c0a8e0f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh

OPTION_NAMES = tuple(sorted(sh.DEFAULTS))


class SyntheticHF:
    """Decides whether the model directory must be written, and writes it."""

    def __init__(self, module):
        self.module = module
        self.path = module.params["path"]
        self.changed = False
        self.removed = []
        self.plan = None

    def run(self):
        params = self.module.params
        if params["family"]:
            options = sh.family_options(params["family"], layers=params["layers"])
            options.update((k, params[k]) for k in ("seed", "shard_max_mib", "weights"))
        else:
            options = dict((k, params[k]) for k in OPTION_NAMES + ("weights",))
        self.plan = sh.ModelPlan(sh.validate_options(options))
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise sh.SyntheticHFError("the parent %s of path=%r does not exist; create it first" % (parent, self.path))
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise sh.SyntheticHFError("path=%r exists and is not a directory" % self.path)
        state = sh.existing_state(self.path, self.plan) if os.path.isdir(self.path) else "absent"
        if state == "foreign" and not self.module.params["force"]:
            raise sh.SyntheticHFError(
                "%s holds a model this module did not write (config.json without %s); refusing to overwrite it. "
                "Pick another path, or set force=true" % (self.path, sh.MARKER_NAME))
        if state == "current" and not self.module.params["force"]:
            return
        self.changed = True
        old_sizes = {}
        if os.path.isdir(self.path):
            self.removed = sh.stale_files(self.path, self.plan)
            for name in self.plan.file_names():
                if os.path.isfile(os.path.join(self.path, name)):
                    old_sizes[name] = os.path.getsize(os.path.join(self.path, name))
        # checked in check mode too, so a model that cannot fit is refused before any change
        sh.check_free_space(self.path if os.path.isdir(self.path) else parent, self.plan, old_sizes)
        if self.module.check_mode:
            return
        if not os.path.isdir(self.path):
            os.mkdir(self.path, 0o755)
        sh.write_model(self.path, self.plan)
        for name in self.removed:
            os.unlink(os.path.join(self.path, name))

    def size_bytes(self):
        total = 0
        for name in self.plan.file_names():
            path = os.path.join(self.path, name)
            if os.path.isfile(path):
                total += os.path.getsize(path)
            elif name.endswith(".safetensors"):
                entries = dict(self.plan.shards)[name]
                header, data = sh.safetensors_header(entries)
                total += len(header) + data
        return total

    @property
    def result(self):
        plan = self.plan
        return dict(
            changed=self.changed,
            path=self.path,
            files=plan.file_names(),
            weights_bytes=plan.weights_bytes,
            size_bytes=self.size_bytes(),
            n_params=plan.n_params,
            tensor_count=len(plan.tensors),
            vocab_size=plan.config["vocab_size"],
            architecture=plan.config["architectures"][0],
            model_type=plan.config["model_type"],
            removed=self.removed,
            options_sha256=plan.options_sha256,
        )


def build_module():
    d = sh.DEFAULTS
    return AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            architecture=dict(type="str", choices=sorted(sh.ARCHITECTURES), default=d["architecture"]),
            family=dict(type="str", choices=sorted(sh.FAMILIES)),
            weights=dict(type="str", choices=list(sh.WEIGHTS), default=sh.FAMILY_DEFAULTS["weights"]),
            layers=dict(type="int"),
            hidden_size=dict(type="int", default=d["hidden_size"]),
            attention_heads=dict(type="int", default=d["attention_heads"]),
            kv_heads=dict(type="int", default=d["kv_heads"]),
            head_dim=dict(type="int", default=d["head_dim"]),
            experts=dict(type="int", default=d["experts"]),
            experts_used=dict(type="int", default=d["experts_used"]),
            expert_ffn_size=dict(type="int", default=d["expert_ffn_size"]),
            ffn_size=dict(type="int", default=d["ffn_size"]),
            max_position_embeddings=dict(type="int", default=d["max_position_embeddings"]),
            quantization=dict(type="str", choices=list(sh.QUANTIZATIONS), default=d["quantization"]),
            weight_block_size=dict(type="list", elements="int", default=d["weight_block_size"]),
            seed=dict(type="int", default=d["seed"]),
            shard_max_mib=dict(type="int", default=d["shard_max_mib"]),
            force=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    model = SyntheticHF(module)
    try:
        model.run()
    except (sh.SyntheticHFError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing the model at %s failed: %s" % (module.params["path"], exc))
    module.exit_json(**model.result)


if __name__ == "__main__":
    main()
