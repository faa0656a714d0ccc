"""The constraint hook points of the step, and the no-constraint implementation.

Constrained decoding (engine/constraints/runtime.py, ConstraintRuntime) plugs into the step through this
protocol. Every call is pure tensor work on static buffers (capturable in a CUDA graph): no host reads,
no data-dependent shapes. `rows` is None inside the decode step, meaning rows [0, B) where B =
logits.shape[0] (the bucket); in prefill it is an int64 tensor of the admitted row ids. Where the step
calls them:

    logits -> mask_logits -> EOS/min-length mask -> sampler -> emit (choose + advance) -> record

The host-side lifecycle of the constraint state (assign at admission, move at compaction, release at
retirement) is the runner's business (runner.py), between decode chunks.
"""

from __future__ import annotations

from typing import Protocol

import torch


class ConstraintHooks(Protocol):
    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """logits [B, V] -> logits with -inf where the row's constraint forbids a token (in place)."""

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None
    ) -> torch.Tensor:
        """sampled [B] int64 -> tokens [B]: the forced token where the constraint dictates one; the state of
        each row still live (active & ~finished [B], before this token) advances by its token."""


class NoConstraints:
    """Every row unconstrained: the hooks cost nothing and change nothing (the graphs without constraint)."""

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return logits

    def emit(
        self, sampled: torch.Tensor, active: torch.Tensor, finished: torch.Tensor, rows: torch.Tensor | None
    ) -> torch.Tensor:
        return sampled


NO_CONSTRAINTS = NoConstraints()
