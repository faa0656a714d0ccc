"""Resumable conformer output: an SDF of the valid conformers and a JSONL row for every attempt.

A JSONL row (`id` = `<input_id>#<conformer_index>`, input_id, smiles, conformer_index, profile, status
`ok`|`error`, error, plus any extra fields) is written after the conformer's SDF record, so every row
marked ok has its record. Reopening the pair resumes, and first makes the two agree: an ok row whose
record is missing (the SDF was deleted or cut) is dropped, so the caller generates it again
(`is_done`), and an SDF record without an ok row (a crash between the two writes) is dropped; each file
is rewritten through a temporary file and a rename. An SDF with records but neither its JSONL nor a job
manifest beside it (outputs/guard.py, which checked it is this job's) was not written by this job (another
tool, or a copy) and is refused, never replaced. Nothing is created until the first row.

Not here: generation and validation; the caller hands in molecules that passed the template check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rdkit import Chem

from inferlab.errors import InputError
from inferlab.inputs.fingerprints import FingerprintMap, FingerprintSet
from inferlab.jsonl_io import ResumableJsonlWriter
from inferlab.outputs.guard import manifest_path
from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter, record_row_ids, row_id


def default_jsonl_path(sdf_path: str | Path) -> Path:
    return Path(sdf_path).with_suffix(".jsonl")


class ConformerResultWriter:
    """`retry_errors`: the error rows of earlier runs are taken out of the JSONL (they have no SDF record)
    and are not done, so the caller generates them again. `num_conformers` (K): also count, per input id,
    the rows of earlier runs among its conformers 0..K-1 (`done_count`), so a plan needs no list of them.
    What is kept of earlier runs is fingerprints (inputs/fingerprints.py): the row ids, the SDF's record
    ids while it is checked, the counts."""

    def __init__(self, sdf_path: str | Path, jsonl_path: str | Path | None = None, profile: str = "",
                 retry_errors: bool = False, num_conformers: int | None = None) -> None:
        self.profile = profile
        rows_path = Path(jsonl_path or default_jsonl_path(sdf_path))
        sdf = Path(sdf_path)
        records = record_row_ids(sdf) if sdf.is_file() else FingerprintSet()
        if records and not rows_path.exists() and not manifest_path(sdf).exists():
            raise InputError(f"{sdf} holds {len(records)} conformer records but neither a rows file {rows_path} nor "
                             "a job manifest beside it, so no run of this job wrote it; write to another output "
                             "(inferlab conformers generate --overwrite replaces it)")
        self.retried = 0  # error rows of earlier runs taken out to generate again (retry_errors)

        def keep_row(row: dict[str, Any]) -> bool:
            if row.get("status") == "ok":
                return row.get("id") in records  # an ok row whose record is gone is generated again
            if retry_errors and row.get("status") == "error":
                self.retried += 1
                return False
            return True

        self._done_per_input = FingerprintMap()  # input id -> rows of earlier runs among its conformers < K

        def count(row: dict[str, Any]) -> None:
            input_id, sep, k = str(row["id"]).rpartition("#")
            if sep and k.isdigit() and str(int(k)) == k and int(k) < num_conformers:  # as row_id writes it
                self._done_per_input[input_id] = self._done_per_input.get(input_id, 0) + 1

        self._rows = ResumableJsonlWriter(rows_path, id_field="id", kind_fields=("conformer_index",),
                                          keep_row=keep_row, on_done=count if num_conformers else None)
        self._sdf = ConformerSdfWriter(sdf, keep_row_ids=self._rows.done)

    @property
    def done(self) -> FingerprintSet:
        """Row ids written by earlier runs."""
        return self._rows.done

    def is_done(self, input_id: str, conformer_index: int) -> bool:
        return row_id(input_id, conformer_index) in self._rows.done

    def done_count(self, input_id: str) -> int:
        """Rows of earlier runs among `input_id`'s conformers 0..K-1 (needs `num_conformers`)."""
        return self._done_per_input.get(input_id, 0)

    def write_ok(
        self,
        input_id: str,
        canonical_smiles: str,
        conformer_index: int,
        mol: Chem.Mol,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._sdf.write(mol, input_id, canonical_smiles, conformer_index, self.profile)
        self._row(input_id, canonical_smiles, conformer_index, "ok", None, extra)

    def write_ok_record(
        self,
        input_id: str,
        canonical_smiles: str,
        conformer_index: int,
        record: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Like write_ok, with the SDF record already formatted (sdf.format_record, e.g. in a worker)."""
        self._sdf.append(record)
        self._row(input_id, canonical_smiles, conformer_index, "ok", None, extra)

    def write_error(
        self,
        input_id: str,
        smiles: str | None,
        conformer_index: int,
        error: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._row(input_id, smiles, conformer_index, "error", error, extra)

    def _row(self, input_id, smiles, conformer_index, status, error, extra) -> None:
        row = {
            "id": row_id(input_id, conformer_index),
            "input_id": input_id,
            "smiles": smiles,
            "conformer_index": conformer_index,
            "profile": self.profile,
            "status": status,
            "error": error,
        }
        row.update(extra or {})
        self._rows.write(row)

    def close(self) -> None:
        self._sdf.close()
        self._rows.close()

    def __enter__(self) -> ConformerResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
