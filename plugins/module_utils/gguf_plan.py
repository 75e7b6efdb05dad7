# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where llama.cpp puts a GGUF model's weights and KV cache, per device, before loading it.

Pure functions over a model's tensor infos and metadata (plugins/module_utils/gguf.py reads
them) and a list of devices in llama.cpp's order. The rules follow llama.cpp's own code
(the version the collection builds, 0c1e570):

- src/llama-model.cpp load_tensors: the tensor split becomes cumulative split points
  normalised to 1 (float), n_gpu_layers offloads the LAST layers (i_gpu_start =
  max(n_layer + 1 - n_gpu_layers, 0)), and layer il (il == n_layer is the output layer) goes to
  device std::upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers); the input layer
  (token embeddings) always stays on the CPU.
- src/llama-model-loader.cpp create_tensor and src/llama-arch.cpp llm_tensor_info_mapping:
  token_embd / position_embd / token_types are input tensors, output / output_norm are output
  tensors, blk.<il>.* belong to layer il.
- src/llama-context.cpp: n_ctx is padded to 256; without a unified KV cache each of the
  n_seq_max (llama-server --parallel) sequences gets its own stream of
  GGML_PAD(n_ctx / n_seq_max, 256) cells.
- src/llama-kv-cache.cpp: per layer a K tensor (n_embd_k_gqa x cells x streams, cache type K)
  and a V tensor (n_embd_v_gqa x cells x streams, cache type V), on the layer's device when
  the KV cache is offloaded. Which layers hold a cache, how wide, and the sliding-window and
  recurrent layers come from model_family.gguf_structure (MLA keeps K only; a sliding layer keeps
  a window per stream, src/llama-kv-cache-iswa.cpp; a recurrent layer a fixed F32 state per
  sequence, src/llama-memory-recurrent.cpp). A family llama.cpp keeps in a memory type of its own
  is named as not modelled and planned for its weights only.

The compute buffer of a family compute_buffer builds (minimax-m2, qwen3moe, glm4moe, deepseek2
MLA, gpt-oss, qwen3next) is what llama.cpp's scheduler reserves for the CPU backend's kernels:
compute_buffer replays the graph, the split over the devices and the graph allocator. Other
families keep a rough estimate (compute_bytes_estimate); compute_modelled says which. Weights and
KV cache are exact up to buffer alignment.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import math
import re

from ansible_collections.gpulab.inference.plugins.module_utils import compute_buffer
from ansible_collections.gpulab.inference.plugins.module_utils import gguf
from ansible_collections.gpulab.inference.plugins.module_utils import kept_room
from ansible_collections.gpulab.inference.plugins.module_utils import model_family
from ansible_collections.gpulab.inference.plugins.module_utils.llama_layers import (
    CACHE_TYPES, PlanError, assign_layers, gpu_layers)

MIB = 1024 * 1024

# llama_max_devices() is 16; common/arg.cpp refuses a --tensor-split of that many entries
MAX_TENSOR_SPLIT_ENTRIES = 15

# src/llama-context.cpp: cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)
KV_CTX_PAD = 256
# common/common.h: n_ubatch default (the physical batch the compute buffer is sized for)
DEFAULT_UBATCH = 512

# src/llama-arch.cpp llm_tensor_info_mapping: tensors of the input and the output "layer"
INPUT_TENSORS = ("token_embd", "position_embd", "token_types")
OUTPUT_TENSORS = ("output", "output_norm", "cls", "cls_out", "cls_norm")
_BLOCK_NAME = re.compile(r"^blk\.(?P<il>[0-9]+)\.")
# expert tensors: ffn_{gate,up,down,gate_up}_exps (the shared experts are _shexp)
_EXPERT_NAME = re.compile(r"_exps\.")

INPUT = "input"
OUTPUT = "output"
CPU = "CPU"


# ---------------------------------------------------------------- model facts

def tensor_layer(name, n_layer):
    """INPUT, OUTPUT or the layer index a tensor belongs to (create_tensor's buffer choice)."""
    match = _BLOCK_NAME.match(name)
    if match:
        il = int(match.group("il"))
        if il >= n_layer:
            raise PlanError("tensor %s belongs to layer %d but the model has %d layers (block_count)" % (name, il, n_layer))
        return il
    base = name.rsplit(".", 1)[0]
    if base in INPUT_TENSORS:
        return INPUT
    if base in OUTPUT_TENSORS:
        return OUTPUT
    # other global tensors (rope_freqs, token_embd_norm) are created per layer or with the first layer
    return 0


