"""Triton kernels: the exponential race of engine/sampler.py in one pass over the logits, and the pick.

Race, grid (rows, parts of SPAN blocks of BLOCK token ids): each program derives the row's key from (seed,
token index), scales its logits by log2(e) / T, applies the row's threshold, adds base-2 Gumbel noise from
the same counter-based hash as sampler.race_noise (uint32 arithmetic wraps as the reference's masked int64
does), and writes its best value and index. Greedy rows skip the noise. Logits are read in the LM head's
dtype (bf16 -> fp32 is exact, so the arithmetic equals the reference's). Pick, one program per row: the
first chunk holding the best value (first index on ties, as torch.argmax). No [rows, vocab] noise tensor
is materialised. ROUND > 0 re-keys the noise, SKIP rows return at once, STATS also writes each chunk's
maximum and softmax mass (all three for the top-p rounds of triton_top_p.py).

The race is bound by its arithmetic per logit, so on a GPU the logarithms are the hardware approximation
(lg2.approx.f32), except near u = 1, where its absolute error (~2^-22) would bias the tiny -log2(u) behind
the large noise that wins a race: there a short series in 1 - u is used (_gumbel2). The uniform is built
from the hash bits in the mantissa of 1.0 (exactly the reference's ((h >> 9) + 0.5) / 2^23, no int-to-float
conversion). A draw can differ from the exact-logarithm reference only where two race values lie within
~1e-6 relative; the distribution is the same. The Triton interpreter computes exact logarithms.

Constrained race (`constrained_race_argmax`, the constraint runtime's step at filter level none): the race
with the constraint's mask applied in registers, from the state the mask kernel reads
(constraints/step_kernels.py). A copy row's programs return at once (its token is forced); a hole row's
program returns at once when its state allows no token of its chunk (a per-state chunk table answers before
any token class is read), else races over the allowed tokens only. The tokens equal the mask kernel's
followed by race_argmax, without the mask's write pass over [B, V]. With PRESSURE every program also reads
the rest of its chunk for the constraint's pressure (engine/constraints/pressure.py: `block_pressure`, then
`combined_pressure` in the pick), racing over exactly the same values: the same tokens.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
ONE_MINUS_HALF_ULP = 1.0 - 2.0**-24  # 1.0 + m / 2^23 minus this is (m + 0.5) / 2^23, exactly


def fast_log() -> bool:
    """The hardware logarithm on a GPU; the exact one in the Triton interpreter (no inline assembly there)."""
    return os.environ.get("TRITON_INTERPRET") != "1"


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
def _lg2_approx(x):
    return tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _gumbel2(bits, FAST_LOG: tl.constexpr):
    """Base-2 Gumbel noise -log2(-log2(u)) of the uniform u = (bits + 0.5) / 2^23 (bits: 23 random bits).

    The exact logarithms, or (FAST_LOG) hardware ones: lg2.approx's error is absolute (~2^-22) near 1, where
    -log2(u) of a u close to 1 (the large noise that wins a race) is tiny, so there -log2(u) = -ln(1 - w) / ln 2
    comes from w = 1 - u (exact) by its series, to ~2e-7 relative for w < 1/128;
    above, lg2.approx's error is at most ~2e-5 of -log2(u) (the noise within ~3e-5)."""
    one = 0x3F800000  # the bits of 1.0: bits as its mantissa give 1 + bits / 2^23
    u = (bits | one).to(tl.float32, bitcast=True) - 0.99999994039535522  # ONE_MINUS_HALF_ULP: exact
    if FAST_LOG:
        w = 1.0 - u  # exact: u and 1 - u are odd multiples of 2^-24
        # -log2(1 - w) = (w + w^2 / 2 + w^3 / 3 + ...) / ln 2, to ~2e-7 relative below 1/128
        series = w * (1.4426950408889634 + w * (0.72134752044448170 + w * 0.48089834696298780))
        e = tl.where(w < 0.0078125, series, -_lg2_approx(u))
        return -_lg2_approx(e)
    else:
        return -tl.log2(-tl.log2(u))


@triton.jit
def _race_value(x, t, seed, token_index, ids, ROUND: tl.constexpr, FAST_LOG: tl.constexpr):
    """The race of logits x [BLOCK] (fp32) of token ids `ids`, for a row at temperature t (greedy if <= 0):
    logit / T in base 2, plus base-2 Gumbel noise of (seed, token index, id) for a sampled row. A -inf logit
    races at -inf (the noise is finite)."""
    scale = 1.4426950408889634 / tl.where(t <= 0.0, 1.0, t)  # sampler.LOG2E / T: logit / T in base 2
    if t > 0.0:  # sampled row: add the noise of sampler.uniform_from_hash's top 23 bits of the hash
        key = _round_key(_row_key(seed, token_index), ROUND)
        h = _mix32(key ^ ((ids.to(tl.uint32) * 0x9E3779B9) & 0xFFFFFFFF))
        race = x * scale + _gumbel2(h >> 9, FAST_LOG)
    else:
        race = x * scale
    return race


