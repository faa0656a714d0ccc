"""What the row-by-row workloads (`inferlab classify`, `inferlab hidden-states`) share, on either backend.

RowWorkloadOptions: the batch and length settings and their checks (each workload adds its own fields).
RowReport: rows ok / error / skipped, the error rows by reason, real tokens, each batch's time and rows, the OOM
back-off's figures and the engine's. FinishedRows: where a finished row is counted (the report, the progress callback) and an
error record written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from inferlab.errors import ConfigError
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, check_max_line_chars
from inferlab.workloads.batching import BatchLimits
from inferlab.workloads.error_groups import ErrorGroups
from inferlab.workloads.hf_loading import resolve_max_length
from inferlab.workloads.oom import BackoffPolicy, BackoffStats
from inferlab.workloads.rows import LengthPolicy, TextRow
from inferlab.workloads.stats import latency_summary_ms


@dataclass(frozen=True)
class RowWorkloadOptions:
    batch_size: int = 16
    max_length: int | None = None  # None: the model's maximum positions
    truncate: bool = False  # over-long texts: keep the first max_length tokens instead of an error record
    max_batch_tokens: int | None = 131072  # rows x padded length of one batch
    text_field: str = "text"
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS  # an input line over it is an error record
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        check_max_line_chars(self.max_line_chars)
        BatchLimits(self.batch_size, self.max_batch_tokens)  # validates both
        if self.max_length is not None and self.max_length < 1:
            raise ConfigError(f"max_length={self.max_length} must be >= 1")

    def limits(self) -> BatchLimits:
        return BatchLimits(self.batch_size, self.max_batch_tokens)

    def resolved_max_length(self, max_positions: int | None) -> int:
        """max_length (never past the model's `max_positions`), or `max_positions` when it is None."""
        return resolve_max_length(self.max_length, max_positions)

    def length_policy(self, max_length: int) -> LengthPolicy:
        """Rows over `max_length` tokens: their first tokens with `truncate`, else error records."""
        hint = "pass --truncate to keep the first tokens, or raise --max-length"
        return LengthPolicy(max_length, self.truncate, hint)


@dataclass
class RowReport:
    backend: str = "hf"  # which backend ran the rows: "hf" (transformers) or "inferlab" (the engine)
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0  # finished by an earlier run
    tokens: int = 0  # real (unpadded) tokens run through the model
    batch_seconds: list[float] = field(default_factory=list)
    batch_rows: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    backoff: BackoffStats = field(default_factory=BackoffStats)
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's figures (stats), when it ran
    errors: ErrorGroups = field(default_factory=ErrorGroups)  # this run's error rows by reason

    def record_batch(self, rows: list[TextRow], seconds: float) -> None:
        self.rows_ok += len(rows)
        self.tokens += sum(len(r.token_ids) for r in rows)
        self.batch_seconds.append(seconds)
        self.batch_rows.append(len(rows))

    def request_seconds(self) -> list[float]:
        """Each finished row's latency: its batch's time (every row of a batch gets its result together)."""
        return [s for s, n in zip(self.batch_seconds, self.batch_rows) for _ in range(n)]

    def summary_with(self, workload_fields: dict[str, Any], rows_per_s_name: str) -> dict[str, Any]:
        """The summary: the shared figures around the workload's own (`workload_fields`, after the row
        counts) and its rows per busy second under `rows_per_s_name`."""
        busy = sum(self.batch_seconds)
        return {
            "backend": self.backend,
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "rows_skipped": self.rows_skipped,
            "errors_by_reason": self.errors.as_list(),
            **workload_fields,
            rows_per_s_name: self.rows_ok / busy if busy > 0 else None,
            "tokens_per_s": self.tokens / busy if busy > 0 else None,
            "wall_s": round(self.wall_s, 3),
            "latency_ms": latency_summary_ms(self.request_seconds()),
            "oom_events": self.backoff.oom_events,
            "largest_ok_batch_rows": self.backoff.largest_ok_rows,
            **({"engine": self.engine} if self.engine else {}),
        }


class FinishedRows:
    """Counts each finished row into `report` and tells `progress` (rows finished); error records go to
    `write_error` too."""

    def __init__(self, report: RowReport, write_error: Callable[[dict], None],
                 progress: Callable[[int], None] | None) -> None:
        self.report = report
        self._write_error = write_error
        self._progress = progress

    def error(self, record: dict) -> None:
        self._write_error(record)
        self.report.rows_error += 1
        self.report.errors.add(str(record.get("id")), record.get("error"))
        if self._progress:
            self._progress(1)

    def batch(self, rows: list[TextRow], seconds: float) -> None:
        self.report.record_batch(rows, seconds)
        if self._progress:
            self._progress(len(rows))
