"""Triton: sampler.top_p_by_rejection in fused kernels (the torch function is the reference).

One draw is, at every batch size, a fixed sequence of launches (graph-capturable, no host sync):
  per round     the race above the pivot (triton_sampling.race_partials: re-keyed by round, settled rows
                skipped; round 0 races over every token and also writes each block's maximum logit and
                softmax mass), the mass pass (each program picks the row's draw from the race's partial
                results and sums the softmax mass strictly above the drawn logit in its blocks; a block whose
                maximum is not above the draw adds nothing and is not read), and one program per row that
                picks the draw again, sums the partials in a fixed order, accepts, and moves the pivot (round
                0 also derives the row maximum, the total mass and the min-p floor from the blocks). After
                round 0 most rows are settled and their programs return at once: the later rounds' programs
                cover LATER_SPAN blocks each, so fewer of them are launched for nothing.
  fallback      the exact radix threshold (triton_filter, given round 0's chunk maxima: no max pass of its
                own) with top_p = 1 for the settled rows (their passes do nothing), one last race, and a
                pick in which the settled rows keep their token.
So the logits are read about twice per draw at top_p = 0.9 (the race and the mass pass of round 0; the
later rounds read only the rows still open), and a batch of 16 rows is bound by its ~17 launches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels import triton_filter
from inferlab.engine.kernels.triton_filter import MAX_CHUNKS, _signed_key, _ukey
from inferlab.engine.kernels.triton_sampling import block_c, pick, pick_tokens, race_partials
from inferlab.engine.sampler import FILTER_TOP_P, TOP_P_ROUNDS

LATER_SPAN = 4  # blocks per program of the races and mass passes after round 0, and of the last race


@triton.jit
def _checked(TEMP, TOP_P, row):
    """Rows with a top-p to check (not greedy, top_p < 1); the others need only the min-p floor."""
    return (tl.load(TEMP + row) > 0.0) & (tl.load(TOP_P + row) < 1.0)


@triton.jit
def _key(x):
    return _signed_key(_ukey(x))


@triton.jit
def _mass_kernel(
    LOGITS, TEMP, TOP_P, BEST_VAL, BEST_IDX, DONE, CHUNK_MAX, ABOVE, stride_l, vocab,
    RACE_PARTS: tl.constexpr, BLOCKS: tl.constexpr, PARTS: tl.constexpr, BLOCK: tl.constexpr, SPAN: tl.constexpr,
    BLOCK_C: tl.constexpr, HAS_DONE: tl.constexpr,
):  # fmt: skip
    """sampler.mass_above_torch's `above` over SPAN blocks of one row: [rows, PARTS] partial sums. The draw is
    picked from the round's race (RACE_PARTS per row); CHUNK_MAX holds round 0's maximum of each of the row's
    BLOCKS blocks."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    above = tl.zeros([], tl.float32)
    go = _checked(TEMP, TOP_P, row)
    if HAS_DONE:
        go = go & (tl.load(DONE + row) == 0)
    if go:
        base = LOGITS + row.to(tl.int64) * stride_l
        drawn_key = _key(tl.load(base + pick(BEST_VAL, BEST_IDX, row, RACE_PARTS, BLOCK_C)).to(tl.float32))
        c = tl.arange(0, BLOCK_C)
        top = tl.max(tl.load(CHUNK_MAX + row * BLOCKS + c, mask=c < BLOCKS, other=float("-inf")), axis=0)
        t = tl.load(TEMP + row)
        scale = 1.4426950408889634 / tl.where(t > 0.0, t, 1.0)  # exp((x - top) / T) as exp2
        for s in tl.static_range(SPAN):
            block = part * SPAN + s
            if block < BLOCKS:
                if _key(tl.load(CHUNK_MAX + row * BLOCKS + block)) > drawn_key:  # else nothing here is above it
                    ids = block * BLOCK + tl.arange(0, BLOCK)
                    x = tl.load(base + ids, mask=ids < vocab, other=float("-inf")).to(tl.float32)
                    w = tl.exp2((x - top) * scale)  # 0 for -inf (masked) logits
                    above += tl.sum(tl.where(_key(x) > drawn_key, w, 0.0), axis=0)
    tl.store(ABOVE + row * PARTS + part, above)


