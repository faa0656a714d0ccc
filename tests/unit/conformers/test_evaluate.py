"""Evaluation against a direct computation: RMSD by numpy (Kabsch over every graph symmetry), then
coverage and matching by numpy, on ETKDG references and perturbed copies."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conformer_molecules import embed
from rdkit import Chem

from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter
from inferlab.workloads.conformers.evaluation.evaluate import EvaluationConfig, evaluate_files, summary_table
from inferlab.workloads.conformers.evaluation.metrics import ensemble_metrics

# No conjugated terminal groups (RDKit symmetrises those beyond graph symmetry); two have symmetric parts.
MOLECULES = ["CCCCCO", "CC(C)Cc1ccccc1", "CCN(CC)CC"]
THRESHOLDS = (0.75, 1.25)


def kabsch_rmsd(a: np.ndarray, b: np.ndarray) -> float:
    """RMSD of b onto a after the optimal rotation and translation."""
    a = a - a.mean(axis=0)
    b = b - b.mean(axis=0)
    u, s, vt = np.linalg.svd(b.T @ a)
    d = np.sign(np.linalg.det(u @ vt))
    rotation = u @ np.diag([1.0, 1.0, d]) @ vt
    return float(np.sqrt(((b @ rotation - a) ** 2).sum(axis=1).mean()))


def direct_rmsd(reference: Chem.Mol, generated: Chem.Mol) -> float:
    ref, gen = Chem.RemoveHs(reference), Chem.RemoveHs(generated)
    a, b = ref.GetConformer().GetPositions(), gen.GetConformer().GetPositions()
    matches = gen.GetSubstructMatches(ref, uniquify=False, maxMatches=100000)
    if not matches:
        return np.nan
    return min(kabsch_rmsd(a, b[list(m)]) for m in matches)


def set_positions(mol: Chem.Mol, xyz: np.ndarray) -> Chem.Mol:
    """Coordinates rounded to the 4 decimals an SDF holds, so the file and the test see the same values."""
    conf = mol.GetConformer()
    for i, p in enumerate(np.round(xyz, 4)):
        conf.SetAtomPosition(i, p.tolist())
    return mol


def single_conformers(mol: Chem.Mol) -> list[Chem.Mol]:
    out = []
    for conf in mol.GetConformers():
        one = Chem.Mol(mol)
        one.RemoveAllConformers()
        one.AddConformer(Chem.Conformer(conf), assignId=True)
        out.append(set_positions(one, one.GetConformer().GetPositions()))
    return out


def perturbed(mol: Chem.Mol, sigma: float, rng: np.random.Generator) -> Chem.Mol:
    out = Chem.Mol(mol)
    return set_positions(out, out.GetConformer().GetPositions() + rng.normal(0.0, sigma, (out.GetNumAtoms(), 3)))


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Reference and generated SDFs, and the molecules written into each, per canonical SMILES."""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("eval")
    refs, gens = {}, {}
    for smiles in MOLECULES:
        key = Chem.MolToSmiles(Chem.MolFromSmiles(smiles))
        refs[key] = single_conformers(Chem.RemoveHs(embed(smiles, num_confs=4, seed=1)))
        others = single_conformers(Chem.RemoveHs(embed(smiles, num_confs=3, seed=2)))
        gens[key] = others + [perturbed(m, s, rng) for m in refs[key][:2] for s in (0.1, 0.6)]
    # A generated "conformer" of another molecule under the first key: it cannot be aligned.
    first = Chem.MolToSmiles(Chem.MolFromSmiles(MOLECULES[0]))
    gens[first].append(single_conformers(Chem.RemoveHs(embed("CCOCC", num_confs=1)))[0])
    reference, generated = root / "ref.sdf", root / "gen.sdf"
    with ConformerSdfWriter(reference) as w:
        for key, mols in refs.items():
            for k, m in enumerate(mols):
                w.write(m, key, key, k)
        w.write(Chem.RemoveHs(embed("CCCl")), "ref-only", "CCCl", 0)
    with ConformerSdfWriter(generated) as w:
        for key, mols in gens.items():
            for k, m in enumerate(mols):
                w.write(m, key, key, k)
        w.write(Chem.RemoveHs(embed("CCBr")), "gen-only", "CCBr", 0)
    with generated.open("a") as f:
        f.write("junk\n\n\n  not a molfile\n$$$$\n")
    return reference, generated, refs, gens


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_equal_a_direct_computation(sets, workers):
    reference, generated, refs, gens = sets
    report = evaluate_files(generated, reference, EvaluationConfig(THRESHOLDS, workers), keep_matrices=True)
    assert [m.smiles for m in report.molecules] == sorted([*refs, "CCCl"])  # CCCl: references only
    for m in report.molecules:
        if m.smiles == "CCCl":  # no generated conformer: a miss, scored 0 coverage, no matching value
            assert m.num_generated == 0 and m.coverage_recall == m.coverage_precision == {"0.75": 0.0, "1.25": 0.0}
            assert np.isnan(m.matching_recall) and np.isnan(m.matching_precision)
            continue
        direct = np.array([[direct_rmsd(r, g) for g in gens[m.smiles]] for r in refs[m.smiles]])
        got = np.array([[np.nan if v is None else v for v in row] for row in m.rmsd])
        np.testing.assert_allclose(got, direct, atol=1e-5, equal_nan=True)
        # Coverage (at each threshold) and matching straight from the matrix, NaN pairs left out.
        valid_cols = ~np.all(np.isnan(direct), axis=0)
        d = direct[:, valid_cols]
        for t in THRESHOLDS:
            assert m.coverage_recall[f"{t:g}"] == pytest.approx(np.mean(np.nanmin(d, axis=1) < t))
            assert m.coverage_precision[f"{t:g}"] == pytest.approx(np.sum(np.nanmin(d, axis=0) < t) / direct.shape[1])
        assert m.matching_recall == pytest.approx(np.mean(np.nanmin(d, axis=1)), abs=1e-5)
        assert m.matching_precision == pytest.approx(np.mean(np.nanmin(d, axis=0)), abs=1e-5)
        # The perturbed copies make the metrics informative: not all covered, not none.
        assert 0.0 < m.coverage_precision["0.75"] < 1.0
    failing = [m for m in report.molecules if m.failed_pairs]
    assert len(failing) == 1 and failing[0].failed_pairs == 4 and len(failing[0].errors) == 1
    assert report.only_in_generated == ["CCBr"] and report.only_in_reference == ["CCCl"]
    assert len(report.unreadable_records) == 1


