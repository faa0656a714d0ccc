"""The constraint hook points of the decode step, and the no-constraint implementation.

Constrained decoding (engine/constraints/, another module) plugs in through this protocol. Every in-step
call is pure tensor work on static buffers (capturable in a CUDA graph): no host reads, no data-dependent
shapes. `rows` is None inside the decode step, meaning rows [0, B) where B = logits.shape[0] (the bucket);
in prefill it is an int64 tensor of the admitted row ids. Where the step calls them:

    logits -> mask_logits -> EOS/min-length mask -> sampler -> choose -> advance(tokens, live) -> record

`assign` runs on the host at admission (outside any graph), `move_row` at compaction, `reset_row` when a
request retires.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class ConstraintHooks(Protocol):
    def assign(self, row: int, program: Any) -> None:
        """Load `program` (None: unconstrained) into the row's state; host call at admission."""

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """logits [B, V] fp32 -> logits with -inf where the row's constraint forbids a token."""

    def choose(self, sampled: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """sampled [B] int64 -> tokens [B]: a forced token where the constraint dictates one."""

    def advance(self, tokens: torch.Tensor, live: torch.Tensor, rows: torch.Tensor | None) -> None:
        """Advance each live row's constraint state by its token (tokens, live [B])."""

    def move_row(self, src: int, dst: int) -> None:
        """Compaction moved a request from row src to row dst; host call between replays."""

    def reset_row(self, row: int) -> None:
        """The row's request retired; host call."""


class NoConstraints:
    """Every row unconstrained: the hooks cost nothing and change nothing."""

    def assign(self, row: int, program: Any) -> None:
        assert program is None, "this engine build has no constraint runtime"

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return logits

    def choose(self, sampled: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return sampled

    def advance(self, tokens: torch.Tensor, live: torch.Tensor, rows: torch.Tensor | None) -> None:
        return None

    def move_row(self, src: int, dst: int) -> None:
        return None

    def reset_row(self, row: int) -> None:
        return None
