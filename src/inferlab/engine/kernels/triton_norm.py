"""Triton kernels: RMSNorm, residual add + RMSNorm, embedding gather + RMSNorm, and the SwiGLU product.

Each replaces several eager kernels (pow, mean, rsqrt, casts, multiplies) with one launch, which matters
in the decode step where a batch row is a few kilobytes and launch count dominates. The arithmetic
mirrors engine/torch_ops.py (normalise in fp32, cast to the model dtype, multiply by the weight), so the
norm outputs equal the reference bit for bit in fp32 and to one rounding in bf16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    X,
    R,
    W,
    OUT,
    RES_OUT,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    dim,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < dim
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(R + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
        summed = (x + r).to(RES_OUT.dtype.element_ty)  # rounded to the model dtype, as in eager torch
        tl.store(RES_OUT + row * stride_ro + offs, summed, mask=mask)
        x = summed.to(tl.float32)
    var = tl.sum(x * x, axis=0) / dim
    normed = (x * tl.rsqrt(var + eps)).to(OUT.dtype.element_ty).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + row * stride_o + offs, (normed * w).to(OUT.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [tokens, dim] -> [tokens, dim]; see torch_ops.rms_norm."""
    shape = x.shape
    x2 = _rows(x.reshape(-1, shape[-1]))
    out = torch.empty_like(x2)
    dim = shape[-1]
    _rms_norm_kernel[(x2.shape[0],)](
        x2,
        x2,
        weight,
        out,
        out,
        x2.stride(0),
        x2.stride(0),
        out.stride(0),
        out.stride(0),
        dim,
        eps,
        HAS_RESIDUAL=False,
        BLOCK=triton.next_power_of_2(dim),
    )
    return out.view(shape)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x) for x, residual [tokens, dim]; one launch."""
    x2, r2 = _rows(x), _rows(residual)
    out = torch.empty_like(x2)
    summed = torch.empty_like(x2)
    dim = x2.shape[-1]
    _rms_norm_kernel[(x2.shape[0],)](
        x2,
        r2,
        weight,
        out,
        summed,
        x2.stride(0),
        r2.stride(0),
        out.stride(0),
        summed.stride(0),
        dim,
        eps,
        HAS_RESIDUAL=True,
        BLOCK=triton.next_power_of_2(dim),
    )
    return out, summed


@triton.jit
def _embed_rms_norm_kernel(TOK, E, W, OUT, X, stride_e, stride_o, stride_x, dim, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < dim
    token = tl.load(TOK + row)
    x = tl.load(E + token * stride_e + offs, mask=mask, other=0.0)
    tl.store(X + row * stride_x + offs, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / dim
    normed = (xf * tl.rsqrt(var + eps)).to(OUT.dtype.element_ty).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + row * stride_o + offs, (normed * w).to(OUT.dtype.element_ty), mask=mask)


def embed_rms_norm(
    tokens: torch.Tensor, embed: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x), x) for x = embed[tokens]: the embedding gather and the first norm in one launch."""
    n, dim = tokens.shape[0], embed.shape[1]
    assert embed.stride(1) == 1
    out = torch.empty((n, dim), dtype=embed.dtype, device=embed.device)
    x = torch.empty_like(out)
    _embed_rms_norm_kernel[(n,)](
        tokens, embed, weight, out, x, embed.stride(0), out.stride(0), x.stride(0), dim, eps,
        BLOCK=triton.next_power_of_2(dim),
    )  # fmt: skip
    return out, x


@triton.jit
def _silu_mul_kernel(GU, OUT, stride_gu, stride_o, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < inter
    gate = tl.load(GU + row * stride_gu + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(GU + row * stride_gu + inter + offs, mask=mask, other=0.0).to(tl.float32)
    silu = gate / (1.0 + tl.exp(-gate))
    tl.store(OUT + row * stride_o + offs, (silu * up).to(OUT.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [tokens, 2 * inter] -> silu(gate) * up [tokens, inter]; one launch."""
    gu = _rows(gate_up)
    tokens, inter = gu.shape[0], gu.shape[1] // 2
    out = torch.empty((tokens, inter), dtype=gu.dtype, device=gu.device)
    block = min(1024, triton.next_power_of_2(inter))
    _silu_mul_kernel[(tokens, triton.cdiv(inter, block))](gu, out, gu.stride(0), out.stride(0), inter, BLOCK=block)
    return out
