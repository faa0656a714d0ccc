"""Line-oriented batch input and resumable output, shared by every workload.

Reading never raises on a bad line: it yields an error record so a long job goes on. Each line is
bounded and decoded on its own (inputs/lines.py: a line over `max_line_chars` or not UTF-8 is an error
record), parsed as one JSON object, and given a row id no other line of the file has (inputs/record_ids.py:
a line without an id gets `line-<n>`, a repeated id is an error record under its own `line-<n>`).
Writing appends one JSON object per line and flushes it at once, so a crash loses nothing that was
finished; a rerun opens the same file, learns which ids are done and skips them. A torn last line (a crash
mid-write) is dropped; rows a caller no longer trusts (`keep_row`) are dropped too, the file rewritten
through a temporary file and a rename. The file is created by the first row, never before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from inferlab.errors import InputError
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, InputLine, read_lines
from inferlab.inputs.record_ids import RecordIds
from inferlab.outputs.atomic import write_bytes_atomic


@dataclass(frozen=True)
class InputRecord:
    """One input line: `data` when it parsed, else `error` (and data is None)."""

    line_no: int  # 1-based
    id: str  # unique within the file
    data: dict[str, Any] | None
    error: str | None = None
    given_id: str | None = None  # the id the line declared, when it repeated an earlier one (id is then line-<n>)

    @property
    def key(self) -> str:
        """The id the line declared: lines sharing it belong together (the scale-out planner's grouping)."""
        return self.given_id if self.given_id is not None else self.id


def read_jsonl_records(path: str | Path, id_field: str = "id",
                       max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> Iterator[InputRecord]:
    """Yield one InputRecord per non-blank line, each with a unique id."""
    ids = RecordIds()
    for line in read_lines(path, max_line_chars):
        if line.error is None and not line.text.strip():
            continue
        data, error = _parsed(line)
        declared = None
        if data is not None:
            declared, error = _declared_id(data, id_field, line.line_no)
        claim = ids.claim(declared, line.line_no)
        if claim.repeated:
            error = claim.repeat_error()
        yield InputRecord(line.line_no, claim.id, data if error is None else None, error, claim.given_id)


def _parsed(line: InputLine) -> tuple[dict[str, Any] | None, str | None]:
    if line.error is not None:
        return None, line.error
    try:
        data = json.loads(line.text)
    except json.JSONDecodeError as e:
        return None, f"line {line.line_no} is not valid JSON: {e.msg}"
    except (ValueError, RecursionError) as e:  # an integer of over 4300 digits, nesting too deep to parse
        return None, f"line {line.line_no} is not valid JSON: {e}"
    if not isinstance(data, dict):
        return None, f"line {line.line_no} is not a JSON object"
    if "\\u" in line.text and not _is_text(data):
        return None, (f"line {line.line_no} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its "
                      "pair), which is not text")
    return data, None


def _is_text(data: dict[str, Any]) -> bool:
    """False when a string of `data` holds a lone surrogate, which no UTF-8 file or tokenizer can take."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _declared_id(data: dict[str, Any], id_field: str, line_no: int) -> tuple[str | None, str | None]:
    """(the line's id or None when it has none, an error when the id is unusable)."""
    value = data.get(id_field)
    if value is None:
        return None, None
    if isinstance(value, str):
        return value, None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value), None
    return None, f"line {line_no}: {id_field!r} must be a string or a number, not {type(value).__name__}"


class ResumableJsonlWriter:
    """Append-only JSONL output keyed by `id_field`; `done` holds the ids already written by earlier runs.
    `kind_fields`: fields every row of this output has; an existing file whose first row lacks one holds
    another job's rows (say `conformers generate`'s out.jsonl given to `generate`) and is refused, never
    resumed into. `keep_row(row)`: whether a row of an earlier run stands; the others (error rows on a
    rerun with --retry-errors, ok rows whose other output is gone) are taken out of the file and are not
    `done`, so they are run again and each id keeps one row; `dropped` counts them."""

    def __init__(self, path: str | Path, id_field: str = "id", fsync: bool = False,
                 kind_fields: tuple[str, ...] = (), keep_row: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.path = Path(path)
        self.id_field = id_field
        self.fsync = fsync
        self.kind_fields = kind_fields
        self.done: set[str] = set()
        self.dropped = 0  # rows of earlier runs taken out to run again (keep_row)
        self._file = None  # opened by the first row
        if self.path.is_dir():
            raise InputError(f"output {self.path} is a folder; give a file path for the JSONL output")
        if self.path.exists():
            self._load_and_repair(keep_row)

    def _load_and_repair(self, keep_row: Callable[[dict[str, Any]], bool] | None) -> None:
        raw = self.path.read_bytes()
        kept: list[bytes] = []
        good_end = 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # a torn last line from a crash: drop it
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                break
            if good_end == 0:
                self._check_kind(row)
            good_end += len(line)
            if isinstance(row, dict) and keep_row is not None and not keep_row(row):
                self.dropped += 1
                continue
            kept.append(line)
            if isinstance(row, dict) and self.id_field in row:
                self.done.add(str(row[self.id_field]))
        if self.dropped:
            write_bytes_atomic(self.path, b"".join(kept))
        elif good_end < len(raw):
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def _check_kind(self, first_row: Any) -> None:
        missing = [f for f in self.kind_fields if not isinstance(first_row, dict) or f not in first_row]
        if missing:
            raise InputError(
                f"{self.path} already holds rows of another kind (its first row has no {', '.join(missing)}): "
                "resuming would mix two jobs in one file; write the output to a new file"
            )

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json_line(row))
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.done.add(str(row[self.id_field]))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> "ResumableJsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def json_line(row: dict[str, Any]) -> str:
    """One JSONL line of `row`: UTF-8 text as it is; a string holding a lone surrogate (an id from a JSON
    escape) is written escaped, so the row still reads back to the same string."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(row)
    return text + "\n"
