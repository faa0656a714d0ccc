"""Stereo agreement: does a conformer's geometry have the stereo its input molecule specifies?

The conformer text carries the input's stereo only as descriptors (`[C@@H]`, `/`, `\\`); the coordinates
the model writes can put the atoms in the mirror arrangement or the other double-bond isomer, and RDKit
reads stereo from 3D coordinates (an SDF reader, `AssignStereochemistryFrom3D`). This module compares
the two: the reference molecule's specified stereo (its chiral tags and double-bond stereo) with the
stereo RDKit assigns from the conformer's coordinates.

- Elements compared: tetrahedral centres whose chiral tag the reference specifies (CW/CCW) and double
  bonds whose stereo it specifies (E/Z or cis/trans). Centres the reference leaves unspecified are not
  reported at all (whatever the geometry makes of them is not a contradiction); other stereo kinds
  (atropisomers, square-planar, allenes) are not compared.
- Numbering: the conformer's atoms are mapped onto the reference's by graph (identity when the two are
  already numbered alike, as the pipeline's molecules are: block k = atom k of the template's canonical
  SMILES; otherwise a substructure match without stereo, e.g. an SDF read back against the user's
  SMILES). The coordinates are then put on a copy of the reference, so both readings share one atom and
  bond numbering and compare tag by tag.
- Verdict (`ok`): the geometry's stereoisomer is the reference's, decided by canonical isomeric SMILES
  of the reference and of the geometry's reading restricted to the reference's specified elements. This
  is what counts in a symmetric molecule, where inverting every centre can give the same stereoisomer
  (cis-1,4-dimethylcyclohexane): per-element differences are then not a mismatch.
- `mismatches`: specified elements whose configuration in the geometry differs from the reference's
  (a geometry too flat to define a centre counts as a difference); 0 when `ok`, at least 1 when not.

Not here: where the molecules come from (pipeline/judge.py reads conformer texts, the lab reads SDFs).
"""

from __future__ import annotations

from dataclasses import dataclass

from rdkit import Chem

_TETRAHEDRAL = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
_DOUBLE_BOND_STEREO = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOZ, Chem.BondStereo.STEREOCIS,
                       Chem.BondStereo.STEREOTRANS)
_TRANS_LIKE = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOTRANS)
_MAX_MATCHES = 16  # graph automorphisms tried when the numbering differs (the best agreement is kept)


@dataclass(frozen=True)
class StereoAgreement:
    centres: int  # tetrahedral centres the reference specifies
    bonds: int  # double bonds whose stereo the reference specifies
    mismatches: int  # specified elements the geometry contradicts (0 when ok)
    ok: bool | None  # the geometry's stereoisomer is the reference's; None when nothing is specified

    @property
    def specified(self) -> int:
        return self.centres + self.bonds

    def fields(self) -> dict[str, int | bool | None]:
        """The JSONL row's fields."""
        return {"stereo_ok": self.ok, "stereo_centres": self.centres, "stereo_bonds": self.bonds,
                "stereo_mismatches": self.mismatches}


def specified_stereo(mol: Chem.Mol) -> tuple[list[int], list[int]]:
    """(atom indices with a specified tetrahedral tag, bond indices with specified double-bond stereo)."""
    atoms = [a.GetIdx() for a in mol.GetAtoms() if a.GetChiralTag() in _TETRAHEDRAL]
    bonds = [b.GetIdx() for b in mol.GetBonds()
             if b.GetBondType() == Chem.BondType.DOUBLE and b.GetStereo() in _DOUBLE_BOND_STEREO]
    return atoms, bonds


def stereo_agreement(reference: Chem.Mol, conformer: Chem.Mol, conf_id: int = -1) -> StereoAgreement:
    """Compare `reference`'s specified stereo with what `conformer`'s coordinates (conformer `conf_id`) say.

    `reference` is the input molecule (sanitised; coordinates, if any, are ignored); `conformer` is the
    same molecular graph, in any atom order, with a 3D conformer. ValueError when the graphs differ.
    """
    atoms, bonds = specified_stereo(reference)
    if not atoms and not bonds:
        return StereoAgreement(0, 0, 0, None)
    positions = conformer.GetConformer(conf_id).GetPositions()  # [atoms, 3] float64
    best: StereoAgreement | None = None
    for match in _atom_maps(reference, conformer):
        placed = _with_positions(reference, [positions[j] for j in match])
        found = _compare(reference, placed, atoms, bonds)
        if found.ok:
            return found
        if best is None or found.mismatches < best.mismatches:
            best = found
    assert best is not None
    return best