def test_a_reference_molecule_without_generated_conformers_can_be_left_out(sets):
    reference, generated, refs, _ = sets
    report = evaluate_files(generated, reference, EvaluationConfig(THRESHOLDS, 1, count_missing=False))
    assert [m.smiles for m in report.molecules] == sorted(refs) and report.only_in_reference == ["CCCl"]
    assert report.summary()["molecules_without_generated"] == 0


def test_summary_table_and_json(sets):
    reference, generated, _, _ = sets
    report = evaluate_files(generated, reference, EvaluationConfig(THRESHOLDS, 1))
    table = summary_table(report)
    assert "molecules evaluated: 4" in table and "(COV-R) < 1.25 A" in table and "(AMR-P)" in table
    data = json.loads(json.dumps(report.to_json()))
    means = [m.coverage_recall["1.25"] for m in report.molecules]
    assert data["summary"]["coverage_recall"]["1.25"]["mean"] == pytest.approx(np.mean(means))
    assert data["summary"]["coverage_recall"]["1.25"]["median"] == pytest.approx(np.median(means))
    assert data["summary"]["molecules_without_generated"] == 1
    # matching means leave out the molecule without a value (CCCl), whose JSON says null
    assert data["summary"]["matching_recall"]["mean"] == pytest.approx(
        np.nanmean([m.matching_recall for m in report.molecules]))
    assert {m["smiles"]: m["matching_recall"] for m in data["molecules"]}["CCCl"] is None
    assert "rmsd" not in data["molecules"][0]


def test_metrics_at_two_thresholds_on_a_hand_made_matrix():
    # 3 references x 4 valid generated of 5 asked for; NaN: a pair that failed to align
    values = np.array([[0.50, 1.00, 2.00, np.nan],
                       [0.80, 1.30, 0.74, np.nan],
                       [1.25, 1.60, 3.00, np.nan]])
    m = ensemble_metrics(values, (0.75, 1.25), attempted=5)
    # references' best: 0.50, 0.74, 1.25; generated's best: 0.50, 1.00, 0.74, none (every pair failed)
    assert m.coverage[0.75].recall == pytest.approx(2 / 3) and m.coverage[0.75].precision == pytest.approx(2 / 5)
    # strictly below: 1.25 itself is not covered at 1.25
    assert m.coverage[1.25].recall == pytest.approx(2 / 3) and m.coverage[1.25].precision == pytest.approx(3 / 5)
    assert m.matching_recall == pytest.approx((0.50 + 0.74 + 1.25) / 3)
    assert m.matching_precision == pytest.approx((0.50 + 1.00 + 0.74) / 3)  # the failed conformer left out
    # without `attempted` the precision counts the matrix's columns only
    assert ensemble_metrics(values, (0.75,)).coverage[0.75].precision == pytest.approx(2 / 4)


def test_a_molecule_with_no_valid_output_has_zero_coverage():
    none_valid = ensemble_metrics(np.zeros((8, 0)), (0.75, 1.25), attempted=16)
    for t in (0.75, 1.25):
        assert (none_valid.coverage[t].recall, none_valid.coverage[t].precision) == (0.0, 0.0)
    assert np.isnan(none_valid.matching_recall) and np.isnan(none_valid.matching_precision)
    nothing_asked = ensemble_metrics(np.zeros((3, 0)), (0.75,))
    assert nothing_asked.coverage[0.75].recall == 0.0 and np.isnan(nothing_asked.coverage[0.75].precision)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="thresholds"):
        EvaluationConfig(thresholds=(0.75, 0))
    with pytest.raises(ConfigError, match="thresholds"):
        EvaluationConfig(thresholds=())
    with pytest.raises(ConfigError, match="workers"):
        EvaluationConfig(workers=-1)
