"""Triton kernel: rope (and the optional per-head q/k RMSNorm) applied in place to the q and k parts of a
fused qkv projection, for the packed prefill, which keeps no KV cache: attention then reads q, k and v as
views of the same buffer, so nothing is copied. One program per (token, head) over the q heads and then the
k heads; v is left as it is. The arithmetic is triton_rope.py's (`rotated_head`); engine/torch_ops.rotate_q_k
is the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_rope import rotated_head


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
    src = QKV + t * stride_t + head * HEAD_DIM
    o1, o2 = rotated_head(src, COS, SIN, QNORM, KNORM, QKV, pos, stride_cos, eps, head < NUM_HEADS, HEAD_DIM,
                          HALF_BLOCK, QK_NORM, NORM_OFFSET)
    tl.store(src + d, o1, mask=dmask)
    tl.store(src + half + d, o2, mask=dmask)


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
