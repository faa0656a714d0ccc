"""Which request runs in which row, and when: the host-side scheduler (no tensors).

Requests wait in a FIFO queue. At each sync point the queue's head fills the free rows, and the admitted
requests are grouped into prefill batches whose padded size (distinct prompts x longest prompt) stays
within `max_prefill_tokens` (the bound of prefill activation memory). With `by_length` (the default) the
admitted prompts are sorted longest first and cut into consecutive batches, so right padding wastes little.

- continuous batching: rows freed by finished requests are refilled at a sync point while the other rows
  keep decoding. A prefill costs its launches whatever its size, so a refill waits until `min_admission`
  rows are free (or the queue cannot fill more, or nothing is live).
- static batching: admission only when every row is free (a whole batch in, a whole batch out), for
  comparison with fixed-batch generation.

Shared prompts: with a `prompt_key`, requests admitted together with equal prompts form one lane whose
first member runs the prompt; the others ride in its batch at no token cost (their K/V are copied).
`compaction` moves live rows above the smallest bucket holding them into free rows below it, so the tail
of a job runs in a smaller CUDA graph.

`schedule` is a sync point's whole plan (StepPlan), what the runner executes: the prefill batches with
their lanes, then the decode chunk (bucket, graph variant, steps). The scheduler keeps each row's decode
steps and KV length for it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar

T = TypeVar("T")


def lane_groups(keys: Sequence[Hashable | None]) -> list[list[int]]:
    """Positions grouped by equal key, groups in order of first occurrence; a None key is its own group."""
    groups: list[list[int]] = []
    group_of: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        group = group_of.get(key) if key is not None else None
        if group is None:
            group = []
            groups.append(group)
            if key is not None:
                group_of[key] = group
        group.append(i)
    return groups


@dataclass
class Admission(Generic[T]):
    """One prefill batch: items[i] goes to rows[i] and rides in lane lanes[i] (one lane per distinct prompt);
    lane j runs its prompt into the slot of rows[leaders[j]], the other rows of the lane get its K/V.
    `variant`: what its sampling runs with (the row features' bits over its items)."""

    rows: list[int]
    items: list[T]
    lanes: list[int] = field(default_factory=list)
    leaders: list[int] = field(default_factory=list)
    variant: Any = None

    @classmethod
    def grouped(cls, rows: Sequence[int], items: Sequence[T], prompt_key: Callable[[T], Hashable | None],
                variant: Any = None) -> "Admission[T]":
        """The batch of items[i] into rows[i], in this order, one lane per distinct key."""
        groups = lane_groups([prompt_key(item) for item in items])
        lanes = [0] * len(items)
        for lane, members in enumerate(groups):
            for i in members:
                lanes[i] = lane
        return cls(list(rows), list(items), lanes, [members[0] for members in groups], variant)


@dataclass(frozen=True)
class StepPlan(Generic[T]):
    """What one sync point runs: the prefill batches, then `steps` decode steps over rows [0, bucket)."""

    admissions: list[Admission[T]]
    live: list[int]  # rows holding a request once admitted, ascending
    bucket: int  # the smallest bucket holding them
    variant: Any  # the decode graph's variant (the row features' bits over the live requests); None: no steps
    steps: int  # 0: nothing to decode (every live row has its tokens)
    len_hint: int  # the longest live row's KV length at the first step (bounds the torch attention's work)
    kv_positions: int  # the live rows' KV lengths at the first step, summed (the decode bytes read)


class Scheduler(Generic[T]):
    def __init__(self, num_rows: int, max_prefill_tokens: int, mode: str, prompt_len: Callable[[T], int],
                 min_admission: int = 1, prompt_key: Callable[[T], Hashable] | None = None,
                 by_length: bool = True, *, bucket_for: Callable[[int], int] = lambda rows: rows,
                 decode_steps: Callable[[T], int] = lambda item: 0,
                 variant_of: Callable[[list[T]], Any] = lambda items: None) -> None:
        """`bucket_for(rows)`: the smallest decode bucket holding that many rows; `decode_steps(item)`: the
        decode steps a request needs after its prefill token; `variant_of(items)`: a batch's graph variant."""
        assert mode in ("continuous", "static") and min_admission >= 1
        self.num_rows = num_rows
        self.min_admission = min(min_admission, num_rows)
        self.max_prefill_tokens = max_prefill_tokens
        self.mode = mode
        self.prompt_len = prompt_len
        self.prompt_key = prompt_key  # None: every request is its own prefill lane
        self.by_length = by_length  # prefill batches of similar prompt lengths (False: in queue order)
        self.bucket_for = bucket_for
        self.decode_steps = decode_steps
        self.variant_of = variant_of
        self.waiting: deque[T] = deque()
        self.rows: list[T | None] = [None] * num_rows
        # per row: decode steps since admission, and the KV length at the next step (exact while it runs; an
        # upper bound once it finished unseen)
        self.steps_done = [0] * num_rows
        self.kv_len = [0] * num_rows

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
        keys = [self.prompt_key(item) if self.prompt_key is not None else None for item in taken]
        # distinct prompts, each with the requests sharing it, in queue order
        lanes = [[taken[i] for i in members] for members in lane_groups(keys)]
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
            batch = batches[-1]
            batch.leaders.append(len(batch.rows))
            for item in lane:
                row = next(rows)
                self.rows[row] = item
                self.steps_done[row], self.kv_len[row] = 0, self.prompt_len(item) + 1  # at the first decode step
                batch.rows.append(row)
                batch.items.append(item)
                batch.lanes.append(len(batch.leaders) - 1)
        for batch in batches:
            batch.variant = self.variant_of(batch.items)
        return batches

    def schedule(self, max_steps: int) -> StepPlan[T]:
        """This sync point's plan: admissions(), then up to `max_steps` decode steps over the live rows (as
        many as the longest-running live request still needs); the rows' step counts advance by them."""
        admissions = self.admissions()
        live = self.live_rows
        bucket = self.bucket_for(live[-1] + 1)
        items = [self.item(r) for r in live]
        remaining = max(self.decode_steps(item) - self.steps_done[r] for r, item in zip(live, items))
        steps = max(0, min(max_steps, remaining))
        lengths = [self.kv_len[r] for r in live]
        plan = StepPlan(admissions, live, bucket, self.variant_of(items) if steps else None, steps, max(lengths),
                        sum(lengths))
        for r in range(bucket):
            self.steps_done[r] += steps
            self.kv_len[r] += steps
        return plan

    def retire(self, row: int) -> T:
        item = self.item(row)
        self.rows[row] = None
        return item

    def compaction(self) -> list[tuple[int, int]]:
        """Moves (src, dst) that bring every live row below the bucket of the number of live rows."""
        live = self.live_rows
        if not live:
            return []
        target = self.bucket_for(len(live))
        movers = [r for r in reversed(live) if r >= target]
        holes = [r for r in range(target) if self.rows[r] is None]
        moves = list(zip(movers, holes))
        for src, dst in moves:
            self.rows[dst], self.rows[src] = self.rows[src], None
            self.steps_done[dst], self.kv_len[dst] = self.steps_done[src], self.kv_len[src]
        return moves
