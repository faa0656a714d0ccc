"""Rows written in input order although they finish in another order (an engine finishes short rows
first): `InputOrder` writes a finished row at once when every row before it is written, and holds it
until then otherwise. What it holds is bounded by how far finishing runs ahead of the oldest unfinished
row (about the rows in flight), not by the job.

`flush()` writes whatever is held (in input order, skipping the rows that never finished): an interrupted
run keeps every finished row, and its rerun writes the missing ones after them. Keys are the rows' ids;
`keys` may be a generator, so a job's rows are never listed up front. The next key is asked for only when
a row is put or flushed, and asked for again later when `keys` had none yet, so `keys` may also be a queue
the producer of the rows fills as it goes (each key before its row is put). The next key is asked for only
once every row before it is written, so a generator of keys may itself write, in their place, rows it
can make without waiting (a job's error rows for lines that never run): they cost nothing while they wait.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

_PENDING = object()  # the next key is not known yet


class InputOrder:
    def __init__(self, keys: Iterable[Hashable], write: Callable[[Any], None]) -> None:
        self._keys = iter(keys)
        self._write = write
        self._held: dict[Hashable, Any] = {}
        self._next: Any = _PENDING

    @property
    def held(self) -> int:
        """Finished rows waiting for an earlier one."""
        return len(self._held)

    def put(self, key: Hashable, row: Any) -> None:
        """Row `key` is finished: write it and what it unblocks, or hold it."""
        if key != self._peek():
            self._held[key] = row
            return
        self._write(row)
        self._next = _PENDING
        while self._peek() in self._held:
            self._write(self._held.pop(self._next))
            self._next = _PENDING

    def flush(self, to_end: bool = False) -> None:
        """Write every held row, in input order; a key never expected comes last. `to_end`: walk the keys to
        their end even once nothing is held (the job is complete: what a key generator writes itself, after
        the last row put, is written too)."""
        while (self._held or to_end) and self._peek() is not _PENDING:
            if self._next in self._held:
                self._write(self._held.pop(self._next))
            self._next = _PENDING
        for key in list(self._held):
            self._write(self._held.pop(key))

    def _peek(self) -> Any:
        """The next key, or _PENDING while `keys` has none (yet)."""
        if self._next is _PENDING:
            self._next = next(self._keys, _PENDING)
        return self._next
