"""Line-oriented batch input and resumable output, shared by every workload.

Reading never raises on a bad line: it yields an error record so a long job goes on. Each line is
bounded and decoded on its own (inputs/lines.py: a line over `max_line_chars` or not UTF-8 is an error
record), parsed as one JSON object, and given a row id no other line of the file has (inputs/record_ids.py:
a line without an id gets `line-<n>`, a repeated id is an error record under its own `line-<n>`).
Writing appends one JSON object per line and flushes it at once, so a crash loses nothing that was
finished; a rerun opens the same file, learns which ids are done and skips them. A torn last line (a crash
mid-write) is dropped; a damaged line elsewhere is set aside in OUTPUT.damaged, the rows around it kept;
rows a caller no longer trusts (`keep_row`) are dropped too, the file rewritten through a temporary file
and a rename. The file is created by the first row, never before.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from inferlab.errors import InputError, OutputError, write_failed
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, InputLine, read_lines
from inferlab.inputs.fingerprints import FingerprintSet
from inferlab.inputs.record_ids import IdClaims, RecordIds
from inferlab.outputs.atomic import replace_atomically
from inferlab.outputs.paths import damaged_path

log = logging.getLogger(__name__)


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


def read_jsonl_records(path: str | Path, id_field: str = "id", max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
                       ids: IdClaims | None = None) -> Iterator[InputRecord]:
    """Yield one InputRecord per non-blank line, each with a unique id. `ids`: the claims of this pass (a
    job reading the file again passes the first pass's `RecordIds.replay()`); None: a pass of its own."""
    ids = RecordIds() if ids is None else ids
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
    """Append-only JSONL output keyed by `id_field`; `done` holds the ids written by earlier runs (as
    fingerprints: a membership test, ~18 bytes an id; the rows this run writes are not added, so a row
    written costs nothing).
    `kind_fields`: fields every row of this output has; an existing file whose first row lacks one holds
    another job's rows (say `conformers generate`'s out.jsonl given to `generate`) and is refused, never
    resumed into. `keep_row(row)`: whether a row of an earlier run stands; the others (error rows on a
    rerun with --retry-errors, ok rows whose other output is gone) are taken out of the file and are not
    `done`, so they are run again and each id keeps one row; `dropped` counts them. `on_done(row)`: told of
    each row that makes its id done (once per id), for a caller's own tally of them.

    Reopening reads the file line by line. A last line without its newline is a torn write (a crash
    mid-row): dropped. Any other line that is not a JSON object (bytes damaged on disk or by hand) is
    damage: its bytes are appended to OUTPUT.damaged (outputs/paths.py; appended to, never replaced), one
    log line names them, the rows on both sides stay, and only the rows it held are run again (`damaged`
    counts the lines). A failed write (a full disk) is an OutputError naming the file; the writer then
    writes nothing more, so no row follows a half-written one."""

    def __init__(self, path: str | Path, id_field: str = "id", fsync: bool = False,
                 kind_fields: tuple[str, ...] = (), keep_row: Callable[[dict[str, Any]], bool] | None = None,
                 on_done: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path = Path(path)
        self.id_field = id_field
        self.fsync = fsync
        self.kind_fields = kind_fields
        self.done = FingerprintSet()
        self.dropped = 0  # rows of earlier runs taken out to run again (keep_row)
        self.damaged = 0  # damaged lines of earlier runs set aside
        self._file = None  # opened by the first row
        self._failed: OutputError | None = None
        if self.path.is_dir():
            raise InputError(f"output {self.path} is a folder; give a file path for the JSONL output")
        if self.path.exists():
            self._load_and_repair(keep_row, on_done)

    def _load_and_repair(self, keep_row: Callable[[dict[str, Any]], bool] | None,
                         on_done: Callable[[dict[str, Any]], None] | None) -> None:
        removed: set[int] = set()  # 0-based lines not kept: damaged, dropped, blank
        damaged: list[tuple[int, bytes]] = []
        torn_at: int | None = None  # byte offset of a torn last line
        checked_kind = False
        offset = 0
        with self.path.open("rb") as f:
            for index, line in enumerate(f):
                if not line.endswith(b"\n"):
                    torn_at = offset
                    break
                offset += len(line)
                if not line.strip():
                    removed.add(index)
                    continue
                row = _parsed_row(line)
                if row is None:
                    removed.add(index)
                    damaged.append((index + 1, line))
                    continue
                if not checked_kind:
                    self._check_kind(row)
                    checked_kind = True
                if keep_row is not None and not keep_row(row):
                    removed.add(index)
                    self.dropped += 1
                    continue
                if self.id_field in row and (key := str(row[self.id_field])) not in self.done:
                    self.done.add_new(key)
                    if on_done is not None:
                        on_done(row)
        if damaged:
            self._set_aside(damaged)
        if removed:
            replace_atomically(self.path, lambda out: _copy_lines(self.path, out, removed))
        elif torn_at is not None:
            with self.path.open("r+b") as f:
                f.truncate(torn_at)

    def _set_aside(self, damaged: list[tuple[int, bytes]]) -> None:
        """Append the damaged lines to OUTPUT.damaged (flushed to disk before the output is rewritten)."""
        aside = damaged_path(self.path)
        when = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            with aside.open("ab") as f:
                for line_no, line in damaged:
                    f.write(f"# line {line_no} of {self.path}, set aside {when}:\n".encode() + line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise write_failed(aside, e) from None
        self.damaged = len(damaged)
        lines = ", ".join(str(n) for n, _ in damaged[:10]) + (", ..." if len(damaged) > 10 else "")
        log.warning("%s: %d damaged line(s) (line %s: not a JSON row) set aside in %s; the rows they held are "
                    "run again", self.path, len(damaged), lines, aside)

    def _check_kind(self, first_row: Any) -> None:
        missing = [f for f in self.kind_fields if not isinstance(first_row, dict) or f not in first_row]
        if missing:
            raise InputError(
                f"{self.path} already holds rows of another kind (its first row has no {', '.join(missing)}): "
                "resuming would mix two jobs in one file; write the output to a new file"
            )

    def write(self, row: dict[str, Any]) -> None:
        if self._failed is not None:
            raise self._failed
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(json_line(row))
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
        except OSError as e:
            self._failed = write_failed(self.path, e)
            raise self._failed from None

    def close(self) -> None:
        if self._file is None:
            return
        try:
            self._file.close()
        except OSError as e:  # the buffered rest of a row could not be written either
            if self._failed is None:
                raise write_failed(self.path, e) from None
        finally:
            self._file = None

    def __enter__(self) -> "ResumableJsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parsed_row(line: bytes) -> dict[str, Any] | None:
    """The JSON object of a complete output line, or None for a damaged one."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8
        return None
    return row if isinstance(row, dict) else None


def _copy_lines(path: Path, out, removed: set[int]) -> None:
    """Copy `path`'s complete lines but the `removed` ones (0-based) to `out`; a torn last line is left out."""
    with path.open("rb") as f:
        for index, line in enumerate(f):
            if line.endswith(b"\n") and index not in removed:
                out.write(line)


def json_line(row: dict[str, Any]) -> str:
    """One JSONL line of `row`: UTF-8 text as it is; a string holding a lone surrogate (an id from a JSON
    escape) is written escaped, so the row still reads back to the same string."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(row)
    return text + "\n"
