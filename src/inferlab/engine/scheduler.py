"""Which request runs in which row, and when: the host-side scheduler (no tensors, unit-tested on CPU).

Requests wait in a FIFO queue. At each sync point the engine asks for admissions: free rows (lowest first)
are filled in FIFO order and the admitted requests are grouped into prefill batches whose padded size
(requests x longest prompt) stays within `max_prefill_tokens`, which bounds prefill activation memory.

- continuous batching: rows freed by finished requests are refilled at a sync point while the other rows
  keep decoding; nobody waits for the longest row of a batch. A prefill costs its kernel launches whatever
  its size (~4 ms for 16 layers, eager), so refills wait until `min_admission` rows are free (or the queue
  cannot fill more, or nothing is live): one prefill per few finished rows, not one per sync point.
- static batching: admission happens only when every row is free (a whole batch in, a whole batch out),
  which is what fixed-batch generation does; kept to measure the difference.

When the batch drains (free rows below live ones), `compaction` pairs live rows above the smallest bucket
that holds them with free rows below it, so the tail runs in a smaller CUDA graph.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


@dataclass
class Admission(Generic[T]):
    """One prefill batch: items[i] goes to rows[i]."""

    rows: list[int]
    items: list[T]


class Scheduler(Generic[T]):
    def __init__(self, num_rows: int, max_prefill_tokens: int, mode: str, prompt_len: Callable[[T], int],
                 min_admission: int = 1) -> None:
        assert mode in ("continuous", "static") and min_admission >= 1
        self.num_rows = num_rows
        self.min_admission = min(min_admission, num_rows)
        self.max_prefill_tokens = max_prefill_tokens
        self.mode = mode
        self.prompt_len = prompt_len
        self.waiting: deque[T] = deque()
        self.rows: list[T | None] = [None] * num_rows

    def submit(self, item: T) -> None:
        self.waiting.append(item)

    @property
    def live_rows(self) -> list[int]:
        return [r for r, item in enumerate(self.rows) if item is not None]

    def has_work(self) -> bool:
        return bool(self.waiting) or any(item is not None for item in self.rows)

    def item(self, row: int) -> T:
        item = self.rows[row]
        assert item is not None, f"row {row} is idle"
        return item

    def admissions(self) -> list[Admission[T]]:
        """Fill free rows from the queue (FIFO); group them into prefill batches within the token bound."""
        live = self.live_rows
        if self.mode == "static" and live:
            return []
        free = [r for r, item in enumerate(self.rows) if item is None]
        if live and len(free) < min(self.min_admission, len(self.waiting)):
            return []  # too few to be worth a prefill yet; the live rows keep decoding
        batches: list[Admission[T]] = []
        current: Admission[T] = Admission([], [])
        longest = 0
        for row in free:
            if not self.waiting:
                break
            item = self.waiting[0]
            length = max(longest, self.prompt_len(item))
            if current.items and (len(current.items) + 1) * length > self.max_prefill_tokens:
                batches.append(current)
                current, length = Admission([], []), self.prompt_len(item)
            self.waiting.popleft()
            self.rows[row] = item
            current.rows.append(row)
            current.items.append(item)
            longest = length
        if current.items:
            batches.append(current)
        return batches

    def retire(self, row: int) -> T:
        item = self.item(row)
        self.rows[row] = None
        return item

    def compaction(self, bucket_for: Callable[[int], int]) -> list[tuple[int, int]]:
        """Moves (src, dst) that bring every live row below bucket_for(number of live rows)."""
        live = self.live_rows
        if not live:
            return []
        target = bucket_for(len(live))
        movers = [r for r in reversed(live) if r >= target]
        holes = [r for r in range(target) if self.rows[r] is None]
        moves = list(zip(movers, holes))
        for src, dst in moves:
            self.rows[dst], self.rows[src] = self.rows[src], None
        return moves
