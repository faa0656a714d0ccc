"""Encoder: a molecule with a 3D conformer -> the enriched string of a format profile.

`[C]<x,y,z>[C]<x,y,z>(=[O]<x,y,z>)...`: one `[descriptor]<x,y,z>` per atom token of the canonical SMILES,
structure tokens copied verbatim. The layout (copy runs between blocks, and which atom each block holds)
is shared with template.py, so the constraint's copy text and the encoder's output cannot drift apart.

Owns: the layout and the encoder. Not here: value formatting (coordinates.py), descriptors
(descriptors.py), canonicalisation (smiles.py), reading text back (decode.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rdkit import Chem

from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.smiles import CanonicalMolecule, canonicalize_mol


@dataclass(frozen=True)
class EnrichedLayout:
    """The enriched string with its blocks cut out: copies[0] block 0 copies[1] block 1 ... copies[n].

    copies[0] ends with `<`, copies[k] for 0 < k < n runs from `>` to `<`, copies[n] is `>` plus any
    trailing structure tokens (ring digits, `)`). atoms[k] is the atom index (in the canonical molecule)
    whose coordinates fill block k.
    """

    copies: tuple[str, ...]
    atoms: tuple[int, ...]

    def fill(self, blocks: Sequence[str]) -> str:
        if len(blocks) != len(self.atoms):
            raise InputError(f"{len(blocks)} coordinate blocks given for {len(self.atoms)} atoms")
        parts = [self.copies[0]]
        for block, copy in zip(blocks, self.copies[1:]):
            parts += [block, copy]
        return "".join(parts)


def enriched_layout(canonical: CanonicalMolecule, profile: FormatProfile) -> EnrichedLayout:
    copies: list[str] = []
    atoms: list[int] = []
    run = ""
    for token in canonical.tokens:
        if token.atom_index is None:
            run += token.text
            continue
        atom = canonical.mol.GetAtomWithIdx(token.atom_index)
        copies.append(run + profile.descriptors.describe(atom, token.text) + "<")
        atoms.append(token.atom_index)
        run = ">"
    copies.append(run)
    return EnrichedLayout(tuple(copies), tuple(atoms))


@dataclass(frozen=True)
class EncodedConformer:
    canonical_smiles: str
    profile: str
    enriched: str  # the body between the conformer tags
    blocks: tuple[str, ...]  # the content of each `<...>` block, in SMILES atom order

    def generation_text(self, profile: FormatProfile) -> str:
        """What a model of this profile generates for the conformer (before EOS)."""
        return profile.wrap(self.enriched)


def encode_conformer(mol: Chem.Mol, profile: FormatProfile, conf_id: int = -1) -> EncodedConformer:
    """Encode one 3D conformer of `mol` (hydrogens are dropped; their coordinates are not written)."""
    return encode_conformers(mol, profile, [conf_id])[0]


def encode_conformers(
    mol: Chem.Mol, profile: FormatProfile, conf_ids: Sequence[int] | None = None
) -> list[EncodedConformer]:
    """Encode the given conformers of `mol` (all of them by default), canonicalising once."""
    if mol.GetNumConformers() == 0:
        raise InputError("the molecule has no conformer; embed one (e.g. ETKDG) before encoding")
    canonical = canonicalize_mol(mol)
    layout = enriched_layout(canonical, profile)
    style = profile.coordinates
    ids = [c.GetId() for c in canonical.mol.GetConformers()] if conf_ids is None else list(conf_ids)
    encoded = []
    for conf_id in ids:
        conformer = canonical.mol.GetConformer(conf_id)
        if not conformer.Is3D():
            raise InputError("the conformer is 2D; the conformer format needs 3D coordinates")
        blocks = []
        for atom_index in layout.atoms:
            p = conformer.GetAtomPosition(atom_index)
            blocks.append(style.format_block(p.x, p.y, p.z))
        encoded.append(EncodedConformer(canonical.smiles, profile.name, layout.fill(blocks), tuple(blocks)))
    return encoded
