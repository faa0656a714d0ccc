"""Evaluate generated conformers against references: per-molecule RMSD metrics in parallel, a summary.

Molecules are matched between the two SDF files by canonical SMILES: the `canonical_smiles` property our
writers set, else the canonical SMILES computed from the record (RDKit then reads stereo from the 3D
coordinates, so foreign files match only where those agree). A reference molecule with no generated
conformer is scored as a molecule with no valid output (coverage 0, no matching value; `count_missing`),
unless the caller leaves such molecules out as 3DMolGen does. A molecule found in the generated file only,
an unreadable record and a pair that cannot be aligned are reported, never a crash. One molecule is one
task of a process pool, its matrix read at every threshold in one pass; the summary holds the mean and
median over molecules of each metric.

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
from inferlab.workloads.conformers.evaluation.metrics import DEFAULT_THRESHOLDS, best_rms_matrix, ensemble_metrics

log = logging.getLogger(__name__)
COVERAGE = ("coverage_recall", "coverage_precision")  # per threshold
MATCHING = ("matching_recall", "matching_precision")  # AMR-R, AMR-P
SHORT_NAMES = {"coverage_recall": "COV-R", "coverage_precision": "COV-P", "matching_recall": "AMR-R",
               "matching_precision": "AMR-P"}


def threshold_key(threshold: float) -> str:
    """A threshold as a JSON key: 0.75 -> "0.75"."""
    return f"{threshold:g}"


@dataclass(frozen=True)
class EvaluationConfig:
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS  # Angstrom
    workers: int = 0  # processes; 0 = one per CPU core, 1 = in this process
    count_missing: bool = True  # a reference molecule without generated conformers scores 0 coverage

    def __post_init__(self) -> None:
        thresholds = tuple(float(t) for t in self.thresholds)
        object.__setattr__(self, "thresholds", thresholds)
        if not thresholds or not all(t > 0 for t in thresholds):
            raise ConfigError(f"thresholds={thresholds} must be one or more values > 0 (Angstrom); "
                              "the usual ones are 0.75 and 1.25")
        if self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be >= 0 (0 = one per CPU core)")


@dataclass
class MoleculeEvaluation:
    smiles: str
    num_references: int
    num_generated: int
    coverage_recall: dict[str, float]  # threshold_key -> COV-R
    coverage_precision: dict[str, float]  # threshold_key -> COV-P
    matching_recall: float  # AMR-R
    matching_precision: float  # AMR-P
    failed_pairs: int = 0
    errors: list[str] = field(default_factory=list)
    rmsd: list[list[float | None]] | None = None  # [references][generated], None for failed pairs


@dataclass
class EvaluationReport:
    thresholds: tuple[float, ...]
    generated_path: str
    reference_path: str
    molecules: list[MoleculeEvaluation]
    only_in_generated: list[str]
    only_in_reference: list[str]
    unreadable_records: list[str]
    count_missing: bool = True

    def summary(self) -> dict:
        out: dict = {
            "thresholds": list(self.thresholds),
            "molecules_evaluated": len(self.molecules),
            "molecules_without_generated": sum(m.num_generated == 0 for m in self.molecules),
            "references": sum(m.num_references for m in self.molecules),
            "generated": sum(m.num_generated for m in self.molecules),
            "failed_pairs": sum(m.failed_pairs for m in self.molecules),
            "only_in_generated": len(self.only_in_generated),
            "only_in_reference": len(self.only_in_reference),
            "only_in_reference_scored_zero": self.count_missing,
            "unreadable_records": len(self.unreadable_records),
        }
        for name in COVERAGE:
            out[name] = {key: _mean_median([getattr(m, name)[key] for m in self.molecules])
                         for key in map(threshold_key, self.thresholds)}
        for name in MATCHING:
            out[name] = _mean_median([getattr(m, name) for m in self.molecules])
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


def _mean_median(values: list[float]) -> dict[str, float | None]:
    array = np.array(values, dtype=float)
    array = array[~np.isnan(array)]
    return {"mean": float(array.mean()) if array.size else None,
            "median": float(np.median(array)) if array.size else None}


def _json_safe(value):
    """NaN -> None, inside dicts too (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return None if isinstance(value, float) and math.isnan(value) else value


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
    scored = sorted(ref_groups) if config.count_missing else sorted(set(gen_groups) & set(ref_groups))
    tasks = [
        (key, [m.ToBinary() for m in ref_groups[key]], [m.ToBinary() for m in gen_groups.get(key, [])],
         config.thresholds)
        for key in scored
    ]
    molecules = _run(tasks, config.workers, progress)
    molecules.sort(key=lambda m: m.smiles)
    if not keep_matrices:
        for m in molecules:
            m.rmsd = None
    log.info("evaluated %d molecules (%d only generated, %d only reference)", len(molecules),
             len(set(gen_groups) - set(ref_groups)), len(set(ref_groups) - set(gen_groups)))
    return EvaluationReport(
        thresholds=config.thresholds,
        generated_path=str(generated),
        reference_path=str(reference),
        molecules=molecules,
        only_in_generated=sorted(set(gen_groups) - set(ref_groups)),
        only_in_reference=sorted(set(ref_groups) - set(gen_groups)),
        unreadable_records=gen_bad + ref_bad,
        count_missing=config.count_missing,
    )


def pool_size(workers: int, tasks: int) -> int:
    """Processes for `tasks` tasks: `workers`, or (0) one per CPU core this process may use (its affinity,
    not the host's count), never more than the tasks."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(workers or cores, tasks))


def _run(tasks: list[tuple], workers: int, progress: Callable[[int, int], None] | None) -> list[MoleculeEvaluation]:
    workers = pool_size(workers, len(tasks))
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
    with spawn_pool(workers) as pool:
        futures = [pool.submit(evaluate_molecule, *task) for task in tasks]
        for future in as_completed(futures):
            results.append(future.result())
            if progress:
                progress(len(results), len(tasks))
    return results


def evaluate_molecule(smiles: str, references: list[bytes], generated: list[bytes],
                      thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS) -> MoleculeEvaluation:
    """One molecule: the RMSD matrix and its metrics at every threshold (molecules arrive as RDKit binaries;
    none generated: coverage 0, no matching value)."""
    keys = [threshold_key(t) for t in thresholds]
    try:
        matrix = best_rms_matrix([Chem.Mol(b) for b in references], [Chem.Mol(b) for b in generated])
    except Exception as e:  # never let one molecule end the evaluation
        return MoleculeEvaluation(
            smiles=smiles,
            num_references=len(references),
            num_generated=len(generated),
            coverage_recall=dict.fromkeys(keys, 0.0),
            coverage_precision=dict.fromkeys(keys, 0.0),
            matching_recall=math.nan,
            matching_precision=math.nan,
            failed_pairs=len(references) * len(generated),
            errors=[f"{type(e).__name__}: {e}"],
        )
    metrics = ensemble_metrics(matrix.values, thresholds)
    return MoleculeEvaluation(
        smiles=smiles,
        num_references=len(references),
        num_generated=len(generated),
        coverage_recall={k: metrics.coverage[t].recall for k, t in zip(keys, thresholds)},
        coverage_precision={k: _zero_if_none_generated(metrics.coverage[t].precision, generated)
                            for k, t in zip(keys, thresholds)},
        matching_recall=metrics.matching_recall,
        matching_precision=metrics.matching_precision,
        failed_pairs=int(np.isnan(matrix.values).sum()),
        errors=list(matrix.errors),
        rmsd=[[None if math.isnan(v) else float(v) for v in row] for row in matrix.values],
    )


def _zero_if_none_generated(precision: float, generated: list[bytes]) -> float:
    """A file holds the valid conformers only: a molecule that has none was generated for and missed."""
    return 0.0 if not generated else precision


def summary_table(report: EvaluationReport) -> str:
    """A plain-text table of the summary (the CLI prints it)."""
    s = report.summary()
    missing = ("scored as 0 coverage" if report.count_missing else "left out")
    lines = [
        f"molecules evaluated: {s['molecules_evaluated']}  (references {s['references']}, "
        f"generated {s['generated']}, failed pairs {s['failed_pairs']})",
        f"only in generated: {s['only_in_generated']}  only in reference: {s['only_in_reference']} ({missing})  "
        f"unreadable records: {s['unreadable_records']}",
        f"thresholds: {', '.join(f'{t:g}' for t in report.thresholds)} A (coverage: RMSD strictly below)",
        f"{'metric':<34}{'mean':>10}{'median':>10}",
    ]
    for name in COVERAGE:
        for key in map(threshold_key, report.thresholds):
            cells = ["-" if v is None else f"{100 * v:.1f}%" for v in s[name][key].values()]
            label = f"{name.replace('_', ' ')} ({SHORT_NAMES[name]}) < {key} A"
            lines.append(f"{label:<34}{cells[0]:>10}{cells[1]:>10}")
    for name in MATCHING:
        cells = ["-" if v is None else f"{v:.3f} A" for v in s[name].values()]
        lines.append(f"{name.replace('_', ' ') + f' ({SHORT_NAMES[name]})':<34}{cells[0]:>10}{cells[1]:>10}")
    return "\n".join(lines)
