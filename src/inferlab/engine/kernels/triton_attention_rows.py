"""Triton flash-decoding over packed rows, fused with the rope and the K/V write: the attention of a decode
step whose rows feed several consecutive positions each (engine/forced_runs.py), each row's K/V read once
for all of its queries, one launch per layer.

Grid (rows, kv_heads, splits). A program takes its row's `count` queries x the kv head's GROUP query heads
as the rows of one tile (BLOCK_Q >= count x GROUP: the 16-row tile a GQA group of 2 pads to anyway holds 8
positions), ropes them (and the optional q norm) as kernels/triton_attention.py does, and runs an online
softmax over its share of the row's cached positions [lo, pos0) (each tile row masked to its sliding
window). The last share also ropes the row's new keys (BLOCK_C >= count of them), writes them and their
values into the cache (fp8: quantized there, triton_fp8.py) and folds them in from registers, causal among
the row's queries (a query sees the new positions up to its own). A tile row may see none of a tile's keys:
its running maximum then stays -inf and the shifts use 0 (no inf - inf). Splits merge as the one-query
kernel's (triton_attention.finish_shares: the last share to finish merges, in a fixed order). With an FP8
cache the e4m3 tiles are converted to fp16 and never dequantized, as there; with no window (WINDOWED off) every
tile row sees every cached key, and the cached tiles are the one-query kernel's own (triton_attention.fp8_tiles).
Padding positions (after the last row's) get zeros from the last row's first share and write no K/V. The
reference: attention.packed_decode_attention over decode_rope_attention_torch (rope and the write of every
position, then one query at a time).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.attention import PackedRows
from inferlab.engine.kernels import device_props
from inferlab.engine.kernels.triton_attention import (
    AttentionConfig,
    capped_scores,
    choose_splits,
    default_config,
    finish_shares,
    fp8_dot_query,
    fp8_tiles,
    rotated_heads,
)
from inferlab.engine.kernels.triton_fp8 import e4m3_scales, to_e4m3

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _tile_update(sc, sees, m, denom, acc, v, v_scale, v_unit, KV_FP8: tl.constexpr, IEEE: tl.constexpr,
                 DOT_TY: tl.constexpr):  # fmt: skip
    """One tile of scores sc [BLOCK_Q, n] (natural units; `sees`: what each tile row's query may see) and its
    values v [n, BLOCK_D] folded into the online softmax. A tile row that has seen no key yet keeps m = -inf
    and shifts by 0 (no inf - inf). fp8: v on the e4m3 grid in DOT_TY with its scales v_scale [n]; the
    probabilities go in relative to the tile's largest scale and acc stays in units of v_unit [BLOCK_Q] (each
    tile row's: the last tile's largest scale)."""
    sc = tl.where(sees, sc, float("-inf"))
    m_new = tl.maximum(m, tl.max(sc, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2((m - shift) * LOG2E)
    p = tl.math.exp2((sc - shift[:, None]) * LOG2E)
    denom = denom * alpha + tl.sum(p, axis=1)
    if KV_FP8:
        top = tl.max(v_scale, axis=0)
        top = tl.where(top > 0, top, 1.0)
        pv = (p * (v_scale * (1.0 / top))[None, :]).to(DOT_TY)
        acc = acc * (alpha * (v_unit / top))[:, None]
        if IEEE:
            acc = tl.dot(pv, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(pv, v, acc)
        v_unit = tl.zeros_like(v_unit) + top
    else:
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, denom, acc, v_unit


@triton.jit
def _half_dots(q1, q2, k1, k2, IEEE: tl.constexpr):
    """q . k over both rope halves: [BLOCK_Q, n]."""
    if IEEE:
        return tl.dot(q1, tl.trans(k1), input_precision="ieee") + tl.dot(q2, tl.trans(k2), input_precision="ieee")
    return tl.dot(q1, tl.trans(k1)) + tl.dot(q2, tl.trans(k2))


@triton.jit
def _rows_attention_kernel(
    QKV, FIRST, COUNT, POS, SLOT, COS, SIN, QNORM, KNORM, K_CACHE, V_CACHE, OUT, O_PART, LSE_PART, COUNTER,
    stride_t, stride_cos, stride_ks, stride_kh, stride_kn, stride_ot, stride_oh,
    stride_pb, stride_pk, stride_pi, stride_ps, stride_lb, stride_lk, stride_li,
    scale, eps, splits, window, softcap, rows, total,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, HEAD_DIM: tl.constexpr, HALF_BLOCK: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, QK_NORM: tl.constexpr, IEEE: tl.constexpr,
    SOFTCAP: tl.constexpr, NORM_OFFSET: tl.constexpr, WINDOWED: tl.constexpr,
    K_SCALE, V_SCALE, stride_ss, stride_sh, KV_FP8: tl.constexpr, DOT_TY: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    dtype = QKV.dtype.element_ty
    first = tl.load(FIRST + row).to(tl.int32)
    count = tl.load(COUNT + row).to(tl.int32)
    pos0 = tl.load(POS + row).to(tl.int32)  # the row's first position; its new ones are pos0 .. pos0 + count - 1
    slot = tl.load(SLOT + row).to(tl.int64)
    lo = tl.where(window > 0, tl.maximum(pos0 + 1 - window, 0), 0)  # the first query's window reaches furthest back
    chunk = tl.cdiv(tl.cdiv(pos0 - lo, splits), BLOCK_N) * BLOCK_N  # the cached positions [lo, pos0), whole tiles
    start = lo + split * chunk
    end = tl.minimum(start + chunk, pos0)
    half = HEAD_DIM // 2

    i = tl.arange(0, BLOCK_Q)  # tile row: query i // GROUP, head i % GROUP of the kv head
    query = i // GROUP
    valid = query < count
    qpos = pos0 + query
    qlo = tl.where(window > 0, tl.maximum(qpos + 1 - window, 0), 0)
    heads = kv_head * GROUP + i % GROUP
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    dv = tl.arange(0, BLOCK_D)
    dvmask = dv < HEAD_DIM
    qmask = valid[:, None] & dmask[None, :]
    c = tl.load(COS + qpos[:, None] * stride_cos + d[None, :], mask=qmask, other=0.0)  # cos halves are equal
    s = tl.load(SIN + qpos[:, None] * stride_cos + d[None, :], mask=qmask, other=0.0)
    q_src = QKV + (first + query).to(tl.int64)[:, None] * stride_t + heads[:, None] * HEAD_DIM
    q1, q2 = rotated_heads(q_src, QNORM, c, s, d[None, :], qmask, eps, HEAD_DIM, QK_NORM, NORM_OFFSET, dtype)

    kv_base = slot * stride_ks + kv_head * stride_kh
    scale_base = slot * stride_ss + kv_head * stride_sh
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
    unit = tl.full([BLOCK_Q], scale, tl.float32)  # the scores' factor: the softmax scale (fp8: x q's 2^e)
    if KV_FP8:
        q1, q2, unit = fp8_dot_query(q1, q2, scale, DOT_TY)
    v_unit = tl.full([BLOCK_Q], 1.0, tl.float32)  # fp8: acc's unit per tile row, the last tile's largest v_scale
    if KV_FP8 and not WINDOWED:  # every tile row sees every cached key: the one-query kernel's tiles
        m, denom, acc, v_unit = fp8_tiles(
            q1, q2, unit, m, denom, acc, v_unit, K_CACHE + kv_base, V_CACHE + kv_base, K_SCALE + scale_base,
            V_SCALE + scale_base, start, end, stride_kn, softcap, d, dmask, dv, dvmask, half,
            BLOCK_N, SOFTCAP, IEEE, DOT_TY,
        )  # fmt: skip
    else:
        for n0 in range(start, end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            nmask = n < end
            sees = nmask[None, :] & (n[None, :] >= qlo[:, None])  # cached keys: before every query
            k_at = kv_base + n[:, None] * stride_kn + d[None, :]
            kmask = nmask[:, None] & dmask[None, :]
            k1 = tl.load(K_CACHE + k_at, mask=kmask, other=0.0)
            k2 = tl.load(K_CACHE + k_at + half, mask=kmask, other=0.0)
            v = tl.load(V_CACHE + kv_base + n[:, None] * stride_kn + dv[None, :],
                        mask=nmask[:, None] & dvmask[None, :], other=0.0)
            v_scale = tl.zeros([BLOCK_N], tl.float32)
            if KV_FP8:
                k1, k2, v = k1.to(DOT_TY), k2.to(DOT_TY), v.to(DOT_TY)
                k_scale = tl.load(K_SCALE + scale_base + n, mask=nmask, other=0.0)
                sc = _half_dots(q1, q2, k1, k2, IEEE) * k_scale[None, :]
                v_scale = tl.load(V_SCALE + scale_base + n, mask=nmask, other=0.0)
            else:
                sc = _half_dots(q1, q2, k1, k2, IEEE)
            sc = capped_scores(sc, unit[:, None], softcap, SOFTCAP)
            m, denom, acc, v_unit = _tile_update(sc, sees, m, denom, acc, v, v_scale, v_unit, KV_FP8, IEEE, DOT_TY)

    if split == splits - 1:  # the row's new positions: roped and written here, folded in from registers
        cn = tl.arange(0, BLOCK_C)
        cmask = cn < count
        npos = pos0 + cn
        nkmask = cmask[:, None] & dmask[None, :]
        kc = tl.load(COS + npos[:, None] * stride_cos + d[None, :], mask=nkmask, other=0.0)
        ks = tl.load(SIN + npos[:, None] * stride_cos + d[None, :], mask=nkmask, other=0.0)
        row_src = QKV + (first + cn).to(tl.int64)[:, None] * stride_t
        k1, k2 = rotated_heads(row_src + (NUM_HEADS + kv_head) * HEAD_DIM, KNORM, kc, ks, d[None, :], nkmask, eps,
                               HEAD_DIM, QK_NORM, NORM_OFFSET, dtype)  # fmt: skip
        nvmask = cmask[:, None] & dvmask[None, :]
        v = tl.load(row_src + (NUM_HEADS + NUM_KV_HEADS + kv_head) * HEAD_DIM + dv[None, :], mask=nvmask, other=0.0)
        cache_at = kv_base + npos[:, None] * stride_kn
        sees = cmask[None, :] & (cn[None, :] <= query[:, None]) & (npos[None, :] >= qlo[:, None])
        v_scale = tl.zeros([BLOCK_C], tl.float32)
        if KV_FP8:  # quantized where written; folded in as the cache now holds them
            cache_ty = K_CACHE.dtype.element_ty
            k_scale = e4m3_scales(k1.to(tl.float32), k2.to(tl.float32))  # [BLOCK_C]
            v_f = tl.where(nvmask, v.to(tl.float32), 0.0)
            v_scale = e4m3_scales(v_f, tl.zeros([BLOCK_C, BLOCK_D], tl.float32))
            k1q = to_e4m3(k1.to(tl.float32), k_scale[:, None])
            k2q = to_e4m3(k2.to(tl.float32), k_scale[:, None])
            vq = to_e4m3(v_f, v_scale[:, None])
            tl.store(K_CACHE + cache_at + d[None, :], k1q.to(cache_ty), mask=nkmask)
            tl.store(K_CACHE + cache_at + half + d[None, :], k2q.to(cache_ty), mask=nkmask)
            tl.store(V_CACHE + cache_at + dv[None, :], vq.to(cache_ty), mask=nvmask)
            tl.store(K_SCALE + scale_base + npos, k_scale, mask=cmask)
            tl.store(V_SCALE + scale_base + npos, v_scale, mask=cmask)
            sc = _half_dots(q1, q2, k1q.to(DOT_TY), k2q.to(DOT_TY), IEEE) * k_scale[None, :]
            v = vq.to(DOT_TY)
        else:
            tl.store(K_CACHE + cache_at + d[None, :], k1, mask=nkmask)
            tl.store(K_CACHE + cache_at + half + d[None, :], k2, mask=nkmask)
            tl.store(V_CACHE + cache_at + dv[None, :], v, mask=nvmask)
            sc = _half_dots(q1, q2, k1, k2, IEEE)
        sc = capped_scores(sc, unit[:, None], softcap, SOFTCAP)
        m, denom, acc, v_unit = _tile_update(sc, sees, m, denom, acc, v, v_scale, v_unit, KV_FP8, IEEE, DOT_TY)
    if KV_FP8:
        acc = acc * v_unit[:, None]

    if (row == rows - 1) & (split == 0):  # the positions after the last row's are padding: zeros (its heads)
        hd = tl.arange(0, BLOCK_GROUP)
        pad_at = (kv_head * GROUP + hd)[:, None] * stride_oh + dv[None, :]
        pad_mask = (hd < GROUP)[:, None] & dvmask[None, :]
        for p in range(first + count, total):
            tl.store(OUT + p * stride_ot + pad_at,
                     tl.zeros([BLOCK_GROUP, BLOCK_D], tl.float32).to(OUT.dtype.element_ty), mask=pad_mask)
    out_ptr = OUT + (first + query).to(tl.int64)[:, None] * stride_ot + heads[:, None] * stride_oh + dv[None, :]
    part_ptr = O_PART + row * stride_pb + kv_head * stride_pk + i[:, None] * stride_pi + dv[None, :]
    lse_ptr = LSE_PART + row * stride_lb + kv_head * stride_lk + i * stride_li
    finish_shares(acc, m, denom, out_ptr, part_ptr, lse_ptr, valid, valid[:, None] & dvmask[None, :], split, splits,
                  stride_ps, COUNTER + row * NUM_KV_HEADS + kv_head, BLOCK_Q, BLOCK_D)


# head_dim <= 128 with an fp8 cache: the one-query kernel's tiles at 2 warps, not 1: with the new keys' rope and
# quantization beside the query tile, one warp runs out of registers and spills (docs/decisions.md)
FP8_ROWS_CONFIG = AttentionConfig(block_n=32, num_warps=2, num_stages=3, programs_per_sm=4)


def rows_config(head_dim: int, fp8: bool) -> AttentionConfig:
    return FP8_ROWS_CONFIG if fp8 and head_dim <= 128 else default_config(head_dim, fp8)


def decode_packed_attention(
    qkv: torch.Tensor,  # [T, (heads + 2 * kv_heads) * head_dim]: the packed positions' qkv projection
    positions: torch.Tensor,  # [T] int64 (the rows' positions are read from `rows`; padding has none)
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer): the rows' new positions written
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [T] int64 (likewise: the rows' slots come from `rows`)
    num_heads: int,
    scale: float,
    counters: torch.Tensor,  # [>= b * kv_heads] int32, zero between launches (KVCache.merge_counters)
    rows: PackedRows,  # b rows: first packed index, count, first position, slot
    *,
    window: int = 0,
    softcap: float | None = None,
    qk_norm_offset: bool = False,
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 when the cache is fp8
    v_scale: torch.Tensor | None = None,
    config: AttentionConfig | None = None,  # None: rows_config(head_dim, fp8)
    splits: int | None = None,  # None: from config.programs_per_sm (choose_splits)
) -> torch.Tensor:  # [T, heads, head_dim] in qkv's dtype; padding positions: 0
    """Ops.decode_packed_attention: rope, the K/V write of every row's new positions and the attention, one
    launch per layer (padding positions write nothing)."""
    total = qkv.shape[0]
    b = rows.first.shape[0]
    kv_heads, max_len, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    fp8 = k_scale is not None
    assert qkv.stride(-1) == 1 and k_cache.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    assert counters.numel() >= b * kv_heads and counters.dtype == torch.int32
    group = num_heads // kv_heads
    config = config or rows_config(head_dim, fp8)
    if splits is None:
        target = config.programs_per_sm * device_props.sm_count(qkv.device, cpu_value=8)
        span = min(max_len, window) if window else max_len
        splits = choose_splits(b, kv_heads, span, target, config.block_n)
    block_q = max(16, triton.next_power_of_2(rows.most * group))
    out = torch.empty((total, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)  # padding: the kernel's 0
    if splits == 1:
        o_part, lse_part = out.view(1, 1, 1, 1, -1), out.view(1, 1, 1, -1)  # unused
    else:
        o_part = torch.empty((b, kv_heads, block_q, splits, head_dim), dtype=torch.float32, device=qkv.device)
        lse_part = torch.empty((b, kv_heads, block_q, splits), dtype=torch.float32, device=qkv.device)
    qk_norm = q_norm is not None
    _rows_attention_kernel[(b, kv_heads, splits)](
        qkv, rows.first, rows.count, rows.position, rows.slot, cos, sin, q_norm if qk_norm else cos,
        k_norm if qk_norm else cos, k_cache, v_cache, out, o_part, lse_part, counters,
        qkv.stride(0), cos.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        lse_part.stride(0), lse_part.stride(1), lse_part.stride(2),
        scale, eps, splits, window, 1.0 if softcap is None else softcap, b, total,
        NUM_HEADS=num_heads, NUM_KV_HEADS=kv_heads, GROUP=group, BLOCK_GROUP=triton.next_power_of_2(group),
        BLOCK_Q=block_q, BLOCK_C=max(16, triton.next_power_of_2(rows.most)), HEAD_DIM=head_dim,
        HALF_BLOCK=max(16, triton.next_power_of_2(head_dim // 2)), BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_N=config.block_n, QK_NORM=qk_norm, IEEE=qkv.dtype == torch.float32, SOFTCAP=softcap is not None,
        NORM_OFFSET=qk_norm_offset, K_SCALE=k_scale if fp8 else cos, V_SCALE=v_scale if fp8 else cos,
        stride_ss=k_scale.stride(0) if fp8 else 0, stride_sh=k_scale.stride(1) if fp8 else 0, KV_FP8=fp8,
        DOT_TY=tl.float32 if qkv.dtype == torch.float32 else tl.float16, WINDOWED=window > 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out
