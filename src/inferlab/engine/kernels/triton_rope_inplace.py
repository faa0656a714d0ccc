"""Triton kernel: rope (and the optional per-head q/k RMSNorm) applied in place to the q and k parts of a
fused qkv projection, for the packed prefill, which keeps no KV cache: attention then reads q, k and v as
views of the same buffer, so nothing is copied. One program per (token, head) over the q heads and then the
k heads; v is left as it is. Same arithmetic as engine/kernels/triton_rope.py's q and k (and as
engine/torch_ops.rotate_q_k, the reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_inplace_kernel(
    QKV, POS, COS, SIN, QNORM, KNORM,
    stride_t, stride_cos, eps,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    QK_NORM: tl.constexpr,
    NORM_OFFSET: tl.constexpr,  # Gemma 3: the q/k norms scale by (1 + w) in fp32, rounded once
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)  # [0, H) are q heads, [H, H + K) k heads (contiguous in qkv)
    half = HEAD_DIM // 2
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    pos = tl.load(POS + t)
    c = tl.load(COS + pos * stride_cos + d, mask=dmask, other=0.0)  # cos halves are equal: read one
    s = tl.load(SIN + pos * stride_cos + d, mask=dmask, other=0.0)
    src = QKV + t * stride_t + head * HEAD_DIM
    dtype = QKV.dtype.element_ty
    x1 = tl.load(src + d, mask=dmask, other=0.0).to(tl.float32)
    x2 = tl.load(src + half + d, mask=dmask, other=0.0).to(tl.float32)
    if QK_NORM:
        if head < NUM_HEADS:
            w1 = tl.load(QNORM + d, mask=dmask, other=0.0).to(tl.float32)
            w2 = tl.load(QNORM + half + d, mask=dmask, other=0.0).to(tl.float32)
        else:
            w1 = tl.load(KNORM + d, mask=dmask, other=0.0).to(tl.float32)
            w2 = tl.load(KNORM + half + d, mask=dmask, other=0.0).to(tl.float32)
        r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM + eps)
        if NORM_OFFSET:
            x1 = (x1 * r * (1.0 + w1)).to(dtype).to(tl.float32)
            x2 = (x2 * r * (1.0 + w2)).to(dtype).to(tl.float32)
        else:
            x1 = ((x1 * r).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
            x2 = ((x2 * r).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    tl.store(src + d, (x1 * c - x2 * s).to(dtype), mask=dmask)
    tl.store(src + half + d, (x2 * c + x1 * s).to(dtype), mask=dmask)


def rope_inplace(
    qkv: torch.Tensor,  # [tokens, (heads + 2 * kv_heads) * head_dim], rows contiguous; q and k rotated in place
    positions: torch.Tensor,  # [tokens] int64
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    num_heads: int,
    kv_heads: int,
    qk_norm_offset: bool = False,
) -> None:
    assert qkv.stride(-1) == 1
    tokens = qkv.shape[0]
    head_dim = cos.shape[-1]
    qk_norm = q_norm is not None
    _rope_inplace_kernel[(tokens, num_heads + kv_heads)](
        qkv, positions, cos, sin, q_norm if qk_norm else cos, k_norm if qk_norm else cos,
        qkv.stride(0), cos.stride(0), eps,
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, HALF_BLOCK=triton.next_power_of_2(head_dim // 2), QK_NORM=qk_norm,
        NORM_OFFSET=qk_norm_offset,
    )  # fmt: skip
