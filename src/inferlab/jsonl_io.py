"""Line-oriented batch input and resumable output, shared by every workload.

Reading never raises on a bad line: it yields an error record so a long job goes on. Writing appends one
JSON object per line and flushes it at once, so a crash loses nothing that was finished; a rerun opens the
same file, learns which ids are done and skips them. A torn last line (a crash mid-write) is dropped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from inferlab.errors import InputError


@dataclass(frozen=True)
class InputRecord:
    """One input line: `data` when it parsed, else `error` (and data is None)."""

    line_no: int  # 1-based
    id: str
    data: dict[str, Any] | None
    error: str | None = None


def read_jsonl_records(path: str | Path, id_field: str = "id") -> Iterator[InputRecord]:
    """Yield one InputRecord per non-blank line. A line without an id gets `line-<n>` as its id."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"input file {p} does not exist")
    with p.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fallback_id = f"line-{line_no}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                yield InputRecord(line_no, fallback_id, None, f"line {line_no} is not valid JSON: {e.msg}")
                continue
            if not isinstance(data, dict):
                yield InputRecord(line_no, fallback_id, None, f"line {line_no} is not a JSON object")
                continue
            yield InputRecord(line_no, str(data.get(id_field, fallback_id)), data)


class ResumableJsonlWriter:
    """Append-only JSONL output keyed by `id_field`; `done` holds the ids already written by earlier runs.
    `kind_fields`: fields every row of this output has; an existing file whose first row lacks one holds
    another job's rows (say `conformers generate`'s out.jsonl given to `generate`) and is refused, never
    resumed into. `redo(row)`: rows of earlier runs to run again (a rerun with --retry-errors): they are
    taken out of the file (rewritten through a temporary file and a rename) and are not `done`, so each
    id keeps one row."""

    def __init__(self, path: str | Path, id_field: str = "id", fsync: bool = False,
                 kind_fields: tuple[str, ...] = (), redo: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.path = Path(path)
        self.id_field = id_field
        self.fsync = fsync
        self.kind_fields = kind_fields
        self.redo = redo
        self.done: set[str] = set()
        self.redone = 0  # rows of earlier runs taken out to run again
        if self.path.is_dir():
            raise InputError(f"output {self.path} is a folder; give a file path for the JSONL output")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._load_and_repair()
        self._file = self.path.open("a", encoding="utf-8")

    def _load_and_repair(self) -> None:
        raw = self.path.read_bytes()
        good_end = 0
        kept: list[bytes] = []  # the lines that stay (all but rows to redo)
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # a torn last line from a crash: drop it
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            if good_end == 0:
                self._check_kind(row)
            good_end += len(line)
            if isinstance(row, dict) and self.redo is not None and self.redo(row):
                self.redone += 1
                continue
            kept.append(line)
            if isinstance(row, dict) and self.id_field in row:
                self.done.add(str(row[self.id_field]))
        if self.redone:
            self._replace_with(kept)
        elif good_end < len(raw):
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def _replace_with(self, lines: list[bytes]) -> None:
        temporary = self.path.with_name(self.path.name + ".rewrite")
        with temporary.open("wb") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)

    def _check_kind(self, first_row: Any) -> None:
        missing = [f for f in self.kind_fields if not isinstance(first_row, dict) or f not in first_row]
        if missing:
            raise InputError(
                f"{self.path} already holds rows of another kind (its first row has no {', '.join(missing)}): "
                "resuming would mix two jobs in one file; write the output to a new file"
            )

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.done.add(str(row[self.id_field]))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "ResumableJsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
