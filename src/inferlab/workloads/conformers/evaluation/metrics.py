"""Per-molecule conformer metrics: the RMSD matrix, coverage and matching (GEOM conventions).

RMSD: heavy atoms only (RemoveHs copies), best alignment over the molecule's symmetries
(rdMolAlign.GetBestRMS, which also symmetrises conjugated terminal groups such as carboxylates). A pair
that RDKit cannot align (a different molecule under the same key) is NaN and reported.

From the matrix M [references, generated]:
- coverage recall: share of references whose best generated RMSD is below the threshold;
- coverage precision: share of generated conformers whose best reference RMSD is below it;
- matching recall / precision: mean over references / generated of their minimum RMSD.
A reference (generated) conformer whose every pair failed counts as not covered and is left out of the
matching mean. Not here: reading files and the parallel loop (evaluate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolAlign

DEFAULT_THRESHOLD = 0.75  # Angstrom


@dataclass(frozen=True)
class RmsdMatrix:
    values: np.ndarray  # [references, generated] float64, NaN where the pair failed
    errors: tuple[str, ...]  # one message per generated conformer that failed against some reference


def best_rms_matrix(references: list[Chem.Mol], generated: list[Chem.Mol]) -> RmsdMatrix:
    """Each molecule contributes its default conformer."""
    refs = [Chem.RemoveHs(m) for m in references]
    gens = [Chem.RemoveHs(m) for m in generated]
    values = np.full((len(refs), len(gens)), np.nan)
    errors: list[str] = []
    for j, gen in enumerate(gens):
        first_error = None
        for i, ref in enumerate(refs):
            try:
                # A fresh probe per pair: GetBestRMS moves the probe, and realigning a moved one drifts ~1e-5 A.
                values[i, j] = rdMolAlign.GetBestRMS(Chem.Mol(gen), ref)
            except Exception as e:  # RDKit raises RuntimeError/ValueError for unmatched molecules
                first_error = first_error or f"{type(e).__name__}: {e}".strip()
        if first_error is not None:
            errors.append(f"generated conformer {j}: {first_error}")
    return RmsdMatrix(values, tuple(errors))


@dataclass(frozen=True)
class CoverageMatching:
    coverage_recall: float  # fraction in [0, 1]; NaN without references
    coverage_precision: float  # NaN without generated conformers
    matching_recall: float  # Angstrom; NaN when no reference had a valid pair
    matching_precision: float


def coverage_matching(values: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> CoverageMatching:
    """values: [references, generated] RMSDs, NaN for failed pairs."""
    ref_best = _nan_min(values, axis=1)  # [references]
    gen_best = _nan_min(values, axis=0)  # [generated]
    return CoverageMatching(
        coverage_recall=_covered_share(ref_best, threshold),
        coverage_precision=_covered_share(gen_best, threshold),
        matching_recall=_nan_mean(ref_best),
        matching_precision=_nan_mean(gen_best),
    )


def _nan_min(values: np.ndarray, axis: int) -> np.ndarray:
    if values.shape[axis] == 0:  # nothing to compare against
        return np.full(values.shape[1 - axis], np.nan)
    filled = np.where(np.isnan(values), np.inf, values)
    best = filled.min(axis=axis)
    return np.where(np.isinf(best), np.nan, best)


def _covered_share(best: np.ndarray, threshold: float) -> float:
    if best.size == 0:
        return math.nan
    return float(np.mean(np.nan_to_num(best, nan=np.inf) < threshold))


def _nan_mean(best: np.ndarray) -> float:
    valid = best[~np.isnan(best)]
    return float(valid.mean()) if valid.size else math.nan
