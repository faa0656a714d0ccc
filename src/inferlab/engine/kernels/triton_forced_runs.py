"""Triton kernels of forced tokens in bulk (engine/forced_runs.py): the booking and packing of a step in one
launch, the booked tokens' copy pressure in one pass over their logits, and its accumulation in one more.

In torch the booking and packing are ~80 tiny kernels per step (the forced run's gathers, the stop and room
checks, two prefix sums, the pointer's skip, the output's scatter, three packed scatters, the bulk index),
and the pressure ~50 more: inside a CUDA graph each still costs a launch, a few percent of a 256-row step,
about what the forced runs save. Here:
- `pack`: one program walks the rows in blocks of BLOCK_R, carrying the two prefix sums (the runs ahead of
  a row, for the budget; the booked tokens ahead, for its packed offset) from block to block; per row it
  reads up to F copy ops after the constraint's pointer, books within the budget, moves the pointer (a
  row landing on a hole takes its start state), appends the booked tokens to the row's output, and writes
  the row's packed positions and bulk entries; then the padding after the last row's positions;
- `copy_pressure`: one program per bulk position, an online max and two sums over the vocabulary;
- `accumulate`: one lane per row, its booked tokens' values into its accumulators in token order (as the
  emit kernel folds one value).
Same semantics as ForcedRuns.pack / measure's torch path (the references, tested through the interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.constraints.program import COPY, HOLE
from inferlab.constraints.token_automaton import DEAD_STATE

BLOCK_R = 256  # rows per block of the pack kernel's walk
BLOCK_V = 2048  # vocabulary ids per iteration of the copy pressure
PRESSURE_CHUNK = 8192  # vocabulary ids per program of the copy pressure: 19 shares of qwen3's 151,936


@triton.jit
def _pack_kernel(
    TOKENS, POSITIONS, ACTIVE, FINISHED, N_OUT, MAX_NEW, STOP, N_STOP, OUT, SLOTS,
    RT_ACTIVE, PTR, LAST, KIND, ARG, STATE,
    P_TOKENS, P_POSITIONS, P_SLOTS, FIRST, COUNT, START, LAST_AT, BOOKED, OFFSET, PTR0, FORCED, BULK, TARGETS,
    rows, budget, total, scratch_slot, op_stride, out_stride, out_cap,
    WIDTH: tl.constexpr, STOPS: tl.constexpr, BLOCK: tl.constexpr, MEASURE: tl.constexpr,
    COPY_KIND: tl.constexpr, HOLE_KIND: tl.constexpr, DEAD: tl.constexpr,
):  # fmt: skip
    ahead_carry = tl.zeros([], tl.int64)  # runs of the rows before this block (the budget's prefix sum)
    booked_carry = tl.zeros([], tl.int64)  # booked tokens of the rows before this block (the packed offsets)
    for r0 in range(0, rows, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        m = r < rows
        live = (tl.load(ACTIVE + r, mask=m, other=0) != 0) & (tl.load(FINISHED + r, mask=m, other=1) == 0)
        live = live & (tl.load(RT_ACTIVE + r, mask=m, other=0) != 0)
        ptr = tl.load(PTR + r, mask=m, other=0)
        last = tl.load(LAST + r, mask=m, other=0)
        n_out = tl.load(N_OUT + r, mask=m, other=0)
        max_new = tl.load(MAX_NEW + r, mask=m, other=0)
        n_stop = tl.load(N_STOP + r, mask=m, other=0)
        base = r.to(tl.int64) * op_stride
        run = tl.zeros([BLOCK], tl.int64)
        going = live
        for j in tl.static_range(WIDTH):
            column = tl.minimum(ptr + j, last)
            kind = tl.load(KIND + base + column, mask=m, other=0)
            arg = tl.load(ARG + base + column, mask=m, other=0)
            stop = tl.zeros([BLOCK], tl.int1)
            for s in tl.static_range(STOPS):
                stop = stop | ((tl.load(STOP + r * STOPS + s, mask=m, other=-1) == arg) & (s < n_stop))
            ok = (kind == COPY_KIND) & (ptr + j < last) & ~stop & (n_out + j + 1 < max_new)
            going = going & ok
            run += going.to(tl.int64)
            tl.store(FORCED + r * WIDTH + j, arg, mask=m)
        ahead = tl.cumsum(run, axis=0) - run + ahead_carry
        booked = tl.minimum(tl.maximum(budget - ahead, 0), run)
        offset = tl.cumsum(booked, axis=0) - booked + booked_carry
        ahead_carry += tl.sum(run, axis=0)
        booked_carry += tl.sum(booked, axis=0)

        first = r + offset
        start = tl.load(POSITIONS + r, mask=m, other=0)
        slot = tl.load(SLOTS + r, mask=m, other=0)
        tl.store(P_TOKENS + first, tl.load(TOKENS + r, mask=m, other=0), mask=m)
        tl.store(P_POSITIONS + first, start, mask=m)
        tl.store(P_SLOTS + first, slot, mask=m)
        for j in tl.static_range(WIDTH):
            taken = m & (j < booked)
            token = tl.load(ARG + base + tl.minimum(ptr + j, last), mask=taken, other=0)  # read-only: no race
            tl.store(P_TOKENS + first + 1 + j, token, mask=taken)
            tl.store(P_POSITIONS + first + 1 + j, start + 1 + j, mask=taken)
            tl.store(P_SLOTS + first + 1 + j, slot, mask=taken)
            tl.store(OUT + r.to(tl.int64) * out_stride + tl.minimum(n_out + j, out_cap - 1), token, mask=taken)
            if MEASURE:
                tl.store(BULK + offset + j, first + j, mask=taken)
                tl.store(TARGETS + offset + j, token, mask=taken)
        new_ptr = ptr + booked
        kind = tl.load(KIND + base + new_ptr, mask=m, other=0)
        arg = tl.load(ARG + base + new_ptr, mask=m, other=0)
        moved = m & (booked > 0)
        tl.store(STATE + r, tl.where(kind == HOLE_KIND, arg, DEAD), mask=moved)
        tl.store(PTR + r, new_ptr, mask=m)
        tl.store(PTR0 + r, ptr, mask=m)
        tl.store(N_OUT + r, n_out + booked, mask=m)
        tl.store(POSITIONS + r, start + booked, mask=m)
        tl.store(FIRST + r, first, mask=m)
        tl.store(COUNT + r, booked + 1, mask=m)
        tl.store(START + r, start, mask=m)
        tl.store(LAST_AT + r, first + booked, mask=m)
        tl.store(BOOKED + r, booked, mask=m)
        tl.store(OFFSET + r, offset, mask=m)
    booked_total = booked_carry.to(tl.int32)
    for p0 in range(rows + booked_total, total, BLOCK):  # the padding after the last row's positions
        p = p0 + tl.arange(0, BLOCK)
        pm = p < total
        tl.store(P_TOKENS + p, tl.zeros([BLOCK], tl.int64), mask=pm)
        tl.store(P_POSITIONS + p, tl.zeros([BLOCK], tl.int64), mask=pm)
        tl.store(P_SLOTS + p, tl.zeros([BLOCK], tl.int64) + scratch_slot, mask=pm)
    if MEASURE:
        for q0 in range(booked_total, budget, BLOCK):  # bulk entries no booked token uses
            q = q0 + tl.arange(0, BLOCK)
            tl.store(BULK + q, tl.zeros([BLOCK], tl.int64), mask=q < budget)
            tl.store(TARGETS + q, tl.zeros([BLOCK], tl.int64), mask=q < budget)


def pack(rows, slots: torch.Tensor, runtime, width: int, budget: int, scratch_slot: int, measure: bool) -> dict:
    """ForcedRuns.pack's booking and layout in one launch (rows: RowState of the bucket's b rows, updated in
    place with the runtime's pointer and state). Returns PackedStep's tensors by field name."""
    b, device = rows.tokens.shape[0], rows.tokens.device
    total = b + budget
    i64 = dict(dtype=torch.int64, device=device)
    packed = torch.empty((3, total), **i64)  # tokens, positions, slots
    per_row = torch.empty((7, b), **i64)  # first, count, start, last, booked, offset, ptr0
    forced = torch.empty((b, width), **i64)
    bulk = torch.empty((2, budget), **i64) if measure else None  # the packed index before each, its token
    stops = rows.stop_ids.shape[1]
    assert rows.stop_ids.stride(0) == stops and runtime.op_kind.stride(0) == runtime.op_arg.stride(0)
    _pack_kernel[(1,)](
        rows.tokens, rows.positions, rows.active, rows.finished, rows.n_out, rows.max_new, rows.stop_ids,
        rows.n_stop, rows.out, slots.contiguous(),
        runtime.active, runtime.ptr, runtime.last_op, runtime.op_kind, runtime.op_arg, runtime.state,
        packed[0], packed[1], packed[2], *per_row, forced, *(bulk if measure else (forced, forced)),
        b, budget, total, scratch_slot, runtime.op_kind.stride(0), rows.out.stride(0), rows.out.shape[1],
        WIDTH=width, STOPS=stops, BLOCK=min(BLOCK_R, max(16, triton.next_power_of_2(b))), MEASURE=measure,
        COPY_KIND=COPY, HOLE_KIND=HOLE, DEAD=DEAD_STATE,
    )  # fmt: skip
    first, count, start, last, booked, offset, ptr0 = per_row
    return dict(tokens=packed[0], positions=packed[1], slots=packed[2], first=first, count=count, start=start,
                last=last, booked=booked, offset=offset, ptr=ptr0, forced=forced,
                bulk=bulk[0] if measure else None, targets=bulk[1] if measure else None)


@triton.jit
def _copy_pressure_part_kernel(LOGITS, TARGET, PART, stride_l, vocab, chunk, splits, BLOCK_V: tl.constexpr):
    """One booked position's (axis 0) share of the vocabulary (axis 1, `chunk` ids): its largest logit, the
    sum of exp(x - largest) and that sum without the forced token, into PART[lane, split, 0:3]."""
    lane = tl.program_id(0)
    split = tl.program_id(1)
    target = tl.load(TARGET + lane)
    row = LOGITS + lane.to(tl.int64) * stride_l
    lo = split * chunk
    hi = tl.minimum(lo + chunk, vocab)
    top = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    others = tl.zeros([], tl.float32)
    for v0 in range(lo, hi, BLOCK_V):
        ids = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(row + ids, mask=ids < hi, other=float("-inf")).to(tl.float32)
        new_top = tl.maximum(top, tl.max(x, axis=0))
        scale = tl.exp(top - new_top)
        w = tl.exp(x - new_top)
        total = total * scale + tl.sum(w, axis=0)
        others = others * scale + tl.sum(tl.where(ids == target, 0.0, w), axis=0)
        top = new_top
    at = PART + (lane * splits + split) * 3
    tl.store(at, top)
    tl.store(at + 1, total)
    tl.store(at + 2, others)


@triton.jit
def _copy_pressure_merge_kernel(PART, OUT, splits, BLOCK_S: tl.constexpr):
    """The shares of one booked position merged: others / total at the largest logit of all."""
    lane = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    mask = s < splits
    at = PART + (lane * splits + s) * 3
    top = tl.load(at, mask=mask, other=float("-inf"))
    weight = tl.exp(top - tl.max(top, axis=0))  # [BLOCK_S]; 0 where masked
    total = tl.sum(tl.load(at + 1, mask=mask, other=0.0) * weight, axis=0)
    others = tl.sum(tl.load(at + 2, mask=mask, other=0.0) * weight, axis=0)
    tl.store(OUT + lane, others / total)


def copy_pressure(logits: torch.Tensor, forced: torch.Tensor, chunk: int = PRESSURE_CHUNK) -> torch.Tensor:
    """constraints/pressure.copy_pressure for logits [N, V] (any float dtype, unit stride), forced [N]: each
    position's vocabulary in shares of `chunk` ids, one program each, then merged (N alone, 32 booked
    positions at 256 rows, would leave most of the GPU idle over a 151,936-entry vocabulary)."""
    assert logits.stride(1) == 1
    n, vocab = logits.shape
    splits = triton.cdiv(vocab, chunk)
    part = torch.empty((n, splits, 3), dtype=torch.float32, device=logits.device)
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    _copy_pressure_part_kernel[(n, splits)](logits, forced.contiguous(), part, logits.stride(0), vocab, chunk, splits,
                                            BLOCK_V=BLOCK_V)  # fmt: skip
    _copy_pressure_merge_kernel[(n,)](part, out, splits, BLOCK_S=max(16, triton.next_power_of_2(splits)))
    return out


@triton.jit
def _accumulate_kernel(VALUES, BOOKED, OFFSET, PTR0, RT_ACTIVE, ACC, rows, WIDTH: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = r < rows
    booked = tl.load(BOOKED + r, mask=m, other=0)
    offset = tl.load(OFFSET + r, mask=m, other=0)
    ptr = tl.load(PTR0 + r, mask=m, other=0)
    constrained = m & (tl.load(RT_ACTIVE + r, mask=m, other=0) != 0)
    acc = ACC + r.to(tl.int64) * 5  # SUM, STEPS, MAX, MAX_STEP, MAX_OP
    total = tl.load(acc, mask=m, other=0.0)
    steps = tl.load(acc + 1, mask=m, other=0.0)
    top = tl.load(acc + 2, mask=m, other=0.0)
    top_step = tl.load(acc + 3, mask=m, other=0.0)
    top_op = tl.load(acc + 4, mask=m, other=0.0)
    for j in tl.static_range(WIDTH):
        measured = constrained & (j < booked)
        p = tl.load(VALUES + offset + j, mask=measured, other=0.0)
        higher = measured & (p > top)
        top_step = tl.where(higher, steps, top_step)
        top_op = tl.where(higher, (ptr + j).to(tl.float32), top_op)
        top = tl.where(higher, p, top)
        total += tl.where(measured, p, 0.0)
        steps += measured.to(tl.float32)
    tl.store(acc, total, mask=m)
    tl.store(acc + 1, steps, mask=m)
    tl.store(acc + 2, top, mask=m)
    tl.store(acc + 3, top_step, mask=m)
    tl.store(acc + 4, top_op, mask=m)


def accumulate(values: torch.Tensor, booked: torch.Tensor, offset: torch.Tensor, ptr: torch.Tensor, runtime,
               acc: torch.Tensor, width: int) -> None:
    """Each row's booked tokens' values (values [E] at its offset) into acc [R, 5] in token order."""
    rows = booked.shape[0]
    block = min(256, max(16, triton.next_power_of_2(rows)))
    _accumulate_kernel[(triton.cdiv(rows, block),)](values, booked, offset, ptr, runtime.active, acc, rows,
                                                    WIDTH=width, BLOCK=block)
