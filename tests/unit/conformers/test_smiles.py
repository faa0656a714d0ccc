"""Canonical SMILES tokens: atom tokens in output order, structure tokens verbatim, clear errors."""

from __future__ import annotations

import pytest
from conformer_molecules import EDGE_CASE_SMILES, nci_smiles
from rdkit import Chem

from inferlab.errors import InputError, UnsupportedError
from inferlab.workloads.conformers.smiles import canonicalize_smiles, parse_smiles


def texts(smiles: str) -> list[str]:
    return [t.text for t in canonicalize_smiles(smiles).tokens]


@pytest.mark.parametrize(
    "smiles, tokens",
    [
        ("OCC", ["C", "C", "O"]),
        ("CSc1ccccc1", ["C", "S", "c", "1", "c", "c", "c", "c", "c", "1"]),
        ("[Sc+3]", ["[Sc+3]"]),
        ("ClCBr", ["Cl", "C", "Br"]),
        ("[NH4+].[Cl-]", ["[Cl-]", ".", "[NH4+]"]),
        ("O=[N+]([O-])C", ["C", "[N+]", "(", "=", "O", ")", "[O-]"]),
        ("F/C=C/F", ["F", "/", "C", "=", "C", "/", "F"]),
        ("C[C@H](N)O", ["C", "[C@H]", "(", "N", ")", "O"]),
        ("[2H]OC", ["[2H]", "O", "C"]),
        ("C#N", ["C", "#", "N"]),
    ],
)
def test_tokens(smiles, tokens):
    assert texts(smiles) == tokens


def test_ring_closures_above_nine_are_one_token():
    tokens = texts(EDGE_CASE_SMILES["ring closure %10"])
    assert "%10" in tokens and "%" not in tokens


def check_consistent(smiles: str) -> None:
    """Joining the tokens gives the canonical SMILES; atom tokens map to atoms of the right element."""
    canonical = canonicalize_smiles(smiles)
    assert "".join(t.text for t in canonical.tokens) == canonical.smiles
    atoms = [t for t in canonical.tokens if t.is_atom]
    assert sorted(t.atom_index for t in atoms) == list(range(canonical.num_atoms))
    for token in atoms:
        atom = canonical.mol.GetAtomWithIdx(token.atom_index)
        symbol = token.text.strip("[]").lstrip("0123456789")
        assert symbol.lower().startswith(atom.GetSymbol().lower()), (smiles, token, atom.GetSymbol())
    # The atom order is RDKit's own _smilesAtomOutputOrder.
    heavy = Chem.RemoveHs(parse_smiles(smiles))
    Chem.MolToSmiles(heavy)
    assert list(canonical.atom_order) == list(heavy.GetPropsAsDict(True, True)["_smilesAtomOutputOrder"])


@pytest.mark.parametrize("name", sorted(EDGE_CASE_SMILES))
def test_edge_cases_tokenise_consistently(name):
    check_consistent(EDGE_CASE_SMILES[name])


def test_nci_molecules_tokenise_consistently():
    for smiles in nci_smiles(400):
        check_consistent(smiles)


@pytest.mark.parametrize(
    "smiles, message",
    [
        ("C1CC", "not valid SMILES syntax"),
        ("C(C)(C)(C)(C)C", "valence"),
        ("", "empty SMILES"),
        ("   ", "empty SMILES"),
        ("c1cccc1", "not a valid molecule"),
    ],
)
def test_invalid_smiles_name_the_problem(smiles, message):
    with pytest.raises(InputError, match=message):
        canonicalize_smiles(smiles)


def test_dative_bonds_are_refused_clearly():
    with pytest.raises(UnsupportedError, match="dative"):
        canonicalize_smiles("[NH3]->[Pt]")
