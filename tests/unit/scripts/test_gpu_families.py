"""scripts/gpu-families.py without a GPU: the checkpoint it writes per family, vLLM's log lines it
reads, and the planned-against-reported ratios it prints (a log shaped as vLLM 0.24 writes it)."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / 'scripts' / 'gpu-families.py'
SPEC = importlib.util.spec_from_file_location('gpu_families', SCRIPT)
families = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(families)

LOG = """INFO 12-07 05:00:01 [gpu_model_runner.py:2601] Model loading took 14.7393 GiB memory and 4.811 seconds
INFO 12-07 05:00:09 [gpu_worker.py:298] Available KV cache memory: 52.61 GiB
INFO 12-07 05:00:09 [kv_cache_utils.py:1087] GPU KV cache size: 24,518,656 tokens
INFO 12-07 05:00:09 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 5985.99x
gpu-families: engine up in 61.2 s
gpu-families: generated 8 tokens
"""


def test_the_log_lines_are_read():
    found, errors = families.logged(LOG)
    assert found == {"model_loading_gib": 14.7393, "available_kv_gib": 52.61, "kv_cache_tokens": 24518656.0,
                     "max_concurrency": 5985.99}
    assert errors == []
    _found, errors = families.logged("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    assert errors == ["Traceback (most recent call last):", "RuntimeError: CUDA out of memory"]


def test_deepseek_v3_reduced_is_written_sparse_and_compared(tmp_path, capsys):
    model = str(tmp_path / "deepseek-v3")
    families.write("deepseek-v3", model, 2)
    written = json.loads(capsys.readouterr().out)
    assert written["options"]["weights"] == "sparse" and written["weights_bytes"] > 14 << 30
    assert sum(os.stat(os.path.join(model, n)).st_blocks for n in written["shards"]) * 512 < 1 << 20
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    families.compare("deepseek-v3", model, str(log), 81559, 4096, 0.9)
    result = json.loads(capsys.readouterr().out)
    planned = result["planned"]
    assert planned["valid"] and planned["kv_bytes_per_token"] == 2 * 576 * 2
    assert planned["structure"] == "mla attention (2 full layers): 2304 bytes of cache per token"
    # the plan's weights are the headers' bytes; vLLM's 52.61 GiB over 2304 bytes a token
    assert planned["weights_gib"] == pytest.approx(written["weights_bytes"] / 2.0 ** 30, abs=1e-4)
    assert result["kv_tokens_from_reported_memory"] == int(52.61 * 2 ** 30 // 2304)
    ratios = result["planned_over_reported"]
    assert ratios["weights"] == round(planned["weights_gib"] / 14.7393, 4)
    assert ratios["kv_tokens_per_byte_rule"] == round(int(52.61 * 2 ** 30 // 2304) / 24518656, 4)
    assert result["within_2_percent"]["weights"] is True
    assert result["reserve_gib_implied"] == round(81559 * 0.9 / 1024 - 14.7393 - 52.61, 3)
    assert result["engine_up"] and result["generated"] and "log_errors" not in result


def test_a_family_that_did_not_start_keeps_the_plan_and_the_errors(tmp_path, capsys):
    model = str(tmp_path / "gpt-oss")
    families.write("gpt-oss", model, 2)
    capsys.readouterr()
    log = tmp_path / "vllm.log"
    log.write_text("Traceback (most recent call last):\nValueError: unsupported\n")
    families.compare("gpt-oss", model, str(log), 81559, 4096, 0.9)
    result = json.loads(capsys.readouterr().out)
    assert result["reported"] == {} and result["planned_over_reported"] == {}
    assert result["log_errors"] == ["Traceback (most recent call last):", "ValueError: unsupported"]
    assert result["planned"]["structure"].startswith("swa attention (1 full + 1 swa layers)")


@pytest.mark.parametrize('config, extra', [({'linear_num_value_heads': 32}, {'gdn_prefill_backend': 'triton'}),
                                           ({'num_local_experts': 128}, {})])
def test_load_runs_hybrid_models_without_flashinfer(tmp_path, monkeypatch, capsys, config, extra):
    # the gated delta net's prefill defaults to FlashInfer, which the wheelhouse lacks: the H100 run of
    # 2026-12-07 came up on Qwen3-Next and failed on the first generation
    import sys
    import types
    (tmp_path / 'config.json').write_text(json.dumps(config))
    seen = {}

    class LLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def generate(self, prompts, params):
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[0] * 8)])]

    monkeypatch.setitem(sys.modules, 'vllm', types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: kw))
    families.load(str(tmp_path), 4096, 0.9)
    assert dict((k, seen[k]) for k in ('load_format', 'enforce_eager', 'max_model_len')) == {
        'load_format': 'dummy', 'enforce_eager': True, 'max_model_len': 4096}
    assert seen.get('gdn_prefill_backend') == extra.get('gdn_prefill_backend')
    assert 'generated 8 tokens' in capsys.readouterr().out


def test_minimax_m3_without_flashinfer_is_skipped_or_runs_on_the_norm_double(tmp_path, monkeypatch, capsys):
    # vLLM's MiniMax-M3 imports flashinfer.norm in every RMSNorm; the wheelhouse carries no flashinfer
    import os
    import sys
    import types
    (tmp_path / 'config.json').write_text(json.dumps({'architectures': ['MiniMaxM3SparseForConditionalGeneration']}))
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *args: None)
    monkeypatch.delenv('PYTHONPATH', raising=False)
    monkeypatch.delenv('GPULAB_FAMILIES_FLASHINFER_NORM_DOUBLE', raising=False)
    with pytest.raises(SystemExit) as stop:
        families.load(str(tmp_path), 4096, 0.9)
    assert stop.value.code == 3 and 'gpu-families: skipped: ' in capsys.readouterr().out

    class LLM:
        def __init__(self, **kwargs):
            pass

        def generate(self, prompts, params):
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[0] * 8)])]

    monkeypatch.setitem(sys.modules, 'vllm', types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: kw))
    monkeypatch.setenv('GPULAB_FAMILIES_FLASHINFER_NORM_DOUBLE', '1')
    monkeypatch.setenv('PATH', os.pathsep.join([str(tmp_path / 'cuda'), '/usr/bin']))
    (tmp_path / 'cuda').mkdir()
    (tmp_path / 'cuda' / 'nvcc').write_text('')
    monkeypatch.setattr(sys, 'path', list(sys.path))
    families.load(str(tmp_path), 4096, 0.9)
    out = capsys.readouterr().out
    assert 'flashinfer.norm is the torch test double' in out and 'generated 8 tokens' in out
    assert sys.path[0].endswith(os.path.join('tests', 'doubles', 'flashinfer_norm'))
    assert os.path.isfile(os.path.join(sys.path[0], 'flashinfer', 'norm.py'))
    assert str(tmp_path / 'cuda') not in os.environ['PATH'].split(os.pathsep)
