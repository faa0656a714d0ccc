"""Triton flash-decoding over packed rows: the attention of a decode step whose rows feed several consecutive
positions each (engine/forced_runs.py), each row's K/V read once for all of its queries.

The step's rope and K/V write run first, for every packed position (kernels/triton_rope.py, as prefill
does), so the cache holds each row's new positions before any is read. Then grid (rows, kv_heads, splits):
a program takes its row's `count` queries x the kv head's GROUP query heads as the rows of one tile
(BLOCK_Q >= count x GROUP: the 16-row tile a GQA group of 2 pads to anyway holds 8 positions), and runs an
online softmax over its share of the row's positions [lo, last], each tile row masked to the keys its
query sees (n <= its position, and its sliding window). A tile row may see none of a tile's keys: its
running maximum then stays -inf, and the shifts use 0 instead (no inf - inf). Splits merge as in
kernels/triton_attention.py (the last share to finish merges, in a fixed order). With an FP8 cache the
e4m3 tiles are converted to fp16 and never dequantized, as there: q scaled by a power of two per tile row,
K's scales multiplying the scores, V's the probabilities relative to the tile's largest. The reference:
attention.packed_decode_attention over decode_rope_attention_torch (one query at a time).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.attention import PackedRows
from inferlab.engine.kernels import device_props, triton_rope
from inferlab.engine.kernels.triton_attention import AttentionConfig, choose_splits, default_config
from inferlab.engine.kernels.triton_math import tanh

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _capped(sc, softcap, SOFTCAP: tl.constexpr):
    if SOFTCAP:
        sc = softcap * tanh(sc / softcap)
    return sc


@triton.jit
def _rows_attention_kernel(
    Q, FIRST, COUNT, POS, SLOT, K_CACHE, V_CACHE, OUT, O_PART, LSE_PART, COUNTER,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_kn, stride_ot, stride_oh,
    stride_pb, stride_pk, stride_pi, stride_ps, stride_lb, stride_lk, stride_li,
    scale, splits, window, softcap, rows, total,
    NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SOFTCAP: tl.constexpr,
    K_SCALE, V_SCALE, stride_ss, stride_sh, KV_FP8: tl.constexpr, DOT_TY: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    first = tl.load(FIRST + row).to(tl.int32)
    count = tl.load(COUNT + row).to(tl.int32)
    pos0 = tl.load(POS + row).to(tl.int32)  # the row's first query's position; the last's is pos0 + count - 1
    slot = tl.load(SLOT + row).to(tl.int64)
    last = pos0 + count - 1
    lo = tl.where(window > 0, tl.maximum(pos0 + 1 - window, 0), 0)  # the first query's window reaches furthest back
    chunk = tl.cdiv(tl.cdiv(last + 1 - lo, splits), BLOCK_N) * BLOCK_N
    start = lo + split * chunk
    end = tl.minimum(start + chunk, last + 1)

    i = tl.arange(0, BLOCK_Q)  # tile row: query i // GROUP, head i % GROUP of the kv head
    query = i // GROUP
    valid = query < count
    qpos = pos0 + query  # [BLOCK_Q]
    qlo = tl.where(window > 0, tl.maximum(qpos + 1 - window, 0), 0)
    heads = kv_head * GROUP + i % GROUP
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q_at = (first + query).to(tl.int64)[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :]
    qmask = valid[:, None] & dmask[None, :]
    q = tl.load(Q + q_at, mask=qmask, other=0.0)  # [BLOCK_Q, BLOCK_D], roped

    kv_base = slot * stride_ks + kv_head * stride_kh
    scale_base = slot * stride_ss + kv_head * stride_sh
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
    unit = tl.full([BLOCK_Q], 1.0, tl.float32)  # fp8: the scores' factor (softmax scale x q's power of two)
    if KV_FP8:
        top_q = tl.max(tl.abs(q.to(tl.float32)), axis=1)
        exponent = tl.minimum(tl.maximum((top_q.to(tl.int32, bitcast=True) >> 23) & 0xFF, 1), 253)
        unit = scale * (exponent << 23).to(tl.float32, bitcast=True)  # scale x 2^e
        q = (q.to(tl.float32) * ((254 - exponent) << 23).to(tl.float32, bitcast=True)[:, None]).to(DOT_TY)
    v_unit = tl.full([], 1.0, tl.float32)  # fp8: acc's unit, the previous tile's largest v_scale
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nmask = n < end
        sees = nmask[None, :] & (n[None, :] <= qpos[:, None]) & (n[None, :] >= qlo[:, None])  # [BLOCK_Q, BLOCK_N]
        kv_at = kv_base + n[:, None] * stride_kn + d[None, :]
        kvmask = nmask[:, None] & dmask[None, :]
        k = tl.load(K_CACHE + kv_at, mask=kvmask, other=0.0)
        v = tl.load(V_CACHE + kv_at, mask=kvmask, other=0.0)
        if KV_FP8:
            k = k.to(DOT_TY)
            v = v.to(DOT_TY)
        if IEEE:
            sc = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            sc = tl.dot(q, tl.trans(k))
        if KV_FP8:
            sc = sc * tl.load(K_SCALE + scale_base + n, mask=nmask, other=0.0)[None, :] * unit[:, None]
        else:
            sc = sc * scale
        sc = tl.where(sees, _capped(sc, softcap, SOFTCAP), float("-inf"))
        m_new = tl.maximum(m, tl.max(sc, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a tile row that has seen no key yet
        alpha = tl.math.exp2((m - shift) * LOG2E)
        p = tl.math.exp2((sc - shift[:, None]) * LOG2E)
        denom = denom * alpha + tl.sum(p, axis=1)
        if KV_FP8:
            v_scale = tl.load(V_SCALE + scale_base + n, mask=nmask, other=0.0)
            top = tl.max(v_scale, axis=0)
            top = tl.where(top > 0, top, 1.0)
            pv = (p * (v_scale * (1.0 / top))[None, :]).to(DOT_TY)
            acc = acc * (alpha * (v_unit / top))[:, None]
            if IEEE:
                acc = tl.dot(pv, v, acc, input_precision="ieee")
            else:
                acc = tl.dot(pv, v, acc)
            v_unit = top
        else:
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    acc = acc * v_unit
    if (row == rows - 1) & (split == 0):  # the positions after the last row's are padding: zeros (its heads)
        hd = tl.arange(0, BLOCK_GROUP)
        pad_at = (kv_head * GROUP + hd)[:, None] * stride_oh + d[None, :]
        pad_mask = (hd < GROUP)[:, None] & dmask[None, :]
        for p in range(first + count, total):
            tl.store(OUT + p * stride_ot + pad_at,
                     tl.zeros([BLOCK_GROUP, BLOCK_D], tl.float32).to(OUT.dtype.element_ty), mask=pad_mask)
    empty = denom == 0.0  # no key of this share is seen by the tile row
    out = tl.where(empty[:, None], 0.0, acc * (1.0 / tl.where(empty, 1.0, denom))[:, None])
    out_ptr = OUT + (first + query).to(tl.int64)[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :]
    if splits == 1:
        tl.store(out_ptr, out.to(OUT.dtype.element_ty), mask=qmask)
    else:
        lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, denom)))
        part_ptr = O_PART + row * stride_pb + kv_head * stride_pk + i[:, None] * stride_pi + d[None, :]
        lse_ptr = LSE_PART + row * stride_lb + kv_head * stride_lk + i * stride_li
        tl.store(part_ptr + split * stride_ps, out, mask=qmask)
        tl.store(lse_ptr + split, lse, mask=valid)
        tl.debug_barrier()  # every thread's partial is written before the counter is released
        counter = COUNTER + row * NUM_KV_HEADS + kv_head
        if tl.atomic_add(counter, 1, sem="acq_rel") == splits - 1:  # the last share merges them all
            top = tl.full([BLOCK_Q], float("-inf"), tl.float32)
            for sp in range(splits):
                top = tl.maximum(top, tl.load(lse_ptr + sp, mask=valid, other=float("-inf"), cache_modifier=".cg"))
            top = tl.where(valid, top, 0.0)
            total = tl.zeros([BLOCK_Q], tl.float32)
            merged = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
            for sp in range(splits):  # fixed order: the same sum whichever share came last
                weight = tl.exp(tl.load(lse_ptr + sp, mask=valid, other=float("-inf"), cache_modifier=".cg") - top)
                part = tl.load(part_ptr + sp * stride_ps, mask=qmask, other=0.0, cache_modifier=".cg")
                merged += weight[:, None] * part
                total += weight
            merged = merged * (1.0 / tl.where(valid, total, 1.0))[:, None]
            tl.store(out_ptr, merged.to(OUT.dtype.element_ty), mask=qmask)
            tl.atomic_xchg(counter, 0)  # ready for the next layer's launch and the next replay


def rows_attention(
    q: torch.Tensor,  # [T, heads, head_dim]: the packed positions' roped queries
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer), every position written
    v_cache: torch.Tensor,
    rows: PackedRows,  # b rows: first packed index, count, first position, slot
    scale: float,
    counters: torch.Tensor,  # [>= b * kv_heads] int32, zero between launches (KVCache.merge_counters)
    *,
    window: int = 0,
    softcap: float | None = None,
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 when the cache is fp8
    v_scale: torch.Tensor | None = None,
    config: AttentionConfig | None = None,  # None: triton_attention.default_config(head_dim, fp8)
    splits: int | None = None,  # None: from config.programs_per_sm (choose_splits)
) -> torch.Tensor:  # [T, heads, head_dim] in q's dtype; positions of no row: 0
    total, num_heads, head_dim = q.shape
    b = rows.first.shape[0]
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    fp8 = k_scale is not None
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    assert counters.numel() >= b * kv_heads and counters.dtype == torch.int32
    group = num_heads // kv_heads
    config = config or default_config(head_dim, fp8)
    block_n, max_count = config.block_n, rows.most
    if splits is None:
        target = config.programs_per_sm * device_props.sm_count(q.device, cpu_value=8)
        span = min(max_len, window + max_count) if window else max_len
        splits = choose_splits(b, kv_heads, span, target, block_n)
    block_q = max(16, triton.next_power_of_2(max_count * group))
    out = torch.empty((total, num_heads, head_dim), dtype=q.dtype, device=q.device)  # padding: zeroed by the kernel
    if splits == 1:
        o_part, lse_part = out.view(1, 1, 1, 1, -1), out.view(1, 1, 1, -1)  # unused
    else:
        o_part = torch.empty((b, kv_heads, block_q, splits, head_dim), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((b, kv_heads, block_q, splits), dtype=torch.float32, device=q.device)
    _rows_attention_kernel[(b, kv_heads, splits)](
        q, rows.first, rows.count, rows.position, rows.slot, k_cache, v_cache, out, o_part, lse_part, counters,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        lse_part.stride(0), lse_part.stride(1), lse_part.stride(2),
        scale, splits, window, 1.0 if softcap is None else softcap, b, total,
        NUM_KV_HEADS=kv_heads, GROUP=group, BLOCK_GROUP=triton.next_power_of_2(group), BLOCK_Q=block_q,
        HEAD_DIM=head_dim,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_N=block_n,
        IEEE=q.dtype == torch.float32, SOFTCAP=softcap is not None,
        K_SCALE=k_scale if fp8 else q, V_SCALE=v_scale if fp8 else q,
        stride_ss=k_scale.stride(0) if fp8 else 0, stride_sh=k_scale.stride(1) if fp8 else 0, KV_FP8=fp8,
        DOT_TY=tl.float32 if q.dtype == torch.float32 else tl.float16,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out


def decode_packed_attention(
    qkv: torch.Tensor,  # [T, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [T] int64
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [T] int64
    num_heads: int,
    scale: float,
    counters: torch.Tensor,
    rows: PackedRows,
    *,
    window: int = 0,
    softcap: float | None = None,
    qk_norm_offset: bool = False,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    config: AttentionConfig | None = None,
    splits: int | None = None,
) -> torch.Tensor:  # [T, heads, head_dim]
    """The packed step's rope + K/V write (every position), then rows_attention (Ops.decode_packed_attention)."""
    q, _, _ = triton_rope.rope_qkv(
        qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, return_kv=False,
        k_scale=k_scale, v_scale=v_scale, qk_norm_offset=qk_norm_offset,
    )  # fmt: skip
    return rows_attention(q, k_cache, v_cache, rows, scale, counters, window=window, softcap=softcap,
                          k_scale=k_scale, v_scale=v_scale, config=config, splits=splits)
