"""Input order for merging: where each output row belongs, and a byte-range copier that writes records of
several shard files in that order.

Rows are placed by id: the id of an input unit sits at its line; an id `line-<n>` (or `line-<n>.<k>`)
that no unit claims (the row of a repeated id, which a workload files under its own line) sits at line n.
Rows with an id the plan does not know keep their shard order after all others, so nothing is ever
dropped. Records are located as (offset, length) spans and copied with seeks, so merging a large SDF or
JSONL holds only the index in memory, never the records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from inferlab.scale.units import Unit

_LINE_ID = re.compile(r"^line-(\d+)(?:\.\d+)?$")
UNPLACED = float("inf")  # the position of a row whose id the plan does not know


class OrderIndex:
    def __init__(self, units: Iterable[Unit]) -> None:
        self._line_of: dict[str, int] = {}
        for unit in units:
            self._line_of.setdefault(unit.key, unit.line)

    def line_of(self, key: str) -> float:
        """The input line of id `key`, or UNPLACED."""
        line = self._line_of.get(key)
        if line is not None:
            return line
        match = _LINE_ID.match(key)
        return int(match.group(1)) if match else UNPLACED


@dataclass(frozen=True)
class RecordSpan:
    sort_key: tuple  # where the record goes; ties keep (shard, offset) order
    source: int  # index into the list of source files
    offset: int
    length: int


def write_in_order(sources: Sequence[Path], spans: list[RecordSpan], destination: Path) -> int:
    """Copy every span into `destination` sorted by sort_key (stable on source, offset); atomic replace.
    Returns the number of records written."""
    spans = sorted(spans, key=lambda s: (s.sort_key, s.source, s.offset))
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(destination.name + ".merge.tmp")
    handles = [open(path, "rb") for path in sources]
    try:
        with tmp.open("wb") as out:
            for span in spans:
                f = handles[span.source]
                f.seek(span.offset)
                data = f.read(span.length)
                out.write(data if data.endswith(b"\n") else data + b"\n")
    finally:
        for f in handles:
            f.close()
    os.replace(tmp, destination)
    return len(spans)
