"""Triton: sampler.top_p_by_rejection in fused kernels (the torch function is the reference).

At 16 rows the torch composition launched ~75 kernels per draw, most of them [rows]-sized bookkeeping,
and recomputed the row maximum every round. Here one draw is:
  max pass      triton_filter.row_max_partials, once: [rows, chunks] slice maxima
  start         one program per row: the min-p floor key, pivot = floor, done = 0
  per round     the race above the pivot (triton_sampling, re-keyed by round, done rows skipped), the mass
                pass (softmax masses strictly above the drawn logit and in all, per chunk), and one
                program per row that sums the chunks in a fixed order, accepts, and moves the pivot
  fallback      the exact radix threshold (reusing the max pass) with top_p = 1 for the settled rows (their
                passes do nothing), one last race, and the pick.
Every launch has a fixed grid: graph-capturable, no host sync.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels import triton_filter, triton_sampling
from inferlab.engine.kernels.triton_filter import MAX_CHUNKS, _signed_key, _ukey
from inferlab.engine.sampler import FILTER_TOP_P, TOP_P_ROUNDS


@triton.jit
def _row_top(PMAX, row, pmax_chunks, MAX_CHUNKS: tl.constexpr):
    c = tl.arange(0, MAX_CHUNKS)
    return tl.max(tl.load(PMAX + row * pmax_chunks + c, mask=c < pmax_chunks, other=float("-inf")), axis=0)


@triton.jit
def _start_kernel(PMAX, TEMP, MIN_P, PIVOT, DONE, TOKENS, SKIP, pmax_chunks, MAX_CHUNKS: tl.constexpr,
                  HAS_SKIP: tl.constexpr):  # fmt: skip
    """The min-p floor key (sampler.filter_threshold at FILTER_MIN_P), the first pivot; nothing chosen but
    the skipped rows (forced tokens), which count as settled."""
    row = tl.program_id(0)
    top = _row_top(PMAX, row, pmax_chunks, MAX_CHUNKS)
    min_p = tl.load(MIN_P + row)
    floor = tl.full([], -2147483648, tl.int32)  # sampler.KEEP_ALL
    if min_p > 0:
        t = tl.load(TEMP + row)
        floor = tl.minimum(_signed_key(_ukey(top + tl.where(t > 0.0, t, 1.0) * tl.log(min_p))), _signed_key(_ukey(top)))
    tl.store(PIVOT + row, floor)
    done = tl.zeros([], tl.int8)
    if HAS_SKIP:
        done = (tl.load(SKIP + row) != 0).to(tl.int8)
    tl.store(DONE + row, done)
    tl.store(TOKENS + row, tl.zeros([], tl.int64))


@triton.jit
def _checked(TEMP, TOP_P, row):
    """Rows with a top-p to check (not greedy, top_p < 1); the others keep round 0's draw."""
    return (tl.load(TEMP + row) > 0.0) & (tl.load(TOP_P + row) < 1.0)


@triton.jit
def _mass_kernel(
    LOGITS, TEMP, TOP_P, DRAWN, DONE, PMAX, ABOVE, TOTAL, stride_l, vocab, pmax_chunks,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr, MAX_CHUNKS: tl.constexpr,
):  # fmt: skip
    """sampler.mass_above_torch for one chunk of one row: [rows, CHUNKS] partial sums."""
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    above = tl.zeros([], tl.float32)
    total = tl.zeros([], tl.float32)
    if (tl.load(DONE + row) == 0) & _checked(TEMP, TOP_P, row):
        base = LOGITS + row.to(tl.int64) * stride_l
        top = _row_top(PMAX, row, pmax_chunks, MAX_CHUNKS)
        t = tl.load(TEMP + row)
        scale = 1.4426950408889634 / tl.where(t > 0.0, t, 1.0)  # exp((x - top) / T) as exp2
        drawn_key = _signed_key(_ukey(tl.load(base + tl.load(DRAWN + row)).to(tl.float32)))
        ids = chunk * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(base + ids, mask=ids < vocab, other=float("-inf")).to(tl.float32)
        w = tl.exp2((x - top) * scale)  # 0 for -inf (masked) logits
        above = tl.sum(tl.where(_signed_key(_ukey(x)) > drawn_key, w, 0.0), axis=0)
        total = tl.sum(w, axis=0)
    tl.store(ABOVE + row * CHUNKS + chunk, above)
    tl.store(TOTAL + row * CHUNKS + chunk, total)


