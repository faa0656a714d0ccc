"""Triton flash-decoding: one query per row against that row's cache slot, cost following its real length.

Stage 1, grid (rows, kv_heads, splits): each program reads the row's slot and length from device tensors,
takes its share of the positions [0, length) (the share is length / splits, so a short row does little
work however long the cache is), and runs an online softmax over BLOCK_N-position tiles for all query
heads of one kv head at once (GQA: the group shares each K/V load; the group is padded to 16 rows for
tl.dot). It writes a partial output and its log-sum-exp. Stage 2, grid (rows, heads), merges the splits;
with one split (large batches already fill the GPU) stage 1 writes the final output and stage 2 is skipped.
The grid depends only on the batch bucket, never on lengths, so the launch is CUDA-graph capturable.
Same signature as engine/attention.decode_attention_torch (the test reference).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(
    Q,
    K,
    V,
    SLOT,
    LEN,
    O_PART,
    LSE_PART,
    stride_qb,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_kn,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_lb,
    stride_lh,
    scale,
    splits,  # splits is a runtime value: one compiled kernel serves every bucket
    GROUP: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
):
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    slot = tl.load(SLOT + row)
    length = tl.load(LEN + row)
    chunk = tl.cdiv(tl.cdiv(length, splits), BLOCK_N) * BLOCK_N  # whole tiles: no ragged tile mid-row
    start = split * chunk
    end = tl.minimum(start + chunk, length)

    h = tl.arange(0, BLOCK_H)
    hmask = h < GROUP
    heads = kv_head * GROUP + h
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q = tl.load(
        Q + row * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=hmask[:, None] & dmask[None, :], other=0.0
    )  # [BLOCK_H, BLOCK_D]
    kv_base = slot * stride_ks + kv_head * stride_kh

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nmask = n < end
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(K + kv_base + n[:, None] * stride_kn + d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(nmask[None, :], s * scale, float("-inf"))  # [BLOCK_H, BLOCK_N]
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        v = tl.load(V + kv_base + n[:, None] * stride_kn + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    empty = denom == 0.0  # this split had no positions (a short row): contributes nothing to the merge
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, denom)[:, None])
    lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, denom)))
    # one split: O_PART is the final output [rows, heads, head_dim] in the model dtype, no merge needed
    tl.store(
        O_PART + row * stride_pb + heads[:, None] * stride_ph + split * stride_ps + d[None, :],
        out.to(O_PART.dtype.element_ty),
        mask=hmask[:, None] & dmask[None, :],
    )
    if splits > 1:
        tl.store(LSE_PART + row * stride_lb + heads * stride_lh + split, lse, mask=hmask)


@triton.jit
def _decode_merge_kernel(
    O_PART,
    LSE_PART,
    OUT,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    smask = s < splits
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    lse = tl.load(LSE_PART + row * stride_lb + head * stride_lh + s, mask=smask, other=float("-inf"))  # [BLOCK_S]
    weights = tl.exp(lse - tl.max(lse, axis=0))  # empty splits: exp(-inf) = 0
    parts = tl.load(
        O_PART + row * stride_pb + head * stride_ph + s[:, None] * stride_ps + d[None, :],
        mask=smask[:, None] & dmask[None, :],
        other=0.0,
    )  # [BLOCK_S, BLOCK_D]
    out = tl.sum(parts * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(OUT + row * stride_ob + head * stride_oh + d, out.to(OUT.dtype.element_ty), mask=dmask)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8


def choose_splits(rows: int, kv_heads: int, max_len: int, target_programs: int, block_n: int = 64) -> int:
    """Enough splits that rows x kv_heads x splits fills the GPU, never more than the cache has tiles."""
    want = triton.cdiv(target_programs, max(1, rows * kv_heads))
    return int(max(1, min(want, triton.cdiv(max_len, block_n), 64)))


def decode_attention(
    q: torch.Tensor,  # [rows, heads, head_dim]
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer)
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [rows] int64
    lengths: torch.Tensor,  # [rows] int64, >= 1
    scale: float,
    max_len_hint: int | None = None,  # unused: the kernel reads the lengths on the device
    splits: int | None = None,  # None: enough to fill the GPU (choose_splits)
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:  # [rows, heads, head_dim]
    rows, heads, head_dim = q.shape
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    group = heads // kv_heads
    if splits is None:
        splits = choose_splits(rows, kv_heads, max_len, 2 * _sm_count(q.device), block_n)
    out = torch.empty_like(q)
    if splits == 1:  # the split kernel writes the final output
        o_part, lse_part = out.view(rows, heads, 1, head_dim), out  # lse_part unused
    else:
        o_part = torch.empty((rows, heads, splits, head_dim), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((rows, heads, splits), dtype=torch.float32, device=q.device)
    block_d = max(16, triton.next_power_of_2(head_dim))
    _decode_split_kernel[(rows, kv_heads, splits)](
        q,
        k_cache,
        v_cache,
        slots,
        lengths,
        o_part,
        lse_part,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        o_part.stride(0),
        o_part.stride(1),
        o_part.stride(2),
        lse_part.stride(0),
        lse_part.stride(1),
        scale,
        splits,
        GROUP=group,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_N=block_n,
        IEEE=q.dtype == torch.float32,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        _decode_merge_kernel[(rows, heads)](
            o_part,
            lse_part,
            out,
            o_part.stride(0),
            o_part.stride(1),
            o_part.stride(2),
            lse_part.stride(0),
            lse_part.stride(1),
            out.stride(0),
            out.stride(1),
            splits,
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            BLOCK_S=max(2, triton.next_power_of_2(splits)),
        )
    return out
