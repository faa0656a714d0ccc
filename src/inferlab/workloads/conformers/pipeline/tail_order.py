"""The job's last molecules handed to the engine largest first, so that its final rows drain short.

The engine fills rows first come, first served; at a job's end its rows drain, and a long request admitted
last keeps a few rows running while the rest idle. Sorting the whole job longest first would keep them
fullest, but the pipeline streams its input and writes rows in input order (RowWriter buffers the rows that
finish early), so it reorders only the tail: the molecules of the job's last `window_rows` rows, by atom count
(a molecule's length follows it). docs/decisions.md "The job's tail goes to the engine largest first" has the
measurements. A job that ends before `window_rows` is known (set once the engine's rows are: its first
molecules go to the pool while the engine starts) keeps its order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from inferlab.workloads.conformers.pipeline.plan import MoleculeJob

TAIL_ROWS_PER_SLOT = 2  # the reordered tail: this many rows per engine row (decisions.md: the best of 1, 2, 4)


class TailOrder:
    """`jobs` (usable, in input order) as they come, except the last ones, from the first whose rows reach
    into the job's last `window_rows` rows: those are held and come largest molecule first (ties in input
    order). `total_rows`: the rows of every job."""

    def __init__(self, jobs: Iterable[MoleculeJob], total_rows: int) -> None:
        self._jobs = jobs
        self._total_rows = total_rows
        self.window_rows = 0  # 0: no reordering (not known yet)

    def __iter__(self) -> Iterator[MoleculeJob]:
        passed, held = 0, []
        for job in self._jobs:
            rows = len(job.todo)
            if held or (self.window_rows and self._total_rows - passed - rows < self.window_rows):
                held.append(job)
            else:
                yield job
            passed += rows
        yield from sorted(held, key=lambda job: -(job.record.num_atoms or 0))
