"""A scaled-out command's exit code: 3 while a shard is unfinished, 1 when the shards run now wrote rows, none
of them succeeded and no earlier run's rows stand (as one process would), 0 otherwise (a rerun with nothing left
to do, or one resuming an earlier run's rows, included)."""

from __future__ import annotations

from inferlab.cli.scale_args import EXIT_INCOMPLETE, scaled_exit_code
from inferlab.scale.report import ScaleReport, ShardReport


def _report(*shards: tuple[str, int, int, int], rows_before: int = 0) -> ScaleReport:
    """shards: (status, attempts this run, rows ok, rows error); merged when every shard is done"""
    merged = 8 if all(status == "done" for status, *_ in shards) else None
    report = ScaleReport("conformers", "out.sdf", "out.sdf.scale", "local", 2, rows_total=8, rows_done=8,
                         rows_before=rows_before, wall_s=1.0, imbalance=1.0, reused_plan=False, merged_rows=merged)
    report.shards = [ShardReport(i, 4, 100.0, status, 1, ran, 4, stats={"summary": {"rows_ok": ok, "rows_error": err}})
                     for i, (status, ran, ok, err) in enumerate(shards)]
    return report


def test_no_row_ok_across_the_shards_exits_1():
    assert scaled_exit_code(_report(("done", 1, 0, 4), ("done", 1, 0, 4))) == 1
    assert scaled_exit_code(_report(("done", 1, 0, 4), ("done", 1, 1, 3))) == 0
    assert scaled_exit_code(_report(("done", 0, 0, 4), ("done", 0, 0, 4))) == 0  # nothing ran now: a resume
    # a resume whose shards run now hold only the rows that fail, beside rows of an earlier run
    assert scaled_exit_code(_report(("done", 0, 0, 4), ("done", 1, 0, 4), rows_before=4)) == 0
    assert scaled_exit_code(_report(("done", 1, 0, 4), ("failed", 1, 0, 2))) == EXIT_INCOMPLETE
