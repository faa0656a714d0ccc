"""Atom descriptor styles: the `[...]` text written for each atom token of the canonical SMILES.

A bracket atom of the SMILES (`[C@@H]`, `[nH]`, `[NH2+]`, `[13C]`, `[O-]`) is always kept byte for byte.
A bare atom (`C`, `c`, `N`, `Cl`) is wrapped, per style:
- v3 (current): `[C]`, `[c]`, `[N]`, `[O]`, `[Cl]`: no H count.
- v2 (the Llama checkpoints' data): non-aromatic heteroatoms carry their total H count (`[OH]`, `[NH2]`,
  `[SH]`, `[N]` when it has none); carbons stay `[C]`/`[c]` and bare aromatic atoms (`[n]`, `[o]`) carry none.

Reading back (`smiles_atom_text`) unwraps brackets around organic-subset atoms only, so `[C]` becomes `C`
while `[OH]`, `[nH]` and `[13C]` stay bracketed and keep their meaning for RDKit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only annotations: the profile registry (CLI choices) loads without RDKit
    from rdkit import Chem

# Atoms SMILES may write without brackets (plus the aromatic forms); `*` is the dummy atom.
ORGANIC_SUBSET = frozenset({"B", "C", "N", "O", "P", "S", "F", "Cl", "Br", "I", "b", "c", "n", "o", "p", "s", "*"})


def _v3_bare(atom: Chem.Atom, text: str) -> str:
    return f"[{text}]"


def _v2_bare(atom: Chem.Atom, text: str) -> str:
    if atom.GetSymbol() == "C" or atom.GetIsAromatic():
        return f"[{text}]"
    hydrogens = atom.GetTotalNumHs()
    h_text = "" if hydrogens == 0 else "H" if hydrogens == 1 else f"H{hydrogens}"
    return f"[{text}{h_text}]"


@dataclass(frozen=True)
class DescriptorStyle:
    name: str
    wrap_bare_atom: Callable[[Chem.Atom, str], str]  # (atom, bare SMILES text) -> descriptor

    def describe(self, atom: Chem.Atom, smiles_text: str) -> str:
        """Descriptor for one atom token of the canonical SMILES."""
        if smiles_text.startswith("["):
            return smiles_text
        return self.wrap_bare_atom(atom, smiles_text)


DESCRIPTOR_STYLES: dict[str, DescriptorStyle] = {
    "v3": DescriptorStyle("v3", _v3_bare),
    "v2": DescriptorStyle("v2", _v2_bare),
}


def smiles_atom_text(descriptor: str) -> str:
    """A descriptor `[...]` back to SMILES atom text: organic-subset brackets are removed."""
    inner = descriptor[1:-1]
    return inner if inner in ORGANIC_SUBSET else descriptor
