"""Run planned batches with out-of-memory back-off.

Owns: recognising an OOM, freeing device memory, splitting the failed batch in halves and retrying, a
learned cost cap (the largest cost that worked, the smallest that failed) that later batches are cut to
and that grows back carefully, and turning a single row that still OOMs into a per-row failure. Each row's
result reaches `on_done` exactly once, as soon as its batch finishes, so the caller can write it at once.
Does not own: what a batch computes, how rows are written, how batches were planned (batching.py).

Cost is whatever the caller says a batch costs in memory (rows x padded tokens for a forward, rows x
(prompt + new tokens) for generation); the cap is learned in that unit, so shorter rows later in a run
get more rows per batch under the same cap.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Sequence, TypeVar

import torch

from inferlab.errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")  # one row of work
R = TypeVar("R")  # one row's result

# torch >= 2.5 has torch.OutOfMemoryError; torch.cuda.OutOfMemoryError is the same class (older alias).
_OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    {getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)} - {None}
)
# Older torch and some libraries (cuBLAS, cuDNN) report OOM as a plain RuntimeError.
_OOM_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def is_oom_error(exc: BaseException) -> bool:
    if isinstance(exc, _OOM_TYPES):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MESSAGES)


def free_device_memory() -> None:
    """Drop unreachable tensors and return cached blocks to the driver (call after leaving `except`, when
    the traceback's frames, which hold the failed batch's tensors, are gone)."""
    if torch.cuda.is_available():  # on the CPU there is no device cache to return: skip the full gc.collect
        gc.collect()  # reference cycles can still hold the failed batch's tensors
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class BackoffPolicy:
    grow_after: int = 4  # batches that succeed in a row under a cap before the cap may grow
    settle_fraction: float = 0.9  # stop growing once the cap is within this fraction of the smallest failure

    def __post_init__(self) -> None:
        if self.grow_after < 1:
            raise ConfigError(f"grow_after={self.grow_after} must be >= 1")
        if not 0.0 < self.settle_fraction < 1.0:
            raise ConfigError(f"settle_fraction={self.settle_fraction} must be in (0, 1)")


@dataclass
class BackoffStats:
    """What the runner learned; `events` lists every back-off and growth in order (also logged)."""

    batches_ok: int = 0
    rows_ok: int = 0
    oom_events: int = 0
    rows_failed_oom: int = 0
    largest_ok_cost: int = 0
    largest_ok_rows: int = 0
    smallest_failed_cost: int | None = None
    cap: int | None = None  # the cost cap in force at the end (None: never hit an OOM)
    events: list[str] = field(default_factory=list)


class BackoffRunner(Generic[T, R]):
    """Runs batches through `run_batch`, backing off on OOM.

    run_batch(rows) -> one result per row, in order; any exception that is not an OOM propagates.
    on_done(rows, results, seconds) is called once per successful piece; on_oom_row(row, message) once for
    a row that OOMs even alone. Every row given to `run` reaches exactly one of the two.
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R]],
        cost: Callable[[list[T]], int],
        on_done: Callable[[list[T], Sequence[R], float], None],
        on_oom_row: Callable[[T, str], None],
        policy: BackoffPolicy = BackoffPolicy(),
    ) -> None:
        self._run_batch = run_batch
        self._cost = cost
        self._on_done = on_done
        self._on_oom_row = on_oom_row
        self._policy = policy
        self._ok_since_cap_change = 0
        self.stats = BackoffStats()

    def run(self, batches: Iterable[list[T]]) -> None:
        for planned in batches:
            queue: deque[list[T]] = deque(self._fit_to_cap(planned))
            while queue:
                piece = queue.popleft()
                if len(piece) > 1 and self._over_cap(piece):  # the cap shrank after this piece was cut
                    queue.extendleft(reversed(self._fit_to_cap(piece)))
                    continue
                oom_message = self._try(piece)
                if oom_message is None:
                    continue
                free_device_memory()  # outside `except`: the failed batch's tensors are unreachable now
                cost = self._cost(piece)
                self._learn_from_oom(cost, len(piece), oom_message)
                if len(piece) == 1:
                    self.stats.rows_failed_oom += 1
                    self._on_oom_row(piece[0], f"out of memory even as a batch of one (cost {cost}): {oom_message}")
                else:
                    half = len(piece) // 2
                    queue.extendleft([piece[half:], piece[:half]])

    def _try(self, piece: list[T]) -> str | None:
        """Run one piece; None on success (results handed on), else the OOM message."""
        start = time.perf_counter()
        try:
            results = self._run_batch(piece)
        except Exception as exc:  # noqa: BLE001 - anything but an OOM is re-raised at once
            if not is_oom_error(exc):
                raise
            return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        seconds = time.perf_counter() - start
        assert len(results) == len(piece), f"run_batch returned {len(results)} results for {len(piece)} rows"
        self._on_done(piece, results, seconds)
        self._learn_from_success(self._cost(piece), len(piece))
        return None

    def _over_cap(self, piece: list[T]) -> bool:
        return self.stats.cap is not None and self._cost(piece) > self.stats.cap

    def _fit_to_cap(self, rows: list[T]) -> list[list[T]]:
        """Cut `rows` (in order) into consecutive pieces whose cost fits the cap (a single row always fits).
        Cost grows with a prefix's length, so each piece's length is found by bisection."""
        cap = self.stats.cap
        if cap is None:
            return [rows]
        pieces: list[list[T]] = []
        start = 0
        while start < len(rows):
            lo, hi = 1, len(rows) - start  # lo rows always fit (one row is never cut)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._cost(rows[start : start + mid]) <= cap:
                    lo = mid
                else:
                    hi = mid - 1
            pieces.append(rows[start : start + lo])
            start += lo
        return pieces

    def _learn_from_success(self, cost: int, rows: int) -> None:
        s = self.stats
        s.batches_ok += 1
        s.rows_ok += rows
        if cost > s.largest_ok_cost:
            s.largest_ok_cost, s.largest_ok_rows = cost, rows
        if s.cap is None or s.smallest_failed_cost is None:
            return
        self._ok_since_cap_change += 1
        if self._ok_since_cap_change < self._policy.grow_after:
            return
        if s.cap >= self._policy.settle_fraction * s.smallest_failed_cost:
            return  # close enough to the known failure: stay
        new_cap = (s.cap + s.smallest_failed_cost) // 2  # halfway to the smallest failure, never past it
        self._event(f"growing the batch cost cap {s.cap} -> {new_cap} (smallest OOM at {s.smallest_failed_cost})")
        s.cap = new_cap
        self._ok_since_cap_change = 0

    def _learn_from_oom(self, cost: int, rows: int, message: str) -> None:
        s = self.stats
        s.oom_events += 1
        s.smallest_failed_cost = cost if s.smallest_failed_cost is None else min(s.smallest_failed_cost, cost)
        if rows == 1:
            # One row too large for the device says nothing about smaller batches: cap just below it.
            new_cap = cost - 1 if cost > 1 else 1
        elif cost // 2 <= s.largest_ok_cost < cost:
            new_cap = s.largest_ok_cost  # a size that worked, and at least half of what failed
        else:
            new_cap = max(1, cost // 2)
            if s.largest_ok_cost >= cost:
                s.largest_ok_cost = 0  # memory got tighter than when that size worked: forget it
        s.cap = new_cap if s.cap is None else min(s.cap, new_cap)  # an OOM never raises the cap
        self._ok_since_cap_change = 0
        self._event(f"out of memory on a batch of {rows} rows (cost {cost}); cost cap now {s.cap}: {message}")

    def _event(self, text: str) -> None:
        self.stats.events.append(text)
        log.warning(text)
