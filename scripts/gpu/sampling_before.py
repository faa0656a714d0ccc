"""The sampling kernels as they were before the race was made cheaper (commit 8dfdf39's triton_sampling.py race
and triton_top_p.py), kept for the A/B timing of scripts/gpu/roofline_check.py only: the exact (polynomial)
logarithms, the int-to-float uniform, a max pass and a start kernel before the top-p rounds. Not used by the
engine."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels import triton_filter
from inferlab.engine.kernels.triton_filter import MAX_CHUNKS, _signed_key, _ukey
from inferlab.engine.sampler import FILTER_TOP_P, TOP_P_ROUNDS

LOG2E = 1.4426950408889634


@triton.jit
def _mix32(x):
    # x is uint32 (literals >= 2^31 are uint32 in Triton, so products wrap mod 2^32); the masks keep the
    # result right even if a Triton version promoted the arithmetic to 64 bits.
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@triton.jit
def _row_key(seed, token_index):
    """sampler.row_keys for one row: int64 seed and token index -> uint32 key."""
    lo = (seed & 0xFFFFFFFF).to(tl.uint32)
    hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    seed_key = _mix32(lo ^ _mix32(hi ^ 0x5BD1E995))
    index = (token_index & 0xFFFFFFFF).to(tl.uint32)
    return _mix32((seed_key + _mix32(index ^ 0x27D4EB2F)) & 0xFFFFFFFF)


@triton.jit
def _round_key(key, ROUND: tl.constexpr):
    """sampler.row_keys' re-keying for rejection round ROUND (round 0: the key as it is)."""
    if ROUND > 0:
        key = _mix32(key ^ _mix32(tl.full([], ROUND ^ 0x68E31DA4, tl.uint32)))
    return key


@triton.jit
def _race_value(x, t, seed, token_index, ids, ROUND: tl.constexpr):
    """The race of logits x [BLOCK] (fp32) of token ids `ids`, for a row at temperature t (greedy if <= 0):
    logit / T in base 2, plus base-2 Gumbel noise of (seed, token index, id) for a sampled row."""
    race = x * (1.4426950408889634 / tl.where(t <= 0.0, 1.0, t))  # sampler.LOG2E / T: logit / T in base 2
    if t > 0.0:  # sampled row: add the noise
        key = _round_key(_row_key(seed, token_index), ROUND)
        h = _mix32(key ^ ((ids.to(tl.uint32) * 0x9E3779B9) & 0xFFFFFFFF))
        u = ((h >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # sampler.UNIFORM_BITS = 23: never 0 or 1
        race = race - tl.log2(-tl.log2(u))
    return race


@triton.jit
def _race_kernel(
    LOGITS, TEMP, TAU, SEEDS, INDEX, SKIP, BEST_VAL, BEST_IDX, stride_l, vocab,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr, HAS_TAU: tl.constexpr, ROUND: tl.constexpr, HAS_SKIP: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    if HAS_SKIP:
        if tl.load(SKIP + row) != 0:
            tl.store(BEST_VAL + row * CHUNKS + chunk, float("-inf"))
            tl.store(BEST_IDX + row * CHUNKS + chunk, 0)
            return
    ids = chunk * BLOCK + tl.arange(0, BLOCK)
    valid = ids < vocab
    x = tl.load(LOGITS + row.to(tl.int64) * stride_l + ids, mask=valid, other=float("-inf")).to(tl.float32)
    race = _race_value(x, tl.load(TEMP + row), tl.load(SEEDS + row), tl.load(INDEX + row), ids, ROUND)
    keep = valid
    if HAS_TAU:  # the threshold is an order-preserving int32 key of the raw logit (sampler.float_key)
        bits = x.to(tl.int32, bitcast=True)
        keep = keep & ((bits ^ ((bits >> 31) & 0x7FFFFFFF)) >= tl.load(TAU + row))
    race = tl.where(keep, race, float("-inf"))
    best, where = tl.max(race, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(BEST_VAL + row * CHUNKS + chunk, best)
    tl.store(BEST_IDX + row * CHUNKS + chunk, chunk * BLOCK + where)


@triton.jit
def _pick_kernel(BEST_VAL, BEST_IDX, OUT, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    values = tl.load(BEST_VAL + row * CHUNKS + c, mask=c < CHUNKS, other=float("-inf"))
    _, first = tl.max(values, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(OUT + row, tl.load(BEST_IDX + row * CHUNKS + first).to(tl.int64))


def race_argmax(
    logits: torch.Tensor,  # [rows, vocab] bf16, fp16 or fp32
    temperature: torch.Tensor,  # [rows] fp32, <= 0: greedy
    tau: torch.Tensor | None,  # [rows] int32 threshold key, or None: no threshold
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    round_index: int = 0,  # rejection round: re-keys the noise
    skip: torch.Tensor | None = None,  # [rows] bool: rows to leave out (token 0 comes back)
    block: int = 4096,
    num_warps: int = 8,
) -> torch.Tensor:  # [rows] int64
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1
    chunks = triton.cdiv(vocab, block)
    best_val = torch.empty((rows, chunks), dtype=torch.float32, device=logits.device)
    best_idx = torch.empty((rows, chunks), dtype=torch.int32, device=logits.device)
    tokens = torch.empty(rows, dtype=torch.int64, device=logits.device)
    _race_kernel[(rows, chunks)](
        logits, temperature, tau if tau is not None else temperature, seeds, token_index,
        skip if skip is not None else temperature, best_val, best_idx, logits.stride(0), vocab,
        CHUNKS=chunks, BLOCK=block, HAS_TAU=tau is not None, ROUND=round_index, HAS_SKIP=skip is not None,
        num_warps=num_warps,
    )  # fmt: skip
    _pick_kernel[(rows,)](best_val, best_idx, tokens, CHUNKS=chunks, BLOCK_C=max(2, triton.next_power_of_2(chunks)))
    return tokens


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
        drawn = race_argmax(
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
    last = race_argmax(logits, temperature, tau, seeds, token_index, rounds, done, block=block,
                                       num_warps=num_warps)
    return torch.where(done != 0, tokens, last)
