"""Stereo fragments: small molecules cut out of the training molecules around each tetrahedral centre, so that
the hand of a centre is decided in a short text where it is a large share of the loss.

In a drug-sized text (~570 tokens) a centre's hand is decided by a handful of tokens of one block (the
last-written neighbour's), worth at most ln 2 nats; the model learns E/Z there but writes the hand at
chance (docs/decisions.md). A fragment of 5-16 atoms puts the same decision, with the same neighbour orders
of the canonical SMILES, in ~250 tokens. Per centre (potential centres included: NCI specifies none) and
per radius in RADII: the atoms within that many bonds of the centre, each ring that holds the centre or an
included aromatic atom completed (a cut aromatic ring is no molecule), the SMILES of that atom set
(RDKit's MolFragmentToSmiles: cut bonds leave implicit hydrogens) with the stereo of every atom and bond
that lost a neighbour cleared. Kept when RDKit reads it, it still has a potential tetrahedral centre, it is
smaller than its parent and at most MAX_ATOMS atoms, and its stereo-free form is no source molecule's
(held-out molecules stay unseen); each distinct fragment once, in the order of the train molecules.

A fragment is then a training molecule like any other (conformer_texts.py): its own ETKDG conformers and
its stereo variants (the mirror image when its centre is specified, the assigned stereoisomers when not),
in the train split only, named in the split file with source FRAGMENT_SOURCE.
"""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol, parse_smiles
from inferlab.workloads.conformers.training.molecule_selection import MIN_ATOMS, Candidate

FRAGMENT_SOURCE = "stereo_fragment"
RADII = (1, 2)
MAX_ATOMS = 16


def stereo_fragments(canonical_smiles: str) -> list[str]:
    """The canonical SMILES of the fragments around each potential tetrahedral centre of the molecule, in
    centre order then radius order, duplicates dropped."""
    mol = parse_smiles(canonical_smiles)
    centres = [index for index, _ in Chem.FindMolChiralCenters(mol, includeUnassigned=True,
                                                              useLegacyImplementation=False)]
    fragments: list[str] = []
    for centre in centres:
        for radius in RADII:
            smiles = _fragment(mol, centre, radius)
            if smiles is not None and smiles not in fragments:
                fragments.append(smiles)
    return fragments


def fragment_candidates(parents: list[Candidate], source_smiles: list[str]) -> list[Candidate]:
    """The fragments of `parents` (the train molecules, in order) as train candidates; a fragment whose
    stereo-free form is that of any of `source_smiles` (every source molecule, all splits) is left out."""
    taken = {_flat(smiles) for smiles in source_smiles}
    kept: list[Candidate] = []
    seen: set[str] = set()
    for parent in parents:
        for k, smiles in enumerate(stereo_fragments(parent.canonical_smiles)):
            if smiles in seen or _flat(smiles) in taken:
                continue
            seen.add(smiles)
            canonical = canonicalize_mol(parse_smiles(smiles))
            kept.append(Candidate(FRAGMENT_SOURCE, f"{FRAGMENT_SOURCE}:{parent.id}:{k}", smiles, canonical.num_atoms,
                                  MurckoScaffold.MurckoScaffoldSmiles(mol=canonical.mol)))
    return kept


def _fragment(mol: Chem.Mol, centre: int, radius: int) -> str | None:
    atoms = {centre}
    for bond_index in Chem.FindAtomEnvironmentOfRadiusN(mol, radius, centre):
        bond = mol.GetBondWithIdx(bond_index)
        atoms |= {bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()}
    aromatic = {a for a in atoms if mol.GetAtomWithIdx(a).GetIsAromatic()}
    for ring in mol.GetRingInfo().AtomRings():
        if centre in ring or aromatic.intersection(ring):
            atoms.update(ring)
    if not MIN_ATOMS <= len(atoms) <= MAX_ATOMS or len(atoms) >= mol.GetNumAtoms():
        return None
    cut = Chem.RWMol(mol)
    for atom in cut.GetAtoms():
        if atom.GetIdx() in atoms and any(n.GetIdx() not in atoms for n in atom.GetNeighbors()):
            atom.SetChiralTag(Chem.ChiralType.CHI_UNSPECIFIED)
    for bond in cut.GetBonds():  # E/Z is not what fragments teach; a bond's stereo atoms may be cut away
        bond.SetStereo(Chem.BondStereo.STEREONONE)
        bond.SetBondDir(Chem.BondDir.NONE)
    with rdkit_log():
        written = Chem.MolFragmentToSmiles(cut, atomsToUse=sorted(atoms), isomericSmiles=True)
        try:
            fragment = canonicalize_mol(parse_smiles(written))
        except InferlabError:  # a ring system RDKit cannot kekulize once cut
            return None
        if not Chem.FindMolChiralCenters(fragment.mol, includeUnassigned=True, useLegacyImplementation=False):
            return None
    return fragment.smiles


def _flat(smiles: str) -> str:
    return Chem.MolToSmiles(parse_smiles(smiles), isomericSmiles=False)
