"""The job's last molecules go to the engine largest first (pipeline/tail_order.py): every job exactly once, the
ones before the tail in input order, the tail's (from the first job reaching into the last window_rows rows)
by atom count, ties in input order; no window: the input's order."""

from __future__ import annotations

from types import SimpleNamespace

from inferlab.workloads.conformers.pipeline.tail_order import TailOrder


def _job(name: str, atoms: int, rows: int) -> SimpleNamespace:
    return SimpleNamespace(record=SimpleNamespace(id=name, num_atoms=atoms), todo=tuple(range(rows)))


def test_only_the_tail_is_reordered_largest_first():
    jobs = [_job("a", 30, 4), _job("b", 10, 4), _job("c", 20, 4), _job("d", 40, 4), _job("e", 20, 4), _job("f", 50, 2)]
    total = sum(len(j.todo) for j in jobs)  # 22
    ordered = TailOrder(jobs, total)
    assert [j.record.id for j in ordered] == ["a", "b", "c", "d", "e", "f"]  # no window yet
    ordered.window_rows = 9  # the last 9 rows: e (4), f (2) and d, whose rows reach into them
    assert [j.record.id for j in ordered] == ["a", "b", "c", "f", "d", "e"]
    ordered.window_rows = 100  # a window past the job: all of it, largest first, ties in input order
    assert [j.record.id for j in ordered] == ["f", "d", "a", "c", "e", "b"]


def test_a_stream_is_read_once_and_lazily():
    pulled = []

    def stream():
        for i in range(6):
            pulled.append(i)
            yield _job(str(i), i, 1)

    ordered = TailOrder(stream(), 6)
    ordered.window_rows = 2
    it = iter(ordered)
    assert next(it).record.id == "0" and pulled == [0]  # before the tail, one job at a time
    assert [j.record.id for j in it] == ["1", "2", "3", "5", "4"]
