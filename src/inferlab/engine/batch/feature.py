"""RowFeature: one kind of per-row state of the batch, with the lifecycle every kind shares.

A row holds one request from admission to retirement; each feature keeps its own part of the row (device
buffers the step reads, host bookkeeping) in step with that lifecycle:
    check(item, tokenizer)  intake: None when the engine can run the request's part of this feature (the
                            feature fills its fields of the Prepared item), else why not (the error Result)
    wanted_by(items)        its bit of the graph Variant (features.Variant field `bit`) over a batch's requests
    admit(rows, items)      the admitted requests' values into their rows
    release(rows)           retirement
    move(moves)             compaction: requests moved to lower rows
    saved()                 what a step over inactive rows may still write: saved and put back around the
                            warm-up step of a graph captured while rows are live (ModelRunner.preserved_rows)
    logits_hooks(hooks, v)  what it adds to the sampling step (hooks.ConstraintHooks) under variant v
    buffers_replaced()      whether check() replaced buffers that captured graphs of its bit address
Every method has a default that does nothing, so a feature writes only what it has. The runner calls them
in registration order (features.py), which is also the order of the intake checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch

from inferlab.engine.hooks import ConstraintHooks

if TYPE_CHECKING:
    from inferlab.engine.intake import Prepared


@dataclass(frozen=True)
class RowSet:
    """Rows retiring at once: their ids on the host and the same ids on the device ([n] int64)."""

    ids: list[int]
    index: torch.Tensor


@dataclass(frozen=True)
class RowMoves:
    """Compaction's moves: requests from rows src[i] to idle rows dst[i] ([m] int64 device tensors), and the
    same pairs on the host."""

    pairs: list[tuple[int, int]]
    src: torch.Tensor
    dst: torch.Tensor


class RowFeature:
    bit: str | None = None  # its field of features.Variant; None: the graphs do not depend on it

    def check(self, item: Prepared, tokenizer: Any) -> str | None:
        return None

    def wanted_by(self, items: Sequence[Prepared]) -> Any:
        return False

    def admit(self, rows: Sequence[int], items: Sequence[Prepared]) -> None:
        pass

    def release(self, rows: RowSet) -> None:
        pass

    def move(self, moves: RowMoves) -> None:
        pass

    def saved(self) -> list[torch.Tensor]:
        return []

    def logits_hooks(self, hooks: ConstraintHooks, variant: Any) -> ConstraintHooks:
        return hooks

    def buffers_replaced(self) -> bool:
        return False

    def close(self) -> None:
        pass
