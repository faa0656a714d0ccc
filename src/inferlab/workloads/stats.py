"""Latency statistics of per-batch timings, in the lab's field names (BENCHMARKING.md: `latency_ms` with
`p50`, `p90`, `p95`, `p99`). Owns only the arithmetic; timing itself happens where the work runs."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Percentiles (linear interpolation), mean, min and max of `seconds`, reported in milliseconds."""
    if len(seconds) == 0:
        return {"n": 0}
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    p50, p90, p95, p99 = np.percentile(ms, [50, 90, 95, 99])
    return {
        "n": int(ms.size),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "mean": float(ms.mean()),
        "min": float(ms.min()),
        "max": float(ms.max()),
    }
