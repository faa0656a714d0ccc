"""Stereo given where a molecule leaves it open: the quality preset's `assign_stereo` (bench/scenarios/
molecules.py) prompts held-out molecules so, since NCI's SMILES specify none and a stereo agreement figure
would have nothing to compare; the reference model's data build cuts those prompts too, so that its reduced
vocabulary covers them (training/conformer_texts.py). Deterministic: RDKit's first enumerated isomer."""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem.EnumerateStereoisomers import EnumerateStereoisomers, StereoEnumerationOptions


def with_assigned_stereo(mol: Chem.Mol) -> str:
    """SMILES of `mol` with every unspecified stereocentre and stereo double bond given a configuration:
    the first isomer RDKit's EnumerateStereoisomers gives (deterministic). Unchanged when there is none."""
    options = StereoEnumerationOptions(onlyUnassigned=True, maxIsomers=1, unique=True)
    return Chem.MolToSmiles(next(iter(EnumerateStereoisomers(mol, options=options)), mol))
