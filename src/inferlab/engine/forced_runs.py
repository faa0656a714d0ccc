"""Forced tokens in bulk: the constrained decode step feeds each row the copy tokens its program forces next
as extra query positions, so a run of forced tokens costs one step instead of one step each.

With EngineConfig.forced_run_tokens = F > 0, a constrained decode step over rows [0, b) first books, per
live row, the copy ops that follow its newest token (at most F; never the program's last op (its EOS), a
stop id, or the last token max_new allows: those end a row and stay with the step's own choose and record),
within the step's budget of E = extra_positions(b, F, share) positions, rows in order (a run past the
budget waits for a later step, which books it then). The booked tokens go into the row's output and the constraint's
pointer moves past them (rows.book_, runtime.skip). The forward then runs over T = b + E packed positions:
    row r: [its newest token at p, its booked c_1..c_e at p+1..p+e] at packed [o_r, o_r + e], o_r = r + sum(e_<r)
    padding: the positions after the last row's (slot: the KV cache's scratch slot, which the torch
             path writes and the Triton kernel leaves alone)
Each position writes its K/V and attends to its row's slot up to itself (causal among the row's own
positions); the LM head runs at each row's last position and the step samples from it as always. So the
step's token, its noise (keyed by n_out) and every token after it are those one token per step gives; only
rounding differs (other GEMM shapes, the attention's order of summation).

The constraint pressure of a booked token (1 - p(token), constraints/pressure.py) comes from the LM head at
the position before it: those E positions' logits (`bulk`), measured before the step's own token.
All of it is tensor work of fixed shapes per bucket: the decode graphs capture it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from inferlab.engine.attention import PackedRows
from inferlab.engine.constraints.pressure import PressureBuffers, accumulate, copy_pressure
from inferlab.engine.rows import RowState


def extra_positions(rows: int, width: int, share: float = 0.125) -> int:
    """E, the booked positions a step over `rows` rows has room for: `share` of its rows, at least four whole
    runs, at most a whole run per row (docs/decisions.md "Forced tokens in bulk" says why)."""
    return min(rows * width, max(4 * width, math.ceil(rows * share)))


@dataclass(frozen=True)
class PackedStep:
    """One decode step's packed positions (T = b + E) and where the b rows sit in them."""

    tokens: torch.Tensor  # [T] int64: each position's input token
    positions: torch.Tensor  # [T] int64: its position in its slot (its K/V is written there)
    slots: torch.Tensor  # [T] int64: its KV slot (padding: the scratch slot)
    rows: PackedRows  # per row: first packed index, count, first position, slot ([b] each)
    last: torch.Tensor  # [b] int64: each row's last packed index (the LM head's input)
    booked: torch.Tensor  # [b] int64: forced tokens booked per row
    forced: torch.Tensor  # [b, F] int64: their ids (row r: the first booked[r])
    offset: torch.Tensor  # [b] int64: where row r's booked tokens start among the E (sum(booked_<r))
    ptr: torch.Tensor  # [b] int64: the constraint's pointer before the booking (the first booked op)
    bulk: torch.Tensor | None  # [E] int64: the packed index before each booked token (pressure), or None
    targets: torch.Tensor | None  # [E] int64: that booked token (0 where none), or None


