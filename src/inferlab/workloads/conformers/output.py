"""Resumable conformer output: an SDF of the valid conformers and a JSONL row for every attempt.

A JSONL row (`id` = `<input_id>#<conformer_index>`, input_id, smiles, conformer_index, profile, status
`ok`|`error`, error, plus any extra fields) is written after the conformer's SDF record, so every row
marked ok has its record. Reopening the pair resumes: the JSONL's finished ids are skipped by the caller
(`is_done`), and SDF records without a row (a crash between the two writes) are dropped.

Not here: generation and validation; the caller hands in molecules that passed the template check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rdkit import Chem

from inferlab.jsonl_io import ResumableJsonlWriter
from inferlab.workloads.conformers.sdf import ConformerSdfWriter, row_id


def default_jsonl_path(sdf_path: str | Path) -> Path:
    return Path(sdf_path).with_suffix(".jsonl")


class ConformerResultWriter:
    """`retry_errors`: the error rows of earlier runs are taken out of the JSONL (they have no SDF record)
    and are not done, so the caller generates them again."""

    def __init__(self, sdf_path: str | Path, jsonl_path: str | Path | None = None, profile: str = "",
                 retry_errors: bool = False) -> None:
        self.profile = profile
        redo = (lambda row: row.get("status") == "error") if retry_errors else None
        self._rows = ResumableJsonlWriter(jsonl_path or default_jsonl_path(sdf_path), id_field="id",
                                          kind_fields=("conformer_index",), redo=redo)
        self._sdf = ConformerSdfWriter(sdf_path, keep_row_ids=self._rows.done)

    @property
    def done(self) -> set[str]:
        """Row ids written by this or earlier runs."""
        return self._rows.done

    @property
    def retried(self) -> int:
        """Error rows of earlier runs taken out to generate again."""
        return self._rows.redone

    def is_done(self, input_id: str, conformer_index: int) -> bool:
        return row_id(input_id, conformer_index) in self._rows.done

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
