"""Triton kernels: RMSNorm, residual add (+ steering) + RMSNorm, embedding gather + RMSNorm, the SwiGLU product.

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
    VEC,
    SLOT,
    SCALE,
    TOKEN_ROWS,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    stride_v,
    stride_slot,
    stride_scale,
    dim,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    STEER: tl.constexpr,  # add scale * VEC[slot] of the token's row to the sum (engine/steering.py)
    HAS_ROW_MAP: tl.constexpr,  # the token's row is TOKEN_ROWS[token] (prefill), else the token index (decode)
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < dim
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(R + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
        summed = (x + r).to(RES_OUT.dtype.element_ty)  # rounded to the model dtype, as in eager torch
        if STEER:
            if HAS_ROW_MAP:
                owner = tl.load(TOKEN_ROWS + row)
            else:
                owner = row
            slot = tl.load(SLOT + owner * stride_slot)  # -1: this row is not steered at this layer
            scale = tl.load(SCALE + owner * stride_scale)
            width = tl.where(slot >= 0, dim, 0)  # nothing is loaded for an unsteered row
            v = tl.load(VEC + tl.maximum(slot, 0).to(tl.int64) * stride_v + offs, mask=offs < width, other=0.0)
            added = (v.to(tl.float32) * scale).to(RES_OUT.dtype.element_ty)  # scale * vector in the model dtype
            summed = (summed.to(tl.float32) + added.to(tl.float32)).to(RES_OUT.dtype.element_ty)
        tl.store(RES_OUT + row * stride_ro + offs, summed, mask=mask)
        x = summed.to(tl.float32)
    var = tl.sum(x * x, axis=0) / dim
    normed = (x * tl.rsqrt(var + eps)).to(OUT.dtype.element_ty).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + row * stride_o + offs, (normed * w).to(OUT.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _launch(x2: torch.Tensor, r2: torch.Tensor | None, weight: torch.Tensor, out: torch.Tensor,
            summed: torch.Tensor, eps: float, steer=None) -> None:
    """One program per token row of x2 [tokens, dim]; r2 None: plain norm; steer: an engine.steering.SteerLayer."""
    dim = x2.shape[-1]
    vec = slot = scale = token_rows = x2  # unused pointers when not steering
    strides = (0, 0, 0)
    if steer is not None:
        vec, slot, scale = steer.vectors, steer.slot, steer.scale
        token_rows = steer.token_rows if steer.token_rows is not None else slot
        strides = (vec.stride(0), slot.stride(0), scale.stride(0))
    r = r2 if r2 is not None else x2
    _rms_norm_kernel[(x2.shape[0],)](
        x2, r, weight, out, summed, vec, slot, scale, token_rows,
        x2.stride(0), r.stride(0), out.stride(0), summed.stride(0), *strides, dim, eps,
        HAS_RESIDUAL=r2 is not None, STEER=steer is not None,
        HAS_ROW_MAP=steer is not None and steer.token_rows is not None, BLOCK=triton.next_power_of_2(dim),
    )  # fmt: skip


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [tokens, dim] -> [tokens, dim]; see torch_ops.rms_norm."""
    shape = x.shape
    x2 = _rows(x.reshape(-1, shape[-1]))
    out = torch.empty_like(x2)
    _launch(x2, None, weight, out, out, eps)
    return out.view(shape)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x) for x, residual [tokens, dim]; one launch."""
    x2, r2 = _rows(x), _rows(residual)
    out, summed = torch.empty_like(x2), torch.empty_like(x2)
    _launch(x2, r2, weight, out, summed, eps)
    return out, summed


def add_steer_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, steer
) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rms_norm with each steered row's scale * vector added to the sum; see torch_ops.add_steer_rms_norm.
    One launch; a row without steering at this layer costs one index load."""
    x2, r2 = _rows(x), _rows(residual)
    out, summed = torch.empty_like(x2), torch.empty_like(x2)
    _launch(x2, r2, weight, out, summed, eps, steer)
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
