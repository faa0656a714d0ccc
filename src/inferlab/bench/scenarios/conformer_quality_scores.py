"""The `conformer-quality` scenario's scoring (child process only: RDKit): each (seed, molecule) one task of
a process pool that reads the molecule's generations strictly (ConformerTemplate.check; stereo agreement of
the valid ones where the input specifies stereo), builds the RMSD matrix against the references and reads
it at every threshold in one pass (evaluation/metrics.py: a generation with no valid conformer is a miss,
a molecule without one has coverage 0); then the figures of one seed over a list of molecules, their
spread over seeds, and the coverage curve on a grid of thresholds.
"""

from __future__ import annotations

import math
from concurrent.futures import as_completed
from dataclasses import dataclass
from typing import Any

MAX_REASONS = 2  # invalid outputs' reasons kept per molecule
CURVE_THRESHOLDS = tuple(round(0.1 * i, 1) for i in range(1, 31))  # 0.1-3.0 A: the coverage-vs-threshold curve


@dataclass(frozen=True)
class MoleculeTask:
    seed: int
    molecule: int  # its place in the cell's molecules
    template: Any  # ConformerTemplate
    profile: str
    references: tuple[bytes, ...]  # RDKit binaries, one conformer each
    texts: tuple[str | None, ...]  # each generation's text before its EOS; None: it ended without EOS
    thresholds: tuple[float, ...]
    stereo_mirror: bool = False  # a wrong-handed conformer is scored mirrored where that gives its input's stereo


@dataclass(frozen=True)
class MoleculeScore:
    seed: int
    molecule: int
    attempted: int
    valid: int
    stereo_checked: int
    stereo_matches: int
    stereo_mirrored: int  # of the matches, conformers scored mirrored (stereo_mirror)
    coverage_recall: tuple[float, ...]  # per threshold of the task
    coverage_precision: tuple[float, ...]
    matching_recall: float  # NaN without a valid conformer
    matching_precision: float
    failed_pairs: int
    conformers: tuple[bytes, ...]  # the valid conformers (for the run's SDF)
    reasons: tuple[str, ...]  # why the first invalid outputs are invalid


def molecule_tasks(seed: int, molecules: list[Any], outputs: list[list[int]], generations: int,
                   references: dict[str, tuple[bytes, ...]], tokenizer: Any, eos: frozenset[int], profile: str,
                   thresholds: tuple[float, ...], stereo_mirror: bool = False) -> list[MoleculeTask]:
    """One scoring task per molecule of this seed: its generations' texts (before EOS; None without one).
    outputs: the seed's token ids, `generations` per molecule in molecule order."""
    tasks = []
    for index, m in enumerate(molecules):
        texts = [text_before_eos(ids, tokenizer, eos) for ids in outputs[index * generations : (index + 1) * generations]]
        tasks.append(MoleculeTask(seed, index, m.template, profile, references[m.template.canonical_smiles],
                                  tuple(texts), thresholds, stereo_mirror))
    return tasks


def text_before_eos(ids: list[int], tokenizer: Any, eos: frozenset[int]) -> str | None:
    """A generation's text before its first EOS; None when it ended without one."""
    end = next((i for i, t in enumerate(ids) if t in eos), None)
    return None if end is None else tokenizer.decode(ids[:end], skip_special_tokens=False)


def wrong_stereo(template: Any, ids: list[int], tokenizer: Any, eos: frozenset[int], profile: str,
                 mirror: bool = False) -> bool:
    """Whether one generation is a valid conformer whose stereo is not its input's, with `mirror` neither as
    written nor mirrored (the pipeline's stereo check, pipeline/judge.py): what a stereo retry samples again.
    Invalid and unjudged outputs are not retried."""
    from inferlab.errors import InferlabError
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.pipeline.judge import judged_stereo

    text = text_before_eos(ids, tokenizer, eos)
    if text is None:
        return False
    try:
        mol = template.check(text, get_profile(profile)).mol
    except InferlabError:
        return False
    return judged_stereo(mol, mirror)[1]["stereo_ok"] is False


def score_molecule(task: MoleculeTask) -> MoleculeScore:
    import numpy as np
    from rdkit import Chem

    from inferlab.errors import InferlabError
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.evaluation.metrics import best_rms_matrix, ensemble_metrics
    from inferlab.workloads.conformers.pipeline.judge import judged_stereo

    profile = get_profile(task.profile)
    valid, reasons = [], []
    stereo_checked = stereo_matches = stereo_mirrored = 0
    for text in task.texts:
        try:
            if text is None:
                raise InferlabError("no EOS within the output bound")
            mol = task.template.check(text, profile).mol
        except InferlabError as e:
            if len(reasons) < MAX_REASONS:
                reasons.append(str(e)[:200])
            continue
        mol, stereo = judged_stereo(mol, task.stereo_mirror)
        valid.append(mol)
        stereo_checked += stereo["stereo_ok"] is not None
        stereo_matches += stereo["stereo_ok"] is True
        stereo_mirrored += stereo["mirrored"]
    matrix = best_rms_matrix([Chem.Mol(b) for b in task.references], valid)
    metrics = ensemble_metrics(matrix.values, task.thresholds, attempted=len(task.texts))
    return MoleculeScore(
        seed=task.seed, molecule=task.molecule, attempted=len(task.texts), valid=len(valid),
        stereo_checked=stereo_checked, stereo_matches=stereo_matches, stereo_mirrored=stereo_mirrored,
        coverage_recall=tuple(metrics.coverage[t].recall for t in task.thresholds),
        coverage_precision=tuple(metrics.coverage[t].precision for t in task.thresholds),
        matching_recall=metrics.matching_recall, matching_precision=metrics.matching_precision,
        failed_pairs=int(np.isnan(matrix.values).sum()), conformers=tuple(m.ToBinary() for m in valid),
        reasons=tuple(reasons))


