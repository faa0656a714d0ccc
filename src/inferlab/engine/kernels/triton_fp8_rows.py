"""Triton kernel: each row of an activation matrix quantized to e4m3 with its own fp32 scale (max|row| / 448),
for the FP8 weights' matmuls (engine/packed/fp8_weights.py). One program per row, two passes over it (the
second from L2): the row's max, then the values divided by the scale and rounded to the e4m3 grid (the
same operations as engine/kv_quant.quantize, the reference, so both give the same bytes).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_fp8 import _round_e4m3


@triton.jit
def _quantize_rows_kernel(X, Q, S, stride_x, stride_q, dim, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, dim, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + offs, mask=offs < dim, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.math.div_rn(tl.max(amax, axis=0), 448.0)
    safe = tl.where(scale > 0, scale, 1.0)  # an all-zero row stores zeros
    tl.store(S + row, scale)
    for start in range(0, dim, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + offs, mask=offs < dim, other=0.0).to(tl.float32)
        q = _round_e4m3(tl.math.div_rn(x, safe))
        tl.store(Q + row * stride_q + offs, q.to(Q.dtype.element_ty), mask=offs < dim)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, dim] -> (q [rows, dim] float8_e4m3fn, scale [rows] fp32), x ~ q * scale[:, None]."""
    assert x.stride(-1) == 1
    rows, dim = x.shape
    q = torch.empty((rows, dim), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    block = min(4096, triton.next_power_of_2(dim))
    _quantize_rows_kernel[(rows,)](x, q, scale, x.stride(0), q.stride(0), dim, BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return q, scale
