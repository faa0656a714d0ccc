"""Stereo agreement (workloads/conformers/chemistry/stereo.py) on ETKDG conformers: a conformer of the input's own
stereoisomer matches, its mirror image contradicts a tetrahedral centre, a conformer of the other
double-bond isomer contradicts E/Z (a mirror keeps E/Z); whatever the atom numbering of the conformer;
a symmetric molecule whose mirror image is the same stereoisomer matches; no specified stereo: None."""

from __future__ import annotations

import pytest
from rdkit import Chem
from rdkit.Chem import AllChem

from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.stereo import StereoAgreement, stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.pipeline.judge import stereo_fields


def etkdg(smiles: str, seed: int = 3) -> Chem.Mol:
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    return Chem.RemoveHs(mol)


def reversed_numbering(mol: Chem.Mol) -> Chem.Mol:
    return Chem.RenumberAtoms(mol, list(range(mol.GetNumAtoms()))[::-1])


@pytest.mark.parametrize("smiles, centres, bonds", [
    ("C[C@H](N)C(=O)O", 1, 0),  # alanine
    ("C[C@@H]1CC[C@H](O)[C@@H](C(C)C)C1", 3, 0),  # menthol-like, three centres in a ring
    ("F/C=C/F", 0, 1),
    ("CC(/F)=C(\\Cl)Br", 0, 1),  # both ends substituted twice
    ("OC/C=C\\C[C@H](N)C", 1, 1),
])
def test_etkdg_conformers_match_and_renumbering_changes_nothing(smiles, centres, bonds):
    reference = Chem.MolFromSmiles(smiles)
    conformer = etkdg(smiles)
    expected = StereoAgreement(centres, bonds, 0, True)
    assert stereo_agreement(reference, conformer) == expected
    assert stereo_agreement(reference, reversed_numbering(conformer)) == expected


@pytest.mark.parametrize("smiles, mismatches", [
    ("C[C@H](N)C(=O)O", 1),
    ("C[C@@H]1CC[C@H](O)[C@@H](C(C)C)C1", 3),
    ("OC/C=C\\C[C@H](N)C", 1),  # the centre inverts, the double bond stays Z
])
def test_a_mirrored_conformer_contradicts_its_tetrahedral_centres(smiles, mismatches):
    reference = Chem.MolFromSmiles(smiles)
    mirror = mirror_image(etkdg(smiles))
    for conformer in (mirror, reversed_numbering(mirror)):
        found = stereo_agreement(reference, conformer)
        assert found.ok is False and found.mismatches == mismatches


@pytest.mark.parametrize("reference, other_isomer", [
    ("F/C=C/F", "F/C=C\\F"),
    ("CC(/F)=C(\\Cl)Br", "CC(/F)=C(/Cl)Br"),
])
def test_the_other_double_bond_isomer_contradicts_e_z_and_a_mirror_does_not(reference, other_isomer):
    mol = Chem.MolFromSmiles(reference)
    assert stereo_agreement(mol, etkdg(other_isomer)) == StereoAgreement(0, 1, 1, False)
    assert stereo_agreement(mol, reversed_numbering(etkdg(other_isomer))).ok is False
    assert stereo_agreement(mol, mirror_image(etkdg(reference))).ok is True


def test_a_symmetric_molecule_whose_mirror_is_the_same_isomer_matches():
    cis = "C[C@H]1CC[C@@H](C)CC1"  # achiral: inverting both centres gives cis again
    assert stereo_agreement(Chem.MolFromSmiles(cis), mirror_image(etkdg(cis))).ok is True
    trans = etkdg("C[C@H]1CC[C@H](C)CC1")
    assert stereo_agreement(Chem.MolFromSmiles(cis), trans).ok is False


def test_unspecified_stereo_is_not_compared():
    assert stereo_agreement(Chem.MolFromSmiles("CC(N)C(=O)O"), etkdg("C[C@H](N)C(=O)O")) == StereoAgreement(0, 0, 0, None)
    # the specified centre is compared, the unspecified one (atom 5's) is not reported
    reference = Chem.MolFromSmiles("C[C@H](O)CC(C)CC")
    conformer = etkdg("C[C@H](O)C[C@@H](C)CC")
    assert stereo_agreement(reference, conformer) == StereoAgreement(1, 0, 0, True)
    assert stereo_agreement(reference, mirror_image(conformer)).ok is False


def test_a_different_graph_is_refused():
    with pytest.raises(ValueError, match="atoms"):
        stereo_agreement(Chem.MolFromSmiles("C[C@H](N)O"), etkdg("CCCCO"))
    with pytest.raises(ValueError, match="graph"):
        stereo_agreement(Chem.MolFromSmiles("C[C@H](N)O"), etkdg("C[C@H](O)O"))


def test_the_pipeline_reading_of_a_conformer_text():
    """The judge's reading: the template's checked molecule (atom k = block k, the input's tags) against
    its own coordinates, as encoded from an ETKDG conformer and from its mirror image."""
    profile = get_profile("v3-fixed4")
    smiles = "C[C@@H]1CC[C@H](O)[C@@H](C(C)C)C1"
    template = build_template(smiles, profile)
    for conformer, ok in ((etkdg(smiles), True), (mirror_image(etkdg(smiles)), False)):
        text = encode_conformer(conformer, profile).generation_text(profile)
        fields = stereo_fields(template.check(text, profile).mol)
        assert fields == {"stereo_ok": ok, "stereo_centres": 3, "stereo_bonds": 0, "stereo_mismatches": 0 if ok else 3}
