"""The skinny GEMM kernel (triton_gemm.py) launched with a chosen number of rows per program, past the 64
rows of the engine's GEMM plan: what the lab's engine-kernels plugin measures at 128-256 rows. Apart from
triton_gemm.py so that the shipped GEMM plans, keyed by that file's code, stay valid."""

from __future__ import annotations

import torch
import triton

from inferlab.engine.kernels.triton_gemm import SkinnyConfig, _skinny_kernel


def skinny_rows_linear(
    x: torch.Tensor,  # [M, K], M <= block_m
    w: torch.Tensor,  # [N, K], contiguous
    block_m: int,  # rows per program (a power of two >= 16)
    config: SkinnyConfig,
    counters: torch.Tensor,  # >= triton_gemm.tile_counters(N, config.block_n)
) -> torch.Tensor:  # [M, N] in w's dtype: x @ w.T
    m, k = x.shape
    n = w.shape[0]
    assert m <= block_m and w.stride(1) == 1 and x.stride(-1) == 1
    out = torch.empty((m, n), dtype=w.dtype, device=w.device)
    split = config.split_k
    part = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=w.device)
    _skinny_kernel[(triton.cdiv(n, config.block_n), split)](
        x, w, out, part, counters, m, n, k, x.stride(0), w.stride(0), out.stride(0),
        triton.cdiv(triton.cdiv(k, split), config.block_k), PARTIALS=split > 1, SWIGLU=False, GATED=False,
        IEEE=w.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GELU_TANH=False, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out
