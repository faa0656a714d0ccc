"""The settings `inferlab tune` tries, per workload and device. Each candidate is a dict of TUNABLE dests.

On the inferlab engine (generate, conformers) the grid is max_slots x KV dtype: for each KV dtype (the
model dtype, and fp8 where the device has FP8; never on CPU) the engine's memory planner is asked, without
building an engine, how many rows fit at the sample's row length; max_slots doubles from the workload's
first size towards that largest feasible value less TOP_HEADROOM (the sample's requests, when fewer),
which is always tried, keeping the MAX_SIZES largest (a doubling step within a quarter of the largest is left out: nearly the
same point, measured twice). The transformers backend of generate tries a fixed grid of batch rows;
classify tries its batch sizes x the dtypes and attention implementations the device can run. Sizes
given by the user (--sizes) are tried as given, those above the sample's requests dropped (the first
reaching them stays): they measure nothing new. Conformers run one token per step on that grid, and after
each KV dtype's sizes once more at its best size with forced tokens in bulk (`forced_runs_at`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError

SIZE_KEY = {"generate": "max_slots", "classify": "batch_size", "conformers": "max_slots"}
# (cpu, cuda): the first max_slots of an engine grid, the fixed grids of the hf backend and of classify
FIRST_SLOTS = {"generate": (2, 32), "conformers": (2, 64)}
FIXED_SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "generate": ((2, 4, 8), (32, 64, 128, 256)),
    "classify": ((4, 16), (16, 64, 256)),
}
MAX_SIZES = 4  # max_slots per KV dtype (each costs an engine start, a warm-up pass and the timed passes)
NEAR_LARGEST = 0.75  # a doubling step above this share of the largest size measures nearly the same point
# The grid's top stays this share below the memory plan's largest: the plan is asked before any engine ran, and
# each run leaves the process holding a little more device memory, so the very largest may not fit a candidate's
# later runs (docs/decisions.md "Why the tune descends from the largest batch")
TOP_HEADROOM = 0.02
PLAN_SLOT_CAP = 1 << 20  # the planner's search bound: far above any device's rows
FORCED_RUN_TOKENS = 4  # the forced-run width conformers try (docs/decisions.md "Forced tokens in bulk": 4 as good as 7)


@dataclass(frozen=True)
class SizeLimit:
    """Where one KV dtype's max_slots grid ends, and why."""

    kv_dtype: str
    max_seq_len: int
    memory_slots: int  # the most rows the memory plan fits at max_seq_len (before any engine ran)
    requests: int  # rows the sample runs at once (molecules x conformers for conformers)

    @property
    def largest(self) -> int:
        return min(self.fitting, self.requests)

    @property
    def fitting(self) -> int:
        """The memory plan's largest less TOP_HEADROOM (at least 1)."""
        return max(1, int(self.memory_slots * (1 - TOP_HEADROOM)))

    @property
    def bound(self) -> str:
        return "memory plan" if self.fitting <= self.requests else "sample"

    def describe(self) -> str:
        if self.bound == "memory plan":
            return (f"kv_dtype={self.kv_dtype}: up to max_slots={self.largest}, {TOP_HEADROOM:.0%} below the memory "
                    f"plan's largest at max_seq_len={self.max_seq_len} ({self.memory_slots})")
        return (f"kv_dtype={self.kv_dtype}: up to max_slots={self.largest}, the sample's requests (the memory plan "
                f"fits {self.memory_slots} at max_seq_len={self.max_seq_len}: more --sample-rows reach them)")

    def as_dict(self) -> dict[str, Any]:
        return {"kv_dtype": self.kv_dtype, "max_seq_len": self.max_seq_len, "memory_slots": self.memory_slots,
                "requests": self.requests, "largest": self.largest, "bound": self.bound}


def doubling_sizes(first: int, largest: int, keep: int = MAX_SIZES) -> list[int]:
    """first, 2 first, 4 first, ... up to NEAR_LARGEST of `largest`, then `largest` itself; the `keep`
    largest of them."""
    if largest < 1:
        raise ConfigError(f"no row fits: the largest feasible max_slots is {largest}")
    sizes = []
    size = max(1, first)
    while size <= NEAR_LARGEST * largest:
        sizes.append(size)
        size *= 2
    return (sizes + [largest])[-keep:]


