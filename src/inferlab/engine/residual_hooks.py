"""Residual hooks: steering and activation collection on the residual stream after each decoder layer.

`ResidualHooks` is built per forward call (per decode graph at capture, per prefill batch) over static
buffers. The forward calls `after_layer(i, delta, residual, weight, eps[, unit_offset, x_norm])` where it
would call `ops.add_rms_norm` (same norm-variant arguments):
    h, x = add_steer_rms_norm(delta, residual, next_norm)   # x: the residual after layer i, steered
    collect_rows(x (prefill: each prompt's last position), layer i's buffers)   # collected layers only
`HookTables` holds the runner's SteeringTable and ActivationBuffers (None until a request needs them:
residual_hook_support.py) and keeps them in step with the rows: admission writes each admitted row's
entries, retirement drops its vector references, compaction moves them.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from inferlab.engine.collection import ActivationBuffers, CollectLayer
from inferlab.engine.rows import RowState
from inferlab.engine.steering import SteeringTable, SteerLayer


class ResidualHooks:
    def __init__(
        self,
        ops: Any,
        steer: list[SteerLayer] | None,  # per layer, or None: no steering in this forward
        collect: list[CollectLayer | None] | None,  # per layer (None where not collected), or None
        last_tokens: torch.Tensor | None = None,  # [n] prefill: the flat index of each prompt's last token
    ) -> None:
        self.ops = ops
        self.steer = steer
        self.collect = collect
        self.last_tokens = last_tokens

    def after_layer(self, i: int, delta: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    unit_offset: bool = False,
                    x_norm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm of the new residual, the new residual) after layer i: residual + delta (+ steering).
        unit_offset, x_norm: the forward's norm variant (Gemma: (1 + w) norms; Gemma 2/3: delta is normed by
        x_norm before the add), as ops.add_rms_norm takes them."""
        if self.steer is not None:
            h, x = self.ops.add_steer_rms_norm(delta, residual, weight, eps, self.steer[i], unit_offset, x_norm)
        else:
            h, x = self.ops.add_rms_norm(delta, residual, weight, eps, unit_offset, x_norm)
        if self.collect is not None and self.collect[i] is not None:
            self.ops.collect_rows(x if self.last_tokens is None else x[self.last_tokens], self.collect[i])
        return h, x


class HookTables:
    def __init__(self, ops: Any, rows: RowState, num_layers: int) -> None:
        self.ops = ops
        self.rows = rows
        self.num_layers = num_layers
        self.steering: SteeringTable | None = None
        self.collection: ActivationBuffers | None = None

    def for_decode(self, b: int, steered: bool, collecting: bool) -> ResidualHooks | None:
        """Hooks over rows [0, b) (what a decode graph of that variant captures), or None for neither."""
        if not (steered or collecting):
            return None
        r = self.rows
        steer = [self.steering.layer(i, b) for i in range(self.num_layers)] if steered else None
        collect = None
        if collecting:
            collect = [self.collection.layer(i, r.active, r.finished, r.n_out, b=b) for i in range(self.num_layers)]
        return ResidualHooks(self.ops, steer, collect)

    def for_prefill(self, row_ids: torch.Tensor, lengths: torch.Tensor, padded: int, steered: bool,
                    collecting: bool) -> ResidualHooks | None:
        """Hooks over a prefill batch: row_ids, lengths [n] (device), prompts right-padded to `padded`."""
        if not (steered or collecting):
            return None
        steer = collect = last = None
        if steered:
            token_rows = row_ids.repeat_interleave(padded)  # [n * padded]
            steer = [self.steering.layer(i, token_rows=token_rows) for i in range(self.num_layers)]
        if collecting:
            r = self.rows
            collect = [self.collection.layer(i, r.active, r.finished, r.n_out, rows=row_ids)
                       for i in range(self.num_layers)]
            last = torch.arange(len(row_ids), device=row_ids.device) * padded + lengths - 1
        return ResidualHooks(self.ops, steer, collect, last)

    def admit(self, row_ids: Sequence[int], items: Sequence[Any]) -> None:
        """Admitted rows' steering entries and collection modes (items: intake.Prepared)."""
        if self.steering is not None:
            self.steering.assign(row_ids, [item.steering for item in items])
        else:
            assert not any(item.steering for item in items), "steered request without a steering table"
        if self.collection is not None:
            self.collection.assign(row_ids, [item.collect for item in items])
        else:
            assert all(item.collect is None for item in items), "collecting request without buffers"

    def release(self, row_ids: Sequence[int]) -> None:
        if self.steering is not None:
            self.steering.release(row_ids)

    def move(self, src: torch.Tensor, dst: torch.Tensor, pairs: Sequence[tuple[int, int]]) -> None:
        if self.steering is not None:
            self.steering.move(src, dst, pairs)
        if self.collection is not None:
            self.collection.move(src, dst)
