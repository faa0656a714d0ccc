"""The mirror repair (chemistry/stereo_mirror.py, pipeline/judge.py `judged_stereo`) on ETKDG conformers: a
wrong-handed conformer is kept mirrored, with its input's stereo and every distance unchanged; one the mirror
cannot repair (one centre of two wrong, a double bond wrong) is kept as written; without `mirror` nothing
changes."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import AllChem

from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.pipeline.judge import judged_stereo


def etkdg(smiles: str, seed: int = 3) -> Chem.Mol:
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    return Chem.RemoveHs(mol)


def placed_on(reference_smiles: str, conformer: Chem.Mol) -> Chem.Mol:
    """`conformer`'s coordinates on the molecule of `reference_smiles` (same atom order: SMILES written alike),
    as the pipeline's check gives it (the input's tags, the model's coordinates)."""
    mol = Chem.MolFromSmiles(reference_smiles)
    assert [a.GetAtomicNum() for a in mol.GetAtoms()] == [a.GetAtomicNum() for a in conformer.GetAtoms()]
    mol.AddConformer(Chem.Conformer(conformer.GetConformer()), assignId=True)
    return mol


def distances(mol: Chem.Mol) -> np.ndarray:
    return Chem.Get3DDistanceMatrix(mol)


def test_the_mirror_negates_x_and_keeps_every_distance():
    mol = etkdg("C[C@H](N)C(=O)O")
    mirror = mirror_image(mol)
    before, after = mol.GetConformer().GetPositions(), mirror.GetConformer().GetPositions()
    assert np.array_equal(after[:, 0], -before[:, 0]) and np.array_equal(after[:, 1:], before[:, 1:])
    assert np.allclose(distances(mirror), distances(mol))
    assert mol.GetConformer().GetPositions()[0, 0] == before[0, 0]  # the input is not touched


@pytest.mark.parametrize("smiles", ["C[C@H](N)C(=O)O", "C[C@@H]1CC[C@H](O)[C@@H](C(C)C)C1", "OC/C=C\\C[C@H](N)C"])
def test_a_wrong_handed_conformer_is_kept_mirrored(smiles):
    wrong = placed_on(smiles, mirror_image(etkdg(smiles)))  # every centre inverted, double bonds right
    kept, fields = judged_stereo(wrong, mirror=True)
    assert fields["stereo_ok"] is True and fields["mirrored"] is True and fields["stereo_mismatches"] == 0
    assert np.allclose(distances(kept), distances(wrong))
    assert judged_stereo(wrong, mirror=False)[1]["stereo_ok"] is False  # the model's own stereo, as written
    right = placed_on(smiles, etkdg(smiles))
    kept, fields = judged_stereo(right, mirror=True)
    assert kept is right and fields["stereo_ok"] is True and fields["mirrored"] is False


@pytest.mark.parametrize("reference, drawn", [
    ("C[C@H](O)[C@H](C)N", "C[C@H](O)[C@@H](C)N"),  # one centre of two wrong: the mirror inverts both
    ("F/C=C/CF", "F/C=C\\CF"),  # a double bond wrong: the mirror keeps E/Z
    ("OC/C=C\\C[C@H](N)C", "OC/C=C/C[C@@H](N)C"),  # the centre and the double bond wrong
])
def test_what_the_mirror_cannot_repair_is_kept_as_written(reference, drawn):
    wrong = placed_on(reference, etkdg(drawn))
    kept, fields = judged_stereo(wrong, mirror=True)
    assert kept is wrong and fields["stereo_ok"] is False and fields["mirrored"] is False