def useful_sizes(sizes: Sequence[int], requests: int) -> list[int]:
    """Sizes below the sample's requests, and the first one reaching them."""
    ordered = sorted(set(sizes))
    if not ordered or ordered[0] < 1:
        raise ConfigError(f"sizes {list(sizes)} must be integers >= 1")
    kept = [s for s in ordered if s < requests]
    reaching = [s for s in ordered if s >= requests]
    return kept + reaching[:1]


def engine_kv_dtypes(device: str, wanted: Sequence[str] | None) -> tuple[str, ...]:
    """The KV dtypes to try: `wanted`, else the model dtype plus fp8 where the device runs an FP8 cache."""
    if wanted:
        return tuple(dict.fromkeys(wanted))
    from inferlab.engine import fp8_kv_supported, resolve_device

    return ("auto", "fp8") if fp8_kv_supported(resolve_device(device)) else ("auto",)


def size_limit(engine: EngineConfig, kv_dtype: str, requests: int) -> SizeLimit:
    """Ask the engine's memory planner how many rows fit at the engine's max_seq_len (no engine is built)."""
    from inferlab.engine import plan_without_loading

    config = dataclasses.replace(engine, kv_dtype=kv_dtype, slot_cap=PLAN_SLOT_CAP)
    plan = plan_without_loading(config)
    return SizeLimit(kv_dtype, plan.max_seq_len, plan.slots, requests)


def engine_candidates(workload: str, device_kind: str, limits: Sequence[SizeLimit],
                      sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """max_slots x KV dtype, grouped by KV dtype, sizes ascending; conformers one token per step
    (forced_run_tokens 0: `forced_runs_at` adds the other width after each group)."""
    out = []
    one_token = {"forced_run_tokens": 0} if workload == "conformers" else {}
    for limit in limits:
        grid = (useful_sizes(sizes, limit.requests) if sizes
                else doubling_sizes(FIRST_SLOTS[workload][device_kind == "cuda"], limit.largest))
        out += [{"max_slots": size, "kv_dtype": limit.kv_dtype, **one_token} for size in grid]
    return out


def forced_runs_at(measured: Sequence[dict[str, Any]], kv_dtype: str, metric: str, width: int) -> dict[str, Any] | None:
    """The candidate that tries forced tokens in bulk (`width` per row and step: engine/forced_runs.py) at the
    best measured max_slots of one KV dtype's group, or None when none of them ran. One candidate per group,
    not a second grid: the width changes a step's cost by a few percent at any size (docs/decisions.md
    "Forced tokens in bulk"), so the best size one token per step is where it is worth measuring."""
    ran = [m for m in measured if m["settings"].get("kv_dtype") == kv_dtype
           and m["settings"].get("forced_run_tokens") == 0 and (m.get("figures") or {}).get(metric)]
    if not ran:
        return None
    best = max(ran, key=lambda m: m["figures"][metric])
    return {**best["settings"], "forced_run_tokens": width}


def classify_dtypes(device_kind: str) -> tuple[str, ...]:
    return ("float32",) if device_kind == "cpu" else ("bfloat16", "float16")


def classify_attns(device_kind: str) -> tuple[str, ...]:
    attns = ("sdpa", "eager")
    if device_kind == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        attns += ("flash_attention_2",)
    return attns


def fixed_candidates(workload: str, device_kind: str, requests: int,
                     sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The hf backend's rows per batch, or classify's batch sizes x dtypes x attentions (grouped by dtype and
    attention: one load each)."""
    grid = useful_sizes(sizes or FIXED_SIZES[workload][device_kind == "cuda"], requests)
    key = SIZE_KEY[workload]
    if workload != "classify":
        return [{key: size} for size in grid]
    return [{"dtype": dtype, "attn": attn, key: size}
            for dtype, attn, size in itertools.product(classify_dtypes(device_kind), classify_attns(device_kind), grid)]
