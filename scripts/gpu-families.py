"""The steps of scripts/gpu-families.sh that run Python: write a family's reduced-depth checkpoint
with this collection's synthetic_hf, start vLLM on it with --load-format dummy (offline LLM API,
one process per family), and set vllm_plan's prediction beside what vLLM logged.

  python3 gpu-families.py write FAMILY DIR LAYERS      config.json, tokenizer, sparse safetensors
  python3 gpu-families.py load DIR MAX_MODEL_LEN UTIL  vLLM's engine up, one short generation, exit
  python3 gpu-families.py compare FAMILY DIR LOG GPU_MIB MAX_MODEL_LEN UTIL
                                                       one JSON object on stdout

Needs the collection importable as ansible_collections.gpulab.inference (gpu-families.sh links
it) and, for load, vLLM importable.
"""

import json
import os
import re
import sys
import time

GIB = 1 << 30

# vLLM 0.24.0's own lines: vllm/v1/worker/gpu_model_runner.py load_model ("Model loading took %s
# GiB memory"), vllm/v1/worker/gpu_worker.py determine_available_memory ("Available KV cache
# memory: %s GiB"), vllm/v1/core/kv_cache_utils.py _report_kv_cache_config ("GPU KV cache size:
# %s tokens", "Maximum concurrency for %s tokens per request: %.2fx").
LOG_PATTERNS = {
    "model_loading_gib": r"Model loading took ([0-9.]+) ?GiB",
    "available_kv_gib": r"Available KV cache memory: ([0-9.]+) ?GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([0-9,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x",
}


def write(family, directory, layers):
    from ansible_collections.gpulab.inference.plugins.module_utils import synthetic_hf as sh
    os.makedirs(directory, exist_ok=True)
    opts = sh.validate_options(sh.family_options(family, layers=layers, weights="sparse", shard_max_mib=4096))
    plan = sh.ModelPlan(opts)
    state = sh.existing_state(directory, plan)
    if state != "current":
        for name in sh.stale_files(directory, plan):
            os.unlink(os.path.join(directory, name))
        sh.write_model(directory, plan)
    print(json.dumps({"family": family, "path": directory, "state_before": state, "options": opts,
                      "weights_bytes": plan.weights_bytes, "shards": [n for n, _e in plan.shards]}))


# vLLM 0.24.0's MiniMax-M3 (vllm/models/minimax_m3/nvidia/model.py MiniMAXGemmaRMSNorm.forward) imports
# flashinfer.norm in every RMSNorm call, the profiling forward's first included; vLLM's wheel does not
# ship flashinfer and the wheelhouse does not carry it. Its Hopper path is otherwise Triton (sparse
# attention and indexer: common/sparse_attention.py select_main_impl_cls, common/indexer.py).
NEEDS_FLASHINFER = "MiniMaxM3"