@triton.jit
def _race_kernel(
    LOGITS, TEMP, TAU, SEEDS, INDEX, SKIP, BEST_VAL, BEST_IDX, CHUNK_MAX, CHUNK_MASS, stride_l, vocab,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr, SPAN: tl.constexpr, HAS_TAU: tl.constexpr, ROUND: tl.constexpr,
    HAS_SKIP: tl.constexpr, STATS: tl.constexpr, FAST_LOG: tl.constexpr,
):  # fmt: skip
    """One program: SPAN blocks of BLOCK token ids of one row, one after the other; CHUNKS programs per row."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    out = row * CHUNKS + part
    if HAS_SKIP:
        if tl.load(SKIP + row) != 0:
            tl.store(BEST_VAL + out, float("-inf"))
            tl.store(BEST_IDX + out, 0)
            if STATS:
                tl.store(CHUNK_MAX + out, float("-inf"))
                tl.store(CHUNK_MASS + out, 0.0)
            return
    t = tl.load(TEMP + row)
    seed = tl.load(SEEDS + row)
    index = tl.load(INDEX + row)
    best = tl.full([], float("-inf"), tl.float32)
    best_id = part * SPAN * BLOCK
    for s in tl.static_range(SPAN):
        start = (part * SPAN + s) * BLOCK
        ids = start + tl.arange(0, BLOCK)
        x = tl.load(LOGITS + row.to(tl.int64) * stride_l + ids, mask=ids < vocab, other=float("-inf")).to(tl.float32)
        race = _race_value(x, t, seed, index, ids, ROUND, FAST_LOG)  # -inf past vocab
        if HAS_TAU:  # the threshold is an order-preserving int32 key of the raw logit (sampler.float_key)
            bits = x.to(tl.int32, bitcast=True)
            race = tl.where((bits ^ ((bits >> 31) & 0x7FFFFFFF)) >= tl.load(TAU + row), race, float("-inf"))
        value, where = tl.max(race, axis=0, return_indices=True, return_indices_tie_break_left=True)
        best_id = tl.where(value > best, start + where, best_id)  # strictly: an earlier block wins a tie
        best = tl.maximum(best, value)
        if STATS:  # (SPAN 1) the chunk's maximum logit and sum of exp((x - max) / T) (a -inf chunk: -inf and 0)
            top = tl.max(x, axis=0)
            shift = tl.where(top == float("-inf"), 0.0, top)
            scale = 1.4426950408889634 / tl.where(t <= 0.0, 1.0, t)
            tl.store(CHUNK_MAX + out, top)
            tl.store(CHUNK_MASS + out, tl.sum(tl.exp2((x - shift) * scale), axis=0))
    tl.store(BEST_VAL + out, best)
    tl.store(BEST_IDX + out, best_id)


@triton.jit
def lane_op(lane, ROWS, ACTIVE, PTR, KIND, op_stride, HAS_ROWS: tl.constexpr):
    """A constrained lane's row (ROWS[lane] with HAS_ROWS, else the lane), its op pointer, whether the row is
    live, and its current op's kind (constraints.program: COPY, HOLE, ...)."""
    if HAS_ROWS:
        r = tl.load(ROWS + lane)
    else:
        r = lane
    ptr = tl.load(PTR + r)
    return r, ptr, tl.load(ACTIVE + r) != 0, tl.load(KIND + r * op_stride + ptr)


@triton.jit
def hole_state(r, ptr, STATE, ARG, LAST, ACCEPTING, op_stride):
    """Row r in a hole: its automaton state and the token that may end the hole now (the next op's token,
    the last op's at the end; -1 unless the state accepts)."""
    state = tl.load(STATE + r)
    exit_token = tl.load(ARG + r * op_stride + tl.minimum(ptr + 1, tl.load(LAST + r)))
    return state, tl.where(tl.load(ACCEPTING + state) != 0, exit_token, -1)


@triton.jit
def block_pressure(x, off):
    """One block's share of a lane's constraint pressure (engine/constraints/pressure.py), at T = 1: its
    largest logit, and the sums of 2^((x - that) * log2 e) over all its tokens and over the `off` ones (those
    the constraint takes away). x [BLOCK] fp32, -inf past the vocabulary."""
    top = tl.max(x, axis=0)
    e = tl.exp2((x - tl.where(top == float("-inf"), 0.0, top)) * 1.4426950408889634)
    return top, tl.sum(e, axis=0), tl.sum(tl.where(off, e, 0.0), axis=0)


