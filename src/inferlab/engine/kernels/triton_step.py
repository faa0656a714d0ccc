"""Triton kernels of the step's bookkeeping: the min-length stop mask and the per-row record.

In eager torch these are about twenty tiny kernels per step (compares, wheres, scatters over [rows] and
[rows, stops]); inside a CUDA graph each still costs a launch, which matters where a small batch's step is
bound by fixed costs. Each is one launch here, with the signatures and semantics of engine/step.py's torch
functions (the test references).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.rows import RowState


@triton.jit
def _mask_stops_kernel(LOGITS, N_OUT, MIN_NEW, N_STOP, STOP, stride_l, STOPS: tl.constexpr, BLOCK_S: tl.constexpr):
    row = tl.program_id(0)
    need = tl.load(N_OUT + row) < tl.load(MIN_NEW + row)
    count = tl.where(need, tl.load(N_STOP + row), 0)  # entries to mask: all valid ones, or none
    s = tl.arange(0, BLOCK_S)
    ids = tl.load(STOP + row * STOPS + s, mask=s < STOPS, other=0)
    tl.store(LOGITS + row * stride_l + ids, tl.full([BLOCK_S], float("-inf"), tl.float32), mask=s < count)


def mask_stops_before_min(logits: torch.Tensor, rows: RowState) -> torch.Tensor:
    """-inf on each row's EOS/stop ids while n_out < min_new (logits [B, V] fp32, in place)."""
    stops = rows.stop_ids.shape[1]
    assert logits.stride(-1) == 1 and rows.stop_ids.stride(0) == stops
    _mask_stops_kernel[(logits.shape[0],)](
        logits,
        rows.n_out,
        rows.min_new,
        rows.n_stop,
        rows.stop_ids,
        logits.stride(0),
        STOPS=stops,
        BLOCK_S=triton.next_power_of_2(stops),
    )
    return logits


@triton.jit
def _record_kernel(
    TOK,
    ACTIVE,
    FINISHED,
    REASON,
    N_OUT,
    MAX_NEW,
    POSITIONS,
    TOKENS,
    STOP,
    N_EOS,
    N_STOP,
    OUT,
    LIVE,
    rows,
    stride_out,
    cap,
    STOPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < rows
    tok = tl.load(TOK + r, mask=m, other=0)
    live = (tl.load(ACTIVE + r, mask=m, other=0) != 0) & (tl.load(FINISHED + r, mask=m, other=1) == 0)
    n = tl.load(N_OUT + r, mask=m, other=0)
    tl.store(OUT + r * stride_out + tl.minimum(n, cap - 1), tok, mask=m)
    n_eos = tl.load(N_EOS + r, mask=m, other=0)
    n_stop = tl.load(N_STOP + r, mask=m, other=0)
    is_eos = tl.zeros([BLOCK], tl.int1)
    is_stop = tl.zeros([BLOCK], tl.int1)
    for s in tl.static_range(STOPS):
        hit = tok == tl.load(STOP + r * STOPS + s, mask=m, other=-1)
        is_eos = is_eos | (hit & (s < n_eos))
        is_stop = is_stop | (hit & (s >= n_eos) & (s < n_stop))
    n_new = n + live.to(tl.int64)
    done = live & (is_eos | is_stop | (n_new >= tl.load(MAX_NEW + r, mask=m, other=0)))
    reason = tl.where(is_eos, 1, tl.where(is_stop, 2, 3)).to(tl.int64)
    tl.store(REASON + r, tl.where(done, reason, tl.load(REASON + r, mask=m, other=0)), mask=m)
    tl.store(FINISHED + r, (tl.load(FINISHED + r, mask=m, other=0) != 0) | done, mask=m)
    tl.store(N_OUT + r, n_new, mask=m)
    tl.store(POSITIONS + r, tl.load(POSITIONS + r, mask=m, other=0) + live.to(tl.int64), mask=m)
    tl.store(TOKENS + r, tl.where(live, tok, tl.load(TOKENS + r, mask=m, other=0)), mask=m)
    tl.store(LIVE + r, live, mask=m)


def record_tokens(tokens: torch.Tensor, rows: RowState) -> torch.Tensor:
    """See engine/step.record_tokens: book one token per live row; returns live [B] bool."""
    b = tokens.shape[0]
    stops = rows.stop_ids.shape[1]
    live = torch.empty(b, dtype=torch.bool, device=tokens.device)
    block = min(256, max(16, triton.next_power_of_2(b)))
    _record_kernel[(triton.cdiv(b, block),)](
        tokens,
        rows.active,
        rows.finished,
        rows.reason,
        rows.n_out,
        rows.max_new,
        rows.positions,
        rows.tokens,
        rows.stop_ids,
        rows.n_eos,
        rows.n_stop,
        rows.out,
        live,
        b,
        rows.out.stride(0),
        rows.out.shape[1],
        STOPS=stops,
        BLOCK=block,
    )
    return live
