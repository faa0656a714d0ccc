"""The demo's conformers against ETKDG: K reference conformers per molecule (evaluation/reference.py, a seed
other than the reference model's training data's) and the evaluation's figures (evaluation/evaluate.py:
COV-R / COV-P and AMR-R / AMR-P at 0.75 and 1.25 A, heavy atoms, GetBestRMS), the lab's quality protocol
on a few molecules. K is half the conformers generated per molecule, as the quality scenario's 2K
generations per K references. Also the pair the picture shows: a molecule's generated conformer nearest to
one of its references. Not here: the metrics (evaluation/), the picture (picture.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rdkit import Chem

from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
from inferlab.workloads.conformers.evaluation.evaluate import (
    EvaluationConfig,
    EvaluationReport,
    evaluate_files,
    group_by_molecule,
)
from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, write_reference_sdf

REFERENCE_SEED = 1001  # the quality scenario's default: not a seed of the reference model's training conformers


def references_per_molecule(num_conformers: int) -> int:
    return max(1, num_conformers // 2)


@dataclass(frozen=True)
class NearestPair:
    """A generated conformer and the reference conformer nearest to it (heavy atoms, as the evaluation read them)."""

    smiles: str  # the molecule's canonical SMILES (the evaluation's key)
    generated: Chem.Mol
    reference: Chem.Mol
    rmsd: float  # Angstrom: the evaluation's GetBestRMS of the pair


@dataclass(frozen=True)
class DemoQuality:
    generated: Path  # the SDF scored
    references: Path  # the ETKDG SDF
    num_references: int  # K per molecule
    seed: int
    report: EvaluationReport  # with the RMSD matrices

    def nearest(self, smiles: str) -> NearestPair | None:
        """The smallest entry of the molecule's RMSD matrix and its two conformers (the files grouped as the
        evaluation grouped them, so the matrix's indices are theirs); None without a valid conformer."""
        key = canonical_smiles(smiles)
        scored = next((m for m in self.report.molecules if m.smiles == key), None)
        pairs = [(value, i, j) for i, row in enumerate(scored.rmsd or []) for j, value in enumerate(row)
                 if value is not None] if scored else []
        if not pairs:
            return None
        rmsd, i, j = min(pairs)
        made, refs = group_by_molecule(self.generated)[0][key], group_by_molecule(self.references)[0][key]
        return NearestPair(key, made[j], refs[i], rmsd)


def score_against_etkdg(molecules: Path, generated: Path, references: Path, num_references: int,
                        seed: int = REFERENCE_SEED) -> DemoQuality:
    """Embed the references of `molecules` (.smi) into `references` and evaluate `generated` against them. In
    this process: a few small molecules take well under a second each way, less than starting a pool."""
    write_reference_sdf(read_molecule_inputs(molecules), references,
                        ReferenceConfig(num_confs=num_references, seed=seed, threads=1))
    report = evaluate_files(generated, references, EvaluationConfig(workers=1), keep_matrices=True)
    return DemoQuality(generated, references, num_references, seed, report)
