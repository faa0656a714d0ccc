"""Canonical SMILES tokens: atom tokens in output order, structure tokens verbatim, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conformer_molecules import EDGE_CASE_SMILES, nci_smiles
from rdkit import Chem

from inferlab.errors import InputError, UnsupportedError
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_smiles, parse_smiles


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
        ("C1CC", "SMILES 'C1CC' cannot be parsed: unclosed ring$"),  # RDKit's own reason
        ("C(C", "cannot be parsed: extra open parentheses near character 2$"),
        ("CC)", "cannot be parsed: extra close parentheses near character 3$"),
        ("C(C)(C)(C)(C)C", "is not a valid molecule: Explicit valence for atom # 0 C, 5, is greater than permitted"),
        ("", "empty SMILES"),
        ("   ", "empty SMILES"),
        ("c1cccc1", "is not a valid molecule: Can't kekulize mol. Unkekulized atoms: 0 1 2 3 4$"),
    ],
)
def test_invalid_smiles_name_the_problem_in_rdkits_words(smiles, message):
    with pytest.raises(InputError, match=message):
        canonicalize_smiles(smiles)


def test_rdkit_prints_nothing_while_we_parse(capfd):
    for smiles in ("C1CC", "C(C", "c1cccc1", "C(C)(C)(C)(C)C"):
        with pytest.raises(InputError):
            canonicalize_smiles(smiles)
    captured = capfd.readouterr()  # file descriptors: RDKit writes from C++
    assert captured.err == "" and captured.out == ""


def test_older_rdkit_builds_without_capture_error_log_give_the_same_reasons():
    """RDKit < 2026.03 has no rdBase.CaptureErrorLog: the reason then comes through Python's `rdkit` logger
    (a child process: that route is process-wide). Nothing is printed inside a capture; outside, RDKit's
    messages still reach the terminal."""
    code = """
import sys
from rdkit import Chem, rdBase
if hasattr(rdBase, "CaptureErrorLog"):
    del rdBase.CaptureErrorLog
from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_smiles
for smiles in ("C1CC", "C(C", "c1cccc1"):
    try:
        canonicalize_smiles(smiles)
    except InputError as e:
        print(e)
sys.stdout.flush()
Chem.MolFromSmiles("C1CC")  # outside a capture: printed as before
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "SMILES 'C1CC' cannot be parsed: unclosed ring",
        "SMILES 'C(C' cannot be parsed: extra open parentheses near character 2",
        "SMILES 'c1cccc1' is not a valid molecule: Can't kekulize mol. Unkekulized atoms: 0 1 2 3 4",
    ]
    assert done.stderr.count("unclosed ring") == 1  # only the parse outside a capture


def test_dative_bonds_are_refused_clearly():
    with pytest.raises(UnsupportedError, match="dative"):
        canonicalize_smiles("[NH3]->[Pt]")
