"""A molecule's stereo variants: the molecules, with conformers, whose texts teach the model what `@` / `@@`
mean. A model trained on the molecules' own texts alone learned E/Z but wrote tetrahedral centres at chance,
even on its training molecules: each tagged molecule came with one configuration only, so nothing in the
data set the tag against the geometry. Two kinds, both made from the molecule's ETKDG conformers (no new
embedding), each then written as any molecule is (canonical SMILES, template, canonical orientation):

- MIRROR, the enantiomer, for a molecule with specified tetrahedral centres: every tetrahedral tag inverted
  (CW <-> CCW on the same atoms and bonds) and every conformer reflected (x negated, then put in canonical
  orientation again). Reflection keeps every double bond's E/Z, so the bonds' stereo stays. The pair is
  contrastive: the same graph, the opposite tags, the mirrored geometry. Not made when no centre is
  specified, nor when the mirror image is the molecule itself (meso: its canonical SMILES is the original's).
- ASSIGNED, for a molecule that leaves stereo open (NCI's SMILES specify none; some of ChEMBL's leave
  centres open): each conformer's own stereo read from its coordinates (RDKit's AssignStereochemistryFrom3D;
  the specified elements stay as ETKDG embedded them), conformers grouped by the stereoisomer they make.
  ETKDG sets an open centre at random per conformer, so the groups of one molecule are usually both
  configurations of it: contrastive already, with no mirror needed. Inference prompts both ways: NCI
  molecules as given (no tags: the molecule's own texts), and the quality preset's with stereo assigned
  (`assign_stereo`), for which these texts are the training.

Each variant's texts are checked like the molecule's own (conformer_texts.py), and each must also have its
prompt's stereo by the pipeline's check (chemistry/stereo.py).
"""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem import rdMolTransforms

from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image as reflected

MIRROR, ASSIGNED = "mirror", "assigned"
KINDS = (MIRROR, ASSIGNED)
_INVERTED = {Chem.ChiralType.CHI_TETRAHEDRAL_CW: Chem.ChiralType.CHI_TETRAHEDRAL_CCW,
             Chem.ChiralType.CHI_TETRAHEDRAL_CCW: Chem.ChiralType.CHI_TETRAHEDRAL_CW}


def mirror_image(mol: Chem.Mol) -> Chem.Mol | None:
    """`mol`'s mirror image with every conformer mirrored; None when no tetrahedral centre is specified. A meso
    molecule's is itself (the same canonical SMILES): the caller compares."""
    mirror = reflected(mol)
    inverted = 0
    for atom in mirror.GetAtoms():
        if atom.GetChiralTag() in _INVERTED:
            atom.SetChiralTag(_INVERTED[atom.GetChiralTag()])
            inverted += 1
    if not inverted:
        return None
    for conformer in mirror.GetConformers():
        rdMolTransforms.CanonicalizeConformer(conformer)
    return mirror


def assigned_stereoisomers(mol: Chem.Mol) -> dict[str, list[Chem.Mol]]:
    """Canonical SMILES -> the one-conformer molecules whose coordinates make that stereoisomer, for each
    conformer whose stereo specifies more than `mol` does (in conformer order); empty when `mol`'s stereo
    is complete."""
    own = canonicalize_mol(mol).smiles
    groups: dict[str, list[Chem.Mol]] = {}
    for conformer in mol.GetConformers():
        single = Chem.Mol(mol, confId=conformer.GetId())
        Chem.AssignStereochemistryFrom3D(single)
        smiles = canonicalize_mol(single).smiles
        if smiles != own:
            groups.setdefault(smiles, []).append(single)
    return groups
