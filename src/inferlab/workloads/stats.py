"""Summary statistics of timed samples: the project's one implementation of percentiles (linear
interpolation between closest ranks, numpy's default), Stats (round-trips through JSON: to_dict /
from_dict), and `latency_summary_ms`, the per-batch latency record in the lab's field names
(BENCHMARKING.md: `latency_ms` with `p50`, `p90`, `p95`, `p99`). Timing itself happens where the work runs
(the lab's clocks: bench/timing.py)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from inferlab.workloads.winner import relative_range


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Stats:
    n: int
    median: float
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float
    stdev: float | None  # sample standard deviation; None with one sample
    spread: float | None  # (max - min) / median, the relative range (workloads/winner.py); None below 3 samples

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Stats":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def scaled(self, factor: float) -> "Stats":
        """The same statistics in another unit (e.g. factor 1000: seconds -> milliseconds)."""
        def s(v: float | None) -> float | None:
            return None if v is None else v * factor
        return Stats(self.n, self.median * factor, self.mean * factor, self.p50 * factor, self.p90 * factor,
                     self.p95 * factor, self.p99 * factor, self.min * factor, self.max * factor, s(self.stdev),
                     self.spread)

    def latency_dict(self) -> dict[str, float]:
        """The shared `latency_ms`-style subset."""
        return {"p50": self.p50, "p90": self.p90, "p95": self.p95, "p99": self.p99}


def summarize(samples: Sequence[float]) -> Stats:
    if len(samples) == 0:
        raise ValueError("no samples to summarize")
    med = statistics.median(samples)
    many = len(samples) > 1
    return Stats(
        n=len(samples),
        median=med,
        mean=statistics.fmean(samples),
        p50=percentile(samples, 50),
        p90=percentile(samples, 90),
        p95=percentile(samples, 95),
        p99=percentile(samples, 99),
        min=min(samples),
        max=max(samples),
        stdev=statistics.stdev(samples) if many else None,
        spread=relative_range(samples),
    )


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Percentiles, mean, min and max of `seconds`, reported in milliseconds ({"n": 0} for none)."""
    if len(seconds) == 0:
        return {"n": 0}
    ms = summarize([float(s) for s in seconds]).scaled(1000.0)
    return {"n": ms.n, "p50": ms.p50, "p90": ms.p90, "p95": ms.p95, "p99": ms.p99, "mean": ms.mean, "min": ms.min,
            "max": ms.max}
