"""One generate/stream call: requests pulled lazily from the caller's iterable, then sync points until it is
exhausted and every admitted request has finished. The host side of the loop; the device work is the
runner's (runner.py), which request sits in which row the scheduler's (scheduler.py).

A sync point: the scheduler's StepPlan run by the runner (queued requests admitted into free rows and
prefilled, up to `decode_steps_per_sync` decode steps) and a snapshot of the rows' progress launched, the
queue topped up from the iterable, then the *previous* chunk's snapshot read (snapshots.py) while this chunk
runs: tokens delivered, finished requests retired into Results (their rows refill at the next sync point),
the batch compacted once it drains for good.

Lazy intake: the iterable is pulled only at sync points and only as far as rows and a bounded queue need:
before the launch, what an admission due now needs (or, with the device idle, at least one request);
after it, enough to hold `queue_ahead` requests waiting. So a generator of millions of requests is never
materialised, it may yield new requests after results came back (retries), and a generator slower than
the device stalls it (`stats.intake_s`, `stats.intake_blocking_s`). A collecting request's Result comes
one sync point after retirement, once its activations reached the host (collection.AwaitingResults).
`on_tokens(n)`, when given, is told at each read of a snapshot the n output tokens that reached the host
there (live rows' and finished ones' together): progress from the first decode chunk, not only per Result;
that first chunk is then one step long, so the count comes after one decode step. On a CPU the chunk has run
when its snapshot is taken (nothing overlaps), so its snapshot is read at once rather than one chunk late.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from inferlab.engine.collection import AwaitingResults
from inferlab.engine.config import EngineConfig
from inferlab.engine.cpu_threads import torch_threads
from inferlab.engine.graphs import bucket_for
from inferlab.engine.intake import Prepared, RequestSource, finished_result
from inferlab.engine.rows import REASON_NAMES
from inferlab.engine.runner import ModelRunner
from inferlab.engine.scheduler import Admission, Scheduler, StepPlan
from inferlab.engine.snapshots import HEADER, Snapshot, SnapshotBuffers
from inferlab.engine.stats import EngineStats, PhaseClock
from inferlab.types import Request, Result

Indexed = tuple[int, Result]  # (the request's position in the caller's iterable, its Result)


@dataclass(frozen=True)
class LoopParts:
    """What one generate/stream call uses of its Engine. The device-side objects (runner, snapshot buffers,
    tokenizer) are fetched at each use, never kept: Engine.close() must be able to drop them under a live
    stream, after which the fetch raises EngineClosedError."""

    config: EngineConfig
    stats: EngineStats
    slots: int
    max_prefill_tokens: int
    kv_bytes_per_token: int  # the cache's bytes per position (fp8 scales included): decode bytes counted
    cuda: bool
    runner: Callable[[], ModelRunner]
    snapshots: Callable[[], SnapshotBuffers]
    tokenizer: Callable[[], Any]  # None for an engine started with load_tokenizer=False
    prepare: Callable[[int, Request], Prepared | Result]  # intake of one request pulled from the iterable
    sync_device: Callable[[], None]
    after_run: Callable[[], None]  # the engine's figures that change after start-up (lazy graphs, peak memory)


class GenerationLoop:
    def __init__(self, parts: LoopParts, requests: Iterable[Request],
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.parts = parts
        self.on_tokens = on_tokens
        self.stats = parts.stats
        config = parts.config
        slots = parts.slots
        min_admission = config.min_admission or max(1, slots // 16)
        sizes = self.runner.sizes
        self.scheduler: Scheduler[Prepared] = Scheduler(
            slots, parts.max_prefill_tokens, config.batching, lambda p: p.prompt_len, min_admission,
            (lambda p: p.prompt_key) if config.share_prompts else None, config.prefill_by_length,
            bucket_for=lambda n: bucket_for(n, sizes),
            decode_steps=lambda p: p.sampling.max_new_tokens - 1,  # after the prefill's token
            variant_of=lambda items: parts.runner().features.variant_of(items),
        )  # fmt: skip
        self.queue_ahead = config.queue_ahead if config.queue_ahead is not None else max(min_admission, slots // 8)
        self.source = RequestSource(requests, parts.prepare)
        self.clock = PhaseClock(cuda=parts.cuda)
        self.pending: Snapshot | None = None  # the snapshot of the chunk in flight, read at the next sync point
        self._fresh: Snapshot | None = None  # the snapshot just launched (becomes `pending` once collected)
        self.awaiting = AwaitingResults()  # collecting Results, their activations in flight
        self.threads = None if parts.cuda else config.cpu_threads  # torch's threads while the CPU runs a chunk
        self._chunks = 0  # decode chunks launched by this call

    @property
    def runner(self) -> ModelRunner:
        return self.parts.runner()

    # ---- the call ---------------------------------------------------------------------------------------
    def run(self) -> Iterator[Indexed]:
        """Sync points until the iterable is exhausted and every request has its Result. The caller's code
        (the iterable, the consumer of the results) always runs outside inference mode."""
        started = time.perf_counter()
        self.runner.release(range(self.parts.slots))  # rows an abandoned stream left behind
        while True:
            yield from self._pull(self._needed_now(), blocking=True)
            if not self.scheduler.has_work() and self.pending is None:
                if self.source.exhausted:
                    break
                continue  # everything pulled so far was refused at intake: pull again
            with torch_threads(self.threads):
                steps = self._launch()
            yield from self._collect(steps)
            if steps > 0:  # the device has a chunk to run: pull ahead now rather than before the next launch
                yield from self._pull(self.queue_ahead - len(self.scheduler.waiting), blocking=False)
        yield from self.awaiting.deliver()
        self.parts.sync_device()
        self.clock.resolve()
        stats = self.stats
        stats.prefill_s += self.clock.totals.get("prefill", 0.0)
        stats.decode_s += self.clock.totals.get("decode", 0.0)
        stats.generate_s += time.perf_counter() - started
        self.parts.after_run()

    def _needed_now(self) -> int:
        """Requests to pull before this sync point's launch (see the module docstring)."""
        sched = self.scheduler
        if self.source.exhausted:
            return 0
        short = sched.free_rows - len(sched.waiting)
        if not sched.live_rows and self.pending is None:  # the device has nothing to do: wait for work
            return max(1, short)
        return max(0, short) if sched.admission_due() else 0

    def _pull(self, n: int, blocking: bool) -> list[Indexed]:
        """Take up to n requests from the iterable: prepared ones join the queue, refused ones come back."""
        if n <= 0 or self.source.exhausted:
            return []
        t = time.perf_counter()
        refused: list[Indexed] = []
        for index, item in self.source.pull(n):
            if isinstance(item, Result):
                refused.append((index, item))
            else:
                self.scheduler.submit(item)
        spent = time.perf_counter() - t
        self.stats.intake_s += spent
        if blocking:
            self.stats.intake_blocking_s += spent
        return refused

    # ---- one sync point ------------------------------------------------------------------------------
    @torch.inference_mode()
    def _launch(self) -> int:
        """Run this sync point's plan (prefills, a decode chunk) and launch its snapshot; returns its steps."""
        scheduler = self.scheduler
        self._fresh = None
        if not (scheduler.live_rows or scheduler.waiting):
            return 0
        max_steps = self.parts.config.decode_steps_per_sync
        if self.on_tokens is not None and not self._chunks:
            max_steps = min(max_steps, 1)  # the caller's progress hears from the first decode step
        plan = scheduler.schedule(max_steps)
        for admission in plan.admissions:
            self._prefill(admission)
        if plan.steps > 0:
            self._chunks += 1
            self._decode(plan)
        holders = [(r, scheduler.item(r)) for r in plan.live]
        width = plan.steps * (1 + self.parts.config.forced_run_tokens) + 1  # the most tokens a row gained
        self._fresh = self.parts.snapshots().take(self.runner.rows, plan.bucket, width, holders,
                                                  self.runner.features.snapshot_tail(plan.bucket))
        return plan.steps

    @torch.inference_mode()
    def _collect(self, steps: int) -> list[Indexed]:
        """Read the *previous* snapshot (retire, build results) while the new chunk runs; compact when the
        batch drains for good."""
        scheduler, fresh = self.scheduler, self._fresh
        results: list[Indexed] = []
        if self.pending is not None:
            results += self._read(self.pending)
        self.pending = fresh
        if fresh is not None and ((steps == 0 and not results) or not self.parts.cuda):  # nothing to overlap
            results += self._read(fresh)
            self.pending = None
        if self.parts.config.compact_rows and not scheduler.waiting and self.source.exhausted:
            self._compact()  # with more requests to come, free rows refill instead
        return results

    def _prefill(self, admission: Admission[Prepared]) -> None:
        stats, now = self.stats, time.perf_counter()
        for row, item in zip(admission.rows, admission.items):
            item.timings.admitted_s, item.row = now, row
        t = self.clock.start()
        self.runner.admit(admission)
        done = self.runner.prefill(admission)
        self.clock.stop("prefill", t)
        stats.prefill_host_s += time.perf_counter() - now
        stats.prefill_batches += 1
        stats.prompt_tokens += sum(item.prompt_len for item in admission.items)
        stats.prefill_tokens += done.tokens
        stats.prefill_padded_tokens += done.padded
        stats.prefill_lanes += done.lanes
        stats.shared_prompt_rows += len(admission.items) - done.lanes

    def _decode(self, plan: StepPlan[Prepared]) -> None:
        """The plan's decode chunk, and what it reads: all weights per step, and each row's KV up to its
        length (1 for idle rows)."""
        stats, steps, b, live = self.stats, plan.steps, plan.bucket, len(plan.live)
        t = self.clock.start()
        self.runner.decode(plan)
        self.clock.stop("decode", t)
        kv_tokens = steps * (plan.kv_positions + b - live) + live * steps * (steps - 1) // 2
        stats.decode_bytes += steps * stats.weight_bytes + kv_tokens * self.parts.kv_bytes_per_token
        stats.decode_steps += steps
        stats.row_steps += steps * b
        stats.live_row_steps += steps * live

    def _read(self, snapshot: Snapshot) -> list[Indexed]:
        """Deliver a snapshot's tokens to their requests; retire the finished ones into Results."""
        data = snapshot.rows()
        self.stats.syncs += 1
        self.clock.resolve()  # fold the finished phase events now: a long run must not hoard them
        tokenizer, decode_text = self.parts.tokenizer(), self.parts.config.decode_text
        results, released = self.awaiting.deliver(), []
        collected: list[tuple[int, Result, Prepared]] = []
        arrived = 0
        for row, item in snapshot.holders:
            if item.retired:  # retired from an earlier snapshot; its row may hold someone else now
                continue
            start, n_out, finished, reason = data[row][:HEADER]
            item.tokens.extend(data[row][HEADER : HEADER + n_out - start])
            arrived += n_out - start
            if finished:
                item.retired = True
                item.timings.finished_s = time.perf_counter()
                released.append(item.row)
                self.scheduler.retire(item.row)
                self.stats.generated_tokens += len(item.tokens)
                result = finished_result(
                    item, item.tokens, REASON_NAMES[reason], tokenizer, decode_text
                )
                snapshot.finish(result, item, data[row])  # the row features' values (constraint pressure)
                if item.collect is not None:
                    collected.append((item.index, result, item))
                else:
                    results.append((item.index, result))
        if arrived and self.on_tokens is not None:
            self.on_tokens(arrived)
        if collected:  # copied behind the running chunk, delivered at the next read
            self.awaiting.add(self.runner.features.collection.buffers, collected)
        if released:
            self.runner.release(released)
        return results

    def _compact(self) -> None:
        moves = self.scheduler.compaction()
        if not moves:
            return
        self.runner.move(moves)
        self.stats.row_moves += len(moves)
        for _, dst in moves:
            self.scheduler.item(dst).row = dst
