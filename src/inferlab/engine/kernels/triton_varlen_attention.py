"""Triton kernel: causal attention over packed rows (no padding), optionally windowed and soft-capped.

q, k, v are [T, heads, head_dim] views with any token and head strides (the packed forward passes views of
the qkv projection, so nothing is copied); row i holds tokens [cu[i], cu[i + 1]) and attends only to itself.
One program per (query block, head, row), flash-attention style: a query block walks the key blocks up to
its diagonal with an online softmax in fp32 (scores in log2 units, exp2), p rounded to the value dtype for
the p @ v product. The blocks of a row whose queries see every key of a key block (below the diagonal and
inside the window) skip the masks; the diagonal blocks apply them. Query blocks are numbered from the last,
so the heaviest blocks of the longest rows start first and short rows' tails fill in.
GQA: query head h reads kv head h // (heads / kv_heads). Gemma 2's soft-cap: scores -> cap * tanh(scores /
cap) after the scale; a window W lets position p see keys p - W + 1 .. p. The reference is
engine/packed/attention.py `varlen_attention_torch`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_math import tanh


@triton.jit
def _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, n, start_n, stride_kt, stride_vt, dmask,
                  scale_log2, scale, softcap, window,
                  MASKED: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, IEEE: tl.constexpr):
    cols = start_n + offs_n
    kv_mask = cols < n  # keys past the row exist only in diagonal (masked) blocks
    if MASKED:
        k = tl.load(k_ptrs + start_n * stride_kt, mask=kv_mask[None, :] & dmask[:, None], other=0.0)  # [D, BN]
    else:
        k = tl.load(k_ptrs + start_n * stride_kt, mask=dmask[:, None], other=0.0)
    if IEEE:
        s = tl.dot(q, k, input_precision="ieee")  # fp32 inputs (tests): no TF32
    else:
        s = tl.dot(q, k)  # [BM, BN] fp32
    if SOFTCAP:
        s = softcap * tanh(s * (scale / softcap)) * 1.4426950408889634
    else:
        s = s * scale_log2
    if MASKED:
        visible = (cols[None, :] <= offs_m[:, None]) & kv_mask[None, :]
        if WINDOW:
            visible &= cols[None, :] > offs_m[:, None] - window
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a query that sees nothing yet keeps zeros
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if MASKED:
        v = tl.load(v_ptrs + start_n * stride_vt, mask=kv_mask[:, None] & dmask[None, :], other=0.0)  # [BN, D]
    else:
        v = tl.load(v_ptrs + start_n * stride_vt, mask=dmask[None, :], other=0.0)
    if IEEE:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


@triton.jit
def _varlen_attention_kernel(
    Q, K, V, O, CU,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    scale, softcap, window,
    GROUP: tl.constexpr,  # query heads per kv head
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SOFTCAP: tl.constexpr,
    WINDOW: tl.constexpr,
    IEEE: tl.constexpr,
):  # fmt: skip
    m_block = tl.num_programs(0) - 1 - tl.program_id(0)  # heaviest (last) query blocks first
    head = tl.program_id(1)
    row = tl.program_id(2)
    start = tl.load(CU + row)  # int32, as every loop bound below (pointer offsets are widened to int64)
    n = tl.load(CU + row + 1) - start
    if m_block * BLOCK_M >= n:
        return
    start = start.to(tl.int64)
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)  # positions within the row
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HEAD_DIM
    kv_head = head // GROUP
    q = tl.load(Q + (start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=(offs_m < n)[:, None] & dmask[None, :], other=0.0)  # [BM, D]
    k_ptrs = K + (start + offs_n)[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None]  # [D, BN]
    v_ptrs = V + (start + offs_n)[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :]  # [BN, D]
    scale_log2 = scale * 1.4426950408889634
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    first_query = m_block * BLOCK_M
    lo = 0
    full_end = first_query  # keys below the block's first query: seen by every query of the block (no window)
    if WINDOW:
        lo = tl.maximum(first_query - window + 1, 0) // BLOCK_N * BLOCK_N
        # keys every query of the block sees: after the last query's window start, before the first query
        full_start = tl.cdiv(first_query + BLOCK_M - window, BLOCK_N) * BLOCK_N
        full_start = tl.maximum(full_start, lo)
        for start_n in range(lo, tl.minimum(full_start, full_end), BLOCK_N):  # the window's edge: masked
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, n, start_n, stride_kt,
                                          stride_vt, dmask, scale_log2, scale, softcap, window, True, SOFTCAP, WINDOW,
                                          IEEE)
        lo = tl.maximum(full_start, lo)
    for start_n in range(lo, full_end, BLOCK_N):
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, n, start_n, stride_kt,
                                      stride_vt, dmask, scale_log2, scale, softcap, window, False, SOFTCAP, WINDOW,
                                      IEEE)
    hi = tl.minimum(first_query + BLOCK_M, n)
    for start_n in range(full_end, hi, BLOCK_N):  # the diagonal: causal (and window) masks
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, n, start_n, stride_kt,
                                      stride_vt, dmask, scale_log2, scale, softcap, window, True, SOFTCAP, WINDOW,
                                      IEEE)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(O + (start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=(offs_m < n)[:, None] & dmask[None, :])


def _config(head_dim: int, alternative: bool = False) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) by head size: shared memory holds q and a few k/v tiles.
    `alternative`: the other warp count for the same tiles (the encoder times both at start-up: register
    pressure and occupancy trade differently per GPU and Triton version)."""
    if head_dim <= 64:
        config = [128, 64, 4, 3]
    elif head_dim <= 128:
        config = [128, 64, 8, 3]
    else:
        config = [64, 32, 8, 2]
    if alternative:
        config[2] = 12 - config[2]  # 4 <-> 8
    return tuple(config)


def varlen_attention(
    q: torch.Tensor,  # [T, heads, head_dim], last dim contiguous
    k: torch.Tensor,  # [T, kv_heads, head_dim]
    v: torch.Tensor,  # [T, kv_heads, head_dim]
    cu_seqlens: torch.Tensor,  # [B + 1] int32 on q's device
    max_len: int,  # longest row (host value: sizes the grid)
    scale: float,
    window: int = 0,  # positions a query sees, itself included (0: all earlier ones)
    softcap: float | None = None,
    out: torch.Tensor | None = None,  # [T, heads, head_dim] to write into
    alternative: bool = False,  # the other warp count (_config)
) -> torch.Tensor:  # [T, heads, head_dim], q's dtype
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    tokens, heads, head_dim = q.shape
    group = heads // k.shape[1]
    if out is None:
        out = torch.empty((tokens, heads, head_dim), dtype=q.dtype, device=q.device)
    block_m, block_n, warps, stages = _config(head_dim, alternative)
    rows = cu_seqlens.shape[0] - 1
    grid = (triton.cdiv(max_len, block_m), heads, rows)
    _varlen_attention_kernel[grid](
        q, k, v, out, cu_seqlens,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        scale, softcap if softcap is not None else 1.0, window,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_M=block_m, BLOCK_N=block_n,
        SOFTCAP=softcap is not None, WINDOW=bool(window), IEEE=q.dtype == torch.float32,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out
