"""The labelled text set the shipped classifier learns, built from a file RDKit ships: NCI's first_5K.smi
(4,999 molecules; 8 that RDKit cannot read are left out). The text is each SMILES as the file writes it, in
Kekulé form (aromatic rings are alternating single and double bonds, never lowercase atoms), so the label is
not spelled out in the text; the label is the molecule's count of aromatic rings as RDKit perceives them:
none, one, or two and more (about a third each). The split is by the file's own ids: every fifth molecule
(id % 5 == 0) is held out. Same file, same RDKit perception: the same rows, in file order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

NAME = "nci-aromatic-rings"
LABELS = ("no aromatic ring", "one aromatic ring", "two or more aromatic rings")
HELD_OUT_EVERY = 5  # ids divisible by this are the test split


@dataclass(frozen=True)
class LabelledText:
    id: str
    text: str
    label: int  # index into LABELS


@dataclass(frozen=True)
class LabelledSet:
    name: str
    labels: tuple[str, ...]
    train: tuple[LabelledText, ...]
    test: tuple[LabelledText, ...]


def nci_smiles_path() -> Path:
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


def aromatic_ring_class(smiles: str) -> int | None:
    """0, 1 or 2 (two and more) aromatic rings; None for a SMILES RDKit cannot read."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdMolDescriptors

    RDLogger.DisableLog("rdApp.*")  # the file's few unreadable lines are expected, not news
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    return min(rdMolDescriptors.CalcNumAromaticRings(mol), len(LABELS) - 1)


@functools.lru_cache(maxsize=1)
def aromatic_ring_set() -> LabelledSet:
    train: list[LabelledText] = []
    test: list[LabelledText] = []
    for line in nci_smiles_path().read_text().splitlines():
        smiles, mol_id = line.split()
        label = aromatic_ring_class(smiles)
        if label is not None:
            (test if int(mol_id) % HELD_OUT_EVERY == 0 else train).append(LabelledText(mol_id, smiles, label))
    return LabelledSet(NAME, LABELS, tuple(train), tuple(test))
