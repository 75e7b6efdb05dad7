#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: synthetic_gguf
short_description: Write a random-weight GGUF model shaped like a real architecture
description:
  - Writes a GGUF model file with random weights whose tensor names, shapes and metadata match
    what llama.cpp's loader expects for O(architecture), so a new cluster (RPC workers and
    llama-server head) can be proven end to end before a real model of hundreds of GiB is
    downloaded.
  - Pure Python on the target (no numpy). Tensor data is streamed to a temporary file in the
    same directory and renamed into place, so a reader never sees a partial file.
  - Idempotent. The options (and the checksum of O(vocab_gguf)) are hashed into the metadata key
    C(gpulab.synthetic.options_sha256); when every file already carries the same hash nothing is
    written.
  - Refuses to overwrite a file at O(path) that is not a synthetic model written by this module
    (for example a real model) unless O(force=true).
  - The defaults are scaled down so a 2-core CPU loads and runs the model; raise O(layers),
    O(hidden_size), O(experts) and the others to approach the real model's memory footprint.
version_added: "0.1.0"
author:
  - gpulab.inference contributors (@gpulab)
extends_documentation_fragment:
  - ansible.builtin.files
attributes:
  check_mode:
    support: full
    description: Reports what would be written (sizes are exact) without writing.
  diff_mode:
    support: none
    description: Model files are binary; no diff is produced.
options:
  path:
    description:
      - Path of the model file; must end with C(.gguf). Its directory must exist.
      - With O(shards) > 1 the files are named like llama.cpp's gguf-split does,
        C(<stem>-00001-of-00003.gguf), and this path itself is not written.
    type: path
    required: true
  architecture:
    description:
      - llama.cpp architecture whose tensor layout and metadata are reproduced.
      - C(minimax-m2) is MiniMax-M2, attention with Q/K RMS norms, sigmoid-gated mixture of
        experts with an expert probability bias.
      - C(deepseek2) is DeepSeek-V3 / Kimi-K2 (multi-head latent attention, one dense first layer,
        one shared expert); C(qwen3moe) Qwen3-MoE; C(glm4moe) GLM-4.x MoE (one dense first layer,
        one shared expert); C(gpt-oss) gpt-oss (a 128-token sliding window on every other layer);
        C(qwen3next) Qwen3-Next (gated delta-net layers with full attention every fourth layer);
        C(minimax-m3) MiniMax-M3 (block-sparse attention with an indexer on every layer after one
        dense first layer, one shared expert).
    type: str
    choices: [minimax-m2, deepseek2, qwen3moe, glm4moe, gpt-oss, qwen3next, minimax-m3]
    default: minimax-m2
  layers:
    description: Number of transformer blocks (C(block_count)). MiniMax-M2 has 62.
    type: int
    default: 4
  hidden_size:
    description: Embedding length; a multiple of 32 (the Q8_0 block size). MiniMax-M2 has 3072.
    type: int
    default: 512
  attention_heads:
    description: Query heads per layer; a multiple of O(kv_heads). MiniMax-M2 has 48.
    type: int
    default: 8
  kv_heads:
    description: Key/value heads per layer (grouped-query attention). MiniMax-M2 has 8.
    type: int
    default: 2
  head_dim:
    description: Size of one attention head; a multiple of 32. MiniMax-M2 has 128.
    type: int
    default: 128
  experts:
    description: Routed experts per layer. MiniMax-M2 has 256.
    type: int
    default: 8
  experts_used:
    description: Experts each token is routed to; at most O(experts). MiniMax-M2 uses 8.
    type: int
    default: 2
  expert_ffn_size:
    description: Hidden size of each expert's feed-forward network; a multiple of 32. MiniMax-M2 has 1536.
    type: int
    default: 256
  context_length:
    description: Training context length written to the metadata (llama-server's default context).
    type: int
    default: 4096
  quantization:
    description:
      - Type of the 2-D weight tensors. Norms, the expert router and the expert bias stay F32,
        as in llama.cpp's own quantized files.
    type: str
    choices: [Q8_0, F16]
    default: Q8_0
  vocab_gguf:
    description:
      - Path on the target of a vocabulary-only GGUF (for example llama.cpp's
        C(models/ggml-vocab-qwen2.gguf)). Its C(tokenizer.*) keys are copied and its token count
        sizes the token embedding and output tensors, so prompts tokenize like a real model.
      - When omitted, a built-in byte-level vocabulary of 259 tokens is used.
    type: path
  chat_template:
    description:
      - Jinja chat template written to C(tokenizer.chat_template), used by llama-server's
        C(/v1/chat/completions).
      - When omitted, the template of O(vocab_gguf) is kept; without one a minimal ChatML-style
        template is written.
    type: str
  seed:
    description: Seed of the pseudo-random weights; the same seed writes the same bytes.
    type: int
    default: 42
  shards:
    description:
      - Number of files to split the model into, the way llama.cpp's gguf-split does (keys
        C(split.no), C(split.count), C(split.tensors.count); all other metadata in the first file).
      - At most the number of tensors.
    type: int
    default: 1
  force:
    description:
      - Rewrite the files even when they are up to date, and overwrite files at the target paths
        that are not synthetic models or cannot be read.
    type: bool
    default: false
