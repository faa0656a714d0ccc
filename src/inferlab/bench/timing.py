"""Clocks that wait for the device and a repeat-until-count-and-duration loop.

Every timed region is bracketed by a device synchronisation (torch.cuda.synchronize on CUDA, nothing on
CPU) and read with time.perf_counter. Warm-up calls run before the loop and never enter the samples;
load, compile and first-call times are measured by the caller with `timed` and kept apart.
torch is imported only when a CUDA clock is made. A Measurement's statistics are workloads/stats.py's
`summarize`, the project's one implementation of percentiles and summary statistics.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from inferlab.workloads.stats import Stats, summarize


def device_synchronizer(device: Any) -> Callable[[], None]:
    """A function that blocks until all queued work on `device` is done (a no-op on CPU)."""
    if str(device).startswith("cuda"):
        import torch

        dev = torch.device(device)
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


@dataclass
class Elapsed:
    seconds: float = 0.0


@contextmanager
def timed(sync: Callable[[], None]) -> Iterator[Elapsed]:
    """`with timed(sync) as t: ...` -> t.seconds, synchronised before both clock reads."""
    result = Elapsed()
    sync()
    start = time.perf_counter()
    yield result
    sync()
    result.seconds = time.perf_counter() - start


def warm_up(call: Callable[[], Any], warmup: int, twin: bool, sync: Callable[[], None]) -> tuple[list[float], float | None]:
    """Run the warm-up calls (at least one), each timed; with `twin`, one more call timed apart: the first
    call's twin once warm, so first - twin is what the first call cost beyond a steady one.
    Returns (seconds of each warm-up call, seconds of the twin or None)."""
    warmups = []
    for _ in range(max(1, warmup)):
        with timed(sync) as t:
            call()
        warmups.append(t.seconds)
    if not twin:
        return warmups, None
    with timed(sync) as t:
        call()
    return warmups, t.seconds


@dataclass
class Measurement:
    samples_s: list[float] = field(default_factory=list)  # one per timed repeat
    warmup_s: list[float] = field(default_factory=list)  # the warm-up calls, kept apart

    @property
    def total_s(self) -> float:
        return sum(self.samples_s)

    @property
    def stats(self) -> Stats:
        return summarize(self.samples_s)


def measure(fn: Callable[[], Any], *, warmup: int, min_repeats: int, min_duration_s: float,
            sync: Callable[[], None] = lambda: None, max_repeats: int = 1_000_000,
            max_duration_s: float | None = None, on_result: Callable[[Any], None] | None = None) -> Measurement:
    """Call `fn` `warmup` times untimed-for-stats, then repeat until BOTH `min_repeats` samples and
    `min_duration_s` of timed calls are reached (or `max_repeats`). `max_duration_s` (None: no cap) ends
    the loop early once the timed calls add up to that long, after at least one call: a run whose calls
    are already long needs no more of them (callers use it only where every call measures the same
    thing). `on_result` sees each timed call's return value (e.g. to count tokens) outside the timed
    region."""
    if min_repeats < 1:
        raise ValueError("min_repeats must be >= 1")
    result = Measurement()
    for _ in range(warmup):
        with timed(sync) as t:
            fn()
        result.warmup_s.append(t.seconds)

    def long_enough() -> bool:
        return bool(max_duration_s) and bool(result.samples_s) and result.total_s >= max_duration_s  # type: ignore[operator]

    while len(result.samples_s) < max_repeats and not long_enough() and (
        len(result.samples_s) < min_repeats or result.total_s < min_duration_s
    ):
        with timed(sync) as t:
            value = fn()
        result.samples_s.append(t.seconds)
        if on_result is not None:
            on_result(value)
    return result
