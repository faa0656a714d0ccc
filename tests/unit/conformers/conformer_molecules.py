"""Molecules for the conformer tests: SMILES from RDKit's NCI set, edge cases, ETKDG embedding."""

from __future__ import annotations

import os

from rdkit import Chem, RDConfig
from rdkit.Chem import AllChem

NCI_PATH = os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")

# Edge cases the format must handle (study section 2.7), each with what it exercises.
EDGE_CASE_SMILES = {
    "ammonium salt": "[NH4+].[Cl-]",
    "nitro": "O=[N+]([O-])c1ccccc1",
    "aromatic NH": "c1cc[nH]c1",
    "isotope": "[13CH3]C(=O)O",
    "deuterium": "[2H]C([2H])([2H])O",
    "chiral": "C[C@H](N)C(=O)O",
    "chiral other": "C[C@@H](O)CC",
    "E/Z": "F/C=C/F",
    "Z": "C/C=C\\Cl",
    "ring closure %10": "C1CC2CCC3CCC4CCC5CCC6CCC7CCC8CCC9CCC%10CCC1C2C3C4C5C6C7C8C9%10",
    "salt with fragments": "CC(=O)[O-].[Na+]",
    "two-letter elements": "ClCC(Br)CCl",
    "S then aromatic c": "CSc1ccccc1",
    "triple bond": "C#CC#N",
}


def nci_smiles(limit: int) -> list[str]:
    out = []
    with open(NCI_PATH) as f:
        for line in f:
            parts = line.split()
            if parts:
                out.append(parts[0])
            if len(out) >= limit:
                break
    return out


def embed(smiles: str, num_confs: int = 1, seed: int = 7) -> Chem.Mol | None:
    """ETKDG conformers (hydrogens kept), or None when RDKit cannot embed the molecule."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    mol = Chem.AddHs(mol)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    try:
        ids = AllChem.EmbedMultipleConfs(mol, numConfs=num_confs, params=params)
    except RuntimeError:  # RDKit raises on a few NCI molecules (metal complexes)
        return None
    return mol if len(ids) == num_confs else None


