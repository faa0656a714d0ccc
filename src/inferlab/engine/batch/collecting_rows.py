"""Hidden-state collection as a row feature: each request's intake check and the collection buffers
(engine/collection.py), allocated when the first collecting request arrives for its layers (and, for pool
"all", its token cap). A later request that needs more layers or a larger cap grows them (contents kept);
the collecting graphs then address the old buffers, so the runner drops them (buffers_replaced) to be
captured again when next needed. A failure to allocate makes that request an error Result naming the fix."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.collection import ActivationBuffers, CollectPlan, resolve_collect
from inferlab.engine.residual_hooks import tables_oom

log = logging.getLogger(__name__)


class CollectingRows(RowFeature):
    bit = "collecting"

    def __init__(self, setup: BatchSetup) -> None:
        self.spec, self.dtype, self.device = setup.spec, setup.dtype, setup.device
        self.rows = setup.rows
        self.buffers: ActivationBuffers | None = None
        self.setup_s = 0.0  # allocation and growth (graph captures: timed there)
        self._replaced = False

    def check(self, item, tokenizer: Any) -> str | None:
        if item.request.collect is None:
            return None
        plan = resolve_collect(item.request.collect, self.spec.num_layers, item.sampling.max_new_tokens)
        if isinstance(plan, str):
            return plan
        item.collect = plan
        if self.buffers is not None and self.buffers.covers(plan):
            return None
        t0 = time.perf_counter()
        try:
            self._grow(plan)
        except torch.cuda.OutOfMemoryError as e:
            return tables_oom(e)
        finally:
            self.setup_s += time.perf_counter() - t0
        return None

    def wanted_by(self, items) -> bool:
        return any(item.collect is not None for item in items)

    def admit(self, rows, items) -> None:
        if self.buffers is not None:
            self.buffers.assign(rows, [item.collect for item in items])
        else:
            assert all(item.collect is None for item in items), "collecting request without buffers"

    def move(self, moves: RowMoves) -> None:
        if self.buffers is not None:
            self.buffers.move(moves.src, moves.dst)

    def buffers_replaced(self) -> bool:
        replaced, self._replaced = self._replaced, False
        return replaced

    def close(self) -> None:
        self.buffers = None

    def _grow(self, plan: CollectPlan) -> None:
        if self.buffers is None:
            self.buffers = ActivationBuffers(self.rows, plan.layers, plan.max_tokens, self.spec.hidden_size,
                                             self.dtype, self.device)
        else:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # nothing in flight may still write the old buffers
            self.buffers = self.buffers.grown(plan)
            self._replaced = True  # the collecting graphs captured the old buffers' addresses
        c = self.buffers
        log.info("collection buffers: layers %s, 'all' cap %d, %.1f MB", c.layers, c.cap, c.nbytes / 1e6)
