"""Triton kernel: split fused qkv, optional per-head q/k RMSNorm (Qwen3; Gemma 3's (1 + w) form), rope, and
the KV-cache write.

One program per (token, head) over the q heads and then the kv heads: a q head is rotated into the q
output; a kv head rotates its k half-vectors, and writes k and v straight into the cache at the token's
(slot, position) - in the decode step this single launch replaces about fifteen eager kernels per layer.
With an FP8 cache (KV_FP8) the kv head stores k and v as e4m3 with one fp32 scale each per position
(kernels/triton_fp8.py); the k and v it returns for prefill attention stay unquantized.
Same signature and arithmetic as engine/torch_ops.rope_qkv (which is the test reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_fp8 import e4m3_scale, to_e4m3


@triton.jit
def rotated_head(
    SRC, COS, SIN, QNORM, KNORM, OUT, pos, stride_cos, eps, is_q,
    HEAD_DIM: tl.constexpr, HALF_BLOCK: tl.constexpr, QK_NORM: tl.constexpr, NORM_OFFSET: tl.constexpr,
):  # fmt: skip
    """One head of qkv at SRC, normed per head (QK_NORM: by QNORM for a q head, else KNORM) and rotated by the
    rope of `pos`: its two halves [HALF_BLOCK], rounded as transformers rounds them, in OUT's dtype."""
    dtype = OUT.dtype.element_ty
    half = HEAD_DIM // 2
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    c = tl.load(COS + pos * stride_cos + d, mask=dmask, other=0.0)  # cos halves are equal: read one
    s = tl.load(SIN + pos * stride_cos + d, mask=dmask, other=0.0)
    x1 = tl.load(SRC + d, mask=dmask, other=0.0).to(tl.float32)
    x2 = tl.load(SRC + half + d, mask=dmask, other=0.0).to(tl.float32)
    if QK_NORM:
        if is_q:
            w1 = tl.load(QNORM + d, mask=dmask, other=0.0).to(tl.float32)
            w2 = tl.load(QNORM + half + d, mask=dmask, other=0.0).to(tl.float32)
        else:
            w1 = tl.load(KNORM + d, mask=dmask, other=0.0).to(tl.float32)
            w2 = tl.load(KNORM + half + d, mask=dmask, other=0.0).to(tl.float32)
        r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM + eps)
        if NORM_OFFSET:  # Gemma 3: (1 + w) in fp32, rounded once
            x1 = (x1 * r * (1.0 + w1)).to(dtype).to(tl.float32)
            x2 = (x2 * r * (1.0 + w2)).to(dtype).to(tl.float32)
        else:  # transformers rounds the normed head, then its product with w
            x1 = ((x1 * r).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
            x2 = ((x2 * r).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    return (x1 * c - x2 * s).to(dtype), (x2 * c + x1 * s).to(dtype)


@triton.jit
def _rope_qkv_kernel(
    QKV,
    POS,
    SLOT,
    COS,
    SIN,
    QNORM,
    KNORM,
    Q_OUT,
    K_OUT,
    V_OUT,
    K_CACHE,
    V_CACHE,
    K_SCALE,
    V_SCALE,
    stride_t,
    stride_cos,
    stride_qo_t,
    stride_qo_h,
    stride_ko_t,
    stride_ko_h,
    stride_cs,
    stride_ch,
    stride_cn,
    stride_ss,
    stride_sh,
    eps,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    QK_NORM: tl.constexpr,
    RETURN_KV: tl.constexpr,
    KV_FP8: tl.constexpr,
    NORM_OFFSET: tl.constexpr,  # Gemma 3: the q/k norms scale by (1 + w) in fp32, rounded once
):
    t = tl.program_id(0)
    head = tl.program_id(1)  # [0, H) are q heads, [H, H + K) kv heads
    half = HEAD_DIM // 2
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    pos = tl.load(POS + t)
    is_q = head < NUM_HEADS
    src = QKV + t * stride_t + head * HEAD_DIM  # q heads then k heads are contiguous in qkv
    o1, o2 = rotated_head(src, COS, SIN, QNORM, KNORM, Q_OUT, pos, stride_cos, eps, is_q, HEAD_DIM, HALF_BLOCK, QK_NORM,
                          NORM_OFFSET)
    if is_q:
        dst = Q_OUT + t * stride_qo_t + head * stride_qo_h
        tl.store(dst + d, o1, mask=dmask)
        tl.store(dst + half + d, o2, mask=dmask)
    else:
        kv_head = head - NUM_HEADS
        slot = tl.load(SLOT + t)
        cache_off = slot * stride_cs + kv_head * stride_ch + pos * stride_cn
        v_src = QKV + t * stride_t + (head + tl.num_programs(1) - NUM_HEADS) * HEAD_DIM
        v1 = tl.load(v_src + d, mask=dmask, other=0.0)
        v2 = tl.load(v_src + half + d, mask=dmask, other=0.0)
        if KV_FP8:  # e4m3 values + one fp32 scale per (slot, kv head, position) for K and for V
            cache_ty = K_CACHE.dtype.element_ty
            k_scale = e4m3_scale(o1.to(tl.float32), o2.to(tl.float32))
            v_scale = e4m3_scale(v1.to(tl.float32), v2.to(tl.float32))
            tl.store(K_CACHE + cache_off + d, to_e4m3(o1.to(tl.float32), k_scale).to(cache_ty), mask=dmask)
            tl.store(K_CACHE + cache_off + half + d, to_e4m3(o2.to(tl.float32), k_scale).to(cache_ty), mask=dmask)
            tl.store(V_CACHE + cache_off + d, to_e4m3(v1.to(tl.float32), v_scale).to(cache_ty), mask=dmask)
            tl.store(V_CACHE + cache_off + half + d, to_e4m3(v2.to(tl.float32), v_scale).to(cache_ty), mask=dmask)
            scale_off = slot * stride_ss + kv_head * stride_sh + pos
            tl.store(K_SCALE + scale_off, k_scale)
            tl.store(V_SCALE + scale_off, v_scale)
        else:
            tl.store(K_CACHE + cache_off + d, o1, mask=dmask)
            tl.store(K_CACHE + cache_off + half + d, o2, mask=dmask)
            tl.store(V_CACHE + cache_off + d, v1, mask=dmask)
            tl.store(V_CACHE + cache_off + half + d, v2, mask=dmask)
        if RETURN_KV:
            k_dst = K_OUT + t * stride_ko_t + kv_head * stride_ko_h
            tl.store(k_dst + d, o1, mask=dmask)
            tl.store(k_dst + half + d, o2, mask=dmask)
            v_dst = V_OUT + t * stride_ko_t + kv_head * stride_ko_h
            tl.store(v_dst + d, v1, mask=dmask)
            tl.store(v_dst + half + d, v2, mask=dmask)


def rope_qkv(
    qkv: torch.Tensor,  # [tokens, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [tokens] int64
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim], written in place
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [tokens] int64
    num_heads: int,
    return_kv: bool = True,  # prefill needs k and v back; decode reads them from the cache
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 with an fp8 cache (else None)
    v_scale: torch.Tensor | None = None,
    qk_norm_offset: bool = False,  # Gemma 3's (1 + w) q/k norms
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """q [tokens, heads, head_dim] (+ k, v [tokens, kv_heads, head_dim] when return_kv); see torch_ops."""
    assert qkv.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride() == k_cache.stride()
    fp8 = k_scale is not None
    if fp8:
        assert k_cache.dtype == torch.float8_e4m3fn and k_scale.stride() == v_scale.stride() and k_scale.stride(-1) == 1
    tokens = qkv.shape[0]
    head_dim = cos.shape[-1]
    kv_heads = k_cache.shape[1]
    q = torch.empty((tokens, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((tokens, kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device) if return_kv else q
    v = torch.empty_like(k) if return_kv else q
    qk_norm = q_norm is not None
    _rope_qkv_kernel[(tokens, num_heads + kv_heads)](
        qkv,
        positions,
        slots,
        cos,
        sin,
        q_norm if qk_norm else cos,
        k_norm if qk_norm else cos,
        q,
        k,
        v,
        k_cache,
        v_cache,
        k_scale if fp8 else cos,
        v_scale if fp8 else cos,
        qkv.stride(0),
        cos.stride(0),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        k_scale.stride(0) if fp8 else 0,
        k_scale.stride(1) if fp8 else 0,
        eps,
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        HALF_BLOCK=triton.next_power_of_2(head_dim // 2),
        QK_NORM=qk_norm,
        RETURN_KV=return_kv,
        KV_FP8=fp8,
        NORM_OFFSET=qk_norm_offset,
    )
    return q, (k if return_kv else None), (v if return_kv else None)
