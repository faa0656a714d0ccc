"""Per-molecule conformer metrics: the RMSD matrix, coverage and matching (torsional-diffusion's protocol).

RMSD: heavy atoms only (RemoveHs copies), best alignment over the molecule's symmetries
(rdMolAlign.GetBestRMS, which also symmetrises conjugated terminal groups such as carboxylates). A pair
that RDKit cannot align (a different molecule under the same key) is NaN and reported.

From the matrix M [references, valid generated], at each threshold (strictly below it, GEOM's convention):
- coverage recall (COV-R): share of references whose best generated RMSD is below the threshold;
- coverage precision (COV-P): share of the generations asked for whose best reference RMSD is below it;
  a generation that gave no valid conformer (`attempted` > the matrix's columns) is a miss;
- matching recall / precision (AMR-R / AMR-P): mean over references / valid generated of their minimum RMSD.
A molecule with no valid generated conformer has coverage 0 (recall and precision) and no matching value:
a miss is a miss, as in torsional-diffusion's code (3DMolGen skips such molecules). A reference (generated)
conformer whose every pair failed counts as not covered and is left out of the matching mean. Every
threshold is read from one pass over the matrix. Not here: reading files and the parallel loop (evaluate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolAlign

DEFAULT_THRESHOLDS = (0.75, 1.25)  # Angstrom: GEOM-Drugs' current reading, and older papers'


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
class Coverage:
    recall: float  # fraction in [0, 1]; NaN without references
    precision: float  # NaN when no generation was asked for


@dataclass(frozen=True)
class EnsembleMetrics:
    coverage: dict[float, Coverage]  # threshold (Angstrom) -> COV-R, COV-P
    matching_recall: float  # AMR-R, Angstrom; NaN when no reference had a valid pair
    matching_precision: float  # AMR-P, Angstrom; NaN when no generated conformer had a valid pair


def ensemble_metrics(values: np.ndarray, thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS,
                     attempted: int | None = None) -> EnsembleMetrics:
    """values: [references, valid generated] RMSDs, NaN for failed pairs; attempted: the generations asked for
    (default: the matrix's columns), of which the columns are the valid ones."""
    attempted = values.shape[1] if attempted is None else attempted
    assert attempted >= values.shape[1], (attempted, values.shape)
    ref_best = _nan_min(values, axis=1)  # [references]
    gen_best = _nan_min(values, axis=0)  # [valid generated]
    return EnsembleMetrics(
        coverage={t: Coverage(recall=_covered_share(ref_best, t, ref_best.size),
                              precision=_covered_share(gen_best, t, attempted)) for t in thresholds},
        matching_recall=_nan_mean(ref_best),
        matching_precision=_nan_mean(gen_best),
    )


def _nan_min(values: np.ndarray, axis: int) -> np.ndarray:
    if values.shape[axis] == 0:  # nothing to compare against
        return np.full(values.shape[1 - axis], np.nan)
    filled = np.where(np.isnan(values), np.inf, values)
    best = filled.min(axis=axis)
    return np.where(np.isinf(best), np.nan, best)


def _covered_share(best: np.ndarray, threshold: float, out_of: int) -> float:
    if out_of == 0:
        return math.nan
    return float(np.sum(np.nan_to_num(best, nan=np.inf) < threshold) / out_of)


def _nan_mean(best: np.ndarray) -> float:
    valid = best[~np.isnan(best)]
    return float(valid.mean()) if valid.size else math.nan