@triton.jit
def _round_kernel(
    LOGITS, TEMP, TOP_P, MIN_P, BEST_VAL, BEST_IDX, ABOVE, CHUNK_MAX, CHUNK_MASS, ROW_TOTAL, FLOOR, PIVOT, DONE,
    TOKENS, SKIP, OPEN_P, stride_l,
    RACE_PARTS: tl.constexpr, BLOCKS: tl.constexpr, PARTS: tl.constexpr, BLOCK_C: tl.constexpr, FIRST: tl.constexpr,
    LAST: tl.constexpr, HAS_SKIP: tl.constexpr,
):  # fmt: skip
    """One row: accept the round's draw (above the min-p floor, and for a checked row the mass above it
    < top_p x the total) or move the pivot past it. Round 0 starts the row's state: its maximum, total mass
    and min-p floor from the chunks, and the rows `skip` settles from the start. The last round also writes
    the top_p of the fallback threshold (1 for settled rows and unchecked ones)."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    in_row = c < BLOCKS
    t = tl.load(TEMP + row)
    p = tl.load(TOP_P + row)
    checked = (t > 0.0) & (p < 1.0)
    if FIRST:
        maxima = tl.load(CHUNK_MAX + row * BLOCKS + c, mask=in_row, other=float("-inf"))
        top = tl.max(maxima, axis=0)
        shift = tl.where(top == float("-inf"), 0.0, top)
        scale = 1.4426950408889634 / tl.where(t > 0.0, t, 1.0)
        masses = tl.load(CHUNK_MASS + row * BLOCKS + c, mask=in_row, other=0.0)
        total = tl.sum(tl.exp2((maxima - shift) * scale) * masses, axis=0)  # the row's sum of exp((x - top) / T)
        tl.store(ROW_TOTAL + row, total)
        min_p = tl.load(MIN_P + row)
        floor = tl.full([], -2147483648, tl.int32)  # sampler.KEEP_ALL
        if min_p > 0:  # sampler.filter_threshold at FILTER_MIN_P, never above the maximum
            floor = tl.minimum(_key(top + tl.where(t > 0.0, t, 1.0) * tl.log(min_p)), _key(top))
        tl.store(FLOOR + row, floor)
        was_done = tl.zeros([], tl.int1)
        if HAS_SKIP:
            was_done = tl.load(SKIP + row) != 0
        pivot = tl.full([], -2147483648, tl.int32)
        tokens = tl.zeros([], tl.int64)
    else:
        total = tl.load(ROW_TOTAL + row)
        floor = tl.load(FLOOR + row)
        was_done = tl.load(DONE + row) != 0
        pivot = tl.load(PIVOT + row)
        tokens = tl.load(TOKENS + row)
    drawn = pick(BEST_VAL, BEST_IDX, row, RACE_PARTS, BLOCK_C)
    drawn_key = _key(tl.load(LOGITS + row.to(tl.int64) * stride_l + drawn).to(tl.float32))
    above = tl.sum(tl.load(ABOVE + row * PARTS + c, mask=c < PARTS, other=0.0), axis=0)
    accept = (was_done == 0) & (drawn_key >= floor) & ((checked == 0) | (above < p * total))
    done = was_done | accept
    tl.store(TOKENS + row, tl.where(accept, drawn.to(tl.int64), tokens))
    tl.store(DONE + row, done.to(tl.int8))
    tl.store(PIVOT + row, tl.where(done, pivot, tl.maximum(tl.maximum(pivot, floor), drawn_key + 1)))
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
    num_warps: int = 4,
    skip: torch.Tensor | None = None,  # [rows] bool / int8: rows settled from the start (token 0 comes back)
) -> torch.Tensor:  # [rows] int64: sampler.top_p_by_rejection's tokens
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1 and rounds >= 1
    block = max(block, triton.next_power_of_2(triton.cdiv(vocab, MAX_CHUNKS)))  # block maxima: the filter's pmax
    blocks = triton.cdiv(vocab, block)
    dev, f32, i32 = logits.device, torch.float32, torch.int32
    pivot, floor = torch.empty(rows, dtype=i32, device=dev), torch.empty(rows, dtype=i32, device=dev)
    done = torch.empty(rows, dtype=torch.int8, device=dev)
    tokens = torch.empty(rows, dtype=torch.int64, device=dev)
    above = torch.empty((rows, blocks), dtype=f32, device=dev)
    row_total, open_p = torch.empty(rows, dtype=f32, device=dev), torch.empty(rows, dtype=f32, device=dev)
    stats = None
    for r in range(rounds):
        first = r == 0
        span = 1 if first else LATER_SPAN  # after round 0 most rows are settled: fewer programs return at once
        settled = skip if first else done  # what the race and the mass pass leave out
        race = race_partials(logits, temperature, None if first else pivot, seeds, token_index, r, settled,
                             stats=first, block=block, num_warps=num_warps, span=span)  # fmt: skip
        stats = race if first else stats
        parts = triton.cdiv(blocks, span)
        race_parts = race.best_val.shape[1]
        width = block_c(max(blocks, race_parts))
        _mass_kernel[(rows, parts)](
            logits, temperature, top_p, race.best_val, race.best_idx, settled if settled is not None else done,
            stats.chunk_max, above, logits.stride(0), vocab,
            RACE_PARTS=race_parts, BLOCKS=blocks, PARTS=parts, BLOCK=block, SPAN=span, BLOCK_C=width,
            HAS_DONE=settled is not None, num_warps=num_warps,
        )  # fmt: skip
        _round_kernel[(rows,)](
            logits, temperature, top_p, min_p, race.best_val, race.best_idx, above, stats.chunk_max, stats.chunk_mass,
            row_total, floor, pivot, done, tokens, skip if skip is not None else done, open_p, logits.stride(0),
            RACE_PARTS=race_parts, BLOCKS=blocks, PARTS=parts, BLOCK_C=width, FIRST=first, LAST=r == rounds - 1,
            HAS_SKIP=skip is not None,
        )  # fmt: skip
    # the rows still open (probability <= (1 - top_p)^rounds each): the exact threshold, for them alone
    tau = triton_filter.filter_threshold(logits, temperature, torch.zeros_like(token_index), open_p, min_p, FILTER_TOP_P,
                                         pmax=stats.chunk_max)  # fmt: skip
    last = race_partials(logits, temperature, tau, seeds, token_index, rounds, done, block=block, num_warps=num_warps,
                         span=LATER_SPAN)  # fmt: skip
    return pick_tokens(last, done, tokens)
