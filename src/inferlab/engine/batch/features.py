"""The batch's row features, registered in one place, and the graph Variant: the tuple of their bits.

Registration order is the order of the intake checks (a constrained request is sized by its program before
its prompt is checked against that size; steering and collection last) and of every lifecycle call. A new
per-row feature is one file (a RowFeature, batch/feature.py) plus its line here, and its field in Variant
when the captured step depends on it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from inferlab.engine.batch.collecting_rows import CollectingRows
from inferlab.engine.batch.constrained_rows import ConstrainedRows
from inferlab.engine.batch.feature import RowFeature, RowMoves, RowSet
from inferlab.engine.batch.kv_slots import KVSlots
from inferlab.engine.batch.sampling_rows import SamplingRows
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.batch.steered_rows import SteeredRows
from inferlab.engine.hooks import NO_CONSTRAINTS, ConstraintHooks


class Variant(NamedTuple):
    """What a decode step (and a prefill batch's sampling) runs for: a CUDA graph per (bucket, Variant)."""

    level: int  # SamplingRows: the sampler's filter level (sampler.FILTER_*)
    constrained: bool = False  # ConstrainedRows: the constraint's mask and emit (hooks.ConstraintHooks)
    steered: bool = False  # SteeredRows: the fused add + steer + norm after every layer
    collecting: bool = False  # CollectingRows: hidden states folded into the rows' collection buffers


class RowFeatures:
    """Every row feature of one runner, by name and in registration order (`all`)."""

    def __init__(self, setup: BatchSetup) -> None:
        self.constraints = ConstrainedRows(setup)
        self.kv_slots = KVSlots(setup)
        self.sampling = SamplingRows(setup)
        self.steering = SteeredRows(setup)
        self.collection = CollectingRows(setup)
        self.all: tuple[RowFeature, ...] = (self.constraints, self.kv_slots, self.sampling, self.steering,
                                            self.collection)

    def variant_of(self, items: Sequence[Any]) -> Variant:
        """The Variant a batch of these requests (intake.Prepared) runs with."""
        return Variant(**{f.bit: f.wanted_by(items) for f in self.all if f.bit is not None})

    def logits_hooks(self, variant: Variant) -> ConstraintHooks:
        """The sampling step's hooks under `variant`, each feature wrapping (or replacing) the ones before."""
        hooks: ConstraintHooks = NO_CONSTRAINTS
        for f in self.all:
            hooks = f.logits_hooks(hooks, variant)
        return hooks

    def saved(self) -> list[torch.Tensor]:
        return [t for f in self.all for t in f.saved()]

    def admit(self, rows: Sequence[int], items: Sequence[Any]) -> None:
        for f in self.all:
            f.admit(rows, items)

    def release(self, rows: RowSet) -> None:
        for f in self.all:
            f.release(rows)

    def move(self, moves: RowMoves) -> None:
        for f in self.all:
            f.move(moves)

    def close(self) -> None:
        for f in self.all:
            f.close()
