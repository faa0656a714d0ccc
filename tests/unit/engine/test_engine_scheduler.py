"""The host scheduler alone: invariants under simulated decoding, FIFO, prefill bound, static vs continuous."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.engine.graphs import bucket_for, bucket_sizes
from inferlab.engine.scheduler import Scheduler


@dataclass(eq=False)
class Job:
    name: int
    prompt: int
    output: int  # decode steps until it finishes
    done_steps: int = 0


def simulate(jobs, rows, prefill_tokens, mode, steps_per_sync=4, compact=True, min_admission=1, by_length=True):
    """Drive the scheduler like the engine does; return the event log and checks of every invariant."""
    sizes = bucket_sizes(rows)
    sched = Scheduler(rows, prefill_tokens, mode, lambda j: j.prompt, min_admission, by_length=by_length,
                      bucket_for=lambda n: bucket_for(n, sizes))
    for job in jobs:
        sched.submit(job)
    log = {"admitted": [], "finished": [], "batches": [], "buckets": []}
    clock = 0
    while sched.has_work():
        for adm in sched.admissions():
            assert len(adm.items) * max(j.prompt for j in adm.items) <= prefill_tokens or len(adm.items) == 1
            log["batches"].append(len(adm.items))
            for row, job in zip(adm.rows, adm.items):
                log["admitted"].append((clock, job.name, row))
        occupied = [r for r, item in enumerate(sched.rows) if item is not None]
        assert len({id(sched.rows[r]) for r in occupied}) == len(occupied)  # no request in two rows
        live = sched.live_rows
        log["buckets"].append(bucket_for(live[-1] + 1, sizes))
        clock += steps_per_sync
        for row in live:
            job = sched.item(row)
            job.done_steps += steps_per_sync
            if job.done_steps >= job.output:
                log["finished"].append((clock, sched.retire(row).name))
        if compact:
            for src, dst in sched.compaction():
                assert src > dst and sched.rows[src] is None and sched.rows[dst] is not None
    return log


def fifo_order(log) -> list[int]:
    """The admitted names by admission time (ties by name): range(n) when who gets in is FIFO."""
    return [name for _, name in sorted((t, name) for t, name, _ in log["admitted"])]


def test_every_request_finishes_once_and_fifo_admission():
    rng = random.Random(0)
    jobs = [Job(i, rng.randint(1, 40), rng.randint(1, 60)) for i in range(50)]
    log = simulate(jobs, rows=8, prefill_tokens=64, mode="continuous")
    assert sorted(name for _, name in log["finished"]) == list(range(50))
    assert fifo_order(log) == list(range(50))  # who gets in: FIFO (the batches are by length)
    for job in jobs:
        job.done_steps = 0
    log = simulate(jobs, rows=8, prefill_tokens=64, mode="continuous", by_length=False)
    assert [name for _, name, _ in log["admitted"]] == list(range(50))  # queue order throughout


def test_prefill_batches_by_length_pad_less_than_queue_order():
    """Long and short prompts alternating in the queue: in queue order every batch pads the short ones to a
    long one; by length the long ones share batches and so do the short ones."""
    prompts = [100, 10] * 8

    def batches(by_length):
        sched = Scheduler(16, 400, "continuous", lambda j: j.prompt, by_length=by_length)
        for i, p in enumerate(prompts):
            sched.submit(Job(i, p, 4))
        out = sched.admissions()
        assert sorted(j.name for a in out for j in a.items) == list(range(16))
        assert sorted(r for a in out for r in a.rows) == list(range(16))
        assert all(sched.rows[r] is j for a in out for r, j in zip(a.rows, a.items))
        return [[j.prompt for j in a.items] for a in out]

    def padded(groups):
        return sum(len(g) * max(g) for g in groups)

    by_length, in_order = batches(True), batches(False)
    assert by_length == [[100] * 4, [100] * 4, [10] * 8]
    assert padded(by_length) == 880 < padded(in_order) == 1600  # 4 batches of [100, 10] x 2: 4 x 400


def test_shared_prompts_ride_in_their_lane_whatever_the_order():
    """Equal prompts (a prompt_key) form one lane, counted once against the bound, all in one batch."""
    sched = Scheduler(8, 60, "continuous", lambda j: j.prompt, prompt_key=lambda j: j.prompt)
    for i, p in enumerate([20, 30, 20, 20, 30, 5]):
        sched.submit(Job(i, p, 4))
    out = sched.admissions()
    assert [[j.name for j in a.items] for a in out] == [[1, 4, 0, 2, 3], [5]]  # lanes 30 and 20: 2 x 30 <= 60


def test_refill_happens_before_the_longest_row_ends():
    jobs = [Job(0, 5, 400)] + [Job(i, 5, 8) for i in range(1, 10)]
    log = simulate(jobs, rows=2, prefill_tokens=100, mode="continuous")
    end_of_long = dict((name, t) for t, name in log["finished"])[0]
    admitted_late = [t for t, name, _ in log["admitted"] if name >= 2]
    assert admitted_late and max(admitted_late) < end_of_long  # short jobs cycled through row 1 meanwhile


def test_static_batching_waits_for_the_whole_batch():
    jobs = [Job(0, 5, 400)] + [Job(i, 5, 8) for i in range(1, 10)]
    log = simulate(jobs, rows=2, prefill_tokens=100, mode="static")
    end_of_long = dict((name, t) for t, name in log["finished"])[0]
    assert all(t >= end_of_long for t, name, _ in log["admitted"] if name >= 2)


def test_refills_wait_for_min_admission_free_rows():
    jobs = [Job(i, 5, 4 * (i + 1)) for i in range(8)] + [Job(i, 5, 400) for i in range(8, 16)]
    log = simulate(jobs, rows=8, prefill_tokens=1000, mode="continuous", min_admission=3)
    first_refill = [t for t, name, _ in log["admitted"] if name >= 8]
    assert first_refill[:3] == [12, 12, 12]  # jobs 0-2 finish at t=4, 8, 12: one prefill of three rows
    assert log["batches"][:2] == [8, 3]
    # the queue's last rows do not wait for more free rows than the queue can fill
    tail = simulate([Job(0, 5, 400), Job(1, 5, 4), Job(2, 5, 4)], rows=2, prefill_tokens=1000, mode="continuous",
                    min_admission=2)
    assert [name for _, name, _ in tail["admitted"]] == [0, 1, 2] and tail["admitted"][2][0] == 4


def test_prefill_batches_respect_the_token_bound():
    jobs = [Job(i, 30, 4) for i in range(6)] + [Job(6, 100, 4)]
    sched = Scheduler(16, 64, "continuous", lambda j: j.prompt)
    for job in jobs:
        sched.submit(job)
    sizes = [len(a.items) for a in sched.admissions()]
    # longest first: the 100-token prompt alone (over the bound by itself), then 2 x 30 <= 64 < 3 x 30
    assert sizes == [1, 2, 2, 2]


def test_compaction_moves_the_tail_into_the_smallest_bucket():
    sched = Scheduler(16, 1000, "continuous", lambda j: j.prompt, bucket_for=lambda n: bucket_for(n, bucket_sizes(16)))
    for i in range(16):
        sched.submit(Job(i, 1, 1))
    sched.admissions()
    for row in range(16):
        if row not in (3, 12, 15):
            sched.retire(row)
    moves = sched.compaction()
    assert sorted(sched.live_rows) == [0, 1, 3]  # 3 live rows -> bucket 4: rows 15 and 12 moved down
    assert moves == [(15, 0), (12, 1)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(1, 80)), min_size=1, max_size=40),
    st.integers(1, 12),
    st.sampled_from(["continuous", "static"]),
    st.integers(1, 128),
    st.integers(1, 16),
)
def test_invariants_hold_for_any_workload(specs, rows, mode, prefill_tokens, min_admission):
    jobs = [Job(i, p, o) for i, (p, o) in enumerate(specs)]
    log = simulate(jobs, rows, prefill_tokens, mode, min_admission=min_admission)
    assert sorted(name for _, name in log["finished"]) == list(range(len(jobs)))
    assert fifo_order(log) == list(range(len(jobs)))
    assert all(b <= rows for b in log["buckets"])
