"""SDF files of conformers: append-and-flush writing with our properties, repair on reopen, reading back.

Each record carries `input_id`, `canonical_smiles` (the key evaluation matches molecules by),
`conformer_index`, `profile` and `row_id` (`<input_id>#<conformer_index>`, the id of the matching JSONL
row). Ids are written through `sdf_text`: `%`, `$`, `<`, `>` and any character that is not printable (a
newline, a tab) become %XX escapes of their UTF-8 bytes, so no id can end a record (`$$$$`), start a
property (`> <`) or break a line; `sdf_id` reverses it, and the JSONL keeps the id as given. A record is
formatted in memory by RDKit's SDWriter (`format_record`, which the conformer pipeline calls in its judge
processes) and appended in one write, then flushed, so a crash loses at most the record being written;
reopening drops such a torn tail and, when told which rows to keep, any record whose row is not among
them, rewriting the file through a temporary file and a rename. The file is created by the first record.

Not here: the JSONL side and resume bookkeeping (pipeline/output.py).
"""

from __future__ import annotations

import io
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from rdkit import Chem

from inferlab.errors import OutputError, write_failed
from inferlab.inputs.fingerprints import FingerprintSet
from inferlab.outputs.atomic import replace_atomically
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log

RECORD_END = "$$$$"  # the line that ends a record
PROPERTIES = ("input_id", "canonical_smiles", "conformer_index", "profile", "row_id")
_ESCAPED = frozenset("%$<>")


def row_id(input_id: str, conformer_index: int) -> str:
    return f"{input_id}#{conformer_index}"


def sdf_text(value: str) -> str:
    """`value` safe for an SDF title or property line (see the module docstring); the identity for ids
    made of printable characters other than % $ < >."""
    return "".join(c if c not in _ESCAPED and (c.isprintable() or c == " ") else
                   "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in value)


def sdf_id(text: str) -> str:
    """The id `sdf_text` was given."""
    return unquote(text, errors="surrogatepass") if "%" in text else text


class ConformerSdfWriter:
    """Append conformers to `path`; `keep_row_ids` (on reopen) drops records whose row is not listed."""

    def __init__(self, path: str | Path, keep_row_ids: Container[str] | None = None) -> None:
        self.path = Path(path)
        self._file = None  # opened by the first record
        self._failed: OutputError | None = None  # a failed write: nothing more is appended after it
        if self.path.exists():
            _repair(self.path, keep_row_ids)

    def write(
        self,
        mol: Chem.Mol,
        input_id: str,
        canonical_smiles: str,
        conformer_index: int,
        profile: str = "",
        conf_id: int = -1,
    ) -> None:
        self.append(format_record(mol, input_id, canonical_smiles, conformer_index, profile, conf_id))

    def append(self, record: str) -> None:
        """Append one record made by `format_record` (e.g. in a worker process) and flush it; a failed write (a
        full disk) is an OutputError naming the file, and the writer then appends nothing more."""
        if self._failed is not None:
            raise self._failed
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(record)
            self._file.flush()
        except OSError as e:
            self._failed = write_failed(self.path, e)
            raise self._failed from None

    def close(self) -> None:
        if self._file is None:
            return
        try:
            self._file.close()
        except OSError as e:  # the buffered rest of a record could not be written either
            if self._failed is None:
                raise write_failed(self.path, e) from None
        finally:
            self._file = None

    def __enter__(self) -> ConformerSdfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_record(
    mol: Chem.Mol,
    input_id: str,
    canonical_smiles: str,
    conformer_index: int,
    profile: str = "",
    conf_id: int = -1,
) -> str:
    """One SDF record (ending with `$$$$`) of `mol`'s conformer with our properties; `mol` is left alone."""
    mol = Chem.Mol(mol)  # properties are set on a copy
    mol.SetProp("_Name", sdf_text(input_id))
    values = (sdf_text(input_id), canonical_smiles, str(conformer_index), profile,
              sdf_text(row_id(input_id, conformer_index)))
    for name, value in zip(PROPERTIES, values):
        mol.SetProp(name, value)
    buffer = io.StringIO()
    writer = Chem.SDWriter(buffer)
    writer.SetProps(list(PROPERTIES))
    writer.write(mol, confId=conf_id)
    writer.close()
    return buffer.getvalue()


def record_row_ids(path: str | Path) -> FingerprintSet:
    """The row ids (as given, not escaped) of the complete records of `path`, read one record at a time."""
    ids = FingerprintSet()
    for record, complete in _records(Path(path)):
        row = _property(record, "row_id") if complete else None
        if row is not None:
            ids.add(sdf_id(row))
    return ids


def _repair(path: Path, keep_row_ids: Container[str] | None) -> None:
    """Drop a torn tail and the records whose row is not kept: a first pass looks, a second rewrites the file
    (through a temporary file) only when something goes; neither holds more than a record."""

    def kept(record: str, complete: bool) -> bool:
        return complete and (keep_row_ids is None or sdf_id(_property(record, "row_id") or "") in keep_row_ids)

    if all(kept(record, complete) for record, complete in _records(path)):
        return
    replace_atomically(path, lambda out: out.writelines(
        record.encode("utf-8") for record, complete in _records(path) if kept(record, complete)))


def _records(path: Path) -> Iterator[tuple[str, bool]]:
    """(record with its `$$$$` line, True) for every complete record of `path`, then (the rest, False) when a
    torn record follows them."""
    current: list[str] = []
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        for line in f:
            current.append(line)
            if line.rstrip("\r\n") == RECORD_END and line.endswith("\n"):
                yield "".join(current), True
                current = []
    if current:
        yield "".join(current), False


def _property(record: str, name: str) -> str | None:
    lines = record.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.startswith(">") and f"<{name}>" in line:
            return lines[i + 1].rstrip("\r")
    return None


@dataclass(frozen=True, eq=False)
class SdfRecord:
    index: int  # 0-based record number in the file
    mol: Chem.Mol | None  # None when RDKit could not read the record
    error: str | None = None

    def prop(self, name: str) -> str | None:
        if self.mol is None or not self.mol.HasProp(name):
            return None
        return self.mol.GetProp(name)


def read_sdf(path: str | Path, remove_hs: bool = False) -> Iterator[SdfRecord]:
    """Every record of an SDF file; an unreadable record is an SdfRecord with `error`, never an exception."""
    with rdkit_log():
        supplier = Chem.SDMolSupplier(str(path), sanitize=True, removeHs=remove_hs)
        count = len(supplier)
    for index in range(count):
        with rdkit_log() as log:  # RDKit prints why a record fails; the record's error carries it instead
            mol = supplier[index]
        if mol is None:
            why = log.reason()
            yield SdfRecord(index, None, f"record {index} of {path} could not be read by RDKit"
                                         + (f": {why}" if why else ""))
        else:
            yield SdfRecord(index, mol)
