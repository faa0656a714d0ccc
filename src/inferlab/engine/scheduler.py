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

Shared prompts: with a `prompt_key`, requests admitted at one sync point whose prompts are equal form
one group: the first is the group's prefill lane, the others ride in its prefill batch at no token cost
(the runner prefills the prompt once and copies its K/V into their slots), so the token bound counts
each distinct prompt once.

When the batch drains (free rows below live ones), `compaction` pairs live rows above the smallest bucket
that holds them with free rows below it, so the tail runs in a smaller CUDA graph.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

T = TypeVar("T")


@dataclass
class Admission(Generic[T]):
    """One prefill batch: items[i] goes to rows[i]."""

    rows: list[int]
    items: list[T]


class Scheduler(Generic[T]):
    def __init__(self, num_rows: int, max_prefill_tokens: int, mode: str, prompt_len: Callable[[T], int],
                 min_admission: int = 1, prompt_key: Callable[[T], Hashable] | None = None) -> None:
        assert mode in ("continuous", "static") and min_admission >= 1
        self.num_rows = num_rows
        self.min_admission = min(min_admission, num_rows)
        self.max_prefill_tokens = max_prefill_tokens
        self.mode = mode
        self.prompt_len = prompt_len
        self.prompt_key = prompt_key  # None: every request is its own prefill lane
        self.waiting: deque[T] = deque()
        self.rows: list[T | None] = [None] * num_rows

    def submit(self, item: T) -> None:
        self.waiting.append(item)

    @property
    def live_rows(self) -> list[int]:
        return [r for r, item in enumerate(self.rows) if item is not None]

    @property
    def free_rows(self) -> int:
        return sum(item is None for item in self.rows)

    def admission_due(self) -> bool:
        """Would admissions() admit something if the queue held enough requests? (the lazy intake asks
        this before pulling requests from the caller's iterable)"""
        free = self.free_rows
        if free == 0 or (self.mode == "static" and free < self.num_rows):
            return False
        return free >= self.min_admission or free == self.num_rows

    def has_work(self) -> bool:
        return bool(self.waiting) or any(item is not None for item in self.rows)

    def item(self, row: int) -> T:
        item = self.rows[row]
        assert item is not None, f"row {row} is idle"
        return item

    def admissions(self) -> list[Admission[T]]:
        """Fill free rows from the queue (FIFO); group them into prefill batches within the token bound
        (padded tokens of the distinct prompts: a repeated prompt joins its first occurrence's batch)."""
        live = self.live_rows
        if self.mode == "static" and live:
            return []
        free = [r for r, item in enumerate(self.rows) if item is None]
        if live and len(free) < min(self.min_admission, len(self.waiting)):
            return []  # too few to be worth a prefill yet; the live rows keep decoding
        batches: list[Admission[T]] = []
        batch_of_prompt: dict[Hashable, Admission[T]] = {}  # this sync point's distinct prompts -> their batch
        current: Admission[T] = Admission([], [])
        lanes, longest = 0, 0
        for row in free:
            if not self.waiting:
                break
            item = self.waiting.popleft()
            self.rows[row] = item
            key = self.prompt_key(item) if self.prompt_key is not None else None
            target = batch_of_prompt.get(key) if key is not None else None
            if target is None:  # a new prefill lane
                length = max(longest, self.prompt_len(item))
                if current.items and (lanes + 1) * length > self.max_prefill_tokens:
                    batches.append(current)
                    current, lanes, length = Admission([], []), 0, self.prompt_len(item)
                lanes, longest, target = lanes + 1, length, current
                if key is not None:
                    batch_of_prompt[key] = current
            target.rows.append(row)
            target.items.append(item)
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
