# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Random-weight Hugging Face model directories shaped like real architectures, so vLLM can load
them and every layout rule can be tried without downloading hundreds of GB.

A directory holds config.json, generation_config.json, the weights as safetensors (one file, or
shards with model.safetensors.index.json), and an offline byte-level BPE tokenizer
(tokenizer.json + tokenizer_config.json with a ChatML chat template).

The tensor names and shapes come from hf_checkpoint.checkpoint_tensors, the same table the planner
estimates memory from. FP8 block quantisation follows the layout of real FP8 checkpoints
(DeepSeek-V3, MiniMax-M2): config `quantization_config` {quant_method: fp8, fmt: e4m3,
activation_scheme: dynamic, weight_block_size: [128, 128]}, linear weights stored as F8_E4M3 with
a float32 `<weight>_scale_inv` per block (vllm/model_executor/layers/quantization/fp8.py).

safetensors is written here without the library: 8 bytes little-endian header length, the JSON
header (padded with spaces to 8 bytes), then the raw little-endian bytes of every tensor in header
order (safetensors/docs format). Pure Python, no numpy: random bytes become bf16 or FP8 values
through byte translation tables that bound their magnitude, so activations stay finite.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import random
import struct

from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
from ansible_collections.gpulab.inference.plugins.module_utils.atomic_file import atomic_write
from ansible_collections.gpulab.inference.plugins.module_utils.synthetic_model import free_space_problem

# bump when the bytes written for the same options change
GENERATOR_REVISION = 1
MARKER_NAME = "gpulab-synthetic.json"
INDEX_NAME = "model.safetensors.index.json"
CHUNK_ELEMENTS = 1 << 20

ARCHITECTURES = {
    # option value -> (config architectures[0], model_type)
    "minimax-m2": ("MiniMaxM2ForCausalLM", "minimax_m2"),
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
}
QUANTIZATIONS = ("none", "fp8")

# Scaled down so one GPU (or a CPU test) loads it in seconds. MiniMax-M2 itself: 62 layers,
# hidden 3072, 48 heads, 8 KV heads, head dim 128, 256 experts (8 used), expert FFN 1536.
DEFAULTS = {
    "architecture": "minimax-m2",
    "layers": 2,
    "hidden_size": 512,
    "attention_heads": 4,
    "kv_heads": 2,
    "head_dim": 128,
    "experts": 8,
    "experts_used": 2,
    "expert_ffn_size": 384,
    "ffn_size": 1024,
    "max_position_embeddings": 4096,
    "quantization": "fp8",
    "weight_block_size": [128, 128],
    "seed": 42,
    "shard_max_mib": 0,
}
CONTENT_OPTIONS = tuple(sorted(DEFAULTS))

# Tokenizer: the 256 byte symbols of GPT-2's byte-level mapping, then these added tokens.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Not special, so they survive detokenization: the reasoning and tool-call parsers of
# vllm/parser/minimax_m2.py look for them in the text and in the vocabulary.
MARKUP_TOKENS = ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
VOCAB_MULTIPLE = 64

# ChatML; a reasoning model's turn opens with <think> (MiniMax-M2's template does the same, which
# is why vLLM's minimax_m2_append_think parser prepends it to the answer).
CHAT_TEMPLATE = (
    "{%% for message in messages %%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%% endfor %%}"
    "{%% if add_generation_prompt %%}{{ '<|im_start|>assistant\\n%s' }}{%% endif %%}"
)
REASONING_ARCHITECTURES = ("minimax-m2",)


class SyntheticHFError(ValueError):
    """Options or files that cannot produce a model; the message names the value."""


