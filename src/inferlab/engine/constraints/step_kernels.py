"""Triton kernels of the constrained step, reading the runtime's state directly: the hole mask, the race
with the mask folded in, and the choice of forced tokens fused with the advance of every live row.

In torch the step is dozens of tiny launches besides the mask itself (op lookups gathered per row, `where`s,
the automaton step), a fixed cost per step that a small batch feels. Here:
- `mask_step`: grid (B, V / BLOCK); each program looks up its row's op, state and exit token and, for a
  row in a hole, stores -inf where the state has no move for the token's class unless it is the open exit
  token (it reads no logits); a row's first program also writes whether its token is forced (a copy op),
  so the sampler skips its draw;
- `constrained_race` (filter level none): the race with the mask in registers
  (kernels/triton_sampling.constrained_race_argmax): no mask pass over [B, V], no draw for copy rows;
- `emit_step`: one lane per row: the forced copy token or the sample, then the advance of the rows still
  live (runtime.advance).
Same semantics as runtime.mask_logits / choose / advance (the torch reference), tested through the
interpreter. `rows` (optional) maps lanes to runtime rows (prefill). With `pressure` (pressure.py) the mask
kernel and the race also measure the constraint's pressure (the mask: each block's share, then one
combining launch per row) and the emit kernel accumulates it for the live rows.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from inferlab.constraints.program import COPY, HOLE

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch path serves when Triton is missing
    triton = None

BLOCK = 1024  # token ids per mask program


def triton_available() -> bool:
    return triton is not None


if triton is not None:
    from inferlab.engine.kernels.triton_sampling import block_c, block_pressure, combined_pressure, hole_state, lane_op

    @triton.jit
    def _mask_step_kernel(
        LOGITS, row_stride, vocab, ROWS, ACTIVE, PTR, LAST, KIND, ARG, op_stride, STATE, ACCEPTING, TOKEN_CLASS,
        ALLOWED, num_classes, FORCED, CHUNK_MAX, CHUNK_ALL, CHUNK_OFF,
        HAS_ROWS: tl.constexpr, HOLE_KIND: tl.constexpr, COPY_KIND: tl.constexpr, BLOCK_SIZE: tl.constexpr,
        PRESSURE: tl.constexpr,
    ):  # fmt: skip
        lane = tl.program_id(0)
        chunk = tl.program_id(1)
        r, ptr, active, kind = lane_op(lane, ROWS, ACTIVE, PTR, KIND, op_stride, HAS_ROWS)
        in_hole = active & (kind == HOLE_KIND)
        if chunk == 0:
            tl.store(FORCED + lane, (active & (kind == COPY_KIND)).to(tl.int8))
        ids = chunk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_vocab = ids < vocab
        row_start = LOGITS + lane.to(tl.int64) * row_stride  # B x V may exceed 2**31
        top = tl.full([], float("-inf"), tl.float32)  # this block's share of the pressure (PRESSURE)
        total = tl.full([], 0.0, tl.float32)
        taken = tl.full([], 0.0, tl.float32)
        if in_hole:
            state, exit_token = hole_state(r, ptr, STATE, ARG, LAST, ACCEPTING, op_stride)
            cls = tl.load(TOKEN_CLASS + ids, mask=in_vocab, other=0)
            allowed = tl.load(ALLOWED + state * num_classes + cls, mask=in_vocab, other=0) != 0
            allowed = allowed | (ids == exit_token)
            if PRESSURE:  # from the logits before the mask's store
                x = tl.load(row_start + ids, mask=in_vocab, other=float("-inf")).to(tl.float32)
                top, total, taken = block_pressure(x, in_vocab & ~allowed)
            tl.store(row_start + ids, float("-inf"), mask=in_vocab & ~allowed)
        if PRESSURE:
            if active & (kind == COPY_KIND):  # every token but the forced one
                x = tl.load(row_start + ids, mask=in_vocab, other=float("-inf")).to(tl.float32)
                top, total, taken = block_pressure(x, in_vocab & (ids != tl.load(ARG + r * op_stride + ptr)))
            share = lane * tl.num_programs(1) + chunk
            tl.store(CHUNK_MAX + share, top)
            tl.store(CHUNK_ALL + share, total)
            tl.store(CHUNK_OFF + share, taken)

    @triton.jit
    def _pressure_kernel(CHUNK_MAX, CHUNK_ALL, CHUNK_OFF, NOW, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
        lane = tl.program_id(0)
        tl.store(NOW + lane, combined_pressure(CHUNK_MAX, CHUNK_ALL, CHUNK_OFF, lane, CHUNKS, BLOCK_C))

    @triton.jit(do_not_specialize=["lanes"])
    def _emit_step_kernel(
        SAMPLED, TOKENS, ROW_ACTIVE, ROW_FINISHED, ROWS, ACTIVE, PTR, LAST, KIND, ARG, op_stride, STATE, ACCEPTING,
        TRANSITIONS, num_classes, TOKEN_CLASS, lanes, NOW, ACC,
        HAS_ROWS: tl.constexpr, COPY_KIND: tl.constexpr, HOLE_KIND: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        PRESSURE: tl.constexpr,
    ):  # fmt: skip
        lane = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        m = lane < lanes
        if HAS_ROWS:
            r = tl.load(ROWS + lane, mask=m, other=0)
        else:
            r = lane
        active = (tl.load(ACTIVE + r, mask=m, other=0) != 0) & m
        ptr = tl.load(PTR + r, mask=m, other=0)
        last = tl.load(LAST + r, mask=m, other=0)
        base = r.to(tl.int64) * op_stride
        kind = tl.load(KIND + base + ptr, mask=m, other=0)
        arg = tl.load(ARG + base + ptr, mask=m, other=0)
        sampled = tl.load(SAMPLED + lane, mask=m, other=0)
        token = tl.where(active & (kind == COPY_KIND), arg, sampled)
        tl.store(TOKENS + lane, token, mask=m)
        live = (tl.load(ROW_ACTIVE + lane, mask=m, other=0) != 0) & (tl.load(ROW_FINISHED + lane, mask=m, other=1) == 0)
        state = tl.load(STATE + r, mask=m, other=0)
        in_hole = kind == HOLE_KIND
        next_arg = tl.load(ARG + base + tl.minimum(ptr + 1, last), mask=m, other=-1)
        exiting = in_hole & (token == next_arg) & (tl.load(ACCEPTING + state, mask=m, other=0) != 0)
        step = tl.where(in_hole, tl.where(exiting, 2, 0), 1)
        new_ptr = tl.minimum(ptr + step, last)
        new_kind = tl.load(KIND + base + new_ptr, mask=m, other=0)
        new_arg = tl.load(ARG + base + new_ptr, mask=m, other=0)
        entered = tl.where(new_kind == HOLE_KIND, new_arg, 0)
        cls = tl.load(TOKEN_CLASS + token, mask=m, other=0)
        stepped = tl.load(TRANSITIONS + state * num_classes + cls, mask=m, other=0)
        moving = active & live
        if PRESSURE:  # this step's pressure into the row's accumulators (pressure.accumulate), at the old ptr
            p = tl.load(NOW + lane, mask=m, other=0.0)
            acc = ACC + r.to(tl.int64) * 5  # SUM, STEPS, MAX, MAX_STEP, MAX_OP
            steps = tl.load(acc + 1, mask=moving, other=0.0)
            higher = moving & (p > tl.load(acc + 2, mask=moving, other=0.0))
            tl.store(acc, tl.load(acc, mask=moving, other=0.0) + p, mask=moving)
            tl.store(acc + 1, steps + 1.0, mask=moving)
            tl.store(acc + 2, p, mask=higher)
            tl.store(acc + 3, steps, mask=higher)
            tl.store(acc + 4, ptr.to(tl.float32), mask=higher)
        tl.store(PTR + r, new_ptr, mask=moving)
        tl.store(STATE + r, tl.where(step > 0, entered, stepped), mask=moving)


@lru_cache(maxsize=2)
def _interpreted(name: str):
    """The same kernel run by Triton's interpreter, for CPU tensors (tests). The @triton.jit helpers it calls
    run interpreted too: an interpreted kernel cannot call a compiled helper."""
    import types

    from triton.runtime.interpreter import InterpretedFunction

    kernel = globals()[name].fn
    scope = {key: InterpretedFunction(value.fn) if isinstance(value, triton.runtime.JITFunction) else value
             for key, value in kernel.__globals__.items()}
    return InterpretedFunction(types.FunctionType(kernel.__code__, scope, kernel.__name__))


def _kernel(name: str, device: torch.device):
    return _interpreted(name) if device.type == "cpu" else globals()[name]


def mask_step(runtime, logits: torch.Tensor, rows: torch.Tensor | None, pressure=None) -> torch.Tensor:
    """runtime.mask_logits in one launch; logits [B, V] (any float dtype, unit stride), in place. With
    `pressure` (constraints/pressure.PressureBuffers) each program also keeps its block's share of the
    lane's pressure, and a second launch combines them into pressure.now."""
    assert logits.stride(1) == 1, "the mask kernel needs unit stride along the vocabulary"
    rows = rows.contiguous() if rows is not None else None  # the kernel indexes rows[lane]: unit stride
    batch, vocab = logits.shape
    chunks = triton.cdiv(vocab, BLOCK)
    shares = [torch.empty((batch, chunks), dtype=torch.float32, device=logits.device) for _ in range(3)] \
        if pressure is not None else [logits] * 3  # fmt: skip
    rt = runtime
    _kernel("_mask_step_kernel", logits.device)[(batch, chunks)](
        logits, logits.stride(0), vocab, rows if rows is not None else rt.ptr, rt.active, rt.ptr, rt.last_op,
        rt.op_kind, rt.op_arg, rt.op_kind.stride(0), rt.state, rt.accepting, rt.token_class_i32,
        rt.allowed_by_class, rt.allowed_by_class.shape[1], rt.forced, *shares,
        HAS_ROWS=rows is not None, HOLE_KIND=HOLE, COPY_KIND=COPY, BLOCK_SIZE=BLOCK, PRESSURE=pressure is not None,
    )  # fmt: skip
    if pressure is not None:
        _kernel("_pressure_kernel", logits.device)[(batch,)](*shares, pressure.now, CHUNKS=chunks,
                                                             BLOCK_C=block_c(chunks))
    return logits


