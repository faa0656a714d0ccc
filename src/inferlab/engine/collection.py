"""Hidden states collected while generating: per-row device buffers filled inside the step, copied to the
host at retirement, and the intake check of a request's `Collect`.

For each generated token, the residual stream after each collected layer (after its steering) at the
position that produced it (the prompt's last position in prefill, then each fed-back token's position),
counted while the row is live. Per row a mode (none / last / mean / all) and per collected layer slot j:
- `acc [rows, layers, hidden]` fp32: "last" overwrites it, "mean" sums into it (the prefill, n_out = 0,
  restarts the sum); the host divides by n;
- `all [rows, layers, cap, hidden]` model dtype (allocated once a request asks for "all"): token n_out's
  vector at column n_out while n_out < cap.
The collected layers are the union of what requests asked for: buffers grow (contents kept) when a request
needs a layer or a cap they lack. At retirement the rows' buffers are gathered and copied into pinned memory
without blocking (`read` -> PendingActivations); the Results wait one sync point (AwaitingResults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from inferlab.engine.transfer import tensor_on, to_device
from inferlab.types import Collect

MODE_NONE, MODE_LAST, MODE_MEAN, MODE_ALL = 0, 1, 2, 3
MODES = {"last": MODE_LAST, "mean": MODE_MEAN, "all": MODE_ALL}


@dataclass(frozen=True)
class CollectPlan:
    """A request's checked collection."""

    layers: tuple[int, ...]  # decoder layers (0-based), in the request's order
    pool: str
    max_tokens: int  # "all": vectors kept (<= max_new_tokens); 0 otherwise


@dataclass(frozen=True)
class CollectLayer:
    """What the collect op reads and writes for one layer (views of ActivationBuffers and RowState)."""

    acc: torch.Tensor  # [R, hidden] fp32
    all: torch.Tensor | None  # [R, cap, hidden] model dtype, or None
    mode: torch.Tensor  # [R] int32
    active: torch.Tensor  # [R] bool
    finished: torch.Tensor  # [R] bool
    n_out: torch.Tensor  # [R] int64: the index of the token this step produces
    rows: torch.Tensor | None  # [n] int64: the row of each input vector (prefill); None: vector i is row i


def resolve_collect(collect: Any, num_layers: int, max_new_tokens: int) -> CollectPlan | str:
    """A request's checked collection, or why it cannot run."""
    if not isinstance(collect, Collect):
        return f"Request.collect must be a Collect(layers, pool, max_tokens), not {type(collect).__name__}"
    layers = []
    for layer in collect.layers:
        resolved = layer + num_layers if layer < 0 else layer
        if not 0 <= resolved < num_layers:
            return (f"collect layer {layer} is out of range: the model has decoder layers 0..{num_layers - 1} "
                    "(negative numbers count from the end)")
        if resolved in layers:
            return f"collect layers {collect.layers} name layer {resolved} twice; list each layer once"
        layers.append(resolved)
    cap = min(collect.max_tokens or max_new_tokens, max_new_tokens) if collect.pool == "all" else 0
    return CollectPlan(tuple(layers), collect.pool, cap)


