"""The settings `inferlab tune` tries, per workload and device kind: the main size knob (the engine's
concurrent rows, or classify's batch rows) over a few powers of two, and for classify the dtypes and
attention implementations the device can run. Sizes above the sample's rows measure nothing new and are
dropped (the first size reaching the sample stays). Each candidate is a dict of TUNABLE dests."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Sequence
from typing import Any

from inferlab.errors import ConfigError

# (cpu, cuda) size grids
SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "generate": ((2, 4, 8), (32, 64, 128, 256)),
    "classify": ((4, 16), (16, 64, 256)),
    "conformers": ((2, 4), (64, 128, 256)),
}
SIZE_KEY = {"generate": "max_slots", "classify": "batch_size", "conformers": "max_slots"}


def classify_dtypes(device_kind: str) -> tuple[str, ...]:
    return ("float32",) if device_kind == "cpu" else ("bfloat16", "float16")


def classify_attns(device_kind: str) -> tuple[str, ...]:
    attns = ("sdpa", "eager")
    if device_kind == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        attns += ("flash_attention_2",)
    return attns


def useful_sizes(sizes: Sequence[int], sample_rows: int) -> list[int]:
    """Sizes below the sample's rows, and the first one reaching it."""
    ordered = sorted(set(sizes))
    if not ordered or ordered[0] < 1:
        raise ConfigError(f"sizes {list(sizes)} must be integers >= 1")
    kept = [s for s in ordered if s < sample_rows]
    reaching = [s for s in ordered if s >= sample_rows]
    return kept + reaching[:1]


def candidates_for(workload: str, device_kind: str, sample_requests: int,
                   sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The candidates in measuring order (for classify, grouped by dtype and attention: one load each)."""
    grid = useful_sizes(sizes or SIZES[workload][device_kind == "cuda"], sample_requests)
    key = SIZE_KEY[workload]
    if workload != "classify":
        return [{key: size} for size in grid]
    return [{"dtype": dtype, "attn": attn, key: size}
            for dtype, attn, size in itertools.product(classify_dtypes(device_kind), classify_attns(device_kind), grid)]
