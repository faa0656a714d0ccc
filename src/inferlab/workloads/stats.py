"""Latency statistics of per-batch timings, in the lab's field names (BENCHMARKING.md: `latency_ms` with
`p50`, `p90`, `p95`, `p99`). Only the shape of the record is here: the arithmetic is the project's one
statistics implementation, inferlab.bench.timing.summarize (linear-interpolation percentiles, numpy's
default). Timing itself happens where the work runs."""

from __future__ import annotations

from typing import Sequence

from inferlab.bench.timing import summarize


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Percentiles, mean, min and max of `seconds`, reported in milliseconds ({"n": 0} for none)."""
    if len(seconds) == 0:
        return {"n": 0}
    ms = summarize([float(s) for s in seconds]).scaled(1000.0)
    return {"n": ms.n, "p50": ms.p50, "p90": ms.p90, "p95": ms.p95, "p99": ms.p99, "mean": ms.mean, "min": ms.min,
            "max": ms.max}
