"""Activation steering as a row feature: the engine's named vector sets, each request's intake check, and
the steering table (engine/steering.py), allocated when the first steered request arrives (rows x
max_steered_layers vectors). A failure to allocate makes that request an error Result naming the fix; the
engine goes on. The forward reads the table through residual_hooks.HookTables."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves, RowSet
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.residual_hooks import tables_oom
from inferlab.engine.steering import SteeringTable, resolve_steering, wants_steering
from inferlab.engine.steering_vectors import SteeringVectors
from inferlab.errors import ConfigError

log = logging.getLogger(__name__)


class SteeredRows(RowFeature):
    bit = "steered"

    def __init__(self, setup: BatchSetup) -> None:
        self.spec, self.dtype, self.device = setup.spec, setup.dtype, setup.device
        self.rows = setup.rows
        self.max_steered_layers = setup.max_steered_layers
        self.named: dict[str, SteeringVectors] = {}  # entry name -> its registered set
        self.table: SteeringTable | None = None
        self.setup_s = 0.0  # the table's allocation (graph captures: timed there)

    def add_vectors(self, vectors: SteeringVectors) -> None:
        """Register a named set; its entry names join the engine's namespace."""
        if not isinstance(vectors, SteeringVectors):
            raise ConfigError(f"add_steering_vectors takes a SteeringVectors (SteeringVectors.load(path)), "
                              f"not {type(vectors).__name__}")
        if vectors.hidden_size != self.spec.hidden_size:
            raise ConfigError(f"the steering vectors of {vectors.source} have {vectors.hidden_size} values; this "
                              f"model's hidden size is {self.spec.hidden_size}: use vectors made for this model")
        for name in vectors.names:
            known = self.named.get(name)
            if known is not None and not torch.equal(known.entry(name), vectors.entry(name)):
                raise ConfigError(f"a different steering vector named {name!r} is already registered (from "
                                  f"{known.source}); rename one of them")
        for name in vectors.names:
            self.named.setdefault(name, vectors)

    def check(self, item, tokenizer: Any) -> str | None:
        if not wants_steering(item.request):
            return None
        entries = resolve_steering(item.request.steering, self.named, self.spec.num_layers, self.spec.hidden_size,
                                   self.dtype, self.max_steered_layers)
        if isinstance(entries, str):
            return entries
        item.steering = entries
        return self._ensure_table() if entries else None

    def wanted_by(self, items) -> bool:
        return any(item.steering for item in items)

    def admit(self, rows, items) -> None:
        if self.table is not None:
            self.table.assign(rows, [item.steering for item in items])
        else:
            assert not any(item.steering for item in items), "steered request without a steering table"

    def release(self, rows: RowSet) -> None:
        if self.table is not None:
            self.table.release(rows.ids)

    def move(self, moves: RowMoves) -> None:
        if self.table is not None:
            self.table.move(moves.src, moves.dst, moves.pairs)

    def close(self) -> None:
        self.table = None

    def _ensure_table(self) -> str | None:
        if self.table is not None:
            return None
        t0 = time.perf_counter()
        try:
            self.table = SteeringTable(self.rows, self.spec.num_layers, self.rows * self.max_steered_layers,
                                       self.spec.hidden_size, self.dtype, self.device)
            log.info("steering table: %d vectors", self.rows * self.max_steered_layers)
        except torch.cuda.OutOfMemoryError as e:
            return tables_oom(e)
        finally:
            self.setup_s += time.perf_counter() - t0
        return None