class ActivationBuffers:
    def __init__(self, rows: int, layers: tuple[int, ...], cap: int, hidden: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.layers = layers  # slot j holds layer layers[j]
        self.slot_of = {layer: j for j, layer in enumerate(layers)}
        self.cap = cap
        self.dtype = dtype  # the model's: "all" keeps vectors as the forward computed them
        self.device = device
        self.acc = torch.zeros((rows, len(layers), hidden), dtype=torch.float32, device=device)
        self.all = torch.zeros((rows, len(layers), cap, hidden), dtype=dtype, device=device) if cap else None
        self.mode = torch.zeros(rows, dtype=torch.int32, device=device)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.acc, self.all, self.mode) if t is not None)

    def covers(self, plan: CollectPlan) -> bool:
        return all(layer in self.slot_of for layer in plan.layers) and plan.max_tokens <= self.cap

    def grown(self, plan: CollectPlan) -> "ActivationBuffers":
        """New buffers holding these layers and the plan's, with this set's contents (rows keep their data)."""
        layers = self.layers + tuple(x for x in plan.layers if x not in self.slot_of)
        rows, _, hidden = self.acc.shape
        new = ActivationBuffers(rows, layers, max(self.cap, plan.max_tokens), hidden, self.dtype, self.device)
        nl = len(self.layers)
        new.acc[:, :nl] = self.acc
        if self.all is not None:
            new.all[:, :nl, : self.cap] = self.all
        new.mode.copy_(self.mode)
        return new

    def layer(self, i: int, active: torch.Tensor, finished: torch.Tensor, n_out: torch.Tensor,
              rows: torch.Tensor | None = None, b: int | None = None) -> CollectLayer | None:
        """Layer i's view (None when layer i is not collected): rows [0, b) in decode, every row in prefill."""
        j = self.slot_of.get(i)
        if j is None:
            return None
        r = slice(None) if b is None else slice(0, b)
        all_ = self.all[r, j] if self.all is not None else None
        return CollectLayer(self.acc[r, j], all_, self.mode[r], active[r], finished[r], n_out[r], rows)

    def assign(self, row_ids: Sequence[int], plans: Sequence[CollectPlan | None]) -> None:
        """Admission: each admitted row's mode (none for requests that collect nothing)."""
        modes = [MODES[p.pool] if p is not None else MODE_NONE for p in plans]
        self.mode[tensor_on(list(row_ids), torch.int64, self.device)] = to_device(
            torch.tensor(modes, dtype=torch.int32), self.device)

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.acc[dst] = self.acc[src]
        self.mode[dst] = self.mode[src]
        if self.all is not None:
            self.all[dst] = self.all[src]

    def read(self, row_ids: Sequence[int], plans: Sequence[CollectPlan], tokens: Sequence[int]) -> "PendingActivations":
        """Enqueue the copy of retiring rows' buffers to pinned host memory (no host wait)."""
        idx = tensor_on(list(row_ids), torch.int64, self.device)
        acc = _to_host(self.acc[idx])  # [n, layers, hidden] fp32
        all_ = None
        wanted = [k for k, p in enumerate(plans) if p.pool == "all"]
        if wanted and self.all is not None:
            width = max(min(tokens[k], plans[k].max_tokens) for k in wanted)
            picked = tensor_on([row_ids[k] for k in wanted], torch.int64, self.device)
            all_ = _to_host(self.all[picked, :, :width])  # [len(wanted), layers, width, hidden]
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        return PendingActivations(acc, all_, {k: n for n, k in enumerate(wanted)}, dict(self.slot_of), list(plans),
                                  list(tokens), event)


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if t.device.type != "cuda":
        return t.clone()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host


@dataclass
class PendingActivations:
    """Retired rows' activations on their way to the host; `activations(k)` waits for the copy."""

    acc: torch.Tensor  # host [n, layers, hidden] fp32
    all: torch.Tensor | None  # host [n_all, layers, width, hidden] model dtype
    all_row: dict[int, int]  # k -> row of `all`
    slot_of: dict[int, int]  # layer -> slot
    plans: list[CollectPlan]
    tokens: list[int]  # generated tokens per retired row
    event: Any  # torch.cuda.Event after the copies, or None on CPU

    def activations(self, k: int) -> dict[int, torch.Tensor]:
        """{layer: fp32 tensor} of the k-th retired row, in the order of its request's layers (fresh tensors,
        usable outside inference mode)."""
        if self.event is not None:
            self.event.synchronize()
        plan, n = self.plans[k], self.tokens[k]
        out = {}
        with torch.inference_mode(False):
            for layer in plan.layers:
                j = self.slot_of[layer]
                if plan.pool == "all":
                    value = self.all[self.all_row[k], j, : min(n, plan.max_tokens)]
                elif plan.pool == "mean":
                    value = self.acc[k, j] / max(n, 1)
                else:
                    value = self.acc[k, j]
                out[layer] = value.to(torch.float32, copy=True)
        return out


@dataclass
class AwaitingResults:
    """Retired collecting requests of one generate/stream call: their Results wait (one sync point) for
    their activations' copy to the host, which the engine enqueued behind the running chunk."""

    batches: list[tuple[PendingActivations, list[tuple[int, Any]]]] = field(default_factory=list)

    def add(self, buffers: ActivationBuffers, retired: Sequence[tuple[int, Any, Any]]) -> None:
        """retired: (index, Result, intake.Prepared) of rows retired at this sync point."""
        pending = buffers.read([item.row for _, _, item in retired], [item.collect for _, _, item in retired],
                               [len(item.tokens) for _, _, item in retired])
        self.batches.append((pending, [(index, result) for index, result, _ in retired]))

    def deliver(self) -> list[tuple[int, Any]]:
        """(index, Result) with `activations` filled, for everything waiting (the copies are done or close)."""
        out = []
        for pending, results in self.batches:
            for k, (index, result) in enumerate(results):
                result.activations = pending.activations(k)
                out.append((index, result))
        self.batches.clear()
        return out
