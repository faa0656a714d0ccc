"""How the row-writing commands (conformers generate, generate, classify, hidden-states) end: the error rows
grouped by reason (count, an example row and its message, which names the fix), the files they wrote
(never one that does not exist), and the exit code: NO_ROW_OK when a run that wrote every row of its output
had none succeed, or the input held none (README, "Exit codes")."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

NO_ROW_OK = 1  # usage and input errors exit 2 (cli/__init__.py), unfinished scaled runs 3, interrupts 130/143
REASONS_SHOWN = 8


def print_error_groups(groups: Sequence[dict[str, Any]], where: str) -> None:
    """`groups`: ErrorGroups.as_list() (largest first); `where`: the file holding every error row."""
    if not groups:
        return
    total = sum(g["count"] for g in groups)
    print(f"error rows by reason ({total:,} in {where}):")
    for g in groups[:REASONS_SHOWN]:
        print(f"  {g['count']:,} x, e.g. {g['example_id']}: {g['example']}")
    if len(groups) > REASONS_SHOWN:
        rest = groups[REASONS_SHOWN:]
        print(f"  ... and {sum(g['count'] for g in rest):,} rows of {len(rest)} other reasons")


def existing(paths: Sequence[str | Path]) -> list[str]:
    return [str(p) for p in paths if Path(p).exists()]


def exit_code(rows_to_write: int, rows_ok: int, input_rows: int, rows_before: int) -> int:
    """0, or NO_ROW_OK when the input held no row, or when this run had rows to write, none succeeded and no
    row of an earlier run stands (`rows_before`). A rerun that resumes an output exits 0, as one with nothing
    left to do: the rows a kill left it may be the ones that fail every time, and the exit code of a job must
    not depend on where it was interrupted (its closing summary says what failed)."""
    if input_rows == 0 or (rows_to_write > 0 and rows_ok == 0 and rows_before == 0):
        return NO_ROW_OK
    return 0
