"""Input units and shard input files.

A unit is one input record (a JSONL line, a molecule line of a .smi or .csv): where it sits in the file,
its id, its estimated cost in tokens and how many output rows it makes. Workload adapters read units;
the partitioner groups them into shards.

A shard's input file keeps the original line numbers: the shard's own lines are copied, header lines
are copied into every shard, and every other line becomes an empty line (which every reader skips). So
a worker reports the same `line-<n>` ids, line numbers and error messages as a single-process run of
the whole file, and its output rows merge back by id. The price is one newline per foreign line.

Not here: estimating costs (the adapters), partitioning (partition.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path



@dataclass(frozen=True)
class Unit:
    line: int  # 1-based line of the record in the input (its last line, for a multi-line CSV record)
    key: str  # the record's id; units with the same key go to the same shard (duplicate-id handling)
    weight: float  # estimated tokens (prompt + expected output), the cost the partition balances
    rows: int = 1  # output rows this unit makes (progress total)
    first_line: int | None = None  # first line of a multi-line record; None: the record is one line

    @property
    def start(self) -> int:
        return self.first_line if self.first_line is not None else self.line

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class UnitPlan:
    """What an adapter read from the input: the units, and how many leading lines are a header that
    every shard needs (the CSV column names)."""

    units: list[Unit]
    header_lines: int = 0
    description: str = ""


def iter_lines(path: str | Path) -> Iterator[bytes]:
    """The input's lines with their endings, as bytes (a shard's lines are byte-identical to the input's),
    split at "\n" only: numbered as every input reader numbers them (inputs/lines.py)."""
    with Path(path).open("rb") as f:
        yield from f


def write_shard_inputs(
    input_path: str | Path,
    shard_of_unit: Sequence[int],
    units: Sequence[Unit],
    header_lines: int,
    shard_paths: Sequence[Path],
) -> None:
    """Write every shard's input file in one pass over the input (see the module docstring)."""
    owner: dict[int, int] = {}  # line number -> shard
    for unit, shard in zip(units, shard_of_unit):
        for line in range(unit.start, unit.line + 1):
            owner[line] = shard
    files = []
    tmp_paths = [p.with_name(p.name + ".tmp") for p in shard_paths]
    try:
        for tmp in tmp_paths:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            files.append(tmp.open("wb"))
        for line_no, text in enumerate(iter_lines(input_path), start=1):
            if line_no <= header_lines:
                for f in files:
                    f.write(text)
                continue
            shard = owner.get(line_no)
            for index, f in enumerate(files):
                f.write(text if index == shard else b"\n")
    finally:
        for f in files:
            f.close()
    for tmp, path in zip(tmp_paths, shard_paths):
        os.replace(tmp, path)


def write_units(path: Path, units: Iterable[Unit], shard_of_unit: Sequence[int]) -> None:
    """units.jsonl of the work folder: one line per unit with its shard (the plan, for merging and
    for people)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for unit, shard in zip(units, shard_of_unit):
            f.write(json.dumps({**unit.as_dict(), "shard": shard}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_units(path: Path) -> tuple[list[Unit], list[int]]:
    units, shards = [], []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            shards.append(row.pop("shard"))
            units.append(Unit(**row))
    return units, shards