def _meta_count(path, key, value, minimum=0):
    """A GGUF metadata value that must be a whole number >= minimum (GGUF UINT32/UINT64 keys)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError("%s: metadata %s is %r (%s), expected a whole number >= %d; the file is damaged or "
                        "not written for llama.cpp, regenerate or re-download it"
                        % (path, key, value, type(value).__name__, minimum))
    return value


def _per_layer(value, n_layer, key, path="the model", minimum=0):
    """A hyperparameter given once or per layer (get_key_or_arr) as a list of n_layer ints."""
    if isinstance(value, list):
        if len(value) != n_layer:
            raise PlanError("%s: metadata %s has %d entries for %d layers" % (path, key, len(value), n_layer))
        return [_meta_count(path, "%s[%d]" % (key, i), v) for i, v in enumerate(value)]
    return [_meta_count(path, key, value, minimum)] * n_layer


def model_facts(model):
    """Architecture, shape and sizes of a GGUFModel (or anything with .get, .tensors, .size_bytes).

    Active parameters and decode bytes per token count the expert tensors (`*_exps`) at
    experts_used / experts and the token embeddings at one row, every other tensor whole.
    """
    arch = model.get("general.architecture")
    if not arch:
        raise PlanError("%s has no general.architecture: not a model (a vocabulary-only GGUF?)" % (model.path,))
    if not isinstance(arch, str) or not re.match(r"\A[A-Za-z0-9_.-]{1,64}\Z", arch):
        raise PlanError("%s: metadata general.architecture is %r, not an architecture name; the file is damaged or "
                        "not written for llama.cpp" % (model.path, arch))

    def key(name, default=None, required=False):
        value = model.get("%s.%s" % (arch, name), default)
        if value is None and required:
            raise PlanError("%s has no %s.%s; llama.cpp cannot load it" % (model.path, arch, name))
        return value

    path = model.path
    full = "%s.%%s" % arch

    def count(name, default=None, required=False, minimum=0):
        return _meta_count(path, full % name, key(name, default, required), minimum)

    n_layer = count("block_count", required=True, minimum=1)
    n_embd = count("embedding_length", required=True, minimum=1)
    # A scalar head count of 0 cannot be attended with; per-layer lists may hold 0 for layers
    # without attention (hybrid models), but at least one layer must have heads.
    n_head = _per_layer(key("attention.head_count", required=True), n_layer, full % "attention.head_count", path, 1)
    n_head_kv = _per_layer(key("attention.head_count_kv", list(n_head)), n_layer, full % "attention.head_count_kv",
                           path)
    n_head_max = max(n_head) if n_head else 0
    if n_head_max < 1:
        raise PlanError("%s: metadata %s is 0 for every layer; a model without attention heads cannot be planned "
                        "(regenerate the file)" % (path, full % "attention.head_count"))
    head_k = count("attention.key_length", n_embd // n_head_max, minimum=1)
    head_v = count("attention.value_length", head_k, minimum=1)
    n_expert = count("expert_count", 0)
    n_expert_used = count("expert_used_count", 0)
    if n_expert_used > n_expert:
        raise PlanError("%s: metadata %s is %d but %s is %d; a token cannot use more experts than there are"
                        % (path, full % "expert_used_count", n_expert_used, full % "expert_count", n_expert))
    tokens = model.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens) if isinstance(tokens, list) else count("vocab_size", 0)
    try:
        structure = model_family.gguf_structure(arch, key)
    except model_family.FamilyError as exc:
        raise PlanError("%s: %s; the file is damaged or not written for llama.cpp" % (path, exc))

    total_params = 0
    active_params = 0.0
    decode_bytes = 0.0
    for info, _shard in model.tensors:
        nbytes = gguf.ggml_nbytes(info.ggml_type, info.dims)
        total_params += info.n_elements
        if _EXPERT_NAME.search(info.name + ".") and n_expert:
            share = float(n_expert_used) / n_expert
            active_params += info.n_elements * share
            decode_bytes += nbytes * share
        elif tensor_layer(info.name, n_layer) == INPUT:
            active_params += info.n_elements
            rows = info.n_elements // info.dims[0]
            decode_bytes += nbytes / float(rows)
        else:
            active_params += info.n_elements
            decode_bytes += nbytes
    return {
        "architecture": arch,
        "name": model.get("general.name"),
        "layers": n_layer,
        "embedding_length": n_embd,
        "attention_heads": n_head_max,
        "kv_heads": n_head_kv,
        "head_dim_k": head_k,
        "head_dim_v": head_v,
        "experts": n_expert,
        "experts_used": n_expert_used,
        "vocab_size": n_vocab,
        "context_length_train": count("context_length", 0),
        "total_params": total_params,
        "active_params": int(round(active_params)),
        "decode_bytes_per_token": int(round(decode_bytes)),
        "size_bytes": int(model.size_bytes),
        "size_mib": round(model.size_bytes / float(MIB), 2),
        "files": len(getattr(model, "shards", [None])),
        "tensors": len(model.tensors),
        "structure": structure,
    }


def weight_bytes_by_layer(model, n_layer, alignment=32):
    """{INPUT: bytes, OUTPUT: bytes, il: bytes} of the weights; each tensor padded to the
    buffer alignment, as ggml-alloc places them."""
    by_layer = {INPUT: 0, OUTPUT: 0}
    for il in range(n_layer):
        by_layer[il] = 0
    for info, _shard in model.tensors:
        nbytes = gguf.ggml_nbytes(info.ggml_type, info.dims)
        by_layer[tensor_layer(info.name, n_layer)] += gguf.align_offset(nbytes, alignment)
    return by_layer


# ---------------------------------------------------------------- the split

def _number(value, what):
    if isinstance(value, bool):
        raise PlanError("%s %r is not a number" % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError("%s %r is not a number" % (what, value))
    if math.isnan(number) or math.isinf(number):
        raise PlanError("%s %r must be a finite number" % (what, value))
    return number


def tensor_split(mode, devices):
    """The split proportions, one per device in llama.cpp's order.

    mode: 'equal'; 'free' (each device's free memory, what llama.cpp uses when no split is
    given); 'proportional' (each device's total memory, as the llama_server role passes it);
    or a list of numbers / a '3,1,1' string (common/arg.cpp splits on ',' and '/'). A list
    shorter than the devices leaves the rest at 0, as common/arg.cpp does.
    """
    names = [d["name"] for d in devices]
    if not devices:
        raise PlanError("no device to split the model over; give at least one device")
    if len(devices) > MAX_TENSOR_SPLIT_ENTRIES + 1:
        raise PlanError("%d devices but llama.cpp handles at most %d (llama_max_devices)"
                        % (len(devices), MAX_TENSOR_SPLIT_ENTRIES + 1))
    if isinstance(mode, str) and re.search(r"[,/]|^\s*[0-9.]+\s*$", mode):
        mode = [v for v in re.split(r"[,/]+", mode) if v.strip()]
    if isinstance(mode, (list, tuple)):
        if len(mode) > len(devices):
            raise PlanError("tensor_split has %d entries but there are only %d devices (%s); give at most one "
                            "proportion per device" % (len(mode), len(devices), ", ".join(names)))
        values = []
        for value in mode:
            number = _number(value, "tensor_split entry")
            if number < 0:
                raise PlanError("tensor_split entry %r is negative; proportions must be >= 0" % (value,))
            values.append(number)
        if not any(values):
            raise PlanError("tensor_split %r is all zero, which puts nothing on any device; give at least one "
                            "positive proportion, or use equal or free" % (list(mode),))
        return values + [0.0] * (len(devices) - len(values))
    if mode == "equal":
        return [1.0] * len(devices)
    if mode in ("free", "proportional"):
        field = "free_mib" if mode == "free" else "total_mib"
        unknown = [d["name"] for d in devices if d.get(field) is None]
        if unknown:
            raise PlanError("%s is unknown for %s; tensor_split=%s needs it for every device (use equal or a list)"
                            % (field, ", ".join(unknown), mode))
        values = [float(d[field]) for d in devices]
        if not any(values):
            raise PlanError("every device reports 0 %s; tensor_split=%s cannot split by it" % (field, mode))
        return values
    raise PlanError("tensor_split %r is not equal, free, proportional or a list of numbers" % (mode,))


# ---------------------------------------------------------------- KV cache and compute buffer

def cache_type(name, option):
    if name not in CACHE_TYPES:
        raise PlanError("%s=%r is not a KV cache type llama.cpp accepts; use one of: %s"
                        % (option, name, ", ".join(sorted(CACHE_TYPES))))
    return CACHE_TYPES[name]


def kv_cells(ctx_size, parallel, n_ctx_train, kv_unified=False):
    """(cells per stream, streams) of the KV cache (src/llama-context.cpp)."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise PlanError("parallel=%r must be a positive number of slots" % (parallel,))
    if isinstance(ctx_size, bool) or not isinstance(ctx_size, int) or ctx_size < 0:
        raise PlanError("ctx_size=%r must be a number of tokens >= 0 (0: the model's training context)" % (ctx_size,))
    n_ctx = ctx_size or n_ctx_train
    if not n_ctx:
        raise PlanError("ctx_size=0 asks for the model's training context, but the model does not say it; set ctx_size")
    n_ctx = gguf.align_offset(n_ctx, KV_CTX_PAD)
    if kv_unified or parallel == 1:
        return n_ctx, 1
    n_ctx_seq = gguf.align_offset(n_ctx // parallel, KV_CTX_PAD)
    return n_ctx_seq, parallel


def swa_cells(cells, window, n_seq, kv_unified, ubatch=DEFAULT_UBATCH, swa_full=False):
    """Cells per stream of the sliding-window cache (src/llama-kv-cache-iswa.cpp
    llama_kv_cache_iswa: GGML_PAD(min(size_base, n_swa x (unified ? n_seq_max : 1) + n_ubatch),
    256), or the full size with --swa-full)."""
    if swa_full:
        return cells
    return gguf.align_offset(min(cells, window * (n_seq if kv_unified else 1) + ubatch), KV_CTX_PAD)


def cache_bytes_per_layer(facts, cells, streams, type_k, type_v, n_seq=None, kv_unified=False,
                          ubatch=DEFAULT_UBATCH, swa_full=False):
    """(K bytes, V bytes, recurrent state bytes) of each layer, as llama.cpp allocates them.

    Facts without a structure (a record written before families were modelled) use the
    grouped-query rule over kv_heads, head_dim_k and head_dim_v. A family that is not modelled
    gives zeros: the plan names it (kv_note) instead of printing a figure."""
    n_seq = n_seq or streams
    structure = facts.get("structure")
    if structure is None:
        structure = {"modelled": True, "layer_kinds": [model_family.FULL] * len(facts["kv_heads"]),
                     "k_values": [facts["head_dim_k"] * n for n in facts["kv_heads"]],
                     "v_values": [facts["head_dim_v"] * n for n in facts["kv_heads"]],
                     "window": 0, "state_r_values": 0, "state_s_values": 0}
    if not structure["modelled"]:
        return [(0, 0, 0)] * facts["layers"]
    window_cells = swa_cells(cells, structure["window"], n_seq, kv_unified, ubatch, swa_full) \
        if structure["window"] else cells
    # a recurrent layer keeps R and S rows of F32 for max(1, n_seq_max) sequences
    state = (structure["state_r_values"] + structure["state_s_values"]) * 4 * max(1, n_seq)
    sizes = []
    for kind, k_values, v_values in zip(structure["layer_kinds"], structure["k_values"], structure["v_values"]):
        if kind == model_family.RECURRENT:
            sizes.append((0, 0, state))
            continue
        rows = (window_cells if kind == model_family.SLIDING else cells) * streams
        k = gguf.ggml_row_bytes(type_k, k_values) * rows if k_values else 0
        v = gguf.ggml_row_bytes(type_v, v_values) * rows if v_values else 0
        sizes.append((k, v, 0))
    return sizes


def kv_bytes_per_layer(facts, cells, streams, type_k, type_v, **options):
    """K and V bytes of each layer (0 for layers without a cache); a recurrent layer's fixed state
    counts as its V, so that a layer's sum is what its device holds for it."""
    return [(k, v + state) for k, v, state in cache_bytes_per_layer(facts, cells, streams, type_k, type_v, **options)]


def kv_bytes_per_token(facts, type_k="f16", type_v="f16"):
    """Cache bytes one token of context takes over every full-context layer, and those a
    sliding-window layer takes until its window is full (0 when the family is not modelled)."""
    structure = facts.get("structure") or {}
    if not structure.get("modelled", True) or "layer_kinds" not in structure:
        return 0
    tk, tv = cache_type(type_k, "cache_type_k"), cache_type(type_v, "cache_type_v")
    total = 0
    for kind, k_values, v_values in zip(structure["layer_kinds"], structure["k_values"], structure["v_values"]):
        if kind in (model_family.FULL, model_family.SLIDING):
            total += (gguf.ggml_row_bytes(tk, k_values) if k_values else 0) + \
                (gguf.ggml_row_bytes(tv, v_values) if v_values else 0)
    return total


def state_bytes_per_sequence(facts):
    """The recurrent state one sequence holds over every recurrent layer (F32)."""
    structure = facts.get("structure") or {}
    if not structure.get("modelled", True) or "layer_kinds" not in structure:
        return 0
    layers = sum(1 for kind in structure["layer_kinds"] if kind == model_family.RECURRENT)
    return layers * (structure["state_r_values"] + structure["state_s_values"]) * 4


def structure_line(facts, type_k="f16", type_v="f16"):
    """The family's structure in one line for plan.yml's table."""
    structure = facts.get("structure")
    if not structure:
        return "%s: grouped-query attention" % facts.get("architecture")
    return "%s: %s" % (structure["family"], model_family.describe(
        structure, kv_bytes_per_token(facts, type_k, type_v), state_bytes_per_sequence(facts)))


def pipeline_copies(n_devices, n_gpu_layers, n_layer, offload_kqv):
    """Copies of each split input the scheduler keeps (src/llama-context.cpp pipeline_parallel:
    more than one device, every layer and the output offloaded, the KV cache offloaded)."""
    parallel = n_devices > 1 and gpu_layers(n_gpu_layers, n_layer) > n_layer and offload_kqv
    return compute_buffer.MAX_COPIES if parallel else 1


def compute_buffers(model, facts, placement, n_copies, cells, streams, n_seq, flash_attn, ubatch, type_k, type_v,
                    swa_cells_per_stream):
    """{device index, or compute_buffer.CPU: bytes} of the compute buffers llama.cpp reserves, or
    None when compute_buffer does not build the family's graph."""
    arch = facts["architecture"]

    def meta(key, default=None):
        return model.get("%s.%s" % (arch, key), default)

    hp = compute_buffer.family_hparams(arch, meta, facts.get("structure"), cells, streams, swa_cells_per_stream, n_seq)
    if hp is None:
        return None
    dims = dict((info.name, tuple(info.dims)) for info, _shard in model.tensors)
    layer_dev = [compute_buffer.CPU if d is None else d for d in placement]
    n_layer = hp["n_layer"]
    kinds = layer_kinds(facts, n_layer)
    hp["built"] = compute_buffer.representative_layers(layer_dev[:n_layer] + [layer_dev[-1]], kinds)
    return compute_buffer.device_buffers(arch, hp, dims.get, layer_dev, cells * streams, n_seq, ubatch, flash_attn,
                                         type_k, type_v, n_copies)


def layer_kinds(facts, n_layer):
    """What sets a layer's tensors apart for the compute buffer: its cache kind, a dense leading
    FFN, and the last layer (it gathers the outputs' rows)."""
    structure = facts.get("structure") or {}
    kinds = structure.get("layer_kinds") or [None] * n_layer
    dense = structure.get("dense_leading", 0)
    return [(kinds[il], il < dense, il == n_layer - 1) for il in range(n_layer)]


def range_compute_bytes(model, facts, layers, output, n_copies, cpu_layers, **graph):
    """Bytes of the compute buffer of a device holding layers (a range) and the output layer or
    not, the layers below cpu_layers on the CPU; None when the family's graph is not built.
    graph: compute_buffers' cells, streams, n_seq, flash_attn, ubatch, type_k, type_v and
    swa_cells_per_stream. A device's buffer depends only on its own split, so the other layers
    sit on two other devices."""
    n_layer = facts["layers"]
    first, last = (layers[0], layers[-1] + 1) if layers else (n_layer, n_layer)
    placement = [None if il < cpu_layers else (1 if first <= il < last else (0 if il < first else 2))
                 for il in range(n_layer)] + [1 if output else (None if cpu_layers > n_layer else 2)]
    buffers = compute_buffers(model, facts, placement, n_copies, **graph)
    return None if buffers is None else buffers.get(1, 0)


def compute_bytes_estimate(facts, cells, holds_layers, holds_output, flash_attn, ubatch=DEFAULT_UBATCH, n_outputs=1):
    """Rough peak of a device's compute buffer: an estimate, not llama.cpp's graph allocator.

    cells: KV cells per stream. A layer device holds a few hidden-state copies (6 x ubatch x
    embedding floats), the larger of the attention scores (with flash attention ubatch x heads
    x head_dim x 2 floats; without it cells x ubatch x heads floats) and the expert FFN
    activations (ubatch x experts_used x expert FFN x 3 floats), and the attention mask (cells x
    ubatch floats). The output device adds the logits of the reserved outputs (one per sequence:
    vocab x n_outputs floats). Against what llama.cpp's sched_reserve logged for CPU RPC devices
    (tests/integration_llama/test_gguf_plan_llama.py) it is within a factor of two; the
    per-device margin is what covers a backend's larger buffers.
    """
    if not holds_layers and not holds_output:
        return 0
    n_embd = facts["embedding_length"]
    heads = facts["attention_heads"]
    hidden = 6 * ubatch * n_embd * 4
    if flash_attn:
        attention = ubatch * heads * facts["head_dim_v"] * 4 * 2
    else:
        attention = cells * ubatch * heads * 4
    ffn_size = facts.get("expert_ffn_size") or 4 * n_embd
    used = facts["experts_used"] or 1
    ffn = ubatch * used * ffn_size * 4 * 3
    mask = cells * ubatch * 4
    total = hidden + (max(attention, ffn) + mask if holds_layers else 0)
    if holds_output:
        total += facts["vocab_size"] * n_outputs * 4
    return total


# ---------------------------------------------------------------- the plan

def normalise_devices(devices):
    """Check a device list: name (unique), free_mib (or None when unknown), total_mib, host, gpu_index."""
    if not devices:
        raise PlanError("devices is empty; give the devices llama.cpp splits over (RPC devices, then local GPUs)")
    seen = set()
    result = []
    for i, device in enumerate(devices):
        if not isinstance(device, dict) or not device.get("name"):
            raise PlanError("devices[%d] %r needs a name" % (i, device))
        name = str(device["name"])
        if name in seen:
            raise PlanError("device name %s appears twice in devices" % name)
        seen.add(name)
        # A device is a GPU unless it says cuda: false (an RPC server of a CPU build).
        entry = {"name": name, "host": device.get("host"), "kind": device.get("kind"),
                 "cuda": device.get("cuda", True) is not False}
        # shared_gpus groups devices on one (host, GPU), such as an RPC server beside llama-server
        gpu_index = device.get("gpu_index")
        if gpu_index is not None and (isinstance(gpu_index, bool) or not isinstance(gpu_index, int) or gpu_index < 0):
            raise PlanError("devices[%d].gpu_index %r must be a GPU index (a whole number >= 0) or null"
                            % (i, gpu_index))
        entry["gpu_index"] = gpu_index
        for field in ("free_mib", "total_mib"):
            value = device.get(field)
            if value is not None:
                value = _number(value, "devices[%d].%s" % (i, field))
                if value < 0:
                    raise PlanError("devices[%d].%s %r is negative" % (i, field, device.get(field)))
            entry[field] = value
        result.append(entry)
    return result


def shared_gpus(devices):
    """Index lists of the devices that share one GPU (the same host and gpu_index, both known), in
    device order: an RPC server on the head's own GPU beside llama-server's CUDA device. Only groups
    of two or more."""
    groups = {}
    for index, device in enumerate(devices):
        if device.get("cuda", True) is not False and device.get("host") is not None \
                and device.get("gpu_index") is not None:
            groups.setdefault((device["host"], device["gpu_index"]), []).append(index)
    return sorted((members for members in groups.values() if len(members) > 1), key=lambda members: members[0])


def cuda_context_figures(cuda_context_mib, cuda_idle_context_mib):
    """(context, idle context) in MiB, each a number >= 0, else PlanError naming the option."""
    figures = []
    for value, name, what in ((cuda_context_mib, "cuda_context_mib", "the CUDA context"),
                              (cuda_idle_context_mib, "cuda_idle_context_mib", "the idle CUDA context")):
        number = _number(value, name)
        if number < 0:
            raise PlanError("%s %r must be >= 0 (0 leaves %s out)" % (name, value, what))
        figures.append(number)
    return tuple(figures)


def cuda_context_bytes(cuda, computes, context_mib, idle_mib):
    """Bytes a device's process holds on its GPU beyond llama.cpp's buffers: the full context when
    it holds layers or the output, the idle one when it holds none, nothing without CUDA."""
    if not cuda:
        return 0
    return (context_mib if computes else idle_mib) * MIB


def plan_layout(model, devices, split="equal", n_gpu_layers="all", ctx_size=0, parallel=1, kv_unified=False,
                cache_type_k="f16", cache_type_v="f16", flash_attn="auto", margin_mib=1024, offload_kqv=True,
                ubatch=DEFAULT_UBATCH, alignment=32, facts=None, cuda_context_mib=0, cuda_idle_context_mib=0,
                swa_full=False):
    """Per-device weights, KV cache, compute buffer and whether each fits; plus the CPU's part.

    The KV cache follows the family's structure (model_family.gguf_structure): sliding-window
    layers hold a window per stream (all the context with swa_full, llama-server --swa-full),
    recurrent layers a fixed state per sequence (state_mib). A family that is not modelled gets
    no KV figure: kv_note says so and the weights are still planned.

    cuda_context_mib: what a process holds on each GPU it uses beyond llama.cpp's buffers (the
    CUDA context, cuBLAS and other library workspaces). llama.cpp's own log leaves it out; each
    RPC server is a process of its own, and the head has one context per local GPU, so every
    GPU device that holds layers or the output carries it once.
    cuda_idle_context_mib: what such a process holds on a GPU device given no layers (its bare
    CUDA context, no library workspaces): an RPC server left without layers still runs and
    holds it.
    Devices on one GPU (shared_gpus) share its free memory and one margin: their rows show the
    GPU's headroom after all of them, so two devices never overcommit it between them.
    """
    facts = facts or model_facts(model)
    devices = normalise_devices(devices)
    values = tensor_split(split, devices)
    n_layer = facts["layers"]
    placement = assign_layers(n_layer, values, n_gpu_layers)
    type_k = cache_type(cache_type_k, "cache_type_k")
    type_v = cache_type(cache_type_v, "cache_type_v")
    if flash_attn not in ("on", "off", "auto"):
        raise PlanError("flash_attn=%r must be on, off or auto" % (flash_attn,))
    if flash_attn == "off" and type_v not in (0, 1, 30):
        # src/llama-context.cpp: quantized V cache requires flash attention
        raise PlanError("cache_type_v=%s needs flash attention; set flash_attn to on or auto, or use f16"
                        % cache_type_v)
    margin_mib = _number(margin_mib, "margin_mib")
    if margin_mib < 0:
        raise PlanError("margin_mib %r must be >= 0" % (margin_mib,))
    context_mib, idle_mib = cuda_context_figures(cuda_context_mib, cuda_idle_context_mib)
    cells, streams = kv_cells(ctx_size, parallel, facts["context_length_train"], kv_unified)
    facts = dict(facts, expert_ffn_size=_expert_ffn(model, facts))
    weights = weight_bytes_by_layer(model, n_layer, alignment)
    cache = cache_bytes_per_layer(facts, cells, streams, type_k, type_v, n_seq=max(parallel, 1),
                                  kv_unified=kv_unified, ubatch=ubatch, swa_full=swa_full)
    kv = [(k, v) for k, v, _state in cache]
    structure_facts = facts.get("structure") or {}
    swa = swa_cells(cells, structure_facts.get("window") or 0, max(parallel, 1), kv_unified, ubatch, swa_full) \
        if structure_facts.get("window") else cells
    graph = compute_buffers(model, facts, placement, pipeline_copies(len(devices), n_gpu_layers, n_layer, offload_kqv),
                            cells, streams, max(parallel, 1), flash_attn != "off", ubatch, type_k, type_v, swa) \
        if offload_kqv and model is not None and hasattr(model, "tensors") else None
    state = [s for _k, _v, s in cache]
    structure = facts.get("structure") or {"modelled": True}
    kv_note = None if structure["modelled"] else model_family.not_modelled_message(structure)

    rows = []
    totals = []
    for index, device in enumerate(devices):
        layers = [il for il in range(n_layer) if placement[il] == index]
        holds_output = placement[n_layer] == index
        weight = sum(weights[il] for il in layers) + (weights[OUTPUT] if holds_output else 0)
        kv_k = sum(kv[il][0] for il in layers) if offload_kqv else 0
        kv_v = sum(kv[il][1] for il in layers) if offload_kqv else 0
        kv_state = sum(state[il] for il in layers) if offload_kqv else 0
        if graph is not None:
            compute = graph.get(index, 0)
        else:
            compute = compute_bytes_estimate(facts, cells, bool(layers), holds_output, flash_attn != "off", ubatch,
                                             max(parallel, 1))
        context = int(cuda_context_bytes(device["cuda"], bool(layers or holds_output), context_mib, idle_mib))
        total = weight + kv_k + kv_v + kv_state + compute + context
        row = {
            "name": device["name"],
            "host": device["host"],
            "kind": device["kind"],
            "gpu_index": device.get("gpu_index"),
            "layers": layers,
            "layer_range": _ranges(layers),
            "output_layer": holds_output,
            "split": values[index],
            "weights_mib": _mib(weight),
            "kv_cache_mib": _mib(kv_k + kv_v),
            "state_mib": _mib(kv_state),
            "compute_mib_estimate": _mib(compute),
            "compute_modelled": graph is not None,
            "context_mib": _mib(context),
            "total_mib": _mib(total),
            "free_mib": device["free_mib"],
            "margin_mib": margin_mib,
        }
        if device["free_mib"] is None:
            row["fits"] = None
            row["headroom_mib"] = None
        else:
            row["headroom_mib"] = round(device["free_mib"] - margin_mib - total / float(MIB), 2)
            row["fits"] = row["headroom_mib"] >= 0
        row["shares_gpu_with"] = []
        rows.append(row)
        totals.append(total)
    for members in shared_gpus(devices):
        # one GPU's memory (and one margin) for every device on it: each row shows the GPU's headroom
        frees = [devices[m]["free_mib"] for m in members]
        if any(free is None for free in frees):
            continue
        headroom = round(min(frees) - margin_mib - sum(totals[m] for m in members) / float(MIB), 2)
        for m in members:
            rows[m]["headroom_mib"] = headroom
            rows[m]["fits"] = headroom >= 0
            rows[m]["shares_gpu_with"] = [devices[o]["name"] for o in members if o != m]

    cpu_layers = [il for il in range(n_layer) if placement[il] is None]
    cpu_weight = weights[INPUT] + sum(weights[il] for il in cpu_layers) + (weights[OUTPUT] if placement[n_layer] is None else 0)
    cpu_kv = sum(kv[il][0] + kv[il][1] for il in (range(n_layer) if not offload_kqv else cpu_layers))
    cpu_state = sum(state[il] for il in (range(n_layer) if not offload_kqv else cpu_layers))
    checked = [r for r in rows if r["fits"] is not None]
    return {
        "devices": rows,
        "cpu": {
            "layers": cpu_layers,
            "layer_range": _ranges(cpu_layers),
            "output_layer": placement[n_layer] is None,
            "weights_mib": _mib(cpu_weight),
            "kv_cache_mib": _mib(cpu_kv),
            "state_mib": _mib(cpu_state),
            "compute_mib": _mib(graph.get(compute_buffer.CPU, 0)) if graph is not None else None,
        },
        "fits": all(r["fits"] for r in checked),
        "unchecked": [r["name"] for r in rows if r["fits"] is None],
        "overflowing": [r["name"] for r in checked if not r["fits"]],
        "tensor_split": values,
        "n_gpu_layers": gpu_layers(n_gpu_layers, n_layer),
        "kv_cells": cells,
        "kv_streams": streams,
        "ctx_size": cells * streams,
        "weights_total_mib": _mib(sum(weights.values())),
        "kv_cache_total_mib": _mib(sum(k + v for k, v in kv)),
        "state_total_mib": _mib(sum(state)),
        "kv_note": kv_note,
        "structure": structure_line(facts, cache_type_k, cache_type_v),
    }


def _expert_ffn(model, facts):
    """Expert FFN width from the expert tensors (dims[1] of ffn_up_exps), else feed_forward_length."""
    for info, _shard in model.tensors:
        if info.name.endswith("ffn_up_exps.weight") and len(info.dims) == 3:
            return info.dims[1]
    ffn = model.get("%s.feed_forward_length" % facts["architecture"])
    if isinstance(ffn, list):
        ffn = max(ffn) if ffn else None
    return int(ffn) if ffn else None


def _mib(nbytes):
    return round(nbytes / float(MIB), 2)


def _ranges(layers):
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts = []
    for _key, group in itertools.groupby(enumerate(layers), lambda pair: pair[1] - pair[0]):
        group = [il for _i, il in group]
        parts.append(str(group[0]) if len(group) == 1 else "%d-%d" % (group[0], group[-1]))
    return ",".join(parts)


def smallest_device_set(model, devices, max_exhaustive=12, **options):
    """The fewest devices (split by free memory, llama.cpp's default) whose plan fits.

    Among sets of the same size the one with the most headroom on its tightest device wins.
    Returns (names in llama.cpp order, plan) or (None, None) when even all devices do not fit.
    Devices with unknown free memory are left out.
    """
    devices = [d for d in normalise_devices(devices) if d["free_mib"] is not None]
    facts = options.pop("facts", None) or model_facts(model)
    options.pop("split", None)
    if len(devices) > max_exhaustive:
        ordered = sorted(devices, key=lambda d: -d["free_mib"])
        candidates_by_size = [[sorted(ordered[:k], key=devices.index)] for k in range(1, len(devices) + 1)]
    else:
        candidates_by_size = [list(itertools.combinations(devices, k)) for k in range(1, len(devices) + 1)]
    for candidates in candidates_by_size:
        best = None
        for subset in candidates:
            if not any(d["free_mib"] for d in subset):
                continue
            plan = plan_layout(model, list(subset), split="free", facts=facts, **options)
            if not plan["fits"]:
                continue
            tightest = min(r["headroom_mib"] for r in plan["devices"])
            if best is None or tightest > best[0]:
                best = (tightest, [d["name"] for d in subset], plan)
        if best:
            return best[1], best[2]
    return None, None


def single_node_fits(model, devices, **options):
    """{host: whether that host's devices alone hold the model (split by free memory)}."""
    facts = options.pop("facts", None) or model_facts(model)
    options.pop("split", None)
    by_host = {}
    for device in normalise_devices(devices):
        if device["host"] is not None:
            by_host.setdefault(device["host"], []).append(device)
    result = {}
    for host, members in by_host.items():
        known = [d for d in members if d["free_mib"] is not None]
        if len(known) != len(members) or not any(d["free_mib"] for d in known):
            result[host] = None
            continue
        result[host] = plan_layout(model, members, split="free", facts=facts, **options)["fits"]
    return result


def format_table(plan):
    """Lines of a per-device table: what each device would hold against what it has free."""
    header = "%-10s %-12s %-9s %10s %10s %12s %8s %10s %10s %10s  %s" % (
        "device", "host", "layers", "weights", "kv cache", "compute(est)", "context", "total", "free", "headroom", "fits")
    lines = [header + "   (MiB; margin %s MiB per device)" % _fmt(plan["devices"][0]["margin_mib"] if plan["devices"] else 0)]
    for row in plan["devices"]:
        layers = row["layer_range"] + ("+out" if row["output_layer"] else "")
        lines.append("%-10s %-12s %-9s %10.2f %10.2f %12.2f %8.0f %10.2f %10s %10s  %s" % (
            row["name"], row["host"] or "-", layers or "-", row["weights_mib"], row["kv_cache_mib"],
            row["compute_mib_estimate"], row["context_mib"], row["total_mib"], _fmt(row["free_mib"]), _fmt(row["headroom_mib"]),
            {True: "yes", False: "NO", None: "unknown"}[row["fits"]]))
    cpu = plan["cpu"]
    lines.append("%-10s %-12s %-9s %10.2f %10.2f" % (
        "CPU(host)", "head", (cpu["layer_range"] + ("+out" if cpu["output_layer"] else "")) or "input",
        cpu["weights_mib"], cpu["kv_cache_mib"]))
    if plan.get("structure"):
        lines.append("cache: " + plan["structure"])
    if plan.get("state_total_mib"):
        lines.append("recurrent state: %.2f MiB in all (on the layers' devices, beside the KV cache)"
                     % plan["state_total_mib"])
    if plan.get("kv_note"):
        lines.append(plan["kv_note"])
    return lines


def _fmt(value):
    if value is None:
        return "?"
    return "%.2f" % value if isinstance(value, float) and value != int(value) else "%d" % value


# ---------------------------------------------------------------- devices from the nodes

def _manifest_number(host, position, field, value, minimum):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError("%s: servers.json endpoints entry %d %s %r is not a whole number >= %d; redeploy "
                        "llama_rpc_server there" % (host, position, field, value, minimum))
    return value


def manifest_entries(host, manifest):
    """(gpu_index, port, memory_mib) of each endpoint of a worker's servers.json, each checked: the
    file comes from another host."""
    endpoints = manifest.get("endpoints") if isinstance(manifest, dict) else None
    if not isinstance(endpoints, list) or not endpoints:
        raise PlanError("%s: servers.json lists no endpoint; redeploy llama_rpc_server there" % host)
    entries = []
    for position, item in enumerate(endpoints):
        if not isinstance(item, dict):
            raise PlanError("%s: servers.json endpoints entry %d is not an object; redeploy llama_rpc_server there"
                            % (host, position))
        port = _manifest_number(host, position, "port", item.get("port"), 1)
        if port is not None and port > 65535:
            raise PlanError("%s: servers.json endpoints entry %d port %d is out of range (1-65535); redeploy "
                            "llama_rpc_server there" % (host, position, port))
        entries.append((_manifest_number(host, position, "gpu_index", item.get("gpu_index"), 0), port,
                        _manifest_number(host, position, "memory_mib", item.get("memory_mib"), 0)))
    return entries


def devices_from_nodes(head, workers, cuda, residency=None, servers=None,
                       own_units=(), drained=None, reserved=None):
    """The devices llama.cpp will split over, in its order, with the memory available to them.

    head: the head's host name; workers: the RPC workers' host names in --rpc order; cuda:
    whether the deployed build has CUDA. residency: {host: gpu_residency's residency (gpus with
    memory_free_mib, processes with systemd_unit and supervisor_program)}; servers: {host: the worker's
    /etc/gpulab/rpc-server/servers.json}, absent before its first deployment, when a CUDA build
    gets one RPC device per GPU (as llama_rpc_server plans it) and a CPU build one CPU device.
    drained: {host: gpu_drain's consumers in check mode}, on the nodes the deployment drains.
    own_units: the collection's serving units (gpulab_own_unit_patterns), whose memory counts as free.
    reserved: kept_room.reserve_on_nodes, what kept services that are down or still loading will
    take again on each host's GPUs: out of the available memory, and said in kept_reserved_mib.
    src/llama.cpp llama_prepare_model_devices puts the RPC devices first (in --rpc order), then
    the local GPUs; every RPC server exposes one device. CPU devices have no free figure here
    (free_mib null: not checked).
    """
    residency = residency or {}
    servers = servers or {}
    drained = drained or {}

    def room(host, gpu, processes):
        """Available memory less the kept services' reservation; the reservation."""
        free = kept_room.available_mib(gpu, processes, own_units, drained.get(host))
        kept = kept_room.reserved_mib(reserved, host, gpu.get("index"))
        return (None if free is None else max(0, free - kept)), kept

    def gpus_of(host):
        found = residency.get(host) or {}
        return dict((int(g["index"]), g) for g in found.get("gpus") or []), found.get("processes") or []

    devices = []
    for host in workers:
        gpus, processes = gpus_of(host)
        manifest = servers.get(host)
        if manifest:
            entries = manifest_entries(host, manifest)
        elif cuda:
            if not gpus:
                raise PlanError("%s has no GPU in its residency facts, but the build has CUDA and would serve one "
                                "RPC device per GPU; run gpu_preflight there or check nvidia-smi" % host)
            entries = [(index, None, None) for index in sorted(gpus)]
        else:
            entries = [(None, None, None)]
        for gpu_index, port, memory_mib in entries:
            gpu = gpus.get(int(gpu_index)) if gpu_index is not None else None
            if gpu_index is not None and gpu is None and cuda:
                raise PlanError("%s: servers.json serves GPU %s, which the node's residency facts do not list"
                                % (host, gpu_index))
            free, kept = room(host, gpu, processes) if gpu else (None, 0)
            devices.append({
                "name": "RPC%d" % len(devices),
                "kind": "rpc",
                "host": host,
                "port": port,
                "gpu_index": gpu_index,
                "free_mib": free,
                "kept_reserved_mib": kept,
                "total_mib": gpu.get("memory_total_mib") if gpu else memory_mib,
                "cuda": bool(cuda),
            })
    if cuda:
        gpus, processes = gpus_of(head)
        for i, index in enumerate(sorted(gpus)):
            free, kept = room(head, gpus[index], processes)
            devices.append({
                "name": "CUDA%d" % i,
                "kind": "local",
                "host": head,
                "port": None,
                "gpu_index": index,
                "free_mib": free,
                "kept_reserved_mib": kept,
                "total_mib": gpus[index].get("memory_total_mib"),
                "cuda": True,
            })
    if not devices:
        raise PlanError("no device: no RPC worker and no local GPU on %s; nothing to plan" % head)
    return devices


# ---------------------------------------------------------------- the record for the report

RECORD_DEVICE_FIELDS = ("name", "host", "kind", "gpu_index", "layer_range", "output_layer", "split", "weights_mib",
                        "kv_cache_mib", "compute_mib_estimate", "context_mib", "total_mib")


# No headroom figure: it follows free memory, and a second deploy must not rewrite the file. A
# rejected split's tensor_split is kept as its whole-layer counts (layout_llama's layer_counts).
CHOICE_REJECTED_FIELDS = ("label", "tensor_split", "layer_ranges", "fits", "findings")


def choice_record(choice):
    """The auto choice as memory-plan.json keeps it for the report: the resolved values, the
    reasons and the turned-down splits with their findings, none with a free-memory figure (the
    play prints those: layout_llama's split_figures and each rejected split's details), so a
    second deploy on the same nodes leaves the file as it was."""
    if not choice:
        return None
    return {
        "ctx_size": choice["ctx_size"],
        "tensor_split": choice["tensor_split"],
        "ctx_reason": choice["ctx_reason"],
        "split_reason": choice["split_reason"],
        "rejected": [dict(dict((k, r.get(k)) for k in CHOICE_REJECTED_FIELDS),
                          tensor_split=r.get("layer_counts", r.get("tensor_split")))
                     for r in choice.get("rejected") or []],
    }


def plan_record(path, facts, plan, options, smallest_set=None, single_node=None, choice=None):
    """What /var/lib/gpulab/memory-plan.json keeps: the prediction, not the live free memory
    (which moves on every run and would rewrite the file each time). The report compares it
    with the residency measured after the head is up and shows `choice` (choice_record; null
    when neither the split nor the context is auto)."""
    return {
        "choice": choice_record(choice),
        "managed_by": "gpulab.inference",
        "model_path": path,
        "model": facts,
        "options": dict((k, options[k]) for k in sorted(options)),
        "tensor_split": plan["tensor_split"],
        "n_gpu_layers": plan["n_gpu_layers"],
        "kv_cells": plan["kv_cells"],
        "kv_streams": plan["kv_streams"],
        "devices": [dict((k, row[k]) for k in RECORD_DEVICE_FIELDS) for row in plan["devices"]],
        "cpu": plan["cpu"],
        "smallest_set": smallest_set,
        "single_node": single_node,
    }
