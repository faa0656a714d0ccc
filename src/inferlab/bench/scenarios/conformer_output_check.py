"""An independent reading of a conformer run's output files (child process only: RDKit), for the
`conformer-pipeline` scenario's rows and the constraint soak.

Nothing of the pipeline's own judgement is reused except the stereo comparison function:
- the JSONL: exactly K rows per input molecule, each once; error rows counted, and among them outputs
  the engine generated that the strict template check rejected (`invalid_strict`);
- the SDF, read back by RDKit's SDMolSupplier (sdf.read_sdf): a record per ok row and none other;
  every record readable; its molecular graph without stereo (canonical SMILES of the heavy-atom graph,
  stereo removed) equal to the input SMILES' (`graph_mismatches`); and the stereo the written
  coordinates have (stereo.stereo_agreement of the input molecule, in the input's own atom numbering,
  against the record) both as a figure (`sdf_stereo_agreement`) and against the rows' `stereo_ok`
  (`stereo_disagreements`: the pipeline's reading and this one must agree).
`invalid_total` sums everything that would make an output wrong; a soak must report 0.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

MAX_EXAMPLES = 3


def graph_key(mol) -> str:
    """Canonical SMILES of the heavy-atom graph without stereo (charges and isotopes kept)."""
    from rdkit import Chem

    plain = Chem.RemoveHs(Chem.Mol(mol))
    Chem.RemoveStereochemistry(plain)
    return Chem.MolToSmiles(plain)


def check_outputs(sdf_path: Path, jsonl_path: Path, inputs: dict[str, str], num_conformers: int) -> dict[str, Any]:
    """`inputs`: input id -> SMILES of every molecule the run was given."""
    from rdkit import Chem

    from inferlab.workloads.conformers.chemistry.sdf import read_sdf
    from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement

    rows = [json.loads(line) for line in jsonl_path.read_text().splitlines() if line.strip()]
    ids = Counter(r["id"] for r in rows)
    per_molecule = Counter(r["input_id"] for r in rows)
    ok_rows = {r["id"]: r for r in rows if r["status"] == "ok"}
    generated_errors = [r for r in rows if r["status"] == "error" and r.get("finish_reason") not in (None, "error")]
    references = {key: Chem.MolFromSmiles(smiles) for key, smiles in inputs.items()}
    graphs = {key: graph_key(mol) for key, mol in references.items() if mol is not None}

    found = Counter()
    examples: list[str] = []
    seen_records: set[str] = set()
    for record in read_sdf(sdf_path):
        found["sdf_records"] += 1
        if record.mol is None:
            found["sdf_unreadable"] += 1
            continue
        row_id, input_id = record.prop("row_id"), record.prop("input_id")
        seen_records.add(row_id)
        if row_id not in ok_rows:
            found["sdf_records_without_ok_row"] += 1
            continue
        if graph_key(record.mol) != graphs.get(input_id):
            found["graph_mismatches"] += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append(f"{row_id}: {graph_key(record.mol)} is not {graphs.get(input_id)}")
            continue
        stereo = stereo_agreement(references[input_id], record.mol)
        if stereo.ok is not None:
            found["sdf_stereo_checked"] += 1
            found["sdf_stereo_matches"] += stereo.ok
        found["stereo_disagreements"] += stereo.ok != ok_rows[row_id].get("stereo_ok")
    expected = len(inputs) * num_conformers
    missing_records = sum(1 for row_id in ok_rows if row_id not in seen_records)
    metrics: dict[str, Any] = {
        "rows": len(rows),
        "rows_expected": expected,
        "rows_repeated": sum(n - 1 for n in ids.values() if n > 1),
        "molecules_without_k_rows": sum(1 for key in inputs if per_molecule[key] != num_conformers),
        "error_rows": len(rows) - len(ok_rows),
        "invalid_strict": len(generated_errors),
        "sdf_records": found["sdf_records"],
        "sdf_unreadable": found["sdf_unreadable"],
        "sdf_records_missing": missing_records,
        "sdf_records_without_ok_row": found["sdf_records_without_ok_row"],
        "graph_mismatches": found["graph_mismatches"],
        "graph_mismatch_examples": examples,
        "invalid_examples": [f"{r['id']}: {r['error']}" for r in generated_errors[:MAX_EXAMPLES]],
        "sdf_stereo_checked": found["sdf_stereo_checked"],
        "sdf_stereo_matches": found["sdf_stereo_matches"],
        "sdf_stereo_agreement": (found["sdf_stereo_matches"] / found["sdf_stereo_checked"]
                                 if found["sdf_stereo_checked"] else None),
        "stereo_disagreements": found["stereo_disagreements"],
    }
    metrics["invalid_total"] = (metrics["invalid_strict"] + metrics["sdf_unreadable"] + metrics["graph_mismatches"]
                                + missing_records + metrics["sdf_records_without_ok_row"]
                                + abs(expected - len(rows)) + metrics["rows_repeated"])
    return metrics
