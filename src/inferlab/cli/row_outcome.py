"""How the row-writing commands (conformers generate, generate, classify, hidden-states) end: the error rows
grouped by reason (count, an example row and its message, which names the fix), the files they wrote
(never one that does not exist), and the exit code: NO_ROW_OK when rows were to be written and none of them
succeeded, or the input held none (README, "Exit codes")."""

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


def exit_code(rows_to_write: int, rows_ok: int, input_rows: int) -> int:
    """0, or NO_ROW_OK when this run had rows to write and none succeeded, or the input held no row (a
    rerun with nothing left to do is a success)."""
    if input_rows == 0 or (rows_to_write > 0 and rows_ok == 0):
        return NO_ROW_OK
    return 0
