"""Which request runs in which row, and when: the host-side scheduler (no tensors, unit-tested on CPU).

Requests wait in a FIFO queue. At each sync point the engine asks for admissions: the queue's head fills the
free rows (which requests get in is FIFO) and the admitted requests are grouped into prefill batches whose
padded size (distinct prompts x longest prompt) stays within `max_prefill_tokens`, which bounds prefill
activation memory. The grouping is by prompt length (`by_length`, the default): the admitted prompts,
longest first, are cut into consecutive batches, so each batch's prompts have similar lengths and right
padding to the batch's longest wastes little device work. In queue order, prompts of 400-1,200 tokens
padded 1.37x their tokens (8,192-token batches; 1.02x sorted: `stats.prefill_padded_tokens` counts them), and
a prefill's device time follows its padded tokens.

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
                 min_admission: int = 1, prompt_key: Callable[[T], Hashable] | None = None,
                 by_length: bool = True) -> None:
        assert mode in ("continuous", "static") and min_admission >= 1
        self.num_rows = num_rows
        self.min_admission = min(min_admission, num_rows)
        self.max_prefill_tokens = max_prefill_tokens
        self.mode = mode
        self.prompt_len = prompt_len
        self.prompt_key = prompt_key  # None: every request is its own prefill lane
        self.by_length = by_length  # prefill batches of similar prompt lengths (False: in queue order)
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
        """Fill free rows from the queue: which requests are admitted is FIFO (the queue's head, as many as
        rows are free); how they are grouped into prefill batches within the token bound is by prompt length
        when `by_length` (see the module docstring), else in queue order. A repeated prompt rides in its
        first occurrence's lane (one distinct prompt: one lane, counted once against the bound)."""
        live = self.live_rows
        if self.mode == "static" and live:
            return []
        free = [r for r, item in enumerate(self.rows) if item is None]
        if live and len(free) < min(self.min_admission, len(self.waiting)):
            return []  # too few to be worth a prefill yet; the live rows keep decoding
        taken = [self.waiting.popleft() for _ in range(min(len(free), len(self.waiting)))]
        lanes: list[list[T]] = []  # distinct prompts, each with the requests sharing it, in queue order
        lane_of: dict[Hashable, list[T]] = {}
        for item in taken:
            key = self.prompt_key(item) if self.prompt_key is not None else None
            lane = lane_of.get(key) if key is not None else None
            if lane is None:
                lane = []
                lanes.append(lane)
                if key is not None:
                    lane_of[key] = lane
            lane.append(item)
        if self.by_length:  # longest first, ties in queue order: each batch holds prompts of similar length
            lanes.sort(key=lambda lane: -self.prompt_len(lane[0]))
        batches: list[Admission[T]] = []
        count, longest = 0, 0  # lanes in the current batch and their longest prompt
        rows = iter(free)
        for lane in lanes:
            length = max(longest, self.prompt_len(lane[0]))
            if not batches or (count + 1) * length > self.max_prefill_tokens:
                batches.append(Admission([], []))
                count, length = 0, self.prompt_len(lane[0])
            count, longest = count + 1, length
            for item in lane:
                row = next(rows)
                self.rows[row] = item
                batches[-1].rows.append(row)
                batches[-1].items.append(item)
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
