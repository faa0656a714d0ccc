"""Constraint pressure on the device: how much of the model's probability each constrained step takes away,
measured inside the step and accumulated per row (docs/constraints.md "Pressure").

At a step, over the model's own distribution (softmax of the raw logits, T = 1, before any filter):
    hole step:  p = mass on the tokens the hole's state forbids (its open exit token counts as allowed)
    copy step:  p = 1 - p(forced token)
It is computed where the step already reads the logits with the constraint's state: the torch mask
(`lane_pressure`, from its forbidden table), the Triton mask kernel and the fused race (each block's
largest logit and its masses over all and over the forbidden tokens, combined per row: step_kernels.py,
kernels/triton_sampling.py). They write this step's value per lane into `now`; `emit` folds it into the
row's `acc` for the rows still live (`accumulate`, or the emit kernel), before the row's pointer advances.

Per row, `acc [R, 5]` fp32: the sum and count of its steps' values, the largest, the token index where it
was (the count before that step: every token of a constrained row is a measured step) and the op pointer
then. Integers are exact in fp32 far beyond any row's length. The host learns them with the rows'
snapshots (`snapshot_columns`: the fp32 bits as int64 columns), so retirement needs no copy of its own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

from inferlab.types import ConstraintPressure

SUM, STEPS, MAX, MAX_STEP, MAX_OP = range(5)  # the columns of PressureBuffers.acc
COLUMNS = 5
EMPTY_ROW = (0.0, 0.0, -1.0, 0.0, 0.0)  # a row before its first step: any value beats its max


@dataclass(frozen=True)
class PressureBuffers:
    now: torch.Tensor  # [R] fp32 per lane: this step's pressure (written by the mask or the race, read by emit)
    acc: torch.Tensor  # [R, COLUMNS] fp32 per row: SUM, STEPS, MAX, MAX_STEP, MAX_OP
    empty: torch.Tensor  # [1, COLUMNS] fp32: EMPTY_ROW, on the device (admission copies it without a host sync)

    @classmethod
    def allocate(cls, rows: int, device: torch.device) -> PressureBuffers:
        empty = torch.tensor([EMPTY_ROW], dtype=torch.float32, device=device)
        return cls(torch.zeros(rows, dtype=torch.float32, device=device), empty.repeat(rows, 1), empty)

    def reset(self, rows: torch.Tensor) -> None:
        """Admission: the rows' accumulators emptied ([n] int64 device ids)."""
        self.acc.index_copy_(0, rows, self.empty.expand(rows.shape[0], COLUMNS))

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.acc[dst] = self.acc[src]

    def snapshot_columns(self, b: int) -> torch.Tensor:
        """[b, COLUMNS] int64: rows [0, b)'s accumulators as their fp32 bit patterns (snapshots.py)."""
        return self.acc[:b].view(torch.int32).to(torch.int64)


def pressure_from_columns(values: list[int]) -> ConstraintPressure | None:
    """A row's snapshot_columns on the host -> its ConstraintPressure (None before any measured step)."""
    total, steps, top, top_step, top_op = struct.unpack(f"<{COLUMNS}f", struct.pack(f"<{COLUMNS}i", *values))
    if steps < 1:
        return None
    return ConstraintPressure(mean=total / steps, max=top, max_step=int(top_step), max_op=int(top_op),
                              steps=int(steps))


def lane_pressure(
    logits: torch.Tensor,  # [B, V] fp32, before the mask
    forbidden: torch.Tensor,  # [B, V] bool: what the hole rows' states forbid (nothing for the other rows)
    copy: torch.Tensor,  # [B] bool: the lane is in a copy op
    forced: torch.Tensor,  # [B] int64: its token in a copy op (any id elsewhere)
) -> torch.Tensor:  # [B] fp32 in [0, 1]
    """The torch mask's pressure: the mass of the taken-away tokens (a hole row's forbidden ones, every
    token but the forced one of a copy row) over the whole, from one exp of the logits shifted by their
    maximum; summed directly, so small values keep their precision. Unconstrained lanes come out 0."""
    taken_away = torch.where(copy[:, None], True, forbidden)  # [B, V]
    taken_away.scatter_(1, forced[:, None], ~copy[:, None] & forbidden.gather(1, forced[:, None]))
    weights = (logits - logits.amax(dim=1, keepdim=True)).exp_()  # [B, V]
    return torch.where(taken_away, weights, 0.0).sum(dim=1) / weights.sum(dim=1)


def copy_pressure(
    logits: torch.Tensor,  # [N, V] the model's logits at the positions before forced tokens
    forced: torch.Tensor,  # [N] int64: the forced token each position's logits predict
) -> torch.Tensor:  # [N] fp32 in [0, 1]
    """A copy step's pressure, 1 - p(forced token) at T = 1, for positions whose logits no mask or race reads
    (the forced runs a step takes as inputs: forced_runs.py); the others' mass summed directly, as
    lane_pressure sums it."""
    x = logits.float()
    weights = (x - x.amax(dim=1, keepdim=True)).exp_()  # [N, V]
    others = weights.scatter(1, forced[:, None], 0.0).sum(dim=1)
    return others / weights.sum(dim=1)


def accumulate(
    buffers: PressureBuffers,
    measured: torch.Tensor,  # [B] bool: constrained rows still live (active & ~finished)
    ptr: torch.Tensor,  # [B] int64: their op pointer at this step (before the advance)
    at: slice | torch.Tensor,  # the lanes' rows: rows [0, B) (decode) or their ids (prefill)
    values: torch.Tensor | None = None,  # [B] fp32 the values to fold in; None: this step's `now`
) -> None:
    """This step's `now` (or `values`) folded into the rows' accumulators (the torch reference of the emit
    kernel's)."""
    batch = measured.shape[0]
    p = buffers.now[:batch] if values is None else values
    acc = buffers.acc[at]  # [B, COLUMNS] (a copy when `at` holds ids)
    higher = measured & (p > acc[:, MAX])
    buffers.acc[at] = torch.stack([
        acc[:, SUM] + torch.where(measured, p, 0.0),
        acc[:, STEPS] + measured.float(),
        torch.where(higher, p, acc[:, MAX]),
        torch.where(higher, acc[:, STEPS], acc[:, MAX_STEP]),
        torch.where(higher, ptr.float(), acc[:, MAX_OP]),
    ], dim=1)  # fmt: skip