@triton.jit
def combined_pressure(CHUNK_MAX, CHUNK_ALL, CHUNK_OFF, lane, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
    """A lane's pressure from its blocks' shares (block_pressure): the mass taken away over the whole mass,
    each block's sums rescaled to the lane's largest logit; 0 for a lane no block measured."""
    c = tl.arange(0, BLOCK_C)
    inside = c < CHUNKS
    at = lane * CHUNKS + c
    tops = tl.load(CHUNK_MAX + at, mask=inside, other=float("-inf"))
    top = tl.max(tops, axis=0)
    scale = tl.exp2((tops - tl.where(top == float("-inf"), 0.0, top)) * 1.4426950408889634)  # 0 for -inf blocks
    total = tl.sum(tl.load(CHUNK_ALL + at, mask=inside, other=0.0) * scale, axis=0)
    taken = tl.sum(tl.load(CHUNK_OFF + at, mask=inside, other=0.0) * scale, axis=0)
    return tl.where(total > 0.0, taken / tl.where(total > 0.0, total, 1.0), 0.0)


@triton.jit
def _constrained_race_kernel(
    LOGITS, stride_l, vocab, TEMP, SEEDS, INDEX, BEST_VAL, BEST_IDX, ROWS, ACTIVE, PTR, LAST, KIND, ARG, op_stride,
    STATE, ACCEPTING, TOKEN_CLASS, ALLOWED, num_classes, CHUNK_ALLOWED, CHUNK_MAX, CHUNK_ALL, CHUNK_OFF,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr, HAS_ROWS: tl.constexpr, HOLE_KIND: tl.constexpr,
    COPY_KIND: tl.constexpr, FAST_LOG: tl.constexpr, PRESSURE: tl.constexpr,
):  # fmt: skip
    lane = tl.program_id(0)
    chunk = tl.program_id(1)
    out = lane * CHUNKS + chunk
    r, ptr, active, kind = lane_op(lane, ROWS, ACTIVE, PTR, KIND, op_stride, HAS_ROWS)
    ids = chunk * BLOCK + tl.arange(0, BLOCK)
    in_vocab = ids < vocab
    keep = in_vocab
    nothing = active & (kind == COPY_KIND)  # a forced token: no draw
    if active & (kind == HOLE_KIND):
        state, exit_token = hole_state(r, ptr, STATE, ARG, LAST, ACCEPTING, op_stride)
        has_exit = (exit_token >= 0) & (exit_token >= chunk * BLOCK) & (exit_token < chunk * BLOCK + BLOCK)
        if (tl.load(CHUNK_ALLOWED + state * CHUNKS + chunk) != 0) | has_exit:
            cls = tl.load(TOKEN_CLASS + ids, mask=keep, other=0)
            allowed = tl.load(ALLOWED + state * num_classes + cls, mask=keep, other=0) != 0
            keep = keep & (allowed | (ids == exit_token))
            nothing = tl.max(keep.to(tl.int32), axis=0) == 0  # no token of this chunk may come next
        else:
            keep = ids < 0  # (for PRESSURE: every token of the chunk is taken away)
            nothing = active  # (true here) no move of the state into this chunk, and the exit token lies elsewhere
    row_start = LOGITS + lane.to(tl.int64) * stride_l
    if PRESSURE:  # every logit of the chunk is read: the race takes the kept ones, the pressure all of them
        x = tl.load(row_start + ids, mask=in_vocab, other=float("-inf")).to(tl.float32)
        copy = active & (kind == COPY_KIND)
        allowed = tl.where(copy, ids == tl.load(ARG + r * op_stride + ptr), keep)  # a copy: its token alone
        top, total, taken = block_pressure(x, in_vocab & ~allowed)
        tl.store(CHUNK_MAX + out, top)
        tl.store(CHUNK_ALL + out, total)
        tl.store(CHUNK_OFF + out, taken)
    if nothing:
        tl.store(BEST_VAL + out, float("-inf"))
        tl.store(BEST_IDX + out, 0)
    else:
        if not PRESSURE:  # the kept logits alone
            x = tl.load(row_start + ids, mask=keep, other=float("-inf")).to(tl.float32)
        race = _race_value(x, tl.load(TEMP + lane), tl.load(SEEDS + lane), tl.load(INDEX + lane), ids, 0, FAST_LOG)
        race = tl.where(keep, race, float("-inf"))
        best, where = tl.max(race, axis=0, return_indices=True, return_indices_tie_break_left=True)
        tl.store(BEST_VAL + out, best)
        tl.store(BEST_IDX + out, chunk * BLOCK + where)


@triton.jit
def pick(BEST_VAL, BEST_IDX, row, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
    """One row's token from its chunks' best values and indices: the first chunk holding the maximum."""
    c = tl.arange(0, BLOCK_C)
    values = tl.load(BEST_VAL + row * CHUNKS + c, mask=c < CHUNKS, other=float("-inf"))
    _, first = tl.max(values, axis=0, return_indices=True, return_indices_tie_break_left=True)
    return tl.load(BEST_IDX + row * CHUNKS + first)


@triton.jit
def _pick_kernel(BEST_VAL, BEST_IDX, OUT, DONE, TOKENS, CHUNK_MAX, CHUNK_ALL, CHUNK_OFF, PRESSURE_NOW,
                 CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr, HAS_DONE: tl.constexpr,
                 PRESSURE: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    token = pick(BEST_VAL, BEST_IDX, row, CHUNKS, BLOCK_C).to(tl.int64)
    if HAS_DONE:  # a settled row keeps the token it has
        token = tl.where(tl.load(DONE + row) != 0, tl.load(TOKENS + row), token)
    tl.store(OUT + row, token)
    if PRESSURE:  # the constrained race's blocks' shares of the lane's pressure, combined
        tl.store(PRESSURE_NOW + row, combined_pressure(CHUNK_MAX, CHUNK_ALL, CHUNK_OFF, row, CHUNKS, BLOCK_C))


class RacePartials(NamedTuple):
    """Per (row, program) results of one race launch (race_partials); a program raced `span` blocks."""

    best_val: torch.Tensor  # [rows, parts] fp32: the part's best race value (-inf: nothing kept)
    best_idx: torch.Tensor  # [rows, parts] int32: its token id
    chunk_max: torch.Tensor | None  # [rows, parts] fp32 maximum logit of each block (stats only: span 1)
    chunk_mass: torch.Tensor | None  # [rows, parts] fp32 sum of exp((logit - block max) / T) (stats only)
    block: int


def race_partials(
    logits: torch.Tensor,  # [rows, vocab] bf16, fp16 or fp32, unit stride along vocab
    temperature: torch.Tensor,  # [rows] fp32, <= 0: greedy
    tau: torch.Tensor | None,  # [rows] int32 threshold key, or None: no threshold
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    round_index: int = 0,  # rejection round: re-keys the noise
    skip: torch.Tensor | None = None,  # [rows] bool / int8: rows to leave out
    stats: bool = False,  # also each block's maximum logit and mass (the top-p rounds; span 1)
    block: int = 4096,  # token ids per block
    num_warps: int = 4,  # fewer registers per program than 8 warps
    span: int = 1,  # blocks per program: > 1 when most rows are skipped (fewer programs that return at once)
) -> RacePartials:
    """The race kernel alone: each program's best (the pick, `pick_tokens`, is a second launch)."""
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1 and (span == 1 or not stats)
    parts = triton.cdiv(triton.cdiv(vocab, block), span)
    dev, f32 = logits.device, torch.float32
    best_val = torch.empty((rows, parts), dtype=f32, device=dev)
    best_idx = torch.empty((rows, parts), dtype=torch.int32, device=dev)
    chunk_max = torch.empty((rows, parts), dtype=f32, device=dev) if stats else None
    chunk_mass = torch.empty((rows, parts), dtype=f32, device=dev) if stats else None
    _race_kernel[(rows, parts)](
        logits, temperature, tau if tau is not None else temperature, seeds, token_index,
        skip if skip is not None else temperature, best_val, best_idx,
        chunk_max if stats else best_val, chunk_mass if stats else best_val, logits.stride(0), vocab,
        CHUNKS=parts, BLOCK=block, SPAN=span, HAS_TAU=tau is not None, ROUND=round_index, HAS_SKIP=skip is not None,
        STATS=stats, FAST_LOG=fast_log(), num_warps=num_warps,
    )  # fmt: skip
    return RacePartials(best_val, best_idx, chunk_max, chunk_mass, block)


def block_c(chunks: int) -> int:
    """The pick's arange over a row's chunks (a power of two, >= 2)."""
    return max(2, triton.next_power_of_2(chunks))


def pick_tokens(
    partials: RacePartials,
    done: torch.Tensor | None = None,  # [rows] int8: settled rows, which keep `tokens`
    tokens: torch.Tensor | None = None,  # [rows] int64
    pressure: tuple[torch.Tensor, ...] | None = None,  # the constrained race's (max, all, off) [rows, chunks], now
) -> torch.Tensor:  # [rows] int64
    rows, chunks = partials.best_val.shape
    out = torch.empty(rows, dtype=torch.int64, device=partials.best_val.device)
    _pick_kernel[(rows,)](
        partials.best_val, partials.best_idx, out, done if done is not None else out,
        tokens if tokens is not None else out, *(pressure if pressure is not None else (out,) * 4),
        CHUNKS=chunks, BLOCK_C=block_c(chunks), HAS_DONE=done is not None, PRESSURE=pressure is not None,
    )  # fmt: skip
    return out


def race_argmax(
    logits: torch.Tensor,  # [rows, vocab] bf16, fp16 or fp32
    temperature: torch.Tensor,  # [rows] fp32, <= 0: greedy
    tau: torch.Tensor | None,  # [rows] int32 threshold key, or None: no threshold
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    round_index: int = 0,  # rejection round: re-keys the noise
    skip: torch.Tensor | None = None,  # [rows] bool: rows to leave out (token 0 comes back)
    block: int = 4096,
    num_warps: int = 4,
) -> torch.Tensor:  # [rows] int64
    """sampler.race_argmax_torch in two launches: the race over (row, chunk) programs, then the pick."""
    partials = race_partials(logits, temperature, tau, seeds, token_index, round_index, skip, block=block,
                             num_warps=num_warps)
    return pick_tokens(partials)


class ConstraintView(NamedTuple):
    """The constraint runtime's per-row state and tables, as the mask kernel reads them (constraints/runtime.py)."""

    active: torch.Tensor  # [R] bool: the row is constrained
    ptr: torch.Tensor  # [R] int64: current op
    last_op: torch.Tensor  # [R] int64
    op_kind: torch.Tensor  # [R, Lmax] int64 (a view with row stride)
    op_arg: torch.Tensor  # [R, Lmax] int64
    state: torch.Tensor  # [R] int64: automaton state in a hole
    accepting: torch.Tensor  # [S] bool
    token_class: torch.Tensor  # [V] int32
    allowed_by_class: torch.Tensor  # [S, C] int8
    chunk_allowed: torch.Tensor  # [S, ceil(V / block)] int8: the state has a move into that chunk
    copy_kind: int
    hole_kind: int


def constrained_race_argmax(
    logits: torch.Tensor,  # [lanes, vocab] bf16, fp16 or fp32, unit stride (no constraint mask applied)
    temperature: torch.Tensor,  # [lanes] fp32, <= 0: greedy
    seeds: torch.Tensor,  # [lanes] int64
    token_index: torch.Tensor,  # [lanes] int64
    view: ConstraintView,
    rows: torch.Tensor | None = None,  # [lanes] int64 runtime rows (prefill); None: lane = row
    block: int = 4096,
    num_warps: int = 8,
    pressure: torch.Tensor | None = None,  # [>= lanes] fp32: each lane's constraint pressure written here
) -> torch.Tensor:  # [lanes] int64: race_argmax over the allowed tokens; 0 for rows in a copy op
    lanes, vocab = logits.shape
    assert logits.stride(-1) == 1
    rows = rows.contiguous() if rows is not None else None
    chunks = triton.cdiv(vocab, block)
    assert view.chunk_allowed.shape[1] == chunks, "chunk_allowed was built for another block or vocabulary"
    best_val = torch.empty((lanes, chunks), dtype=torch.float32, device=logits.device)
    best_idx = torch.empty((lanes, chunks), dtype=torch.int32, device=logits.device)
    shares = [torch.empty_like(best_val) for _ in range(3)] if pressure is not None else [best_val] * 3
    _constrained_race_kernel[(lanes, chunks)](
        logits, logits.stride(0), vocab, temperature, seeds, token_index, best_val, best_idx,
        rows if rows is not None else view.ptr, view.active, view.ptr, view.last_op, view.op_kind, view.op_arg,
        view.op_kind.stride(0), view.state, view.accepting, view.token_class, view.allowed_by_class,
        view.allowed_by_class.shape[1], view.chunk_allowed, *shares,
        CHUNKS=chunks, BLOCK=block, HAS_ROWS=rows is not None, HOLE_KIND=view.hole_kind, COPY_KIND=view.copy_kind,
        FAST_LOG=fast_log(), PRESSURE=pressure is not None, num_warps=num_warps,
    )  # fmt: skip
    return pick_tokens(RacePartials(best_val, best_idx, None, None, block),
                       pressure=(*shares, pressure) if pressure is not None else None)