def contradicted_centres(mol: Chem.Mol) -> list[int]:
    """Where `mol`'s coordinates contradict its own specified stereo, for a molecule from
    ConformerTemplate.check (the input's tags, the conformer's positions, numbered alike): each tetrahedral
    centre whose geometry has the other hand, and the first atom of each double bond whose geometry has the
    other isomer; sorted (a stereo retry continues from the first: pipeline/feed.py)."""
    atoms, bonds = specified_stereo(mol)
    geometric = Chem.Mol(mol)
    Chem.AssignStereochemistryFrom3D(geometric)
    centres = [i for i in atoms if geometric.GetAtomWithIdx(i).GetChiralTag() != mol.GetAtomWithIdx(i).GetChiralTag()]
    for i in bonds:
        if _trans_relation(geometric.GetBondWithIdx(i)) != _trans_relation(mol.GetBondWithIdx(i)):
            bond = mol.GetBondWithIdx(i)
            centres.append(min(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))
    return sorted(centres)


def _atom_maps(reference: Chem.Mol, conformer: Chem.Mol) -> list[tuple[int, ...]]:
    """Maps reference atom i -> conformer atom match[i]: the identity when the numbering already agrees."""
    n = reference.GetNumAtoms()
    if conformer.GetNumAtoms() != n:
        raise ValueError(f"the conformer has {conformer.GetNumAtoms()} atoms, the reference {n}")
    if _same_numbering(reference, conformer):
        return [tuple(range(n))]
    matches = conformer.GetSubstructMatches(reference, useChirality=False, uniquify=False, maxMatches=_MAX_MATCHES)
    if not matches:
        raise ValueError("the conformer's molecular graph is not the reference's")
    return list(matches)


def _same_numbering(a: Chem.Mol, b: Chem.Mol) -> bool:
    if any(x.GetAtomicNum() != y.GetAtomicNum() for x, y in zip(a.GetAtoms(), b.GetAtoms())):
        return False
    if a.GetNumBonds() != b.GetNumBonds():
        return False
    for bond in a.GetBonds():
        other = b.GetBondBetweenAtoms(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
        if other is None or other.GetBondType() != bond.GetBondType():
            return False
    return True


def _with_positions(reference: Chem.Mol, positions) -> Chem.Mol:
    """A copy of `reference` (its numbering, its stereo) holding `positions` as its only conformer."""
    mol = Chem.Mol(reference)
    mol.RemoveAllConformers()
    conformer = Chem.Conformer(mol.GetNumAtoms())
    for index, (x, y, z) in enumerate(positions):
        conformer.SetAtomPosition(index, (float(x), float(y), float(z)))
    conformer.Set3D(True)
    mol.AddConformer(conformer, assignId=True)
    return mol


def _compare(reference: Chem.Mol, placed: Chem.Mol, atoms: list[int], bonds: list[int]) -> StereoAgreement:
    geometric = Chem.Mol(placed)
    Chem.AssignStereochemistryFrom3D(geometric)  # replaces the tags and bond stereo with the geometry's
    differing = sum(geometric.GetAtomWithIdx(i).GetChiralTag() != reference.GetAtomWithIdx(i).GetChiralTag()
                    for i in atoms)
    differing += sum(_trans_relation(geometric.GetBondWithIdx(i)) != _trans_relation(reference.GetBondWithIdx(i))
                     for i in bonds)
    ok = _restricted_smiles(geometric, atoms, bonds) == Chem.MolToSmiles(reference)
    return StereoAgreement(len(atoms), len(bonds), 0 if ok else max(1, differing), ok)


def _trans_relation(bond: Chem.Bond) -> bool | None:
    """Whether the lowest-numbered neighbours of the bond's two atoms are trans (None: no stereo here).

    RDKit states a double bond's stereo relative to its two stereo atoms (E/Z with the CIP-highest
    neighbours as stereo atoms, cis/trans with any); each end has at most one other neighbour, so the
    relation of a fixed pair follows by flipping once per end whose stereo atom is not that pair's."""
    if bond.GetStereo() not in _DOUBLE_BOND_STEREO or len(bond.GetStereoAtoms()) != 2:
        return None
    trans = bond.GetStereo() in _TRANS_LIKE
    for end, stereo_atom in zip((bond.GetBeginAtom(), bond.GetEndAtom()), bond.GetStereoAtoms()):
        other = bond.GetOtherAtomIdx(end.GetIdx())
        lowest = min(n.GetIdx() for n in end.GetNeighbors() if n.GetIdx() != other)
        trans ^= stereo_atom != lowest
    return trans


def _restricted_smiles(geometric: Chem.Mol, atoms: list[int], bonds: list[int]) -> str:
    """Canonical isomeric SMILES of the geometry's reading with only the reference's specified elements."""
    mol = Chem.Mol(geometric)
    keep_atoms, keep_bonds = set(atoms), set(bonds)
    for atom in mol.GetAtoms():
        if atom.GetIdx() not in keep_atoms:
            atom.SetChiralTag(Chem.ChiralType.CHI_UNSPECIFIED)
    for bond in mol.GetBonds():
        if bond.GetIdx() not in keep_bonds and bond.GetBondType() == Chem.BondType.DOUBLE:
            bond.SetStereo(Chem.BondStereo.STEREONONE)
    return Chem.MolToSmiles(mol)
