"""CUDA graphs of the decode step, one per (batch bucket, step variant), captured when first needed.

Buckets grow geometrically (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ...: at most 1.5x padding) up to the
engine's row count, which is always a bucket. A variant (batch/features.py Variant: the row features' bits,
sampler filter level, constrained, steered, collecting) is picked per decode chunk from the live requests,
so a batch never pays for what none of its rows uses. Start-up captures the largest bucket of each plain filter level (sizing the shared pool); the
rest are captured by `ensure` at a sync point: a wait for the device, one eager warm-up step inside the
runner's `preserved_rows` (live rows are left as they were), then the capture. `drop` forgets variants
whose buffers were replaced. All graphs, prefill ones included, share one memory pool (`Capturer`); every
tensor a graph reads is a static buffer the host fills between replays, and a replay allocates nothing.

DecodeGraphs keeps no reference to the step it captures (the runner passes it to each `ensure`): a stored
bound method of the runner would be a reference cycle keeping the KV cache alive after its engine is dropped.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Hashable

import torch

log = logging.getLogger(__name__)

Variant = Hashable  # batch/features.py Variant (a NamedTuple of the row features' bits)
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


@dataclass
class Capturer:
    """What every graph of an engine shares: one memory pool (graphs replay one at a time on one stream, so
    each reuses the others' temporaries) and one capture stream (its cuBLAS workspace persists), plus the
    time spent. `capture` waits for the device, runs `fn` once eagerly off the capture (Triton JIT, cuBLAS
    workspace), then captures it without running it."""

    pool: Any = None
    stream: Any = None
    warmup_s: float = 0.0  # the eager runs before each capture (Triton compilation when its disk cache is cold)
    capture_s: float = 0.0  # capture alone
    count: int = 0

    def capture(self, fn: Callable[[], Any], around_warmup: Callable[[], ContextManager] | None = None):
        if self.pool is None:
            self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        current, side = torch.cuda.current_stream(), self.stream
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with around_warmup() if around_warmup is not None else nullcontext():
            side.wait_stream(current)
            with torch.cuda.stream(side):
                fn()
            current.wait_stream(side)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph would also empty the allocator's cache; capture_begin/end alone keep it warm
        with torch.cuda.stream(side):
            graph.capture_begin(pool=self.pool)
            try:
                fn()
            finally:
                graph.capture_end()
        self.warmup_s += t1 - t0
        self.capture_s += time.perf_counter() - t1
        self.count += 1
        return graph

    def close(self) -> None:
        """Drop the pool and the capture stream (after every graph of the pool was reset)."""
        self.pool = self.stream = None


class DecodeGraphs:
    """Graphs of the decode step, captured one (bucket, variant) at a time when first needed."""

    def __init__(self, sizes: list[int], capturer: Capturer) -> None:
        self.sizes = sizes
        self.capturer = capturer
        self.graphs: dict[tuple[int, Variant], torch.cuda.CUDAGraph] = {}

    def ensure(self, size: int, variant: Variant, step: StepFn, preserved: Callable[[], ContextManager]) -> None:
        """Capture (size, variant) with `step` unless it exists. Waits for the device; rows may be live: the
        warm-up step runs inside `preserved` (the runner's preserved_rows)."""
        if (size, variant) in self.graphs:
            return
        t = time.perf_counter()
        self.graphs[(size, variant)] = self.capturer.capture(lambda: step(size, variant), preserved)
        log.debug("decode graph (bucket %d, %s) in %.3f s", size, variant, time.perf_counter() - t)

    def drop(self, predicate: Callable[[Variant], bool]) -> None:
        """Forget the graphs of matching variants (their memory returns to the pool; recapture on next use)."""
        for key in [k for k in self.graphs if predicate(k[1])]:
            del self.graphs[key]

    def replay(self, size: int, variant: Variant) -> None:
        self.graphs[(size, variant)].replay()

    def close(self) -> None:
        """Destroy every graph (the caller closes the Capturer's pool, frees the static buffers the graphs
        read, and empties the allocator's cache)."""
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
