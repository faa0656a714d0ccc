"""Constraint pressure as a row feature: per constrained row, how much of the model's probability its
constraint took away, measured inside the step and handed back on the Result (`Result.constraint_pressure`;
the definition and the kernels: engine/constraints/pressure.py, docs/constraints.md "Pressure").

The accumulators (PressureBuffers: [R] this step's value per lane, [R, 5] per row) are allocated when the
first constrained request arrives (EngineConfig.constraint_pressure, on by default). In the constrained
variant the feature wraps the constraint's hooks so that the mask or the fused race measures and emit
accumulates; unconstrained steps are untouched, and so is an engine that never sees a constraint. The rows'
accumulators travel to the host inside every snapshot (snapshot_columns), so the Result of a retiring row
gets them with its last tokens, without a copy or a wait of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.constraints.pressure import COLUMNS, PressureBuffers, pressure_from_columns
from inferlab.engine.hooks import ConstraintHooks
from inferlab.engine.transfer import tensor_on


class MeasuredConstraint:
    """The constraint's hooks with its pressure measured into `buffers` (ConstraintHooks)."""

    def __init__(self, inner: ConstraintHooks, buffers: PressureBuffers) -> None:
        self.inner, self.buffers = inner, buffers

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None, pressure: Any = None) -> torch.Tensor:
        return self.inner.mask_logits(logits, rows, self.buffers)

    def forced_rows(self, batch: int, rows: torch.Tensor | None) -> torch.Tensor | None:
        return self.inner.forced_rows(batch, rows)

    def fused_race(self, filter_level: int, pressure: Any = None):
        return self.inner.fused_race(filter_level, self.buffers)

    def emit(self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None,
             pressure: Any = None) -> torch.Tensor:  # fmt: skip
        return self.inner.emit(sampled, active, finished, rows, self.buffers)


class PressureRows(RowFeature):
    snapshot_width = COLUMNS

    def __init__(self, setup: BatchSetup) -> None:
        self.enabled = setup.constraint_pressure
        self.rows, self.device = setup.rows, setup.device
        self.buffers: PressureBuffers | None = None

    def check(self, item, tokenizer: Any) -> str | None:
        if item.constraint is not None and self.enabled and self.buffers is None:
            self.buffers = PressureBuffers.allocate(self.rows, self.device)  # before any constrained graph
        return None

    def admit(self, rows, items) -> None:
        measured = [row for row, item in zip(rows, items) if item.constraint is not None]
        if self.buffers is not None and measured:
            self.buffers.reset(tensor_on(measured, torch.int64, self.device))

    def move(self, moves: RowMoves) -> None:
        if self.buffers is not None:
            self.buffers.move(moves.src, moves.dst)

    def logits_hooks(self, hooks: ConstraintHooks, variant) -> ConstraintHooks:
        if not variant.constrained or self.buffers is None:
            return hooks
        return MeasuredConstraint(hooks, self.buffers)

    def snapshot_columns(self, b: int) -> torch.Tensor | None:
        return self.buffers.snapshot_columns(b) if self.buffers is not None else None

    def finish(self, result, item, values: list[int]) -> None:
        if item.constraint is not None:
            result.constraint_pressure = pressure_from_columns(values)

    def close(self) -> None:
        self.buffers = None
