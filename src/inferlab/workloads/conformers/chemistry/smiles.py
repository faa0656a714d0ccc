"""Canonical SMILES and its tokens: the skeleton every enriched conformer is written on.

Canonical form: RDKit `MolToSmiles(RemoveHs(mol), canonical=True, isomericSmiles=True)`; the atom order of
the enriched string is that call's `_smilesAtomOutputOrder`. The SMILES is cut into atom tokens (bracket
atoms `[C@@H]`, bare atoms `C`, `c`, `Cl`, `*`) and structure tokens (bonds `- = # : / \\ $`, branches,
ring digits, `%NN`, `%(NNN)`, `.`), each bare atom checked against the expected atom in output order, which
also settles any letter ambiguity (`Sc` is S then aromatic c, scandium is always `[Sc]`).

This module owns parsing user SMILES (InputError with RDKit's reason), the checks of a SMILES text made
before RDKit sees it (`smiles_text_problem`: characters, atom count) and canonicalisation. It knows
nothing of descriptors or coordinates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rdkit import Chem

from inferlab.errors import InputError, UnsupportedError
from inferlab.workloads.conformers.chemistry.input_bounds import DEFAULT_MAX_ATOMS
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log

_STRUCTURE_TOKEN = re.compile(r"%\(\d+\)|%\d\d|[-=#:/\\$~().]|\d")
_TWO_LETTER_BARE = ("Cl", "Br")


@dataclass(frozen=True)
class SmilesToken:
    text: str
    atom_index: int | None  # index of the atom in CanonicalMolecule.mol; None for structure tokens

    @property
    def is_atom(self) -> bool:
        return self.atom_index is not None


@dataclass(frozen=True, eq=False)
class CanonicalMolecule:
    smiles: str
    mol: Chem.Mol  # the heavy-atom molecule (RemoveHs); keeps the input's conformers
    tokens: tuple[SmilesToken, ...]

    @property
    def num_atoms(self) -> int:
        return self.mol.GetNumAtoms()

    @property
    def atom_order(self) -> tuple[int, ...]:
        """Atom indices of `mol` in the order the SMILES writes them."""
        return tuple(t.atom_index for t in self.tokens if t.atom_index is not None)


_ATOM_TOKEN = re.compile(r"\[[^\]]*\]|Br|Cl|[BCNOPSFIbcnops*]")


def smiles_text_problem(text: str, max_atoms: int = DEFAULT_MAX_ATOMS) -> str | None:
    """Why `text` cannot be a SMILES of at most `max_atoms` atoms, decided without RDKit (so a hostile line
    never reaches it), or None. Atoms are counted from the text: bracket atoms and bare element symbols."""
    odd = next((ch for ch in text if ch.isspace() or not ch.isascii() or not ch.isprintable()), None)
    if odd is not None:
        where = "whitespace" if odd.isspace() else "a character"
        return (f"SMILES {_clipped(text)} holds {where} ({odd!r}) no SMILES has; give one molecule per line "
                "(in a CSV, check the quoting of the SMILES field)")
    atoms = sum(1 for _ in _ATOM_TOKEN.finditer(text))
    if atoms > max_atoms:
        return (f"SMILES {_clipped(text)} has {atoms:,} atoms, over the limit of {max_atoms:,}; raise it with "
                "--max-atoms if the molecule is meant to be this large")
    return None


def _clipped(text: str, keep: int = 60) -> str:
    return repr(text) if len(text) <= keep else repr(text[:keep]) + f"... ({len(text):,} characters)"


def parse_smiles(smiles: str) -> Chem.Mol:
    """RDKit molecule of a user SMILES, sanitised; InputError with RDKit's own reason (rdkit_messages.py):
    "SMILES 'C1CC' cannot be parsed: unclosed ring", "... is not a valid molecule: Explicit valence ..."."""
    text = smiles.strip() if isinstance(smiles, str) else ""
    if not text:
        raise InputError("empty SMILES; give one molecule per line")
    with rdkit_log() as log:
        mol = Chem.MolFromSmiles(text)  # parse, sanitise and assign stereo, as every canonical form was made
    if mol is None:
        raise InputError(f"SMILES {text!r} {_failure(text, log.reason())}")
    if mol.GetNumAtoms() == 0:
        raise InputError(f"SMILES {text!r} has no atoms")
    return mol


def _failure(text: str, logged: str | None) -> str:
    """Whether the syntax or the chemistry failed, in RDKit's words."""
    with rdkit_log():
        raw = Chem.MolFromSmiles(text, sanitize=False)
    if raw is None:
        return f"cannot be parsed: {logged or 'RDKit gave no reason'}"
    if logged:
        return f"is not a valid molecule: {logged}"
    try:
        Chem.SanitizeMol(raw)
    except Exception as e:  # RDKit raises several sanitisation exception types; the message is the reason
        return f"is not a valid molecule: {e}"
    return "is not a valid molecule (RDKit gave no reason)"