class ForcedRuns:
    """The booking and packing of one engine's constrained decode steps (runner.decode_step calls them):
    with `triton`, kernels/triton_forced_runs.py's launches; else the torch code below (the reference)."""

    def __init__(self, width: int, scratch_slot: int, triton: bool = False, share: float = 0.125) -> None:
        self.width = width  # F
        self.share = share  # the step's budget of booked positions per row (extra_positions)
        self.scratch_slot = scratch_slot  # the KV cache's extra slot, which only padding positions write
        self.kernels = None
        if triton:
            from inferlab.engine.kernels import triton_forced_runs

            self.kernels = triton_forced_runs

    def positions(self, rows: int) -> int:
        """T, the positions a packed step over `rows` rows runs its forward over: the rows and their budget."""
        return rows + extra_positions(rows, self.width, self.share)

    def pack(self, rows: RowState, slots: torch.Tensor, runtime, measure: bool) -> PackedStep:
        """Book rows [0, b)'s forced runs (rows: the bucket's view; slots [b]) and lay out the step's
        positions; with `measure`, the bulk positions whose logits give the booked tokens' pressure."""
        b = rows.tokens.shape[0]
        budget = extra_positions(b, self.width, self.share)
        if self.kernels is not None:
            t = self.kernels.pack(rows, slots, runtime, self.width, budget, self.scratch_slot, measure)
            packed_rows = PackedRows(t["first"], t["count"], t["start"], slots, self.width + 1)
            return PackedStep(t["tokens"], t["positions"], t["slots"], packed_rows, t["last"], t["booked"],
                              t["forced"], t["offset"], t["ptr"], t["bulk"], t["targets"])
        return self._pack_torch(rows, slots, runtime, budget, measure)

    def _pack_torch(self, rows: RowState, slots: torch.Tensor, runtime, budget: int, measure: bool) -> PackedStep:
        b, width, device = rows.tokens.shape[0], self.width, rows.tokens.device
        live = rows.active & ~rows.finished
        forced, run = runtime.forced_run(b, width, live)  # [b, F], [b]
        j = torch.arange(width, device=device)
        allowed = ~rows.stops_at(forced) & (rows.n_out[:, None] + j[None, :] + 1 < rows.max_new[:, None])
        run = torch.minimum(run, allowed.long().cumprod(dim=1).sum(dim=1))
        ahead = run.cumsum(0) - run
        booked = (budget - ahead).clamp(min=0).minimum(run)  # [b]
        offset = booked.cumsum(0) - booked
        ptr = runtime.ptr[:b].clone()
        start = rows.positions.clone()  # [b] each row's newest token's position
        runtime.skip(b, booked)
        rows.book_(forced, booked)

        first = torch.arange(b, device=device) + offset  # [b]
        k = torch.arange(width + 1, device=device)[None, :]  # [1, F + 1]
        total = b + budget
        index = torch.where(k <= booked[:, None], first[:, None] + k, total).flatten()  # [b * (F + 1)]; total: dropped

        def packed(values: torch.Tensor, fill: int) -> torch.Tensor:  # [b, F + 1] -> [T]
            out = torch.full((total + 1,), fill, dtype=torch.int64, device=device)
            return out.scatter_(0, index, values.flatten())[:total]

        tokens = packed(torch.cat([rows.tokens[:, None], forced], dim=1), 0)
        positions = packed(start[:, None] + k, 0)
        slot_of = packed(slots[:, None].expand(b, width + 1), self.scratch_slot)
        bulk = targets = None
        if measure:
            has = j[None, :] < booked[:, None]  # [b, F]
            at = torch.where(has, offset[:, None] + j[None, :], budget).flatten()
            before = (first[:, None] + j[None, :]).flatten()  # the packed index before booked token j
            empty = torch.zeros(budget + 1, dtype=torch.int64, device=device)
            bulk = empty.clone().scatter_(0, at, before)[:budget]
            targets = empty.scatter_(0, at, forced.flatten())[:budget]
        packed_rows = PackedRows(first, booked + 1, start, slots, width + 1)
        return PackedStep(tokens, positions, slot_of, packed_rows, first + booked, booked, forced, offset, ptr, bulk,
                          targets)

    def measure(self, step: PackedStep, bulk_logits: torch.Tensor, buffers: PressureBuffers, runtime) -> None:
        """The booked tokens' pressure (bulk_logits [E, V] at step.bulk) into the rows' accumulators, in
        token order, before the step's own token is measured."""
        if self.kernels is not None:
            values = self.kernels.copy_pressure(bulk_logits, step.targets)
            self.kernels.accumulate(values, step.booked, step.offset, step.ptr, runtime, buffers.acc, self.width)
            return
        b, budget = step.booked.shape[0], bulk_logits.shape[0]
        values = copy_pressure(bulk_logits, step.targets)  # [E]
        constrained = runtime.active[:b]
        for i in range(self.width):
            value = values[(step.offset + i).clamp(max=budget - 1)]
            accumulate(buffers, constrained & (i < step.booked), step.ptr + i, slice(0, b), value)