def constrained_race(
    runtime,
    logits: torch.Tensor,  # [B, V] any float dtype, unit stride, the min-length stop mask applied, no constraint mask
    temperature: torch.Tensor,  # [B] fp32, <= 0: greedy
    seeds: torch.Tensor,  # [B] int64
    token_index: torch.Tensor,  # [B] int64
    rows: torch.Tensor | None,  # lanes -> runtime rows (prefill), or None (rows 0..B-1)
    pressure=None,  # constraints/pressure.PressureBuffers: also this step's pressure into pressure.now
) -> torch.Tensor:  # [B] int64: the race over the constraint's allowed tokens (0 for forced rows)
    """mask_step + the race in one (kernels/triton_sampling.constrained_race_argmax, which reads the same
    state as mask_step). Runs where the engine's Triton kernels run (CUDA, or TRITON_INTERPRET=1)."""
    from inferlab.engine.kernels.triton_sampling import ConstraintView, constrained_race_argmax

    rt = runtime
    view = ConstraintView(rt.active, rt.ptr, rt.last_op, rt.op_kind, rt.op_arg, rt.state, rt.accepting,
                          rt.token_class_i32, rt.allowed_by_class, rt.chunk_allowed, COPY, HOLE)
    return constrained_race_argmax(logits, temperature, seeds, token_index, view, rows, block=runtime.race_block,
                                   pressure=pressure.now if pressure is not None else None)