notes:
  - The weights are random, so the model's output is gibberish; it proves loading, splitting
    across devices and serving, not quality.
  - Writing needs free space for the new files beside the old ones until they are renamed into
    place; the module checks the space first, in check mode too.
  - Temporary files an interrupted run left (C(.<file name>.<random>.tmp) beside each file) are
    removed at the start of the next run and their space is counted as free.
  - Changing O(shards) leaves the files of the old layout in place; remove them when done.
seealso:
  - name: llama.cpp gguf-split
    description: The split file naming and keys reproduced by O(shards).
    link: https://github.com/ggml-org/llama.cpp/tree/master/tools/gguf-split
"""

EXAMPLES = r"""
- name: Write the default scaled-down MiniMax-M2 model with the Qwen2 vocabulary
  gpulab.inference.synthetic_gguf:
    path: /var/lib/gpulab/models/synthetic-minimax-m2.gguf
    vocab_gguf: /opt/gpulab/llama.cpp/current/src/models/ggml-vocab-qwen2.gguf

- name: Write a larger model split into 3 files, as big downloaded models are
  gpulab.inference.synthetic_gguf:
    path: /var/lib/gpulab/models/synthetic-minimax-m2.gguf
    layers: 16
    hidden_size: 3072
    attention_heads: 48
    kv_heads: 8
    experts: 32
    experts_used: 8
    expert_ffn_size: 1536
    shards: 3
    owner: gpulab
    mode: "0644"
  register: gpulab_synthetic_model

- name: Show the file llama-server must be started with
  ansible.builtin.debug:
    msg: "{{ gpulab_synthetic_model.path }} ({{ gpulab_synthetic_model.size_gib }} GiB)"
"""

RETURN = r"""
path:
  description: File to pass to llama.cpp's C(-m); the first shard when O(shards) > 1.
  returned: always
  type: str
  sample: /var/lib/gpulab/models/synthetic-minimax-m2-00001-of-00003.gguf
shard_paths:
  description: Every file of the model, in order.
  returned: always
  type: list
  elements: str
  sample: [/var/lib/gpulab/models/synthetic-minimax-m2.gguf]
size_bytes:
  description:
    - Total size of all files in bytes.
    - The C(size), C(mode), C(owner) keys Ansible adds for O(path) describe the first file only.
  returned: always
  type: int
  sample: 190283904
size_gib:
  description: Total size of all files in GiB, rounded to 3 decimals.
  returned: always
  type: float
  sample: 0.177
tensor_count:
  description: Number of tensors over all files.
  returned: always
  type: int
  sample: 55
n_params:
  description: Number of weights (tensor elements) over all files.
  returned: always
  type: int
  sample: 173434400
vocab_size:
  description: Number of tokens in the vocabulary.
  returned: always
  type: int
  sample: 151936
architecture:
  description: llama.cpp architecture written to C(general.architecture).
  returned: always
  type: str
  sample: minimax-m2
layers:
  description: Number of transformer blocks.
  returned: always
  type: int
  sample: 4
chat_template_source:
  description: Where C(tokenizer.chat_template) came from, C(option), C(vocab_gguf) or C(default).
  returned: always
  type: str
  sample: vocab_gguf
removed_temp_files:
  description:
    - Temporary files an interrupted run had left beside the model's files, removed by this run
      (in check mode, those that would be removed). Their space counts as free in the space check.
  returned: always
  type: list
  elements: str
  sample: [/var/lib/gpulab/models/.synthetic-minimax-m2.gguf.k2j4x9_a.tmp]
options_sha256:
  description: Hash of the options and vocabulary checksum, stored in C(gpulab.synthetic.options_sha256).
  returned: always
  type: str
  sample: 4d5c0a8e0f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_model as sm

OPTION_NAMES = ("architecture", "layers", "hidden_size", "attention_heads", "kv_heads", "head_dim",
                "experts", "experts_used", "expert_ffn_size", "context_length", "quantization",
                "vocab_gguf", "chat_template", "seed", "shards")