def score_all(tasks: list[MoleculeTask], workers: int) -> list[MoleculeScore]:
    """Every task's score, in task order: in this process (workers 1, or a single task), else in a spawn pool
    of `workers` processes (0 = one per CPU core)."""
    from inferlab.child_processes import spawn_pool
    from inferlab.workloads.conformers.evaluation.evaluate import pool_size

    workers = pool_size(workers, len(tasks))
    if workers == 1:
        return [score_molecule(t) for t in tasks]
    scores: list[MoleculeScore | None] = [None] * len(tasks)
    # spawn, not fork: this process holds CUDA and threads that a forked child must not inherit
    with spawn_pool(workers) as pool:
        futures = {pool.submit(score_molecule, t): i for i, t in enumerate(tasks)}
        for future in as_completed(futures):
            scores[futures[future]] = future.result()
    return [s for s in scores if s is not None]


def _mean(values: list[float]) -> float | None:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else None


def _median(values: list[float]) -> float | None:
    kept = sorted(v for v in values if not math.isnan(v))
    if not kept:
        return None
    mid = len(kept) // 2
    return kept[mid] if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2


def threshold_name(prefix: str, threshold: float) -> str:
    """cov_r, 0.75 -> cov_r_0.75 (a figure's key in the rows)."""
    return f"{prefix}_{threshold:g}"


def seed_figures(scores: list[MoleculeScore], thresholds: tuple[float, ...]) -> dict[str, Any]:
    """One seed over a list of molecules (every molecule counts in the coverage means; AMR means over the
    molecules with a valid conformer, `amr_molecules` of them): means and medians over molecules, validity
    over every generation, stereo agreement over the valid ones whose input specifies stereo."""
    figures: dict[str, Any] = {"molecules": len(scores)}
    for i, t in enumerate(thresholds):
        for prefix, values in (("cov_r", [s.coverage_recall[i] for s in scores]),
                               ("cov_p", [s.coverage_precision[i] for s in scores])):
            figures[threshold_name(prefix, t)] = _mean(values)
            figures[threshold_name(prefix, t) + "_median"] = _median(values)
    for name, values in (("amr_r", [s.matching_recall for s in scores]),
                         ("amr_p", [s.matching_precision for s in scores])):
        figures[name] = _mean(values)
        figures[name + "_median"] = _median(values)
    attempted, valid = sum(s.attempted for s in scores), sum(s.valid for s in scores)
    checked = sum(s.stereo_checked for s in scores)
    figures.update({
        "amr_molecules": sum(not math.isnan(s.matching_recall) for s in scores),
        "generations": attempted,
        "valid": valid,
        "validity": valid / attempted if attempted else None,
        "stereo_checked": checked,
        "stereo_agreement": sum(s.stereo_matches for s in scores) / checked if checked else None,
        "stereo_mirrored": sum(s.stereo_mirrored for s in scores) / checked if checked else None,
        "molecules_without_valid_output": sum(s.valid == 0 for s in scores),
        "failed_pairs": sum(s.failed_pairs for s in scores),
    })
    return figures


def spread(values: list[float | None]) -> dict[str, Any] | None:
    """mean, sample std (None for one value), min, max and the values over seeds; None when a seed has none."""
    if not values or any(v is None for v in values):
        return None
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "values": list(values)}


def summarise(scores: list[Any], seeds: list[int], molecules: list[int], thresholds: tuple[float, ...],
              calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Per seed the figures over `molecules` (indices), their spread over seeds (`quality`), the coverage curve
    (mean over seeds at each grid threshold), and the headline: COV-R at the first threshold, mean over seeds."""
    wanted = set(molecules)
    per_seed = []
    for seed, call in zip(seeds, calls):
        picked = [s for s in scores if s.seed == seed and s.molecule in wanted]
        figures = seed_figures(picked, thresholds + CURVE_THRESHOLDS)
        per_seed.append({"seed": seed, **{k: v for k, v in figures.items() if not _on_curve_only(k, thresholds)},
                         "output_tokens_per_s": call["output_tokens_per_s"]})
        per_seed[-1]["curve"] = {p: [figures[threshold_name(p, t)] for t in CURVE_THRESHOLDS] for p in ("cov_r", "cov_p")}
    names = [threshold_name(p, t) for t in thresholds for p in ("cov_r", "cov_p")]
    names += ["amr_r", "amr_p", "validity", "stereo_agreement", "molecules_without_valid_output", "output_tokens_per_s"]
    quality = {name: spread([s[name] for s in per_seed]) for name in names}
    curve = {"thresholds": list(CURVE_THRESHOLDS)}
    for p in ("cov_r", "cov_p"):
        curve[p] = [sum(s["curve"][p][i] for s in per_seed) / len(per_seed) for i in range(len(CURVE_THRESHOLDS))]
    head = quality[threshold_name("cov_r", thresholds[0])]
    return {"per_seed": [{k: v for k, v in s.items() if k != "curve"} for s in per_seed], "quality": quality,
            "coverage_curve": curve, "coverage_recall": head["mean"] if head else None,
            "output_tokens_per_s": quality["output_tokens_per_s"]["mean"]}


def _on_curve_only(key: str, thresholds: tuple[float, ...]) -> bool:
    """A per-seed figure at a grid threshold that is not a reported one (it goes into the curve only)."""
    reported = {threshold_name(p, t) + suffix for t in thresholds for p in ("cov_r", "cov_p") for suffix in ("", "_median")}
    return key.startswith(("cov_r_", "cov_p_")) and key not in reported