def emit_step(
    runtime, sampled: torch.Tensor, row_active: torch.Tensor, row_finished: torch.Tensor, rows: torch.Tensor | None,
    pressure=None,
) -> torch.Tensor:
    """runtime.choose, then runtime.advance of the live rows, in one launch; returns the tokens [B]. With
    `pressure`, the live constrained rows' accumulators take this step's pressure.now first."""
    lanes = sampled.shape[0]
    # the kernel indexes every [B] input by lane: unit strides (prefill's row ids are a column of a staged block)
    sampled, row_active, row_finished = sampled.contiguous(), row_active.contiguous(), row_finished.contiguous()
    rows = rows.contiguous() if rows is not None else None
    tokens = torch.empty_like(sampled)
    block = min(256, max(16, triton.next_power_of_2(lanes)))
    rt = runtime
    _kernel("_emit_step_kernel", sampled.device)[(triton.cdiv(lanes, block),)](
        sampled, tokens, row_active, row_finished, rows if rows is not None else rt.ptr, rt.active, rt.ptr,
        rt.last_op, rt.op_kind, rt.op_arg, rt.op_kind.stride(0), rt.state, rt.accepting, rt.transitions,
        rt.transitions.shape[1], rt.token_class, lanes,
        pressure.now if pressure is not None else sampled, pressure.acc if pressure is not None else sampled,
        HAS_ROWS=rows is not None, COPY_KIND=COPY, HOLE_KIND=HOLE, BLOCK_ROWS=block, PRESSURE=pressure is not None,
    )  # fmt: skip
    return tokens
