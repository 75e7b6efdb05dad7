# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE, not FlashInfer: the two norms vLLM 0.24.0's MiniMax-M3 calls (flashinfer.norm), in
torch, for scripts/gpu-families.sh on a host whose wheelhouse carries no flashinfer. It holds no
memory between calls, so the weights and the KV cache vLLM reports are those of the real kernels.
scripts/gpu-families.py takes nvcc off PATH beside it, so vllm.utils.flashinfer.has_flashinfer()
stays False and no other FlashInfer path is chosen."""
