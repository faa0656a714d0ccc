"""Session fixtures of the conformer tests (the molecules themselves are in conformer_molecules.py)."""

from __future__ import annotations

import pytest
from conformer_molecules import embed, nci_smiles
from rdkit import Chem


@pytest.fixture(scope="session")
def nci_conformers() -> list[Chem.Mol]:
    """ETKDG conformers of the first 250 NCI molecules that embed (about 4 s, built once)."""
    mols = [embed(s) for s in nci_smiles(260)]
    return [m for m in mols if m is not None][:250]