def _positive(opts, key):
    value = opts[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SyntheticHFError("%s is %r, expected a positive integer" % (key, value))


MAX_LAYERS = 512
MAX_EXPERTS = 1024


def validate_options(options):
    """Merge options over DEFAULTS and check them; returns the merged dict."""
    opts = dict(DEFAULTS)
    opts.update(dict((k, v) for k, v in options.items() if v is not None))
    if opts["architecture"] not in ARCHITECTURES:
        raise SyntheticHFError("architecture %r is not one of %s" % (opts["architecture"], ", ".join(sorted(ARCHITECTURES))))
    if opts["quantization"] not in QUANTIZATIONS:
        raise SyntheticHFError("quantization %r is not one of %s" % (opts["quantization"], ", ".join(QUANTIZATIONS)))
    for key in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_position_embeddings"):
        _positive(opts, key)
    # The plan lists every tensor before the free-space check: a count beyond any real model would
    # exhaust memory first. The same ceilings as synthetic_gguf (llama.cpp's).
    for key, ceiling in (("layers", MAX_LAYERS), ("experts", MAX_EXPERTS)):
        if isinstance(opts[key], int) and opts[key] > ceiling:
            raise SyntheticHFError("%s %d is above %d, more than any model has; give a real model's shape"
                                   % (key, opts[key], ceiling))
    if opts["attention_heads"] % opts["kv_heads"]:
        raise SyntheticHFError("attention_heads %d is not a multiple of kv_heads %d (grouped-query attention)"
                               % (opts["attention_heads"], opts["kv_heads"]))
    if opts["architecture"] == "minimax-m2":
        for key in ("experts", "experts_used", "expert_ffn_size"):
            _positive(opts, key)
        if opts["experts_used"] > opts["experts"]:
            raise SyntheticHFError("experts_used %d exceeds experts %d" % (opts["experts_used"], opts["experts"]))
    else:
        _positive(opts, "ffn_size")
    block = opts["weight_block_size"]
    if (not isinstance(block, (list, tuple)) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise SyntheticHFError("weight_block_size is %r, expected two positive integers [n, k]" % (block,))
    opts["weight_block_size"] = list(block)
    if opts["quantization"] == "fp8":
        # vLLM's FP8 MoE method needs each expert's FFN (unsharded at TP 1) to be a multiple of block n
        # (vllm/model_executor/layers/quantization/fp8.py Fp8MoEMethod.create_weights)
        # and the merged Q/K/V and gate/up weights need every part but the last to be one too
        # (vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape)
        sizes = [("hidden_size", opts["hidden_size"]),
                 ("attention_heads x head_dim", opts["attention_heads"] * opts["head_dim"]),
                 ("kv_heads x head_dim", opts["kv_heads"] * opts["head_dim"])]
        if opts["architecture"] == "minimax-m2":
            sizes.append(("expert_ffn_size", opts["expert_ffn_size"]))
        else:
            sizes.append(("ffn_size", opts["ffn_size"]))
        for key, size in sizes:
            if size % block[0]:
                raise SyntheticHFError("%s %d is not a multiple of the FP8 block %d; vLLM cannot load it even on one GPU"
                                       % (key, size, block[0]))
    if not isinstance(opts["seed"], int):
        raise SyntheticHFError("seed is %r, expected an integer" % (opts["seed"],))
    if not isinstance(opts["shard_max_mib"], int) or opts["shard_max_mib"] < 0:
        raise SyntheticHFError("shard_max_mib is %r, expected 0 (one file) or a size in MiB" % (opts["shard_max_mib"],))
    return opts


# --- tokenizer --------------------------------------------------------------------------------

def byte_symbols():
    """GPT-2's reversible byte -> printable character mapping, used by ByteLevel pre-tokenizers."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def chat_template(architecture):
    return CHAT_TEMPLATE % ("<think>\\n" if architecture in REASONING_ARCHITECTURES else "")


def tokenizer_files(architecture="minimax-m2"):
    """tokenizer.json and tokenizer_config.json for a byte-level BPE over 256 byte symbols (no
    merges: one token per byte) plus the added tokens. Returns (files dict, token count)."""
    symbols = byte_symbols()
    vocab = dict((symbols[b], b) for b in range(256))
    added = []
    for i, token in enumerate(SPECIAL_TOKENS + MARKUP_TOKENS):
        added.append({"id": 256 + i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": token in SPECIAL_TOKENS})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": None,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template(architecture),
        "added_tokens_decoder": dict((str(a["id"]), dict((k, v) for k, v in a.items() if k != "id")) for a in added),
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}, 256 + len(added)


def token_id(token):
    return 256 + list(SPECIAL_TOKENS + MARKUP_TOKENS).index(token)


# --- config -----------------------------------------------------------------------------------

def model_config(opts, n_tokens):
    """config.json as the real model's (key names as in the published MiniMax-M2 / Llama / Qwen2 configs)."""
    architecture, model_type = ARCHITECTURES[opts["architecture"]]
    vocab_size = -(-n_tokens // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": opts["hidden_size"],
        "num_hidden_layers": opts["layers"],
        "num_attention_heads": opts["attention_heads"],
        "num_key_value_heads": opts["kv_heads"],
        "head_dim": opts["head_dim"],
        "vocab_size": vocab_size,
        "max_position_embeddings": opts["max_position_embeddings"],
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": token_id(EOS_TOKEN),
        "pad_token_id": token_id(PAD_TOKEN),
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_cache": True,
    }
    if opts["architecture"] == "minimax-m2":
        config.update({
            "intermediate_size": opts["expert_ffn_size"],
            "num_local_experts": opts["experts"],
            "num_experts_per_tok": opts["experts_used"],
            "scoring_func": "sigmoid",
            "use_routing_bias": True,
            "use_qk_norm": True,
            "qk_norm_type": "per_layer",
            "rotary_dim": opts["head_dim"] // 2,
            "rope_theta": 5000000,
            "partial_rotary_factor": 0.5,
            "router_aux_loss_coef": 0.001,
            "output_router_logits": False,
            "attn_type_list": [1] * opts["layers"],
        })
    else:
        config.update({
            "intermediate_size": opts["ffn_size"],
            "rope_theta": 1000000.0,
            "attention_bias": opts["architecture"] == "qwen2",
        })
    if opts["quantization"] == "fp8":
        config["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": list(opts["weight_block_size"]),
            "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
        }
    return config


# --- weights ----------------------------------------------------------------------------------

def _bf16_high_table():
    """Random byte -> high byte of a bf16 (sign + top 7 exponent bits 59 or 60); with the low byte's
    top bit the exponent is 118..121, so magnitudes lie in [2^-9, 2^-5): never 0, inf or NaN."""
    return bytes(((b & 0x80) | (59 + (b & 1))) for b in range(256))


def _fp8_table():
    """Random byte -> e4m3 byte with exponent 5..8 (values 0.25 .. 3.75), never NaN."""
    return bytes(((b & 0x80) | ((5 + ((b >> 3) & 3)) << 3) | (b & 7)) for b in range(256))


BF16_HIGH = _bf16_high_table()
FP8_TABLE = _fp8_table()
BF16_ONE = struct.pack("<H", 0x3F80)
# dequantised FP8 weight = fp8 value x scale_inv: ~0.001 .. 0.015
FP8_SCALE_INV = struct.pack("<f", 0.004)


def _random_bytes(rng, count):
    if count == 0:
        return b""
    return rng.getrandbits(count * 8).to_bytes(count, "little")


def tensor_chunks(name, dtype, dims, rng):
    """The tensor's bytes, in chunks: norms are ones, the router bias zeros, scales constant,
    everything else bounded random values."""
    count = 1
    for d in dims:
        count *= d
    done = 0
    while done < count:
        n = min(CHUNK_ELEMENTS, count - done)
        done += n
        if dtype == "F32":
            if name.endswith("_scale_inv"):
                yield FP8_SCALE_INV * n
            else:
                yield b"\0" * (4 * n)
        elif dtype == "F8_E4M3":
            yield _random_bytes(rng, n).translate(FP8_TABLE)
        elif dtype == "BF16":
            if name.endswith("norm.weight"):
                yield BF16_ONE * n
            else:
                out = bytearray(2 * n)
                out[0::2] = _random_bytes(rng, n)
                out[1::2] = _random_bytes(rng, n).translate(BF16_HIGH)
                yield bytes(out)
        else:
            raise SyntheticHFError("no generator for dtype %s of %s" % (dtype, name))


def safetensors_header(entries, metadata=None):
    """entries: [(name, dtype, dims)] in file order. Returns (header bytes with its length
    prefix, data size)."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, dtype, dims in entries:
        size = hf.tensor_nbytes(dtype, dims)
        header[name] = {"dtype": dtype, "shape": list(dims), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def shard_tensors(tensors, shard_max_bytes):
    """Split the tensor list into files of at most shard_max_bytes (a larger tensor gets its own
    file); 0 keeps one file. Returns [(file name, [entries])], names as transformers writes them."""
    if not shard_max_bytes:
        return [("model.safetensors", list(tensors))]
    groups, current, size = [], [], 0
    for entry in tensors:
        nbytes = hf.tensor_nbytes(entry[1], entry[2])
        if current and size + nbytes > shard_max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(entry)
        size += nbytes
    if current:
        groups.append(current)
    if len(groups) == 1:
        return [("model.safetensors", groups[0])]
    total = len(groups)
    return [("model-%05d-of-%05d.safetensors" % (i + 1, total), g) for i, g in enumerate(groups)]


class ModelPlan:
    """Everything that will be written, computed before any byte is."""

    def __init__(self, opts):
        self.opts = opts
        self.tokenizer, self.n_tokens = tokenizer_files(opts["architecture"])
        self.config = model_config(opts, self.n_tokens)
        self.shape = hf.model_shape(self.config)
        self.tensors = hf.checkpoint_tensors(self.shape)
        self.shards = shard_tensors(self.tensors, opts["shard_max_mib"] << 20)
        self.options_sha256 = options_digest(opts)
        self.weights_bytes = sum(hf.tensor_nbytes(dt, dims) for _n, dt, dims in self.tensors)
        self.n_params = sum(_count(dims) for name, _dt, dims in self.tensors if not name.endswith("_scale_inv"))

    def json_files(self):
        files = dict(self.tokenizer)
        files["config.json"] = self.config
        files["generation_config.json"] = {"eos_token_id": self.config["eos_token_id"],
                                           "pad_token_id": self.config["pad_token_id"]}
        if len(self.shards) > 1:
            weight_map = {}
            for file_name, entries in self.shards:
                for name, _dt, _dims in entries:
                    weight_map[name] = file_name
            files[INDEX_NAME] = {"metadata": {"total_size": self.weights_bytes}, "weight_map": weight_map}
        return files

    def file_names(self):
        return sorted(list(self.json_files()) + [name for name, _e in self.shards] + [MARKER_NAME])

    def marker(self):
        return {"managed_by": "gpulab.inference.synthetic_hf", "options_sha256": self.options_sha256,
                "options": self.opts, "generator_revision": GENERATOR_REVISION,
                "files": sorted(list(self.json_files()) + [name for name, _e in self.shards])}


def _count(dims):
    count = 1
    for d in dims:
        count *= d
    return count


def options_digest(opts):
    canonical = json.dumps({"revision": GENERATOR_REVISION, "options": dict((k, opts[k]) for k in CONTENT_OPTIONS)},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def existing_state(directory, plan):
    """'absent' (no model there), 'current' (same options, every file present), 'stale'
    (written by this module with other options) or 'foreign' (a model this module did not write)."""
    marker_path = os.path.join(directory, MARKER_NAME)
    if not os.path.exists(marker_path):
        if os.path.exists(os.path.join(directory, "config.json")):
            return "foreign"
        return "absent"
    try:
        with open(marker_path, "rb") as handle:
            marker = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError, UnicodeDecodeError):
        return "foreign"
    if not isinstance(marker, dict) or marker.get("managed_by") != "gpulab.inference.synthetic_hf":
        return "foreign"
    if marker.get("options_sha256") != plan.options_sha256:
        return "stale"
    if not all(os.path.isfile(os.path.join(directory, name)) for name in plan.file_names()):
        return "stale"
    return "current"


def _write_atomic(directory, name, chunks, mode):
    def write(stream):
        for chunk in chunks:
            stream.write(chunk)
    atomic_write(os.path.join(directory, name), write, mode)


def write_model(directory, plan, mode=0o644):
    """Write every file through a temporary file and a rename; the marker last, so an interrupted
    run is rewritten on the next one."""
    marker_path = os.path.join(directory, MARKER_NAME)
    if os.path.exists(marker_path):
        os.unlink(marker_path)
    rng = random.Random(plan.opts["seed"])
    for file_name, entries in plan.shards:
        header, _size = safetensors_header(entries)

        def chunks(entries=entries, header=header):
            yield header
            for name, dtype, dims in entries:
                yield from tensor_chunks(name, dtype, dims, rng)
        _write_atomic(directory, file_name, chunks(), mode)
    for name, content in sorted(plan.json_files().items()):
        _write_atomic(directory, name, [(json.dumps(content, indent=2, sort_keys=True) + "\n").encode("utf-8")], mode)
    _write_atomic(directory, MARKER_NAME, [(json.dumps(plan.marker(), indent=2, sort_keys=True) + "\n").encode("utf-8")], mode)


def _json_bytes(content):
    return len((json.dumps(content, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def write_sizes(plan):
    """[(file name, bytes)] of every file write_model writes, in the order it writes them."""
    sizes = []
    for file_name, entries in plan.shards:
        header, data = safetensors_header(entries)
        sizes.append((file_name, len(header) + data))
    for name, content in sorted(plan.json_files().items()):
        sizes.append((name, _json_bytes(content)))
    sizes.append((MARKER_NAME, _json_bytes(plan.marker())))
    return sizes


def space_needed(new_sizes, old_sizes):
    """The most the directory grows while write_model runs: each file is written beside the one it
    replaces (old_sizes: {name: bytes} now there), which is freed only by the rename."""
    peak = grown = 0
    for name, size in new_sizes:
        peak = max(peak, grown + size)
        grown += size - old_sizes.get(name, 0)
    return peak


def check_free_space(directory, plan, old_sizes, free_bytes=None):
    """Refuse before writing when the filesystem of directory cannot take the model; free_bytes
    (for tests) replaces what statvfs says."""
    if free_bytes is None:
        stat = os.statvfs(directory)
        free_bytes = stat.f_bavail * stat.f_frsize
    problem = free_space_problem(directory, free_bytes, space_needed(write_sizes(plan), old_sizes))
    if problem:
        raise SyntheticHFError(problem)


def stale_files(directory, plan):
    """Weight files of an earlier layout written by this module that the new one does not use."""
    wanted = set(plan.file_names())
    names = []
    for name in os.listdir(directory):
        if name not in wanted and (name.endswith(".safetensors") or name == INDEX_NAME):
            names.append(name)
    return sorted(names)
