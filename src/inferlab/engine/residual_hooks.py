"""Residual hooks: steering and activation collection on the residual stream after each decoder layer.

`ResidualHooks` is built per forward call (per decode graph at capture, per prefill batch) over static
buffers. The forward calls `after_layer(i, delta, residual, weight, eps[, unit_offset, x_norm])` where it
would call `ops.add_rms_norm` (same norm-variant arguments):
    h, x = add_steer_rms_norm(delta, residual, next_norm)   # x: the residual after layer i, steered
    collect_rows(x (prefill: each prompt's last position), layer i's buffers)   # collected layers only
`HookTables` builds them over the runner's SteeringTable and ActivationBuffers, which their row features
(batch/steered_rows.py, batch/collecting_rows.py) make when a request first needs them and keep in step with
the rows.
"""
from __future__ import annotations

from typing import Any

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


def tables_oom(error: Exception) -> str:
    """A steered or collecting request's error when its table or buffers do not fit (batch/steered_rows.py,
    batch/collecting_rows.py)."""
    return (f"no device memory left for the steering table or collection buffers ({error}); collect fewer "
            "layers or tokens, or start the engine with a lower gpu_memory_fraction or max_slots")


class HookTables:
    """The forward's residual hooks over the steering table and collection buffers of the runner's features
    (batch/steered_rows.py `.table`, batch/collecting_rows.py `.buffers`: None until a request needs them)."""

    def __init__(self, ops: Any, rows: RowState, num_layers: int, steering: Any, collection: Any) -> None:
        self.ops = ops
        self.rows = rows
        self.num_layers = num_layers
        self._steering = steering
        self._collection = collection

    @property
    def steering(self) -> SteeringTable | None:
        return self._steering.table

    @property
    def collection(self) -> ActivationBuffers | None:
        return self._collection.buffers

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
