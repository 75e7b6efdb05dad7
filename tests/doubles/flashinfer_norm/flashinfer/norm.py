# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE, not FlashInfer: flashinfer.norm's Gemma RMSNorm (weight applied as 1 + w, float32
inside), plain and fused with the residual add in place, as vLLM's MiniMAXGemmaRMSNorm calls them
(vllm/models/minimax_m3/nvidia/model.py)."""

import torch


def gemma_rmsnorm(x, weight, eps=1e-6):
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    return out.to(x.dtype)


def gemma_fused_add_rmsnorm(x, residual, weight, eps=1e-6):
    # residual <- residual + x; x <- norm(residual), both in place
    residual.add_(x)
    x.copy_(gemma_rmsnorm(residual, weight, eps))
