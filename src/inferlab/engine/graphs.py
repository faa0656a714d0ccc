"""CUDA graphs of the decode step, one per (batch bucket, step variant), captured once.

Buckets grow geometrically (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ...: at most 1.5x padding) up to the
engine's row count, which is always a bucket. A variant is (sampler filter level, constrained): the host
picks one per decode chunk from the live requests, so a batch never pays for a filter or a constraint
none of its rows uses. A graph is captured when its (bucket, variant) is first needed (`ensure`, from the
runner at a sync point), so a job captures only what it uses: the engine captures the largest bucket of
each unconstrained filter level at start-up (which sizes the shared pool and compiles the kernels) and
the rest lazily. A lazy capture waits for the device (once per graph, ~10-30 ms), runs one eager warm-up
step inside the runner's `preserved_rows` (rows may be live: their state is put back afterwards), then
captures without running anything. All graphs share one memory pool; every tensor a graph reads is a
static buffer (RowState, KV cache, weights, constraint state) that the host fills between replays; nothing
is allocated when a graph replays.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, ContextManager

import torch

log = logging.getLogger(__name__)

Variant = tuple[int, bool]  # (sampler filter level, constrained)
StepFn = Callable[[int, Variant], None]  # step(bucket, variant): one decode step over rows [0, bucket)


def bucket_sizes(max_rows: int) -> list[int]:
    sizes = [1, 2, 4, 8]
    power = 16
    while power < max_rows:
        sizes += [power, power + power // 2]  # from 16 on: powers of two and the halfway points
        power *= 2
    return sorted({s for s in sizes if s < max_rows} | {max_rows})


def bucket_for(rows: int, sizes: list[int]) -> int:
    """The smallest bucket holding `rows` rows."""
    for size in sizes:
        if size >= rows:
            return size
    raise ValueError(f"{rows} rows exceed the largest bucket {sizes[-1]}")


class DecodeGraphs:
    """Graphs of the decode step, captured one (bucket, variant) at a time when first needed."""

    def __init__(self, step: StepFn, sizes: list[int], preserved: Callable[[], ContextManager]) -> None:
        self.step = step
        self.sizes = sizes
        self.preserved = preserved  # a context in which steps leave the rows' state unchanged (runner.py)
        self.graphs: dict[tuple[int, Variant], torch.cuda.CUDAGraph] = {}
        self.warmup_s = 0.0  # the eager steps before each capture (Triton compilation when the disk cache is cold)
        self.capture_s = 0.0  # capture alone
        self._pool = None
        self._stream: torch.cuda.Stream | None = None  # the capture stream (its cuBLAS workspace persists)

    def ensure(self, size: int, variant: Variant) -> None:
        if (size, variant) not in self.graphs:
            self.capture(size, variant)

    def capture(self, size: int, variant: Variant) -> None:
        """Capture one graph. Waits for the device; rows may be live (see the module docstring)."""
        if self._pool is None:
            self._pool, self._stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        current, side = torch.cuda.current_stream(), self._stream
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with self.preserved():
            side.wait_stream(current)
            with torch.cuda.stream(side):  # warm-up off the capture: Triton JIT, cuBLAS workspace of this stream
                self.step(size, variant)
            current.wait_stream(side)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph would also empty the allocator's cache; capture_begin/end alone keep it warm
        with torch.cuda.stream(side):
            graph.capture_begin(pool=self._pool)
            try:
                self.step(size, variant)
            finally:
                graph.capture_end()
        self.graphs[(size, variant)] = graph
        self.warmup_s += t1 - t0
        self.capture_s += time.perf_counter() - t1
        log.debug("decode graph (bucket %d, variant %s) captured in %.3f s (+ %.3f s warm-up)", size, variant,
                  time.perf_counter() - t1, t1 - t0)

    def replay(self, size: int, variant: Variant) -> None:
        self.graphs[(size, variant)].replay()
