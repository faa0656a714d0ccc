"""CUDA graphs of the decode step, one per (batch bucket, step variant), captured once.

Buckets grow geometrically (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ...: at most 1.5x padding) up to the
engine's row count, which is always a bucket. A variant is (sampler filter level, constrained, steered,
collecting): the host picks one per decode chunk from the live requests, so a batch never pays for a
filter, a constraint, steering or collection none of its rows uses. The plain variants are captured at
start-up; the constrained ones when the engine meets its first constrained request; steered and
collecting ones the first time a chunk needs them (`capture` adds variants to the same pool; `drop`
forgets variants whose buffers were replaced). All graphs
share one memory pool and each capture call goes largest bucket first, so the pool is sized by the largest
and the others reuse it. Every tensor a graph reads is a static buffer (RowState, KV cache, weights,
constraint state) that the host fills between replays; nothing is allocated when a graph replays.
Capture runs eager warm-up steps over rows [0, bucket): call it only while every row is idle.

DecodeGraphs keeps no reference to the step it captured (it is passed to each `capture` call): a stored
step would be a bound method of the runner that owns these graphs, a reference cycle that keeps the KV
cache alive after its engine is dropped. `close` destroys the graphs and their pool (Engine.close).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple

import torch

log = logging.getLogger(__name__)


class Variant(NamedTuple):
    level: int  # sampler filter level (sampler.FILTER_*)
    constrained: bool = False  # constraint mask and emit (hooks.ConstraintHooks)
    steered: bool = False  # the fused add + steer + norm after every layer (engine/steering.py)
    collecting: bool = False  # hidden states folded into the rows' collection buffers (engine/collection.py)


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
    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.graphs: dict[tuple[int, Variant], torch.cuda.CUDAGraph] = {}
        self.warmup_s = 0.0  # first calls of the step (includes Triton compilation)
        self.capture_s = 0.0
        self._pool = None
        self._side = None  # one warm-up stream for every capture call: each new stream gets its own cuBLAS workspace

    def capture(self, step: StepFn, variants: list[Variant]) -> None:
        """Capture every bucket of each variant with `step` (variants already captured are skipped)."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
            self._side = torch.cuda.Stream()
        side = self._side
        for variant in variants:
            for size in sorted(self.sizes, reverse=True):
                if (size, variant) in self.graphs:
                    continue
                t0 = time.perf_counter()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # warm-up off the capture stream (cuBLAS handles, autotune)
                    for _ in range(2):
                        step(size, variant)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool):
                    step(size, variant)
                torch.cuda.synchronize()
                self.graphs[(size, variant)] = graph
                self.warmup_s += t1 - t0
                self.capture_s += time.perf_counter() - t1
        log.info(
            "%d decode graphs (buckets %s, variants %s) captured in %.2f s (+ %.2f s warm-up)",
            len(self.graphs),
            self.sizes,
            variants,
            self.capture_s,
            self.warmup_s,
        )

    def has(self, variant: Variant) -> bool:
        return all((size, variant) in self.graphs for size in self.sizes)

    def drop(self, predicate: Callable[[Variant], bool]) -> None:
        """Forget the graphs of matching variants (their memory returns to the pool; recapture on next use)."""
        for key in [k for k in self.graphs if predicate(k[1])]:
            del self.graphs[key]

    def replay(self, size: int, variant: Variant) -> None:
        self.graphs[(size, variant)].replay()

    def close(self) -> None:
        """Destroy every graph and drop the pool, so its memory returns to the allocator (the caller frees
        the static buffers the graphs read, and empties the allocator's cache)."""
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
        self._pool = self._side = None
