"""Evaluate generated conformers against references: per-molecule RMSD metrics in parallel, a summary.

Molecules are matched between the two SDF files by canonical SMILES: the `canonical_smiles` property our
writers set, else the canonical SMILES computed from the record (RDKit then reads stereo from the 3D
coordinates, so foreign files match only where those agree). A molecule found in one file only, an
unreadable record and a pair that cannot be aligned are reported, never a crash. One molecule is one task
of a process pool; the summary holds the mean and median over molecules of each metric.

Not here: the metric definitions (metrics.py) and printing (cli/conformers_cmd.py).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from rdkit import Chem

from inferlab.child_processes import spawn_pool
from inferlab.errors import ConfigError, InputError
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol
from inferlab.workloads.conformers.evaluation.metrics import DEFAULT_THRESHOLD, best_rms_matrix, coverage_matching

log = logging.getLogger(__name__)
METRICS = ("coverage_recall", "coverage_precision", "matching_recall", "matching_precision")


@dataclass(frozen=True)
class EvaluationConfig:
    threshold: float = DEFAULT_THRESHOLD  # Angstrom
    workers: int = 0  # processes; 0 = one per CPU core, 1 = in this process

    def __post_init__(self) -> None:
        if not self.threshold > 0:
            raise ConfigError(f"threshold={self.threshold} must be > 0 (Angstrom); the usual value is 0.75")
        if self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be >= 0 (0 = one per CPU core)")


@dataclass
class MoleculeEvaluation:
    smiles: str
    num_references: int
    num_generated: int
    coverage_recall: float
    coverage_precision: float
    matching_recall: float
    matching_precision: float
    failed_pairs: int = 0
    errors: list[str] = field(default_factory=list)
    rmsd: list[list[float | None]] | None = None  # [references][generated], None for failed pairs


@dataclass
class EvaluationReport:
    threshold: float
    generated_path: str
    reference_path: str
    molecules: list[MoleculeEvaluation]
    only_in_generated: list[str]
    only_in_reference: list[str]
    unreadable_records: list[str]

    def summary(self) -> dict:
        out: dict = {
            "threshold": self.threshold,
            "molecules_evaluated": len(self.molecules),
            "references": sum(m.num_references for m in self.molecules),
            "generated": sum(m.num_generated for m in self.molecules),
            "failed_pairs": sum(m.failed_pairs for m in self.molecules),
            "only_in_generated": len(self.only_in_generated),
            "only_in_reference": len(self.only_in_reference),
            "unreadable_records": len(self.unreadable_records),
        }
        for name in METRICS:
            values = np.array([getattr(m, name) for m in self.molecules], dtype=float)
            values = values[~np.isnan(values)]
            out[name] = {
                "mean": float(values.mean()) if values.size else None,
                "median": float(np.median(values)) if values.size else None,
            }
        return out

    def to_json(self, include_matrices: bool = False) -> dict:
        molecules = [asdict(m) for m in self.molecules]
        if not include_matrices:
            for m in molecules:
                m.pop("rmsd")
        return {
            "summary": self.summary(),
            "generated": self.generated_path,
            "reference": self.reference_path,
            "molecules": [_json_safe(m) for m in molecules],
            "only_in_generated": self.only_in_generated,
            "only_in_reference": self.only_in_reference,
            "unreadable_records": self.unreadable_records,
        }


def _json_safe(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def group_by_molecule(path: str | Path) -> tuple[dict[str, list[Chem.Mol]], list[str]]:
    """Records of an SDF grouped by canonical SMILES; plus a message per unreadable record."""
    if not Path(path).is_file():
        raise InputError(f"SDF file {path} does not exist")
    groups: dict[str, list[Chem.Mol]] = {}
    unreadable: list[str] = []
    for record in read_sdf(path):
        if record.mol is None:
            unreadable.append(record.error or f"record {record.index} of {path}")
            continue
        key = record.prop("canonical_smiles")
        if not key:
            try:
                key = canonicalize_mol(record.mol).smiles
            except Exception as e:  # a record RDKit read but cannot canonicalise
                unreadable.append(f"record {record.index} of {path}: {e}")
                continue
        groups.setdefault(key, []).append(record.mol)
    return groups, unreadable


def evaluate_files(
    generated: str | Path,
    reference: str | Path,
    config: EvaluationConfig = EvaluationConfig(),
    progress: Callable[[int, int], None] | None = None,
    keep_matrices: bool = False,
) -> EvaluationReport:
    """`progress(done, total)` is called as molecules finish (for a progress bar)."""
    gen_groups, gen_bad = group_by_molecule(generated)
    ref_groups, ref_bad = group_by_molecule(reference)
    common = sorted(set(gen_groups) & set(ref_groups))
    tasks = [
        (key, [m.ToBinary() for m in ref_groups[key]], [m.ToBinary() for m in gen_groups[key]], config.threshold)
        for key in common
    ]
    molecules = _run(tasks, config.workers, progress)
    molecules.sort(key=lambda m: m.smiles)
    if not keep_matrices:
        for m in molecules:
            m.rmsd = None
    log.info("evaluated %d molecules (%d only generated, %d only reference)", len(molecules),
             len(set(gen_groups) - set(ref_groups)), len(set(ref_groups) - set(gen_groups)))
    return EvaluationReport(
        threshold=config.threshold,
        generated_path=str(generated),
        reference_path=str(reference),
        molecules=molecules,
        only_in_generated=sorted(set(gen_groups) - set(ref_groups)),
        only_in_reference=sorted(set(ref_groups) - set(gen_groups)),
        unreadable_records=gen_bad + ref_bad,
    )


def _run(tasks: list[tuple], workers: int, progress: Callable[[int, int], None] | None) -> list[MoleculeEvaluation]:
    workers = workers or os.cpu_count() or 1
    if progress:
        progress(0, len(tasks))
    results: list[MoleculeEvaluation] = []
    if workers == 1 or len(tasks) <= 1:
        for task in tasks:
            results.append(evaluate_molecule(*task))
            if progress:
                progress(len(results), len(tasks))
        return results
    # spawn, not fork: the caller may hold CUDA or threads that a forked child must not inherit
    with spawn_pool(min(workers, len(tasks))) as pool:
        futures = [pool.submit(evaluate_molecule, *task) for task in tasks]
        for future in as_completed(futures):
            results.append(future.result())
            if progress:
                progress(len(results), len(tasks))
    return results


def evaluate_molecule(smiles: str, references: list[bytes], generated: list[bytes], threshold: float):
    """One molecule: the RMSD matrix and its metrics (molecules arrive as RDKit binaries)."""
    try:
        matrix = best_rms_matrix([Chem.Mol(b) for b in references], [Chem.Mol(b) for b in generated])
    except Exception as e:  # never let one molecule end the evaluation
        return MoleculeEvaluation(
            smiles=smiles,
            num_references=len(references),
            num_generated=len(generated),
            coverage_recall=0.0,
            coverage_precision=0.0,
            matching_recall=math.nan,
            matching_precision=math.nan,
            failed_pairs=len(references) * len(generated),
            errors=[f"{type(e).__name__}: {e}"],
        )
    metrics = coverage_matching(matrix.values, threshold)
    return MoleculeEvaluation(
        smiles=smiles,
        num_references=len(references),
        num_generated=len(generated),
        failed_pairs=int(np.isnan(matrix.values).sum()),
        errors=list(matrix.errors),
        rmsd=[[None if math.isnan(v) else float(v) for v in row] for row in matrix.values],
        **asdict(metrics),
    )


def summary_table(report: EvaluationReport) -> str:
    """A plain-text table of the summary (the CLI prints it)."""
    s = report.summary()
    lines = [
        f"molecules evaluated: {s['molecules_evaluated']}  (references {s['references']}, "
        f"generated {s['generated']}, failed pairs {s['failed_pairs']})",
        f"only in generated: {s['only_in_generated']}  only in reference: {s['only_in_reference']}  "
        f"unreadable records: {s['unreadable_records']}",
        f"threshold: {report.threshold:g} A",
        f"{'metric':<20}{'mean':>10}{'median':>10}",
    ]
    for name in METRICS:
        unit_pct = name.startswith("coverage")
        cells = []
        for stat in ("mean", "median"):
            v = s[name][stat]
            cells.append("-" if v is None else f"{100 * v:.1f}%" if unit_pct else f"{v:.3f} A")
        lines.append(f"{name.replace('_', ' '):<20}{cells[0]:>10}{cells[1]:>10}")
    return "\n".join(lines)
