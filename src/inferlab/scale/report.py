"""What a scaled run reports: per shard (rows, estimated tokens, status, attempts, the worker's timings,
and for a failure its message and log tail) and for the whole run (rows done, merged rows, wall time).
Written to <work dir>/report.json; the CLI prints it. Not here: computing any of it (coordinator.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ShardReport:
    index: int
    rows: int
    est_tokens: float
    status: str  # done, failed, pending (cancelled)
    attempts: int  # over all runs
    attempts_this_run: int
    rows_done: int
    log: str | None = None
    message: str | None = None  # why the last attempt failed
    log_tail: str | None = None
    stats: dict[str, Any] | None = None  # the worker's stats file (timings, the workload's summary)


@dataclass
class ScaleReport:
    workload: str
    output: str
    work_dir: str
    launcher: str
    workers: int
    rows_total: int
    rows_done: int
    rows_before: int  # finished by earlier runs
    wall_s: float
    imbalance: float  # heaviest shard / mean shard, in estimated tokens
    reused_plan: bool
    merged_rows: int | None = None  # rows in the merged output (None: not merged, some shard is not done)
    shards: list[ShardReport] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.merged_rows is not None

    @property
    def failed(self) -> list[ShardReport]:
        return [s for s in self.shards if s.status != "done"]

    @property
    def rows_per_s(self) -> float | None:
        """Rows finished by this run per second of this run's wall time (planning and merging included)."""
        done = self.rows_done - self.rows_before
        return done / self.wall_s if self.wall_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["complete"] = self.complete
        data["rows_per_s"] = self.rows_per_s
        return data
