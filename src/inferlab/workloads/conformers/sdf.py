"""SDF files of conformers: append-and-flush writing with our properties, repair on reopen, reading back.

Each record carries `input_id`, `canonical_smiles` (the key evaluation matches molecules by),
`conformer_index`, `profile` and `row_id` (`<input_id>#<conformer_index>`, the id of the matching JSONL
row). A record is formatted in memory by RDKit's SDWriter (`format_record`, which the conformer pipeline
calls in its judge processes) and appended in one write, then flushed, so a crash loses at most the
record being written; reopening drops such a torn tail and, when told which rows are done, any record
whose JSONL row never made it.

Not here: the JSONL side and resume bookkeeping (output.py).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rdkit import Chem

from inferlab.workloads.conformers.rdkit_messages import rdkit_log

RECORD_END = "$$$$\n"
PROPERTIES = ("input_id", "canonical_smiles", "conformer_index", "profile", "row_id")


def row_id(input_id: str, conformer_index: int) -> str:
    return f"{input_id}#{conformer_index}"


class ConformerSdfWriter:
    """Append conformers to `path`; `keep_row_ids` (on reopen) drops records whose row is not listed."""

    def __init__(self, path: str | Path, keep_row_ids: set[str] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            _repair(self.path, keep_row_ids)
        self._file = self.path.open("a", encoding="utf-8")

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
        """Append one record made by `format_record` (e.g. in a worker process) and flush it."""
        self._file.write(record)
        self._file.flush()

    def close(self) -> None:
        self._file.close()

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
    mol.SetProp("_Name", input_id)
    values = (input_id, canonical_smiles, str(conformer_index), profile, row_id(input_id, conformer_index))
    for name, value in zip(PROPERTIES, values):
        mol.SetProp(name, value)
    buffer = io.StringIO()
    writer = Chem.SDWriter(buffer)
    writer.SetProps(list(PROPERTIES))
    writer.write(mol, confId=conf_id)
    writer.close()
    return buffer.getvalue()


def _repair(path: Path, keep_row_ids: set[str] | None) -> None:
    text = path.read_text(encoding="utf-8")
    records = text.split(RECORD_END)
    complete = records[:-1]  # the last piece is empty after a clean write, a torn record after a crash
    if keep_row_ids is not None:
        complete = [r for r in complete if _property(r, "row_id") in keep_row_ids]
    repaired = "".join(r + RECORD_END for r in complete)
    if repaired != text:
        tmp = path.with_name(path.name + ".repair")
        tmp.write_text(repaired, encoding="utf-8")
        os.replace(tmp, path)


def _property(record: str, name: str) -> str | None:
    lines = record.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.startswith(">") and f"<{name}>" in line:
            return lines[i + 1]
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
