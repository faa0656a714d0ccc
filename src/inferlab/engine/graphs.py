"""CUDA graphs of the decode step, one per (batch bucket, sampler variant), captured once at start-up.

Buckets grow geometrically (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ...: at most 1.5x padding) up to the
engine's row count, which is always a bucket. The variants are the sampler's filter levels (none, min-p,
sorted top-k/top-p); the host picks one per decode chunk from the live requests' parameters. All graphs share
one memory pool and are captured largest first, so the pool is sized by the largest and the others reuse
it. Every tensor a graph reads is a static buffer (RowState, KV cache, weights) that the host fills between
replays; nothing is allocated when a graph replays.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import torch

log = logging.getLogger(__name__)

StepFn = Callable[[int, int], None]  # step(bucket, filter level): one decode step over rows [0, bucket)


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
    def __init__(self, step: StepFn, sizes: list[int], variants: tuple[int, ...]) -> None:
        self.step = step
        self.sizes = sizes
        self.variants = variants
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.warmup_s = 0.0  # first calls of the step (includes torch.compile / Triton compilation)
        self.capture_s = 0.0

    def capture(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        for variant in self.variants:
            for size in sorted(self.sizes, reverse=True):
                t0 = time.perf_counter()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # warm-up off the capture stream (cuBLAS handles, autotune)
                    for _ in range(2):
                        self.step(size, variant)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self.step(size, variant)
                torch.cuda.synchronize()
                self.graphs[(size, variant)] = graph
                self.warmup_s += t1 - t0
                self.capture_s += time.perf_counter() - t1
        log.info(
            "captured %d decode graphs (buckets %s) in %.2f s (+ %.2f s warm-up)",
            len(self.graphs),
            self.sizes,
            self.capture_s,
            self.warmup_s,
        )

    def replay(self, size: int, variant: int) -> None:
        self.graphs[(size, variant)].replay()