@triton.jit
def _round_kernel(
    LOGITS, TEMP, TOP_P, DRAWN, ABOVE, TOTAL, ROW_TOTAL, PIVOT, DONE, TOKENS, OPEN_P, stride_l,
    CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr, FIRST: tl.constexpr, LAST: tl.constexpr,
):  # fmt: skip
    """One row: sum the chunks (fixed order), accept the draw or move the pivot past it. The last round
    also writes the top_p of the fallback threshold (1 for settled rows: their radix passes do nothing)."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    above = tl.sum(tl.load(ABOVE + row * CHUNKS + c, mask=c < CHUNKS, other=0.0), axis=0)
    if FIRST:
        total = tl.sum(tl.load(TOTAL + row * CHUNKS + c, mask=c < CHUNKS, other=0.0), axis=0)
        tl.store(ROW_TOTAL + row, total)  # the same every round: kept from round 0
    else:
        total = tl.load(ROW_TOTAL + row)
    p = tl.load(TOP_P + row)
    checked = _checked(TEMP, TOP_P, row)
    was_done = tl.load(DONE + row) != 0
    drawn = tl.load(DRAWN + row)
    accept = (tl.load(DONE + row) == 0) & ((checked == 0) | (above < p * total))
    done = was_done | accept
    tl.store(TOKENS + row, tl.where(accept, drawn, tl.load(TOKENS + row)))
    tl.store(DONE + row, done.to(tl.int8))
    key = _signed_key(_ukey(tl.load(LOGITS + row.to(tl.int64) * stride_l + drawn).to(tl.float32)))
    pivot = tl.load(PIVOT + row)
    tl.store(PIVOT + row, tl.where(done, pivot, tl.maximum(pivot, key + 1)))  # past the rejected draw
    if LAST:
        tl.store(OPEN_P + row, tl.where(done | (checked == 0), 1.0, p))


def top_p_by_rejection(
    logits: torch.Tensor,  # [rows, vocab] bf16, fp16 or fp32, masks applied, unit stride along vocab
    temperature: torch.Tensor,  # [rows] fp32, 0 = greedy
    top_p: torch.Tensor,  # [rows] fp32, 1.0 = off
    min_p: torch.Tensor,  # [rows] fp32, 0.0 = off
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    rounds: int = TOP_P_ROUNDS,
    block: int = 4096,
    num_warps: int = 8,
    skip: torch.Tensor | None = None,  # [rows] bool / int8: rows settled from the start (token 0 comes back)
) -> torch.Tensor:  # [rows] int64: sampler.top_p_by_rejection's tokens
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1 and rounds >= 1
    dev = logits.device
    chunks = triton.cdiv(vocab, block)
    pmax = triton_filter.row_max_partials(logits)  # [rows, pmax_chunks]
    pivot = torch.empty(rows, dtype=torch.int32, device=dev)
    done = torch.empty(rows, dtype=torch.int8, device=dev)
    tokens = torch.empty(rows, dtype=torch.int64, device=dev)
    above = torch.empty((rows, chunks), dtype=torch.float32, device=dev)
    total = torch.empty((rows, chunks), dtype=torch.float32, device=dev)
    row_total = torch.empty(rows, dtype=torch.float32, device=dev)
    open_p = torch.empty(rows, dtype=torch.float32, device=dev)
    _start_kernel[(rows,)](pmax, temperature, min_p, pivot, done, tokens, skip if skip is not None else done,
                           pmax.shape[1], MAX_CHUNKS=MAX_CHUNKS, HAS_SKIP=skip is not None)
    for r in range(rounds):
        drawn = triton_sampling.race_argmax(
            logits, temperature, pivot, seeds, token_index, r, done if r or skip is not None else None, block=block,
            num_warps=num_warps,
        )  # fmt: skip
        _mass_kernel[(rows, chunks)](
            logits, temperature, top_p, drawn, done, pmax, above, total, logits.stride(0), vocab, pmax.shape[1],
            CHUNKS=chunks, BLOCK=block, MAX_CHUNKS=MAX_CHUNKS, num_warps=num_warps,
        )  # fmt: skip
        _round_kernel[(rows,)](
            logits, temperature, top_p, drawn, above, total, row_total, pivot, done, tokens, open_p, logits.stride(0),
            CHUNKS=chunks, BLOCK_C=max(2, triton.next_power_of_2(chunks)), FIRST=r == 0, LAST=r == rounds - 1,
        )  # fmt: skip
    # the rows still open (probability <= (1 - top_p)^rounds each): the exact threshold, for them alone
    tau = triton_filter.filter_threshold(logits, temperature, torch.zeros_like(token_index), open_p, min_p, FILTER_TOP_P,
                                         pmax=pmax)  # the max pass of the start, not a second one
    last = triton_sampling.race_argmax(logits, temperature, tau, seeds, token_index, rounds, done, block=block,
                                       num_warps=num_warps)
    return torch.where(done != 0, tokens, last)