def canonicalize_smiles(smiles: str) -> CanonicalMolecule:
    return canonicalize_mol(parse_smiles(smiles))


def canonical_smiles(smiles: str) -> str:
    return canonicalize_smiles(smiles).smiles


def canonicalize_mol(mol: Chem.Mol) -> CanonicalMolecule:
    """Canonicalise a sanitised molecule (explicit H atoms are removed, conformers are kept)."""
    heavy = Chem.RemoveHs(mol)
    if heavy.GetNumAtoms() == 0:
        raise InputError("the molecule has no atoms after removing hydrogens")
    smiles = Chem.MolToSmiles(heavy, canonical=True, isomericSmiles=True)
    order = _output_order(heavy)
    if "<" in smiles or ">" in smiles:
        raise UnsupportedError(
            f"canonical SMILES {smiles!r} has a dative bond (-> or <-); the conformer format cannot hold it "
            "because '<' and '>' delimit coordinate blocks"
        )
    expected = [_bare_text(heavy.GetAtomWithIdx(i)) for i in order]
    tokens = tuple(
        SmilesToken(text, order[k] if k is not None else None) for text, k in _split(smiles, expected)
    )
    return CanonicalMolecule(smiles, heavy, tokens)


def _output_order(mol: Chem.Mol) -> list[int]:
    """`_smilesAtomOutputOrder` of the last MolToSmiles call (a list, or "[0,1,]" text in some RDKit builds)."""
    value = mol.GetPropsAsDict(includePrivate=True, includeComputed=True)["_smilesAtomOutputOrder"]
    return [int(i) for i in (re.findall(r"\d+", value) if isinstance(value, str) else value)]


def _bare_text(atom: Chem.Atom) -> str:
    """How the atom would be written without brackets: `c` for an aromatic carbon, `Cl`, `*`."""
    symbol = atom.GetSymbol()
    return symbol.lower() if atom.GetIsAromatic() else symbol


def _split(smiles: str, expected: list[str]) -> list[tuple[str, int | None]]:
    """(token text, atom ordinal or None) for each token; bare atoms must match `expected` in order."""
    out: list[tuple[str, int | None]] = []
    i, atom = 0, 0
    while i < len(smiles):
        ch = smiles[i]
        if ch == "[":
            end = smiles.find("]", i)
            if end < 0:
                raise UnsupportedError(f"canonical SMILES {smiles!r}: unclosed '[' at {i}")
            out.append((smiles[i : end + 1], atom))
            atom, i = atom + 1, end + 1
            continue
        structure = _STRUCTURE_TOKEN.match(smiles, i)
        if structure is not None:
            out.append((structure.group(), None))
            i = structure.end()
            continue
        want = expected[atom] if atom < len(expected) else None
        two = smiles[i : i + 2]
        text = two if two in _TWO_LETTER_BARE and two == want else ch
        if text != want:
            raise UnsupportedError(
                f"canonical SMILES {smiles!r}: at {i} found {text!r} but atom {atom} in output order is {want!r}"
            )
        out.append((text, atom))
        atom, i = atom + 1, i + len(text)
    if atom != len(expected):
        raise UnsupportedError(f"canonical SMILES {smiles!r} has {atom} atom tokens but {len(expected)} atoms")
    return out
