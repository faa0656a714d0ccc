"""Molecule inputs: .smi (`SMILES [whitespace id]`) and .csv/.tsv (a SMILES column, an optional id column).

Reading never stops on a bad line: an unparsable SMILES, an empty field, a malformed CSV row or a
repeated id becomes a record with `error` set (and the RDKit reason), so a long batch goes on and the
error is reported beside the results. A missing id becomes `line-<n>`. Ids are unique: a line that repeats
an earlier id is an error record filed under `line-<n>` (as the text workloads do; `given_id` keeps the id
it declared), so its output rows never collide with the first line's. Which columns were used is told in
`MoleculeInputs.description`. Not here: canonicalisation (smiles.py) and the molecules' templates.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import InputError
from inferlab.workloads.conformers.smiles import parse_smiles

SMILES_COLUMN_NAMES = ("smiles", "canonical_smiles", "isomeric_smiles", "smi")
ID_COLUMN_NAMES = ("id", "name", "mol_id", "molecule_id", "compound_id", "title")


@dataclass(frozen=True)
class MoleculeInput:
    line_no: int  # 1-based line (or CSV row, header = 1) in the file
    id: str
    smiles: str | None  # None when the line held no usable SMILES field
    error: str | None = None  # set when this record cannot be used
    num_atoms: int | None = None  # atoms of the parsed SMILES (hydrogens implicit), when it parsed
    given_id: str | None = None  # the id the line declared, when it repeated an earlier one (id is then line-<n>)

    @property
    def key(self) -> str:
        """The id the line declared: lines sharing it belong together (the scale-out planner's grouping)."""
        return self.given_id if self.given_id is not None else self.id

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class MoleculeInputs:
    records: tuple[MoleculeInput, ...]
    description: str  # the file kind and the columns found, for the user

    @property
    def valid(self) -> list[MoleculeInput]:
        return [r for r in self.records if r.ok]

    @property
    def errors(self) -> list[MoleculeInput]:
        return [r for r in self.records if not r.ok]


def read_molecule_inputs(
    path: str | Path, smiles_column: str | None = None, id_column: str | None = None
) -> MoleculeInputs:
    """Read every record of `path`; raises InputError only for a missing file, an unknown kind or no
    SMILES column."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"input file {p} does not exist")
    reader = _READERS.get(p.suffix.lower())
    if reader is None:
        raise InputError(f"input {p}: unknown file kind {p.suffix!r}; use one of {', '.join(_READERS)}")
    rows, description = reader(p, smiles_column, id_column)
    records: list[MoleculeInput] = []
    first_line: dict[str, int] = {}  # id -> the line that used it first
    for line_no, record_id, smiles, error in rows:
        given_id = None
        if record_id in first_line:
            given_id, record_id = record_id, _unused_id(f"line-{line_no}", first_line)
            error = (
                f"id {given_id!r} repeats line {first_line[given_id]}; ids must be unique "
                f"(this line's rows are filed under {record_id!r})"
            )
        num_atoms = None
        if error is None:
            error, num_atoms = _parse(smiles)
        first_line[record_id] = line_no
        records.append(MoleculeInput(line_no, record_id, smiles, error, num_atoms, given_id))
    return MoleculeInputs(tuple(records), description)


Row = tuple[int, str, str | None, str | None]  # line, id, smiles, error


def _unused_id(candidate: str, taken: dict[str, int]) -> str:
    """`candidate`, or `candidate.2`, `candidate.3`... when an explicit id already took it."""
    unique, n = candidate, 1
    while unique in taken:
        n += 1
        unique = f"{candidate}.{n}"
    return unique


def _parse(smiles: str | None) -> tuple[str | None, int | None]:
    """(error, None) for an unusable SMILES, else (None, its atom count)."""
    if not smiles:
        return "no SMILES on this line", None
    try:
        return None, parse_smiles(smiles).GetNumAtoms()
    except InputError as e:
        return str(e), None


def _read_smi(path: Path, smiles_column: str | None, id_column: str | None) -> tuple[Iterator[Row], str]:
    if smiles_column or id_column:
        raise InputError(f"input {path}: --smiles-column/--id-column apply to .csv/.tsv files, not .smi")

    def rows() -> Iterator[Row]:
        with path.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                fields = line.strip().split(maxsplit=1)
                if not fields or fields[0].startswith("#"):
                    continue
                if line_no == 1 and fields[0].lower() in SMILES_COLUMN_NAMES:
                    continue  # a header line
                yield line_no, (fields[1].strip() if len(fields) > 1 else f"line-{line_no}"), fields[0], None

    return rows(), f"SMILES file {path} (SMILES, then an optional id after whitespace)"


def _pick_column(header: list[str], wanted: str | None, candidates: tuple[str, ...], what: str, path: Path):
    if wanted is not None:
        if wanted not in header:
            raise InputError(f"input {path}: no column {wanted!r}; the columns are {header}")
        return wanted
    by_lower = {h.strip().lower(): h for h in header}
    found = next((by_lower[c] for c in candidates if c in by_lower), None)
    if found is None and what == "SMILES":
        raise InputError(
            f"input {path}: no SMILES column among {header}; name one with --smiles-column "
            f"(recognised names: {', '.join(candidates)})"
        )
    return found


def _delimited_reader(delimiter: str) -> Callable[[Path, str | None, str | None], tuple[Iterator[Row], str]]:
    def read(path: Path, smiles_column: str | None, id_column: str | None) -> tuple[Iterator[Row], str]:
        with path.open(encoding="utf-8-sig", newline="") as f:
            header = next(csv.reader(f, delimiter=delimiter), None)
        if not header:
            raise InputError(f"input {path}: the file is empty; the first line must name the columns")
        smiles_col = _pick_column(header, smiles_column, SMILES_COLUMN_NAMES, "SMILES", path)
        id_col = _pick_column(header, id_column, ID_COLUMN_NAMES, "id", path)

        def rows() -> Iterator[Row]:
            with path.open(encoding="utf-8-sig", newline="") as f:
                reader = csv.reader(f, delimiter=delimiter)
                next(reader)
                for fields in reader:
                    line_no = reader.line_num
                    if not fields or not any(x.strip() for x in fields):
                        continue
                    row_id = f"line-{line_no}"
                    if len(fields) != len(header):
                        problem = f"line {line_no} has {len(fields)} fields; the header has {len(header)}"
                        yield line_no, row_id, None, problem
                        continue
                    values = dict(zip(header, fields))
                    if id_col is not None and values[id_col].strip():
                        row_id = values[id_col].strip()
                    yield line_no, row_id, values[smiles_col].strip() or None, None

        id_text = f"id column {id_col!r}" if id_col else "no id column (ids are line-<n>)"
        return rows(), f"table {path}: SMILES column {smiles_col!r}, {id_text}"

    return read


_READERS = {
    ".smi": _read_smi,
    ".smiles": _read_smi,
    ".csv": _delimited_reader(","),
    ".tsv": _delimited_reader("\t"),
}
