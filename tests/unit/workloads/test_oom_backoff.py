"""OOM back-off (workloads/oom.py) against a simulated device whose memory holds batches of cost <= capacity."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.workloads.batching import BatchLimits, plan_batches
from inferlab.workloads.oom import BackoffPolicy, BackoffRunner, is_oom_error

OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class SimulatedDevice:
    """Rows are (row_id, length); a batch costs rows x longest; over `capacity` it raises OOM."""

    def __init__(self, capacity: int, oom_factory=lambda: OOM("CUDA out of memory. Tried to allocate 2.00 GiB")):
        self.capacity = capacity
        self.oom_factory = oom_factory
        self.attempts: list[int] = []  # rows per attempted batch

    @staticmethod
    def cost(rows):
        return len(rows) * max(length for _, length in rows)

    def run(self, rows):
        self.attempts.append(len(rows))
        if self.cost(rows) > self.capacity:
            raise self.oom_factory()
        return [row_id * 10 for row_id, _ in rows]  # the "result" of a row


def run_all(rows, batches, device, policy=BackoffPolicy()):
    done: Counter = Counter()
    results: dict[int, int] = {}
    failed: list[int] = []

    def on_done(piece, res, seconds):
        assert seconds >= 0
        for (row_id, _), r in zip(piece, res):
            done[row_id] += 1
            results[row_id] = r

    runner = BackoffRunner(device.run, device.cost, on_done, lambda row, msg: failed.append(row[0]), policy)
    runner.run([[rows[i] for i in b] for b in batches])
    return runner, done, results, failed


def test_backs_off_from_a_batch_far_too_large_and_writes_every_row_once():
    rows = [(i, 100) for i in range(256)]
    device = SimulatedDevice(capacity=100 * 24)  # at most 24 rows of 100 tokens fit
    runner, done, results, failed = run_all(rows, [list(range(256))], device)  # one batch of 256
    assert set(done) == set(range(256)) and set(done.values()) == {1}
    assert results == {i: i * 10 for i in range(256)}
    assert failed == []
    s = runner.stats
    assert s.oom_events >= 4  # 256 -> 128 -> 64 -> 32 -> 16 at least
    assert s.largest_ok_cost <= device.capacity
    assert device.attempts[0] == 256 and device.attempts[1] == 128  # halved
    assert s.rows_ok == 256 and s.rows_failed_oom == 0
    assert any("out of memory on a batch of 256 rows" in e for e in s.events)


def test_grows_back_carefully_after_a_back_off():
    rows = [(i, 10) for i in range(400)]
    device = SimulatedDevice(capacity=10 * 30)  # 30 rows fit; the first OOM at 64 halves to 32 (fails), 16...
    batches = plan_batches([10] * 400, BatchLimits(max_rows=64))
    runner, done, _, _ = run_all(rows, batches, device, BackoffPolicy(grow_after=2))
    assert set(done.values()) == {1} and len(done) == 400
    s = runner.stats
    assert any("growing the batch cost cap" in e for e in s.events)
    assert s.largest_ok_rows > 16  # grew past the first halving that worked
    assert s.largest_ok_rows <= 30
    assert s.cap < s.smallest_failed_cost  # never grows back to a size that failed
    # after learning, most batches run without OOM: the number of OOMs stays small
    assert s.oom_events <= 8


def test_a_row_that_ooms_alone_becomes_a_failure_and_the_rest_go_on():
    rows = [(0, 10), (1, 500), (2, 10), (3, 10)]  # row 1 alone costs 500 > capacity
    device = SimulatedDevice(capacity=100)
    runner, done, results, failed = run_all(rows, [[1, 0, 2, 3]], device)
    assert failed == [1]
    assert sorted(done) == [0, 2, 3] and set(done.values()) == {1}
    assert runner.stats.rows_failed_oom == 1


def test_plain_runtime_error_with_cuda_oom_text_is_an_oom():
    assert is_oom_error(RuntimeError("CUDA error: out of memory"))
    assert is_oom_error(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert is_oom_error(OOM("x"))
    assert not is_oom_error(RuntimeError("shape mismatch"))
    assert not is_oom_error(ValueError("out of memory"))  # only RuntimeError carries the CUDA message
    rows = [(i, 10) for i in range(8)]
    device = SimulatedDevice(capacity=20, oom_factory=lambda: RuntimeError("CUDA error: out of memory"))
    _, done, _, _ = run_all(rows, [list(range(8))], device)
    assert len(done) == 8


def test_other_errors_propagate():
    def broken(rows):
        raise ValueError("a real bug")

    runner = BackoffRunner(broken, len, lambda *a: None, lambda *a: None)
    with pytest.raises(ValueError, match="a real bug"):
        runner.run([[1, 2, 3]])


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=60),
    capacity=st.integers(1, 800),
    max_rows=st.integers(1, 64),
    grow_after=st.integers(1, 5),
)
def test_every_row_reaches_exactly_one_outcome(lengths, capacity, max_rows, grow_after):
    rows = list(enumerate(lengths))
    device = SimulatedDevice(capacity)
    batches = plan_batches(lengths, BatchLimits(max_rows))
    runner, done, results, failed = run_all(rows, batches, device, BackoffPolicy(grow_after=grow_after))
    assert set(done.values()) <= {1}
    assert sorted(list(done) + failed) == list(range(len(rows)))  # once each: written or failed
    assert set(failed) == {i for i, n in rows if n > capacity}  # only rows that cannot fit even alone fail
    assert all(results[i] == i * 10 for i in done)
