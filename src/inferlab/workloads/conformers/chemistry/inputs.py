"""Molecule inputs: .smi (`SMILES [whitespace id]`) and .csv/.tsv (a SMILES column, an optional id column).

Reading never stops on a bad line: each line is bounded and decoded on its own (inputs/lines.py: a line
over `max_line_chars` or not UTF-8 is an error record), and a malformed CSV row (a record that a quoted
field may carry over at most MAX_RECORD_LINES lines: a stray quote is one error row for its own line, and
the next line is read as its own record), a CSV field over Python's csv limit, an empty field, a SMILES
with whitespace or characters no SMILES has, one over `max_atoms` atoms (counted from the text, before
RDKit parses it: RDKit crashes the process on tens of thousands), an unparsable SMILES or a repeated id
becomes a record with `error` set (and the reason), so a long batch goes on and the error is reported
beside the results. Ids come from inputs/record_ids.py: a missing id becomes `line-<n>`, a line repeating
an earlier id is an error record under its own `line-<n>` (`given_id` keeps the id it declared). Which
columns were used is told in `description`. `MoleculeFile` reads the records as a stream, one pass at a
time (a job over millions of lines holds none of them); `read_molecule_inputs` lists them. Not here:
canonicalisation (smiles.py) and the molecules' templates.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import InputError
from inferlab.inputs.lines import InputLine, read_lines
from inferlab.inputs.record_ids import IdClaims, RecordIds
from inferlab.workloads.conformers.chemistry.input_bounds import InputBounds
from inferlab.workloads.conformers.chemistry.smiles import parse_smiles, smiles_text_problem

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
    path: str | Path, smiles_column: str | None = None, id_column: str | None = None,
    bounds: InputBounds = InputBounds(),
) -> MoleculeInputs:
    """Every record of `path`, listed; raises InputError only for a missing file, an unknown kind, an
    unreadable header or no SMILES column. A job over a large input reads a MoleculeFile's records instead."""
    molecules = MoleculeFile.open(path, smiles_column, id_column, bounds)
    return MoleculeInputs(tuple(molecules.records()), molecules.description)


@dataclass(frozen=True)
class MoleculeFile:
    """A molecule input read as a stream, as often as a job needs (one pass per `records()` call)."""

    path: Path
    smiles_column: str | None
    id_column: str | None
    bounds: InputBounds
    description: str  # the file kind and the columns found, for the user

    @classmethod
    def open(cls, path: str | Path, smiles_column: str | None = None, id_column: str | None = None,
             bounds: InputBounds = InputBounds()) -> "MoleculeFile":
        """The file checked (InputError for a missing file, an unknown kind, an unreadable header or no SMILES
        column); nothing is read past its header."""
        p = Path(path)
        _, description = _rows_of(p, smiles_column, id_column, bounds)
        return cls(p, smiles_column, id_column, bounds, description)

    def records(self, ids: IdClaims | None = None) -> Iterator[MoleculeInput]:
        """Every record, in file order; `ids`: the claims of this pass (a later pass gets the first one's
        `RecordIds.known().replay()`), None: a pass of its own."""
        rows, _ = _rows_of(self.path, self.smiles_column, self.id_column, self.bounds)
        ids = RecordIds() if ids is None else ids
        for line_no, declared_id, smiles, error in rows:
            claim = ids.claim(declared_id, line_no)
            num_atoms = None
            if claim.repeated:
                error = claim.repeat_error()
            elif error is None:
                error, num_atoms = _parse(smiles, self.bounds.max_atoms)
            yield MoleculeInput(line_no, claim.id, smiles, error, num_atoms, claim.given_id)


def _rows_of(path: Path, smiles_column: str | None, id_column: str | None,
             bounds: InputBounds) -> tuple[Iterator["Row"], str]:
    if not path.is_file():
        raise InputError(f"input file {path} does not exist")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise InputError(f"input {path}: unknown file kind {path.suffix!r}; use one of {', '.join(_READERS)}")
    return reader(path, smiles_column, id_column, bounds.max_line_chars)


Row = tuple[int, str | None, str | None, str | None]  # line, declared id (None: none), smiles, error
Reader = Callable[[Path, str | None, str | None, int], tuple[Iterator[Row], str]]


def _parse(smiles: str | None, max_atoms: int) -> tuple[str | None, int | None]:
    """(error, None) for an unusable SMILES, else (None, its atom count)."""
    if not smiles:
        return "no SMILES on this line", None
    problem = smiles_text_problem(smiles, max_atoms)
    if problem is not None:
        return problem, None
    try:
        return None, parse_smiles(smiles).GetNumAtoms()
    except InputError as e:
        return str(e), None


