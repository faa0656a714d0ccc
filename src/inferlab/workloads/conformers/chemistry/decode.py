"""Strict decoder: enriched conformer text -> an RDKit molecule with one 3D conformer, or InputError.

The text is read unit by unit: `[descriptor]<x,y,z>` (the block must fullmatch the profile's grammar),
or one structure token (bond, branch, ring digit, `%NN`, `.`). Anything else - junk inside a block
(`0.9587abra`, `1.2.3`), a missing value, a descriptor without a block, stray text - is an error that names
the position, never silently skipped. The SMILES is rebuilt (organic-subset brackets unwrapped), parsed
by RDKit with explicit atoms kept, the atom count checked against the block count, and block k becomes
the position of atom k (RDKit numbers atoms in SMILES order).

Not here: whether the molecule is the one that was asked for (template.py checks that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rdkit import Chem
from rdkit.Geometry import Point3D

from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.descriptors import smiles_atom_text
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol

# One unit of the body: an atom with its block (groups 1, 2) or one structure token (group 3).
_UNIT = re.compile(r"(\[[^\[\]<>]+\])<([^<>]*)>|(%\(\d+\)|%\d\d|[-=#:/\\$~().]|\d)")
_CONTEXT = 24  # characters of the offending text quoted in an error


@dataclass(frozen=True, eq=False)
class DecodedConformer:
    mol: Chem.Mol  # heavy atoms in SMILES order, with one 3D conformer
    smiles: str  # the SMILES rebuilt from the text (what RDKit parsed)

    @property
    def canonical_smiles(self) -> str:
        return canonicalize_mol(self.mol).smiles


def decode_generation(text: str, profile: FormatProfile) -> DecodedConformer:
    """Decode a generation `[CONFORMER]...[/CONFORMER]` (EOS already removed); the tags are required."""
    return decode_enriched(strip_tags(text, profile), profile)


def strip_tags(text: str, profile: FormatProfile) -> str:
    """The body of a generation; InputError when either tag is missing or anything lies outside them."""
    if not text.startswith(profile.conformer_open):
        raise InputError(f"the generation does not start with {profile.conformer_open}: {text[:_CONTEXT]!r}")
    if not text.endswith(profile.conformer_close):
        raise InputError(f"the generation does not end with {profile.conformer_close}: ...{text[-_CONTEXT:]!r}")
    return text[len(profile.conformer_open) : len(text) - len(profile.conformer_close)]


def decode_enriched(body: str, profile: FormatProfile) -> DecodedConformer:
    """Decode the enriched body (between the tags).

    The SMILES is rebuilt by unwrapping organic-subset descriptors. The format cannot tell a wrapped bare
    atom from a bracket atom of the same text (`[O]` of a radical), so such rare molecules decode to the
    unwrapped reading; ConformerTemplate.check, which knows the molecule, has no such ambiguity.
    """
    parts, positions = read_units(body, profile)
    smiles = "".join(smiles_atom_text(p) if p.startswith("[") else p for p in parts)
    return DecodedConformer(molecule_with_positions(smiles, positions), smiles)


def read_units(body: str, profile: FormatProfile) -> tuple[list[str], list[tuple[float, float, float]]]:
    """Strictly split the body into descriptors and structure tokens (in order) and the block positions."""
    style = profile.coordinates
    parts: list[str] = []
    positions: list[tuple[float, float, float]] = []
    pos = 0
    while pos < len(body):
        unit = _UNIT.match(body, pos)
        if unit is None:
            raise InputError(_unexpected(body, pos))
        if unit.group(1) is not None:
            try:
                positions.append(style.parse_block(unit.group(2)))
            except InputError as e:
                raise InputError(f"atom {len(positions)} {unit.group(1)} at character {pos}: {e}") from None
            parts.append(unit.group(1))
        else:
            parts.append(unit.group(3))
        pos = unit.end()
    if not positions:
        raise InputError("the conformer has no atoms")
    return parts, positions


def molecule_with_positions(smiles: str, positions: list[tuple[float, float, float]]) -> Chem.Mol:
    """Parse `smiles` (every written atom kept) and give atom k the position k as a 3D conformer."""
    mol = _parse_rebuilt(smiles, len(positions))
    conformer = Chem.Conformer(mol.GetNumAtoms())
    for index, (x, y, z) in enumerate(positions):
        conformer.SetAtomPosition(index, Point3D(x, y, z))
    conformer.Set3D(True)
    mol.AddConformer(conformer, assignId=True)
    return mol


def _unexpected(body: str, pos: int) -> str:
    fragment = body[pos : pos + _CONTEXT]
    if body[pos] == "[":
        return f"atom at character {pos} has no complete <x,y,z> block: {fragment!r}"
    return f"unexpected text at character {pos}: {fragment!r}"


def _parse_rebuilt(smiles: str, num_blocks: int) -> Chem.Mol:
    params = Chem.SmilesParserParams()
    params.removeHs = False  # every written atom has a block, explicit [H] and [2H] included
    params.sanitize = False
    with rdkit_log() as log:  # RDKit prints its reasons; ours carry them instead
        raw = Chem.MolFromSmiles(smiles, params)
    if raw is None:
        raise InputError(f"the rebuilt SMILES {smiles!r} cannot be parsed: {log.reason() or 'RDKit gave no reason'}")
    if raw.GetNumAtoms() != num_blocks:
        raise InputError(f"the rebuilt SMILES {smiles!r} has {raw.GetNumAtoms()} atoms but {num_blocks} blocks")
    params.sanitize = True
    with rdkit_log() as log:
        mol = Chem.MolFromSmiles(smiles, params)
    if mol is None:
        raise InputError(f"the rebuilt SMILES {smiles!r} is not a valid molecule: "
                         f"{log.reason() or 'RDKit gave no reason'}")
    return mol