class SyntheticGGUF:
    """Decides whether the model files must be written and writes them."""

    def __init__(self, module):
        self.module = module
        self.check_mode = module.check_mode
        self.path = module.params["path"]
        self.force = module.params["force"]
        self.changed = False
        self.plan = None
        self.size_bytes = 0
        self.removed_temp_files = []

    def prepare(self):
        """Validate everything and build the plan; nothing is written here."""
        opts = sm.validate_options(dict((k, self.module.params[k]) for k in OPTION_NAMES))
        sm.shard_paths(self.path, opts["shards"])
        directory = os.path.dirname(os.path.abspath(self.path))
        # in check mode the task that creates the directory has not run either
        if not os.path.isdir(directory) and not self.check_mode:
            raise sm.SyntheticModelError("directory %s of path=%r does not exist; create it first "
                                         "(ansible.builtin.file state=directory)" % (directory, self.path))
        if opts["vocab_gguf"]:
            vocab = sm.load_vocab(opts["vocab_gguf"])
            vocab_sha256 = sm.file_sha256(opts["vocab_gguf"])
        else:
            vocab = sm.builtin_vocab()
            vocab_sha256 = None
        self.plan = sm.ModelPlan(opts, self.path, vocab, vocab_sha256)

    def run(self):
        self.prepare()
        # temporary files of an interrupted run: removed first, their space counted as free
        stale = sm.stale_temp_files(self.plan.paths)
        self.removed_temp_files = [path for path, _size in stale]
        state = "stale"
        if not self.force:
            state = sm.existing_state(self.plan.paths, self.plan.options_sha256)
        if state == "current":
            self.size_bytes = sum(os.path.getsize(p) for p in self.plan.paths)
        else:
            self.changed = True
            self.size_bytes = sum(self.plan.file_sizes())
            # checked in check mode too, so a model that cannot fit is refused before any change
            directory = sm.existing_directory(os.path.dirname(os.path.abspath(self.plan.paths[0])))
            sm.check_free_space(directory, self.size_bytes, sum(size for _path, size in stale))
        if stale:
            self.changed = True
            if not self.check_mode:
                for path in self.removed_temp_files:
                    os.unlink(path)
        if state != "current" and not self.check_mode:
            sm.write_model(self.plan, self.plan.opts["seed"])
        self.apply_file_attributes()

    def apply_file_attributes(self):
        for path in self.plan.paths:
            if self.check_mode and not os.path.exists(path):
                continue
            file_args = self.module.load_file_common_arguments(self.module.params, path=path)
            self.changed = self.module.set_fs_attributes_if_different(file_args, self.changed)

    @property
    def result(self):
        plan = self.plan
        return dict(
            changed=self.changed,
            path=plan.paths[0],
            shard_paths=plan.paths,
            size_bytes=self.size_bytes,
            size_gib=round(self.size_bytes / float(1 << 30), 3),
            tensor_count=len(plan.tensors),
            n_params=plan.n_params,
            vocab_size=plan.n_vocab,
            architecture=plan.opts["architecture"],
            layers=plan.opts["layers"],
            chat_template_source=plan.chat_template_source,
            options_sha256=plan.options_sha256,
            removed_temp_files=self.removed_temp_files,
        )


def build_module():
    defaults = sm.DEFAULTS
    argument_spec = dict(
        path=dict(type="path", required=True),
        architecture=dict(type="str", choices=list(sm.ARCHITECTURES), default=defaults["architecture"]),
        layers=dict(type="int", default=defaults["layers"]),
        hidden_size=dict(type="int", default=defaults["hidden_size"]),
        attention_heads=dict(type="int", default=defaults["attention_heads"]),
        kv_heads=dict(type="int", default=defaults["kv_heads"]),
        head_dim=dict(type="int", default=defaults["head_dim"]),
        experts=dict(type="int", default=defaults["experts"]),
        experts_used=dict(type="int", default=defaults["experts_used"]),
        expert_ffn_size=dict(type="int", default=defaults["expert_ffn_size"]),
        context_length=dict(type="int", default=defaults["context_length"]),
        quantization=dict(type="str", choices=["Q8_0", "F16"], default=defaults["quantization"]),
        vocab_gguf=dict(type="path"),
        chat_template=dict(type="str"),
        seed=dict(type="int", default=defaults["seed"]),
        shards=dict(type="int", default=defaults["shards"]),
        force=dict(type="bool", default=False),
    )
    return AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, add_file_common_args=True)


def main():
    module = build_module()
    model = SyntheticGGUF(module)
    try:
        model.run()
    except (sm.SyntheticModelError, gguf.GGUFError) as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing the model at %s failed: %s" % (module.params["path"], exc))
    module.exit_json(**model.result)


if __name__ == "__main__":
    main()