def load(directory, max_model_len, utilization):
    import importlib.util
    start = time.time()
    with open(os.path.join(directory, "config.json")) as handle:
        config = json.load(handle)
    hybrid = "linear_num_value_heads" in config
    if (config.get("architectures") or [""])[0].startswith(NEEDS_FLASHINFER) and importlib.util.find_spec("flashinfer") is None:
        if os.environ.get("GPULAB_FAMILIES_FLASHINFER_NORM_DOUBLE") != "1":
            print("gpu-families: skipped: vLLM's MiniMax-M3 needs flashinfer (MiniMAXGemmaRMSNorm.forward imports "
                  "flashinfer.norm), which is not installed", flush=True)
            sys.exit(3)
        # tests/doubles/flashinfer_norm: the two norms in torch; without nvcc on PATH (and no cubin
        # package) vllm.utils.flashinfer.has_flashinfer() stays False, so vLLM picks no other FlashInfer path
        double = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "doubles", "flashinfer_norm")
        sys.path.insert(0, double)
        os.environ["PYTHONPATH"] = double + os.pathsep + os.environ.get("PYTHONPATH", "")
        os.environ["PATH"] = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                             if not os.path.exists(os.path.join(d, "nvcc")))
        print("gpu-families: flashinfer.norm is the torch test double (tests/doubles/flashinfer_norm)", flush=True)
    from vllm import LLM, SamplingParams
    # the gated delta net's prefill defaults to FlashInfer, which the wheelhouse does not carry
    # (vllm/engine/arg_utils.py --gdn-prefill-backend)
    extra = {"gdn_prefill_backend": "triton"} if hybrid else {}
    if os.environ.get("GPULAB_FAMILIES_PIN_KV") == "1":
        # as role vllm_server deploys: the planned cache pinned (--kv-cache-memory-bytes), no profiling
        with open(os.path.join(directory, "config.json")) as handle:
            config = json.load(handle)
        est = estimate(config, directory, int(os.environ["GPULAB_FAMILIES_GPU_MIB"]), max_model_len, utilization)[0]
        extra["kv_cache_memory_bytes"] = est["kv_cache_memory_bytes"]
        print("gpu-families: KV cache pinned at %d bytes" % est["kv_cache_memory_bytes"], flush=True)
    llm = LLM(model=directory, load_format="dummy", enforce_eager=True, max_model_len=max_model_len,
              gpu_memory_utilization=utilization, tensor_parallel_size=1, seed=0, **extra)
    print("gpu-families: engine up in %.1f s" % (time.time() - start), flush=True)
    out = llm.generate(["The quick brown fox"], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    print("gpu-families: generated %d tokens" % len(out[0].outputs[0].token_ids), flush=True)


def read_tensors(directory):
    """{name: (dtype, dims, nbytes)} from the checkpoint's safetensors headers, as the plan module reads them."""
    from ansible_collections.gpulab.inference.plugins.module_utils import hf_checkpoint as hf
    tensors = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(directory, name)
        with open(path, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little")
            tensors.update(hf.parse_safetensors_header(head + handle.read(length), path))
    return tensors


def logged(text):
    found = {}
    for key, pattern in LOG_PATTERNS.items():
        matches = re.findall(pattern, text)
        if matches:
            found[key] = float(matches[-1].replace(",", ""))
    errors = [line.strip()[:400] for line in text.splitlines()
              if re.search(r"Error|error:|Traceback|CUDA out of memory", line)][-8:]
    return found, errors


def estimate(config, directory, gpu_mib, max_model_len, utilization):
    """vllm_plan's per-GPU estimate for the checkpoint at TP=1 on one GPU of gpu_mib, and the plan."""
    from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp
    nodes = [{"name": "gpu-host", "gpus": [{"index": 0, "memory_total_mib": gpu_mib}]}]
    opts = {"gpu_memory_utilization": utilization, "kv_cache_dtype": "auto", "max_model_len": max_model_len,
            "reserve_mib": vp.DEFAULT_RESERVE_MIB}
    planned = vp.plan(config, read_tensors(directory), "safetensors", nodes, vp.Layout(1), opts)
    return planned["estimate"] or {}, planned


def compare(family, directory, log_path, gpu_mib, max_model_len, utilization):
    from ansible_collections.gpulab.inference.plugins.module_utils import model_family
    from ansible_collections.gpulab.inference.plugins.module_utils import vllm_plan as vp
    with open(os.path.join(directory, "config.json")) as handle:
        config = json.load(handle)
    result = {"family": family, "architecture": config["architectures"][0],
              "layers": config.get("text_config", config)["num_hidden_layers"],
              "gpu_memory_mib": gpu_mib, "max_model_len": max_model_len, "gpu_memory_utilization": utilization}
    try:
        est, planned = estimate(config, directory, gpu_mib, max_model_len, utilization)
        shape = vp.model_shape(config)
        result["planned"] = {
            "valid": planned["valid"], "errors": planned["errors"],
            "weights_gib": round(est.get("weights_bytes", 0) / float(GIB), 4),
            "kv_cache_gib": est.get("kv_cache_gib"), "kv_tokens": est.get("kv_tokens_per_gpu"),
            "concurrency": est.get("concurrency_at_max_model_len"),
            "recurrent_state_bytes_per_sequence": est.get("recurrent_state_bytes_per_sequence"),
            "kv_bytes_per_token": est.get("kv_bytes_per_token"), "reserve_gib": est.get("reserve_gib"),
            "budget_gib": est.get("budget_gib"),
            "structure": model_family.describe(shape["structure"], est.get("kv_bytes_per_token") or 0,
                                               est.get("recurrent_state_bytes_per_sequence") or 0),
        }
    except Exception as exc:  # the report must carry the reason, whatever it is
        result["planned"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    text = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
    found, errors = logged(text)
    result["reported"] = found
    result["engine_up"] = "gpu-families: engine up" in text
    result["generated"] = "gpu-families: generated" in text
    skipped = re.search(r"gpu-families: skipped: (.*)", text)
    if skipped:
        result["skipped"] = skipped.group(1)
    if errors and not result["generated"]:
        result["log_errors"] = errors
    p = result["planned"]
    if "error" not in p:
        ratio = {}
        if found.get("model_loading_gib"):
            ratio["weights"] = round(p["weights_gib"] / found["model_loading_gib"], 4)
        if found.get("kv_cache_tokens") and p.get("kv_tokens"):
            ratio["kv_tokens"] = round(p["kv_tokens"] / found["kv_cache_tokens"], 4)
        if found.get("available_kv_gib") and p.get("kv_bytes_per_token"):
            # the token rule alone, on vLLM's own KV memory (bytes per token, or pages per request
            # where layer types mix)
            shape = vp.model_shape(config)
            tokens = vp.kv_capacity(shape, vp.Layout(1), "auto", shape["layers"], 0,
                                    int(found["available_kv_gib"] * GIB), max_model_len)[0]
            result["kv_tokens_from_reported_memory"] = tokens
            if found.get("kv_cache_tokens"):
                ratio["kv_tokens_per_byte_rule"] = round(tokens / found["kv_cache_tokens"], 4)
        if found.get("model_loading_gib") and found.get("available_kv_gib"):
            # what vLLM kept beside weights and cache: the reserve the plan estimates as reserve_mib
            budget = gpu_mib * utilization / 1024.0
            result["reserve_gib_implied"] = round(budget - found["model_loading_gib"] - found["available_kv_gib"], 3)
        result["planned_over_reported"] = ratio
        result["within_2_percent"] = dict((k, abs(v - 1) <= 0.02) for k, v in ratio.items())
    print(json.dumps(result, sort_keys=True))


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    step = argv[1]
    if step == "write" and len(argv) == 5:
        write(argv[2], argv[3], int(argv[4]))
    elif step == "load" and len(argv) == 5:
        load(argv[2], int(argv[3]), float(argv[4]))
    elif step == "compare" and len(argv) == 8:
        compare(argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]), float(argv[7]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
