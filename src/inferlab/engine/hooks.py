"""The constraint hook points of the step (ConstraintHooks), and the no-constraint implementation.

Constrained decoding (constraints/runtime.py) plugs into the step through this protocol. Every call is pure
tensor work on static buffers (capturable): no host reads, no data-dependent shapes. `rows` is None inside
the decode step (rows [0, B), B = logits.shape[0]) and the admitted row ids in prefill. The step calls them:
    logits -> mask_logits -> EOS/min-length mask -> sampler (skipping forced_rows) -> emit -> record
or, with a race that folds the mask in for the step's filter level (`fused_race`):
    logits -> EOS/min-length mask -> fused race -> emit -> record
`pressure` (engine/constraints/pressure.PressureBuffers, or None): the constraint's pressure is measured
where the mask or the race reads the logits (into pressure.now) and folded into the rows' accumulators by
emit (batch/pressure_rows.py passes it to every call; without it nothing is measured).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

# race(logits [B, V], temperature [B], seeds [B], token_index [B], rows) -> sampled [B] int64
FusedRace = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class ConstraintHooks(Protocol):
    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None, pressure: Any = None) -> torch.Tensor:
        """logits [B, V] -> logits with -inf where the row's constraint forbids a token (in place)."""

    def forced_rows(self, batch: int, rows: torch.Tensor | None) -> torch.Tensor | None:
        """[B] (bool or int8): rows whose token emit will force (a copy op), so the sampler may skip their
        draw; None: no row is forced. Valid after this step's mask_logits."""

    def fused_race(self, filter_level: int, pressure: Any = None) -> FusedRace | None:
        """A race that applies the constraint itself (no mask_logits before it) for this filter level, or
        None. It returns the same tokens as mask_logits + the sampler's race for every row emit does not
        force."""

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None,
        pressure: Any = None,
    ) -> torch.Tensor:
        """sampled [B] int64 -> tokens [B]: the forced token where the constraint dictates one; the state of
        each row still live (active & ~finished [B], before this token) advances by its token."""


class NoConstraints:
    """Every row unconstrained: the hooks cost nothing and change nothing (the graphs without constraint)."""

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None, pressure: Any = None) -> torch.Tensor:
        return logits

    def forced_rows(self, batch: int, rows: torch.Tensor | None) -> None:
        return None

    def fused_race(self, filter_level: int, pressure: Any = None) -> None:
        return None

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None,
        pressure: Any = None,
    ) -> torch.Tensor:
        return sampled


NO_CONSTRAINTS = NoConstraints()
