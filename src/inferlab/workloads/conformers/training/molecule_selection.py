"""Which source molecules become reference-model molecules, and in which canonical form.

Per molecule: parsed (chemistry/smiles.py), its largest fragment kept (a salt's counter-ion sits wherever
the embedding drops it: its position relative to the molecule is noise to a model and undefined for an
RMSD), canonicalised as the pipeline canonicalises prompts, kept when it has MIN_ATOMS to MAX_ATOMS
atoms (fewer: no shape to learn or to score; more: longer than the drug-sized molecules the model is for,
and each costs ~24 tokens per atom), and its Bemis-Murcko scaffold taken for the split. Duplicates by
canonical SMILES keep their first occurrence (sources in molecule_sources.SOURCE_ORDER). Whether the
format can write it and RDKit can embed it is decided per molecule later (conformer_texts.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rdkit import Chem
from rdkit.Chem.MolStandardize import rdMolStandardize
from rdkit.Chem.Scaffolds import MurckoScaffold

from inferlab.errors import InputError, UnsupportedError
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol, parse_smiles
from inferlab.workloads.conformers.training.molecule_sources import SourceMolecule

MIN_ATOMS = 3
MAX_ATOMS = 40


@dataclass(frozen=True)
class Candidate:
    source: str
    id: str
    canonical_smiles: str
    num_atoms: int  # atoms of the canonical SMILES = coordinate blocks of its conformer text
    scaffold: str  # Bemis-Murcko scaffold SMILES; "" for an acyclic molecule


def select_molecules(molecules: list[SourceMolecule]) -> tuple[list[Candidate], Counter]:
    """The candidates in source order, and how many molecules were dropped for each reason."""
    chooser = rdMolStandardize.LargestFragmentChooser(preferOrganic=True)
    kept: dict[str, Candidate] = {}
    dropped: Counter = Counter()
    for molecule in molecules:
        candidate, reason = _candidate(molecule, chooser)
        if candidate is None:
            dropped[reason] += 1
        elif candidate.canonical_smiles in kept:
            dropped["selection: a duplicate canonical SMILES"] += 1
        else:
            kept[candidate.canonical_smiles] = candidate
    return list(kept.values()), dropped


def _candidate(molecule: SourceMolecule, chooser) -> tuple[Candidate | None, str]:
    try:
        mol = parse_smiles(molecule.smiles)
        with rdkit_log():
            largest = chooser.choose(mol) if len(Chem.GetMolFrags(mol)) > 1 else mol
        canonical = canonicalize_mol(largest)
    except InputError:
        return None, "selection: a SMILES RDKit cannot read"
    except UnsupportedError:
        return None, "selection: the format cannot write it (a dative bond)"
    if not MIN_ATOMS <= canonical.num_atoms <= MAX_ATOMS:
        return None, f"selection: outside {MIN_ATOMS}-{MAX_ATOMS} atoms"
    scaffold = MurckoScaffold.MurckoScaffoldSmiles(mol=canonical.mol)
    return Candidate(molecule.source, molecule.id, canonical.smiles, canonical.num_atoms, scaffold), ""
