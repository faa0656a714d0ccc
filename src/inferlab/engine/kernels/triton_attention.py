"""Triton flash-decoding fused with the decode step's rope: from the qkv projection to the attention output
in one launch per layer, each row's cost following its real length.

Grid (rows, kv_heads, splits). Each program:
  1. reads the query heads of its kv head from qkv, applies the optional per-head RMSNorm (Qwen3, Gemma 3)
     and rope in registers, rounded as kernels/triton_rope.py rounds them;
  2. runs an online softmax over its share of the row's cached positions [lo, pos) (lo = 0, or
     max(0, pos + 1 - window) for a sliding window), in whole BLOCK_N tiles, for all query heads of the kv
     head at once (GQA: the group shares each K/V load); Gemma 2's soft-cap is the SOFTCAP flag;
  3. the program whose share holds the new position rotates the new key, writes key and value into the
     cache at (slot, pos) and folds them in from registers;
  4. with one split it writes the output; otherwise a partial output and its log-sum-exp, and the row's last
     split to finish (an atomic counter per (row, kv head), reset for the next launch) merges them in a
     fixed order: deterministic, no second launch.
With an FP8 cache (KV_FP8, kv_quant.py) the e4m3 tiles are converted to fp16 (exact, one packed conversion
per two values) and never dequantized: q is scaled by a power of two per head, K's scales multiply the
tile's scores, V's the probabilities relative to the tile's largest scale (p stays in [0, 1]). The new
position is quantized where it is written (triton_fp8.py) and folded in as later steps will read it.
The grid depends only on the batch bucket, so the launch is CUDA-graph capturable. The reference is
engine/attention.py's decode_rope_attention_torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels import device_props
from inferlab.engine.kernels.triton_fp8 import e4m3_scale, to_e4m3
from inferlab.engine.kernels.triton_math import tanh

LOG2E = tl.constexpr(1.4426950408889634)


@dataclass(frozen=True)
class AttentionConfig:
    """Tile and launch settings of the decode attention kernel (the defaults: bf16 cache, head_dim <= 128;
    docs/decisions.md says how they were chosen)."""

    block_n: int = 64  # cached positions per tile
    num_warps: int = 4
    num_stages: int = 3
    programs_per_sm: int = 1  # splits are added until rows x kv_heads x splits reaches this many per SM
    maxnreg: int | None = None  # registers per thread ptxas may use (fewer: more programs resident per SM)


@triton.jit
def rotated_heads(
    SRC, NORM, c, s, d, dmask, eps, HEAD_DIM: tl.constexpr, QK_NORM: tl.constexpr, NORM_OFFSET: tl.constexpr, DTYPE
):
    """One head's [.., half] halves from qkv (SRC points at the head; d broadcasts over leading dims), with
    the optional RMSNorm (Qwen3; Gemma 3's (1 + w) form with NORM_OFFSET), rotated; rounded to DTYPE as the
    rope kernel rounds them."""
    half = HEAD_DIM // 2
    x1 = tl.load(SRC + d, mask=dmask, other=0.0).to(tl.float32)
    x2 = tl.load(SRC + half + d, mask=dmask, other=0.0).to(tl.float32)
    if QK_NORM:
        w1 = tl.load(NORM + d, mask=dmask, other=0.0).to(tl.float32)
        w2 = tl.load(NORM + half + d, mask=dmask, other=0.0).to(tl.float32)
        r = tl.rsqrt((tl.sum(x1 * x1, axis=-1) + tl.sum(x2 * x2, axis=-1)) / HEAD_DIM + eps)
        r = tl.expand_dims(r, -1)
        if NORM_OFFSET:
            x1 = (x1 * r * (1.0 + w1)).to(DTYPE).to(tl.float32)
            x2 = (x2 * r * (1.0 + w2)).to(DTYPE).to(tl.float32)
        else:
            x1 = ((x1 * r).to(DTYPE).to(tl.float32) * w1).to(DTYPE).to(tl.float32)
            x2 = ((x2 * r).to(DTYPE).to(tl.float32) * w2).to(DTYPE).to(tl.float32)
    return (x1 * c - x2 * s).to(DTYPE), (x2 * c + x1 * s).to(DTYPE)


@triton.jit
def capped_scores(sc, scale, softcap, SOFTCAP: tl.constexpr):
    """q . k -> the score the softmax sees: times scale, then Gemma 2's cap * tanh(score / cap)."""
    sc = sc * scale
    if SOFTCAP:
        sc = softcap * tanh(sc / softcap)
    return sc


@triton.jit
def fp8_dot_query(q1, q2, scale, DOT_TY: tl.constexpr):
    """The query halves [BLOCK_H, HALF_BLOCK] for dots with e4m3 tiles converted to DOT_TY: each head times
    2^-e, e its largest |element|'s exponent (so that element lands in [1, 2)), then cast: exact from bf16 in
    fp16's normal range, and never past fp16's 65504. Returns them and scale x 2^e [BLOCK_H], the factor of
    the scores (the softmax scale included)."""
    top = tl.maximum(tl.max(tl.abs(q1.to(tl.float32)), axis=1), tl.max(tl.abs(q2.to(tl.float32)), axis=1))
    exponent = tl.minimum(tl.maximum((top.to(tl.int32, bitcast=True) >> 23) & 0xFF, 1), 253)  # biased fp32
    power = (exponent << 23).to(tl.float32, bitcast=True)  # 2^e
    inverse = ((254 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^-e, exact
    q1 = (q1.to(tl.float32) * inverse[:, None]).to(DOT_TY)
    q2 = (q2.to(tl.float32) * inverse[:, None]).to(DOT_TY)
    return q1, q2, scale * power


@triton.jit
def _max_pair(a0, b0, a1, b1):
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def _fp8_tile(
    q1, q2, q_scale, m, denom, acc, v_unit, K, V, K_SCALE, V_SCALE, n0, cached_end, stride_kn, softcap,
    d, dmask, dv, dvmask, half, BLOCK_N: tl.constexpr, SOFTCAP: tl.constexpr, IEEE: tl.constexpr, DOT_TY: tl.constexpr,
):  # fmt: skip
    """One tile of positions [n0, n0 + BLOCK_N) of an fp8 cache folded into the online softmax. The e4m3 tiles
    are converted to DOT_TY (exact) and never scaled: the scores are (q . k8) x k_scale[n] x q_scale[h], and
    V's scales go into the probabilities, relative to the tile's largest (top): (p x v_scale[n] / top) @ v8
    keeps the dot's operands in [0, 1] and on the e4m3 grid. acc is kept in units of v_unit (the previous
    tile's top): rescaled by alpha x v_unit / top, it takes the dot's result as its accumulator."""
    n = n0 + tl.arange(0, BLOCK_N)
    nmask = n < cached_end
    k_ptr = K + n[:, None] * stride_kn + d[None, :]
    kmask = nmask[:, None] & dmask[None, :]
    k1 = tl.load(k_ptr, mask=kmask, other=0.0).to(DOT_TY)  # [BLOCK_N, HALF_BLOCK]
    k2 = tl.load(k_ptr + half, mask=kmask, other=0.0).to(DOT_TY)
    if IEEE:
        sc = tl.dot(q1, tl.trans(k1), input_precision="ieee") + tl.dot(q2, tl.trans(k2), input_precision="ieee")
    else:
        sc = tl.dot(q1, tl.trans(k1)) + tl.dot(q2, tl.trans(k2))
    sc = sc * tl.load(K_SCALE + n, mask=nmask, other=0.0)[None, :]  # x q_scale: the softmax's scores
    unit = q_scale  # [BLOCK_H] > 0: sc x unit are the scores in natural units
    if SOFTCAP:
        sc = softcap * tanh(sc * q_scale[:, None] / softcap)
        unit = tl.full(q_scale.shape, 1.0, tl.float32)
    sc = tl.where(nmask[None, :], sc, float("-inf"))  # [BLOCK_H, BLOCK_N]
    v_scale = tl.load(V_SCALE + n, mask=nmask, other=0.0)
    tile_max, top = tl.reduce((sc, tl.broadcast_to(v_scale[None, :], sc.shape)), 1, _max_pair)  # one pass: [BLOCK_H]
    top = tl.where(top > 0, top, 1.0)
    m_new = tl.maximum(m, tile_max * unit)
    alpha = tl.math.exp2((m - m_new) * LOG2E)
    p = tl.math.exp2(sc * (unit * LOG2E)[:, None] - (m_new * LOG2E)[:, None])  # one FMA and exp2 per score
    denom = denom * alpha + tl.sum(p, axis=1)
    pv = (p * v_scale[None, :] * (1.0 / top)[:, None]).to(DOT_TY)
    v = tl.load(V + n[:, None] * stride_kn + dv[None, :], mask=nmask[:, None] & dvmask[None, :], other=0.0).to(DOT_TY)
    acc = acc * (alpha * (v_unit / top))[:, None]
    if IEEE:
        acc = tl.dot(pv, v, acc, input_precision="ieee")
    else:
        acc = tl.dot(pv, v, acc)
    return m_new, denom, acc, top


@triton.jit
def fp8_tiles(
    q1, q2, q_scale, m, denom, acc, v_unit, K, V, K_SCALE, V_SCALE, start, cached_end, stride_kn, softcap,
    d, dmask, dv, dvmask, half, BLOCK_N: tl.constexpr, SOFTCAP: tl.constexpr, IEEE: tl.constexpr, DOT_TY: tl.constexpr,
):  # fmt: skip
    """The positions [start, cached_end) of an fp8 cache, tile by tile (_fp8_tile), where every query row sees
    every position: the one-query kernel's, and the packed-rows kernel's without a window."""
    for n0 in range(start, cached_end, BLOCK_N):
        m, denom, acc, v_unit = _fp8_tile(
            q1, q2, q_scale, m, denom, acc, v_unit, K, V, K_SCALE, V_SCALE, n0, cached_end, stride_kn, softcap,
            d, dmask, dv, dvmask, half, BLOCK_N, SOFTCAP, IEEE, DOT_TY,
        )  # fmt: skip
    return m, denom, acc, v_unit


@triton.jit
def finish_shares(
    acc, m, denom, out_ptr, part_ptr, lse_ptr, rows_mask, omask, split, splits, stride_ps, counter,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """A share's online softmax [BLOCK_R rows] to the output: stored when it is the only share, else its partial
    output and log-sum-exp (part_ptr, lse_ptr: split 0's), and the share that finishes last (the counter, one per
    program group) merges every share's in a fixed order, deterministic, then resets the counter. A share that
    saw no position contributes nothing."""
    empty = denom == 0.0
    out = tl.where(empty[:, None], 0.0, acc * (1.0 / tl.where(empty, 1.0, denom))[:, None])  # one divide per row
    out_ty = out_ptr.dtype.element_ty
    if splits == 1:
        tl.store(out_ptr, out.to(out_ty), mask=omask)
    else:
        lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, denom)))
        tl.store(part_ptr + split * stride_ps, out, mask=omask)
        tl.store(lse_ptr + split, lse, mask=rows_mask)
        tl.debug_barrier()  # every thread's partial is written before the counter is released
        if tl.atomic_add(counter, 1, sem="acq_rel") == splits - 1:  # the last share merges them all
            top = tl.full([BLOCK_R], float("-inf"), tl.float32)
            for sp in range(splits):
                top = tl.maximum(top, tl.load(lse_ptr + sp, mask=rows_mask, other=float("-inf"), cache_modifier=".cg"))
            top = tl.where(rows_mask, top, 0.0)
            total = tl.zeros([BLOCK_R], tl.float32)
            merged = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
            for sp in range(splits):  # fixed order: the same sum whichever share came last
                weight = tl.exp(tl.load(lse_ptr + sp, mask=rows_mask, other=float("-inf"), cache_modifier=".cg") - top)
                part = tl.load(part_ptr + sp * stride_ps, mask=omask, other=0.0, cache_modifier=".cg")
                merged += weight[:, None] * part
                total += weight
            merged = merged * (1.0 / tl.where(rows_mask, total, 1.0))[:, None]
            tl.store(out_ptr, merged.to(out_ty), mask=omask)
            tl.atomic_xchg(counter, 0)  # ready for the next layer's launch and the next replay


@triton.jit
def _rope_attention_kernel(
    QKV, POS, SLOT, COS, SIN, QNORM, KNORM, K_CACHE, V_CACHE, OUT, O_PART, LSE_PART, COUNTER,
    stride_t, stride_cos, stride_ks, stride_kh, stride_kn, stride_ob, stride_oh,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
    scale, eps, splits,  # splits is a runtime value: one compiled kernel serves every bucket
    window, softcap,  # window: positions a query sees, itself included (0: all; runtime, per layer)
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    QK_NORM: tl.constexpr, IEEE: tl.constexpr, SOFTCAP: tl.constexpr, NORM_OFFSET: tl.constexpr,
    K_SCALE, V_SCALE, stride_ss, stride_sh,  # KV_FP8: [slots, kv_heads, max_len] fp32 scales (else unused)
    KV_FP8: tl.constexpr, DOT_TY: tl.constexpr,  # KV_FP8: the dots' operand type (fp16; fp32 with IEEE)
):  # fmt: skip
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    dtype = QKV.dtype.element_ty
    pos = tl.load(POS + row).to(tl.int32)  # the new token's position; the row attends to [lo, pos]
    slot = tl.load(SLOT + row).to(tl.int64)  # int64: slot x its stride may pass 2^31; offsets in a slot may not
    lo = tl.where(window > 0, tl.maximum(pos + 1 - window, 0), 0)  # a sliding window's first position
    chunk = tl.cdiv(tl.cdiv(pos + 1 - lo, splits), BLOCK_N) * BLOCK_N  # whole tiles: no ragged tile mid-row
    start = lo + split * chunk
    end = tl.minimum(start + chunk, pos + 1)
    half = HEAD_DIM // 2

    h = tl.arange(0, BLOCK_H)
    hmask = h < GROUP
    heads = kv_head * GROUP + h
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    dv = tl.arange(0, BLOCK_D)
    dvmask = dv < HEAD_DIM
    c = tl.load(COS + pos * stride_cos + d, mask=dmask, other=0.0)  # cos halves are equal: read one
    s = tl.load(SIN + pos * stride_cos + d, mask=dmask, other=0.0)
    qmask = hmask[:, None] & dmask[None, :]
    q_src = QKV + row * stride_t + heads[:, None] * HEAD_DIM
    q1, q2 = rotated_heads(
        q_src, QNORM, c[None, :], s[None, :], d[None, :], qmask, eps, HEAD_DIM, QK_NORM, NORM_OFFSET, dtype
    )

    kv_base = slot * stride_ks + kv_head * stride_kh
    scale_base = slot * stride_ss + kv_head * stride_sh  # KV_FP8: this (slot, kv head)'s scales, position stride 1
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    cached_end = tl.minimum(end, pos)  # the cache holds [0, pos); pos itself comes from qkv below
    if KV_FP8:
        # q in the dots' type times 2^-e per head (exact); each score gets 2^e x scale back with its k_scale
        q1, q2, q_scale = fp8_dot_query(q1, q2, scale, DOT_TY)
        v_unit = tl.full([BLOCK_H], 1.0, tl.float32)  # acc's unit: the last tile's largest v_scale (_fp8_tile)
        m, denom, acc, v_unit = fp8_tiles(
            q1, q2, q_scale, m, denom, acc, v_unit, K_CACHE + kv_base, V_CACHE + kv_base, K_SCALE + scale_base,
            V_SCALE + scale_base, start, cached_end, stride_kn, softcap, d, dmask, dv, dvmask, half,
            BLOCK_N, SOFTCAP, IEEE, DOT_TY,
        )  # fmt: skip
        acc = acc * v_unit[:, None]
    else:
        for n0 in range(start, cached_end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            nmask = n < cached_end
            k_ptr = K_CACHE + kv_base + n[:, None] * stride_kn + d[None, :]
            kmask = nmask[:, None] & dmask[None, :]
            k1 = tl.load(k_ptr, mask=kmask, other=0.0)  # [BLOCK_N, HALF_BLOCK]
            k2 = tl.load(k_ptr + half, mask=kmask, other=0.0)
            if IEEE:
                sc = tl.dot(q1, tl.trans(k1), input_precision="ieee") + tl.dot(q2, tl.trans(k2), input_precision="ieee")
            else:
                sc = tl.dot(q1, tl.trans(k1)) + tl.dot(q2, tl.trans(k2))
            sc = tl.where(nmask[None, :], capped_scores(sc, scale, softcap, SOFTCAP), float("-inf"))  # [BLOCK_H, BLOCK_N]
            m_new = tl.maximum(m, tl.max(sc, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(sc - m_new[:, None])
            denom = denom * alpha + tl.sum(p, axis=1)
            v = tl.load(V_CACHE + kv_base + n[:, None] * stride_kn + dv[None, :], mask=nmask[:, None] & dvmask[None, :])
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
    if (pos >= start) & (pos < end):  # this share holds the new token: cache it and fold it in
        k_src = QKV + row * stride_t + (NUM_HEADS + kv_head) * HEAD_DIM
        k1, k2 = rotated_heads(k_src, KNORM, c, s, d, dmask, eps, HEAD_DIM, QK_NORM, NORM_OFFSET, dtype)
        v_new = tl.load(QKV + row * stride_t + (NUM_HEADS + NUM_KV_HEADS + kv_head) * HEAD_DIM + dv, mask=dvmask)
        cache_at = kv_base + pos * stride_kn
        if KV_FP8:  # quantize where written; fold in the rounded values the cache now holds
            cache_ty = K_CACHE.dtype.element_ty
            k_scale = e4m3_scale(k1.to(tl.float32), k2.to(tl.float32))
            v_f = tl.where(dvmask, v_new.to(tl.float32), 0.0)  # lanes past head_dim must not enter the scale
            v_scale = e4m3_scale(v_f, tl.zeros([BLOCK_D], tl.float32))
            k1q = to_e4m3(k1.to(tl.float32), k_scale)  # fp32 on the e4m3 grid
            k2q = to_e4m3(k2.to(tl.float32), k_scale)
            vq = to_e4m3(v_f, v_scale)
            tl.store(K_CACHE + cache_at + d, k1q.to(cache_ty), mask=dmask)
            tl.store(K_CACHE + cache_at + half + d, k2q.to(cache_ty), mask=dmask)
            tl.store(V_CACHE + cache_at + dv, vq.to(cache_ty), mask=dvmask)
            tl.store(K_SCALE + scale_base + pos, k_scale)
            tl.store(V_SCALE + scale_base + pos, v_scale)
            sc_new = tl.sum(q1.to(tl.float32) * k1q[None, :], axis=1)
            sc_new = (sc_new + tl.sum(q2.to(tl.float32) * k2q[None, :], axis=1)) * k_scale
            sc_new = capped_scores(sc_new, q_scale, softcap, SOFTCAP)  # [BLOCK_H]
            m_new = tl.maximum(m, sc_new)
            alpha = tl.exp(m - m_new)
            p_new = tl.exp(sc_new - m_new)
            denom = denom * alpha + p_new
            pv_new = p_new.to(DOT_TY).to(tl.float32) * v_scale  # as a tile rounds p x v_scale / top (top = v_scale)
            acc = acc * alpha[:, None] + pv_new[:, None] * vq[None, :]
        else:
            tl.store(K_CACHE + cache_at + d, k1, mask=dmask)
            tl.store(K_CACHE + cache_at + half + d, k2, mask=dmask)
            tl.store(V_CACHE + cache_at + dv, v_new, mask=dvmask)
            sc_new = tl.sum(q1.to(tl.float32) * k1.to(tl.float32)[None, :], axis=1)
            sc_new = sc_new + tl.sum(q2.to(tl.float32) * k2.to(tl.float32)[None, :], axis=1)
            sc_new = capped_scores(sc_new, scale, softcap, SOFTCAP)  # [BLOCK_H]
            m_new = tl.maximum(m, sc_new)
            alpha = tl.exp(m - m_new)
            p_new = tl.exp(sc_new - m_new)
            denom = denom * alpha + p_new
            p_rounded = p_new.to(dtype).to(tl.float32)  # as the tile path rounds p for its dot
            acc = acc * alpha[:, None] + p_rounded[:, None] * v_new.to(tl.float32)[None, :]
        m = m_new
    out_ptr = OUT + row * stride_ob + heads[:, None] * stride_oh + dv[None, :]
    part_ptr = O_PART + row * stride_pb + heads[:, None] * stride_ph + dv[None, :]
    lse_ptr = LSE_PART + row * stride_lb + heads * stride_lh
    finish_shares(acc, m, denom, out_ptr, part_ptr, lse_ptr, hmask, hmask[:, None] & dvmask[None, :], split, splits,
                  stride_ps, COUNTER + row * NUM_KV_HEADS + kv_head, BLOCK_H, BLOCK_D)


def _sm_count(device: torch.device) -> int:
    return device_props.sm_count(device, cpu_value=8)


# head_dim 256 (Gemma): 32-position tiles keep q and the K/V tiles within shared memory at 4 warps.
WIDE_HEAD_CONFIG = AttentionConfig(block_n=32, num_warps=4, num_stages=3)
FP8_WIDE_HEAD_CONFIG = WIDE_HEAD_CONFIG

# head_dim <= 128 with an fp8 cache: one warp per program (a softmax reduction across warps goes through
# shared memory), 32-position tiles, 3 stages; programs_per_sm 4 keeps small batches at the bf16 default's
# 4 warps per SM.
FP8_ATTENTION_CONFIG = AttentionConfig(block_n=32, num_warps=1, num_stages=3, programs_per_sm=4)


def default_config(head_dim: int, fp8: bool = False) -> AttentionConfig:
    if head_dim <= 128:
        return FP8_ATTENTION_CONFIG if fp8 else AttentionConfig()
    return FP8_WIDE_HEAD_CONFIG if fp8 else WIDE_HEAD_CONFIG


def choose_splits(rows: int, kv_heads: int, max_len: int, target_programs: int, block_n: int) -> int:
    """Enough splits that rows x kv_heads x splits reaches the target, never more than the cache has tiles."""
    want = triton.cdiv(target_programs, max(1, rows * kv_heads))
    return int(max(1, min(want, triton.cdiv(max_len, block_n), 64)))


def decode_rope_attention(
    qkv: torch.Tensor,  # [rows, (heads + 2 * kv_heads) * head_dim]: the qkv projection of the new tokens
    positions: torch.Tensor,  # [rows] int64: each new token's position (its K/V is written there)
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer), written at (slot, position)
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [rows] int64
    num_heads: int,
    scale: float,
    counters: torch.Tensor,  # [>= rows * kv_heads] int32, zero between launches (KVCache.merge_counters)
    max_len_hint: int | None = None,  # unused: the kernel reads the positions on the device
    config: AttentionConfig | None = None,  # None: default_config(head_dim, fp8)
    splits: int | None = None,  # None: from config.programs_per_sm (choose_splits)
    *,
    window: int = 0,  # this layer's sliding window: a row scans [max(0, pos + 1 - window), pos] (0: [0, pos])
    softcap: float | None = None,  # Gemma 2: scores -> softcap * tanh(scores / softcap)
    qk_norm_offset: bool = False,  # Gemma 3: q/k norms scale by (1 + w)
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32: the cache is fp8 (engine/kv_quant.py)
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim] in qkv's dtype
    rows = qkv.shape[0]
    kv_heads, max_len, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    assert qkv.stride(-1) == 1 and k_cache.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    fp8 = k_scale is not None
    if fp8:
        assert k_cache.dtype == torch.float8_e4m3fn and k_scale.stride() == v_scale.stride() and k_scale.stride(-1) == 1
    assert counters.numel() >= rows * kv_heads and counters.dtype == torch.int32
    assert window >= 0 and (softcap is None or softcap > 0)
    group = num_heads // kv_heads
    config = config or default_config(head_dim, fp8)
    if splits is None:
        target = config.programs_per_sm * _sm_count(qkv.device)
        span = min(max_len, window) if window else max_len  # the most positions one row scans
        splits = choose_splits(rows, kv_heads, span, target, config.block_n)
    out = torch.empty((rows, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    if splits == 1:
        o_part, lse_part = out.view(rows, num_heads, 1, head_dim), out  # unused
    else:
        o_part = torch.empty((rows, num_heads, splits, head_dim), dtype=torch.float32, device=qkv.device)
        lse_part = torch.empty((rows, num_heads, splits), dtype=torch.float32, device=qkv.device)
    qk_norm = q_norm is not None
    _rope_attention_kernel[(rows, kv_heads, splits)](
        qkv, positions, slots, cos, sin, q_norm if qk_norm else cos, k_norm if qk_norm else cos,
        k_cache, v_cache, out, o_part, lse_part, counters,
        qkv.stride(0), cos.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse_part.stride(0), lse_part.stride(1),
        scale, eps, splits, window, 1.0 if softcap is None else softcap,
        NUM_HEADS=num_heads, NUM_KV_HEADS=kv_heads, GROUP=group, BLOCK_H=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, HALF_BLOCK=max(16, triton.next_power_of_2(head_dim // 2)),
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_N=config.block_n,
        QK_NORM=qk_norm, IEEE=qkv.dtype == torch.float32, SOFTCAP=softcap is not None, NORM_OFFSET=qk_norm_offset,
        K_SCALE=k_scale if fp8 else cos, V_SCALE=v_scale if fp8 else cos,
        stride_ss=k_scale.stride(0) if fp8 else 0, stride_sh=k_scale.stride(1) if fp8 else 0, KV_FP8=fp8,
        DOT_TY=tl.float32 if qkv.dtype == torch.float32 else tl.float16,
        num_warps=config.num_warps, num_stages=config.num_stages,
        **({"maxnreg": config.maxnreg} if config.maxnreg else {}),
    )  # fmt: skip
    return out
