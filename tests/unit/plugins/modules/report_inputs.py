"""Inputs shaped like the bench modules' return values, for the report tests."""

import json


def level(concurrency, aggregate, decode):
    return {'concurrency': concurrency, 'requests': 4, 'requests_ok': 4, 'requests_failed': 0, 'errors': [],
            'ttft_s': {'mean': 0.06, 'p50': 0.05, 'p99': 0.09}, 'tpot_s': {'mean': 0.012, 'p50': 0.012, 'p99': 0.013},
            'itl_s': {'mean': 0.012, 'p50': 0.012, 'p99': 0.02}, 'prefill_tok_s': 337.0, 'decode_tok_s': decode,
            'decode_tok_s_cv_percent': 0.6, 'aggregate_output_tok_s': aggregate, 'reasoning_tokens': 0,
            'answer_tokens': 512, 'server': {'decode_tok_s': decode * 1.01, 'prefill_tok_s': 340.0, 'decode_ratio': 0.99}}


BENCH = {'engine': 'llama.cpp', 'model': 'm.gguf', 'base_url': 'http://127.0.0.1:8080', 'warnings': [],
         'levels': [level(1, 80.0, 82.5), level(2, 120.0, 61.0), level(4, 150.0, 38.0)],
         'prompt': {'tokens': 128, 'sizing': 'tokenizer'}, 'request': {'max_tokens': 128, 'ignore_eos': True, 'sampling': {}},
         'model_weights': None}
RESIDENCY = {'node-a': {'gpus': [{'index': 0, 'name': 'NVIDIA H200', 'memory_used_mib': 18033, 'memory_total_mib': 143771}],
                        'processes': [{'pid': 1, 'process_name': 'llama-server', 'gpu_index': 0, 'used_memory_mib': 8206,
                                       'systemd_unit': None},
                                      {'pid': 2, 'process_name': 'ggml-rpc-server', 'gpu_index': 0, 'used_memory_mib': 9812,
                                       'systemd_unit': None}]}}
SAMPLER = {'node-a': {'method': 'nvidia-smi-loop', 'gpus': [
    {'index': 0, 'name': 'NVIDIA H200', 'samples': 26, 'utilization_peak': 65, 'utilization_median': 51.0,
     'utilization_p10': 0.0, 'utilization_mean': 35.0, 'zero_fraction': 0.3846, 'memory_used_peak_mib': 18135}]}}


def trace():
    utils = [0, 0, 51, 51, 61, 61, 60, 60, 63, 63, 64, 64, 63, 63, 11, 11, 65, 65, 0, 0, 0, 0, 0, 0, 0, 0]
    return json.dumps({'host': 'node-a', 'method': 'nvidia-smi-loop', 'interval_ms': 100, 'gpu_names': {'0': 'NVIDIA H200'},
                       'samples': [[round(0.1 * i, 3), 0, u, 18033, 80.0 + 6 * u] for i, u in enumerate(utils)]})
