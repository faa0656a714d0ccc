"""The stereo fragments (training/stereo_fragments.py): small molecules around each tetrahedral centre of a
training molecule that keep the centre's configuration, drop the stereo of what was cut, and never repeat a
source molecule."""

from __future__ import annotations

from rdkit import Chem

from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
from inferlab.workloads.conformers.training.molecule_selection import Candidate
from inferlab.workloads.conformers.training.stereo_fragments import (
    FRAGMENT_SOURCE,
    MAX_ATOMS,
    fragment_candidates,
    stereo_fragments,
)

PARENT = canonical_smiles("CCCC[C@H](N)C(=O)OCCc1ccc(OC)cc1")


def _inverted(smiles: str) -> Chem.Mol:
    mol = Chem.MolFromSmiles(smiles)
    for atom in mol.GetAtoms():
        tag = atom.GetChiralTag()
        if tag == Chem.ChiralType.CHI_TETRAHEDRAL_CW:
            atom.SetChiralTag(Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
        elif tag == Chem.ChiralType.CHI_TETRAHEDRAL_CCW:
            atom.SetChiralTag(Chem.ChiralType.CHI_TETRAHEDRAL_CW)
    return mol


def test_each_fragment_is_a_small_part_of_its_parent_with_the_centres_own_configuration():
    parent = Chem.MolFromSmiles(PARENT)
    fragments = stereo_fragments(PARENT)
    assert fragments == ["CC[C@H](N)C(=O)O"]  # radius 1 (CC(N)C) is no centre: only radius 2's
    for smiles in fragments:
        mol = Chem.MolFromSmiles(smiles)
        assert smiles == canonical_smiles(smiles) and "@" in smiles
        assert mol.GetNumAtoms() < min(MAX_ATOMS + 1, parent.GetNumAtoms())
        assert parent.HasSubstructMatch(mol, useChirality=True)
        assert not parent.HasSubstructMatch(_inverted(smiles), useChirality=True)  # the hand is the parent's


def test_a_cut_centre_loses_its_tag_and_a_cut_aromatic_ring_is_completed():
    # radius 2 around the first centre reaches the second but cuts its N and chain: its tag must go
    parent = canonical_smiles("C[C@H](O)C[C@@H](N)CCc1ccccc1")
    small = min(stereo_fragments(parent), key=len)
    assert small.count("@") == 1 and Chem.MolFromSmiles(small).GetNumAtoms() == 5, small
    assert Chem.MolFromSmiles(parent).HasSubstructMatch(Chem.MolFromSmiles(small), useChirality=True)
    # a centre beside a phenyl ring: the fragment holds the whole ring, never a cut aromatic chain
    ring = stereo_fragments(canonical_smiles("CCCCC[C@H](O)c1ccc(CCCC)cc1"))
    assert ring and all(Chem.MolFromSmiles(s) is not None for s in ring)
    assert any("c1ccccc1" in Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in ring)


def test_a_molecule_without_a_centre_gives_no_fragment():
    assert stereo_fragments(canonical_smiles("CCOc1ccccc1")) == []


def test_fragment_candidates_drop_duplicates_and_every_source_molecule():
    parents = [Candidate("chembl_drugs", "chembl_drugs:1", PARENT, 17, ""),
               Candidate("chembl_drugs", "chembl_drugs:2", canonical_smiles("CCCC[C@H](N)C(=O)OCCc1ccc(O)cc1"), 16, "")]
    every = stereo_fragments(PARENT)
    taken = Chem.MolToSmiles(Chem.MolFromSmiles(every[0]), isomericSmiles=False)  # as if a held-out molecule
    kept = fragment_candidates(parents, [p.canonical_smiles for p in parents] + [taken])
    smiles = [c.canonical_smiles for c in kept]
    assert every[0] not in smiles and len(smiles) == len(set(smiles))
    assert all(c.source == FRAGMENT_SOURCE and c.id.startswith(f"{FRAGMENT_SOURCE}:chembl_drugs:") for c in kept)
    assert all(c.num_atoms == Chem.MolFromSmiles(c.canonical_smiles).GetNumAtoms() for c in kept)
