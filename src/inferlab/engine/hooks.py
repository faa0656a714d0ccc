"""The constraint hook points of the step, and the no-constraint implementation.

Constrained decoding (engine/constraints/runtime.py, ConstraintRuntime) plugs into the step through this
protocol. Every call is pure tensor work on static buffers (capturable in a CUDA graph): no host reads,
no data-dependent shapes. `rows` is None inside the decode step, meaning rows [0, B) where B =
logits.shape[0] (the bucket); in prefill it is an int64 tensor of the admitted row ids. Where the step
calls them:

    logits -> mask_logits -> EOS/min-length mask -> sampler (skipping forced_rows) -> emit (choose +
    advance) -> record
or, when the hooks have a race with the mask folded in for the step's filter level (`fused_race`):
    logits -> EOS/min-length mask -> fused race -> emit -> record

The host-side lifecycle of the constraint state (assign at admission, move at compaction, release at
retirement) is the runner's business (runner.py), between decode chunks.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

# race(logits [B, V], temperature [B], seeds [B], token_index [B], rows) -> sampled [B] int64
FusedRace = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class ConstraintHooks(Protocol):
    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """logits [B, V] -> logits with -inf where the row's constraint forbids a token (in place)."""

    def forced_rows(self, batch: int, rows: torch.Tensor | None) -> torch.Tensor | None:
        """[B] (bool or int8): rows whose token emit will force (a copy op), so the sampler may skip their
        draw; None: no row is forced. Valid after this step's mask_logits."""

    def fused_race(self, filter_level: int) -> FusedRace | None:
        """A race that applies the constraint itself (no mask_logits before it) for this filter level, or
        None. It returns the same tokens as mask_logits + the sampler's race for every row emit does not
        force."""

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None
    ) -> torch.Tensor:
        """sampled [B] int64 -> tokens [B]: the forced token where the constraint dictates one; the state of
        each row still live (active & ~finished [B], before this token) advances by its token."""


class NoConstraints:
    """Every row unconstrained: the hooks cost nothing and change nothing (the graphs without constraint)."""

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return logits

    def forced_rows(self, batch: int, rows: torch.Tensor | None) -> None:
        return None

    def fused_race(self, filter_level: int) -> None:
        return None

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None
    ) -> torch.Tensor:
        return sampled


NO_CONSTRAINTS = NoConstraints()
