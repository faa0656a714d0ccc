"""Activation steering on the device: the vector table, each row's (slot, scale) per layer, and the intake
check of a request's steering entries.

A request's `Steer(layer, vector, scale)` entries add `scale * vector` to the residual stream after those
decoder layers, at every position, in prefill and in every decode step. On the device:
- `vectors [capacity, hidden]` (model dtype): each distinct vector once, keyed by content (requests
  steering with one vector share one slot, uploaded once); an unreferenced slot stays cached until its place
  is needed (least recently used first). The capacity, rows x `max_steered_layers`, holds every live row's
  vectors at once, so admission never waits for a slot.
- `index [rows, layers]` int32 (the slot, -1 = none) and `scale [rows, layers]` fp32, written at admission
  and moved with a row at compaction.
The forward reads them through `SteerLayer` in the fused residual add + steer + RMSNorm after each layer
(a row without steering loads one index and adds nothing). Nothing is allocated before the first steered request.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from inferlab.engine.steering_vectors import SteeringVectors
from inferlab.engine.transfer import tensor_on, to_device
from inferlab.errors import InputError
from inferlab.types import Steer


def wants_steering(request: Any) -> bool:
    """Whether the request asks for steering at all (None or an empty list is none)."""
    steering = request.steering
    return not (steering is None or (isinstance(steering, (tuple, list)) and len(steering) == 0))


def wants_steering_or_collection(request: Any) -> bool:
    """Whether the request asks for steering or collection at all (an empty steering list is none)."""
    return wants_steering(request) or request.collect is not None


@dataclass(frozen=True)
class SteerEntry:
    """One checked steering entry of a request."""

    layer: int  # 0 .. num_layers - 1
    values: torch.Tensor  # [hidden] fp32 on the host, unscaled
    scale: float
    key: bytes  # digest of the values: equal vectors share a device slot


@dataclass(frozen=True)
class SteerLayer:
    """What the fused add + steer + RMSNorm reads for one layer (views of SteeringTable's buffers)."""

    vectors: torch.Tensor  # [capacity, hidden] model dtype
    slot: torch.Tensor  # [rows] int32: this layer's slot per row, -1 = none (a column view: stride = layers)
    scale: torch.Tensor  # [rows] fp32
    token_rows: torch.Tensor | None  # [tokens] int64: the row of each token (prefill); None: token t is row t


def resolve_steering(
    steering: Any,
    named: Mapping[str, SteeringVectors],  # entry name -> the registered set holding it
    num_layers: int,
    hidden: int,
    dtype: torch.dtype,
    max_entries: int,
) -> list[SteerEntry] | str:
    """A request's checked entries, or why they cannot run (the message names the fix)."""
    if isinstance(steering, (str, bytes, Steer)) or not isinstance(steering, Sequence):
        return "Request.steering must be a sequence of Steer(layer, vector, scale) entries"
    if len(steering) > max_entries:
        return (f"{len(steering)} steering entries exceed max_steered_layers={max_entries}; steer fewer layers or "
                "start the engine with a larger EngineConfig.max_steered_layers")
    entries: list[SteerEntry] = []
    for k, item in enumerate(steering):
        if isinstance(item, Steer):
            layer, vector, scale = item.layer, item.vector, item.scale
        elif isinstance(item, (tuple, list)) and len(item) == 3:
            layer, vector, scale = item
        else:
            return f"steering entry {k} is a {type(item).__name__}; use Steer(layer, vector, scale)"
        if not isinstance(layer, int) or isinstance(layer, bool):
            return f"steering layer {layer!r} (entry {k}) must be an integer"
        resolved = layer + num_layers if layer < 0 else layer
        if not 0 <= resolved < num_layers:
            return (f"steering layer {layer} is out of range: the model has decoder layers 0..{num_layers - 1} "
                    "(negative numbers count from the end)")
        if any(e.layer == resolved for e in entries):
            return f"two steering entries for layer {resolved}; add their scaled vectors into one entry"
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            return f"steering scale {scale!r} (layer {layer}) must be a finite number"
        values = _values(vector, named, resolved, num_layers)
        if isinstance(values, str):
            return f"steering vector for layer {layer}: {values}"
        if values.shape != (hidden,):
            return (f"steering vector for layer {layer} has shape {tuple(values.shape)}; this model needs "
                    f"[{hidden}] (its hidden size)")
        bad = (~torch.isfinite(values)).nonzero()
        if len(bad):
            return f"steering vector for layer {layer} has a NaN or inf at index {int(bad[0, 0])}"
        if not torch.isfinite((values * scale).to(dtype)).all():
            return f"scale {scale} x the steering vector for layer {layer} overflows {dtype}; use a smaller scale"
        key = hashlib.blake2b(values.numpy().tobytes(), digest_size=16).digest()
        entries.append(SteerEntry(resolved, values, float(scale), key))
    return entries


def _values(vector: Any, named: Mapping[str, SteeringVectors], layer: int, num_layers: int) -> torch.Tensor | str:
    """[n] fp32 CPU values of a vector given by name or by value, or what is wrong with it."""
    if isinstance(vector, str):
        if vector not in named:
            known = ", ".join(sorted(named)) or "none (Engine.add_steering_vectors registers a set)"
            return f"no registered steering vector is named {vector!r}; registered: {known}"
        try:
            return named[vector].vector(vector, layer, num_layers)
        except InputError as e:
            return str(e)
    if isinstance(vector, (list, tuple)):
        try:
            return torch.tensor(vector, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError):
            return "a list of numbers is needed"
    try:
        values = torch.as_tensor(vector)
    except (TypeError, ValueError, RuntimeError):
        return f"a {type(vector).__name__} is not a vector; give a 1-D float tensor, array or list, or an entry name"
    if not values.is_floating_point():
        return f"its dtype is {values.dtype}; give floating-point values"
    return values.detach().to("cpu", torch.float32).contiguous()


class SteeringTable:
    def __init__(self, rows: int, num_layers: int, capacity: int, hidden: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.device = device
        self.dtype = dtype
        self.vectors = torch.zeros((capacity, hidden), dtype=dtype, device=device)
        self.index = torch.full((rows, num_layers), -1, dtype=torch.int32, device=device)
        self.scale = torch.zeros((rows, num_layers), dtype=torch.float32, device=device)
        # host bookkeeping of the slots: content key <-> slot, references by live rows, cached unused ones
        self._slot_of: dict[bytes, int] = {}
        self._key_of: list[bytes | None] = [None] * capacity
        self._refs = [0] * capacity
        self._cached: OrderedDict[int, None] = OrderedDict()  # unreferenced slots holding a vector, LRU first
        self._fresh = list(range(capacity - 1, -1, -1))  # never used slots
        self._row_slots: dict[int, list[int]] = {}

    def layer(self, i: int, b: int | None = None, token_rows: torch.Tensor | None = None) -> SteerLayer:
        """Layer i's view: rows [0, b) in decode (b given), every row with a token -> row map in prefill."""
        rows = slice(None) if b is None else slice(0, b)
        return SteerLayer(self.vectors, self.index[rows, i], self.scale[rows, i], token_rows)

    def assign(self, row_ids: Sequence[int], entries: Sequence[Sequence[SteerEntry]]) -> None:
        """Admission: each row's (slot, scale) per layer (-1 where it has no entry); new vectors uploaded in
        one staged copy. Rows whose request has no steering get -1 everywhere."""
        n, layers = len(row_ids), self.index.shape[1]
        index = torch.full((n, layers), -1, dtype=torch.int32)
        scale = torch.zeros((n, layers), dtype=torch.float32)
        uploads: dict[int, torch.Tensor] = {}
        for i, (row, row_entries) in enumerate(zip(row_ids, entries)):
            self.release([row])
            slots = []
            for entry in row_entries:
                slot = self._slot_of.get(entry.key)
                if slot is None:
                    slot = self._take_slot(entry.key)
                    uploads[slot] = entry.values
                elif self._refs[slot] == 0:
                    del self._cached[slot]
                self._refs[slot] += 1
                slots.append(slot)
                index[i, entry.layer], scale[i, entry.layer] = slot, entry.scale
            self._row_slots[row] = slots
        if uploads:
            staged = to_device(torch.stack(list(uploads.values())).to(self.dtype), self.device)  # [new, hidden]
            self.vectors[tensor_on(list(uploads), torch.int64, self.device)] = staged
        rows = tensor_on(list(row_ids), torch.int64, self.device)
        self.index[rows] = to_device(index, self.device)
        self.scale[rows] = to_device(scale, self.device)

    def _take_slot(self, key: bytes) -> int:
        if self._fresh:
            slot = self._fresh.pop()
        else:
            assert self._cached, "steering table full: capacity must be rows x max_steered_layers"
            slot, _ = self._cached.popitem(last=False)  # the least recently used unreferenced vector
            del self._slot_of[self._key_of[slot]]
        self._slot_of[key], self._key_of[slot] = slot, key
        return slot

    def release(self, row_ids: Sequence[int]) -> None:
        """Retirement: the rows' vectors lose a reference (unreferenced ones stay cached)."""
        for row in row_ids:
            for slot in self._row_slots.pop(row, []):
                self._refs[slot] -= 1
                if self._refs[slot] == 0:
                    self._cached[slot] = None

    def move(self, src: torch.Tensor, dst: torch.Tensor, pairs: Sequence[tuple[int, int]]) -> None:
        """Compaction: rows src -> dst (device tensors and the same pairs on the host)."""
        self.index[dst] = self.index[src]
        self.scale[dst] = self.scale[src]
        for s, d in pairs:
            self._row_slots[d] = self._row_slots.pop(s, [])