def _read_smi(path: Path, smiles_column: str | None, id_column: str | None,
              max_line_chars: int) -> tuple[Iterator[Row], str]:
    if smiles_column or id_column:
        raise InputError(f"input {path}: --smiles-column/--id-column apply to .csv/.tsv files, not .smi")

    def rows() -> Iterator[Row]:
        for line in read_lines(path, max_line_chars):
            if line.error is not None:
                yield line.line_no, None, None, line.error
                continue
            fields = line.text.strip().split(maxsplit=1)
            if not fields or fields[0].startswith("#"):
                continue
            if line.line_no == 1 and fields[0].lower() in SMILES_COLUMN_NAMES:
                continue  # a header line
            yield line.line_no, (fields[1].strip() if len(fields) > 1 else None), fields[0], None

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


# A quoted field may hold line breaks, but its record ends within this many lines (and max_line_chars
# characters): a stray quote then costs one error row for its own line, never the lines after it.
MAX_RECORD_LINES = 8
_UNCLOSED = "unexpected end of data"  # csv's strict-mode words for a quote still open at the end


def _delimited_reader(delimiter: str) -> Reader:
    def read(path: Path, smiles_column: str | None, id_column: str | None,
             max_line_chars: int) -> tuple[Iterator[Row], str]:
        lines = read_lines(path, max_line_chars)
        header = _header(next(lines, None), delimiter, path)
        smiles_col = _pick_column(header, smiles_column, SMILES_COLUMN_NAMES, "SMILES", path)
        id_col = _pick_column(header, id_column, ID_COLUMN_NAMES, "id", path)

        def rows() -> Iterator[Row]:
            for line_no, fields, error in _records(lines, delimiter, max_line_chars):
                if error is not None:
                    yield line_no, None, None, error
                    continue
                if not fields or not any(x.strip() for x in fields):
                    continue
                if len(fields) != len(header):
                    problem = f"line {line_no} has {len(fields)} fields; the header has {len(header)}"
                    yield line_no, None, None, problem
                    continue
                values = dict(zip(header, fields))
                row_id = values[id_col].strip() if id_col is not None else ""
                yield line_no, row_id or None, values[smiles_col].strip() or None, None

        id_text = f"id column {id_col!r}" if id_col else "no id column (ids are line-<n>)"
        return rows(), f"table {path}: SMILES column {smiles_col!r}, {id_text}"

    return read


def _records(lines: Iterator[InputLine], delimiter: str,
             max_chars: int) -> Iterator[tuple[int, list[str] | None, str | None]]:
    """(first line, fields or None, error or None) per CSV record. A record is its line, or, while a quoted
    field is open, its line and the next ones, up to MAX_RECORD_LINES and `max_chars`; a record that does
    not parse is one error for its first line, and reading goes on at the line after that one."""
    pending: list[InputLine] = []  # lines read ahead and given back

    def next_line() -> InputLine | None:
        return pending.pop() if pending else next(lines, None)

    while (first := next_line()) is not None:
        if first.error is not None:
            yield first.line_no, None, first.error
            continue
        taken, parsed = [first], _parse_record([first.text], delimiter)
        while parsed == _UNCLOSED and len(taken) < MAX_RECORD_LINES:
            more = next_line()
            if more is None or more.error is not None or sum(len(t.text) for t in taken) + len(more.text) > max_chars:
                if more is not None:
                    pending.append(more)
                break
            taken.append(more)
            parsed = _parse_record([t.text for t in taken], delimiter)
        if isinstance(parsed, list):
            yield first.line_no, parsed, None
            continue
        pending.extend(reversed(taken[1:]))  # read them again, as records of their own
        if parsed == _UNCLOSED:
            yield first.line_no, None, (f"line {first.line_no} opens a quoted field that no line within "
                                        f"{MAX_RECORD_LINES} closes (a stray quote?); close the quote or remove it")
        else:
            yield first.line_no, None, f"line {first.line_no} is not a readable CSV row ({parsed})"


def _parse_record(texts: list[str], delimiter: str) -> list[str] | str:
    """The fields of one record made of `texts` (lines), or csv's reason why not (_UNCLOSED: a quote is
    still open at the end)."""
    try:
        parsed = list(csv.reader(["\n".join(texts)], delimiter=delimiter, strict=True))
    except csv.Error as e:  # a field over the csv limit, a quote in the middle of a field, a stray carriage return
        return _UNCLOSED if _UNCLOSED in str(e) else str(e)
    return parsed[0] if parsed else []


def _header(first: InputLine | None, delimiter: str, path: Path) -> list[str]:
    if first is None or (first.error is None and not first.text.strip()):
        raise InputError(f"input {path}: the file is empty; the first line must name the columns")
    if first.error is not None:
        raise InputError(f"input {path}: the header cannot be read: {first.error}")
    try:
        return next(csv.reader([first.text], delimiter=delimiter))
    except csv.Error as e:
        raise InputError(f"input {path}: the header is not a CSV row ({e}); the first line must name the columns") \
            from None


_READERS: dict[str, Reader] = {
    ".smi": _read_smi,
    ".smiles": _read_smi,
    ".csv": _delimited_reader(","),
    ".tsv": _delimited_reader("\t"),
}
