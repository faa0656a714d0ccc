"""Molecule inputs: .smi and .csv/.tsv, bad lines become error records, columns are reported."""

from __future__ import annotations

import pytest

from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs


def test_smi_file(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text(
        "SMILES Name\n"
        "CCO ethanol\n"
        "\n"
        "# a comment\n"
        "c1ccccc1\tbenzene ring one\n"
        "C1CC broken\n"
        "CCN\n"
        "C(C)(C)(C)(C)C pentavalent\n"
        "CCC ethanol\n"
    )
    inputs = read_molecule_inputs(path)
    rows = [(r.line_no, r.id, r.smiles, r.error is None) for r in inputs.records]
    assert rows == [
        (2, "ethanol", "CCO", True),
        (5, "benzene ring one", "c1ccccc1", True),
        (6, "broken", "C1CC", False),
        (7, "line-7", "CCN", True),
        (8, "pentavalent", "C(C)(C)(C)(C)C", False),
        (9, "line-9", "CCC", False),
    ]
    errors = {r.id: r.error for r in inputs.errors}
    assert "cannot be parsed: unclosed ring" in errors["broken"]
    assert "valence" in errors["pentavalent"]
    repeat = [r for r in inputs.records if r.line_no == 9][0]
    assert "id 'ethanol' repeats line 2" in repeat.error and repeat.given_id == "ethanol" == repeat.key
    assert [r.num_atoms for r in inputs.records] == [3, 6, None, 3, None, None]
    assert "SMILES file" in inputs.description


def test_csv_detects_columns_and_keeps_going(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        'Name,SMILES,note\n'
        'aspirin,CC(=O)Oc1ccccc1C(=O)O,"a note, with a comma"\n'
        'bad,C1CC,x\n'
        'short,CCO\n'
        ',CCN,no name\n'
        'empty,,x\n'
    )
    inputs = read_molecule_inputs(path)
    assert "SMILES column 'SMILES'" in inputs.description and "id column 'Name'" in inputs.description
    rows = [(r.line_no, r.id, r.ok) for r in inputs.records]
    assert rows == [
        (2, "aspirin", True), (3, "bad", False), (4, "line-4", False), (5, "line-5", True), (6, "empty", False)
    ]
    assert "has 2 fields; the header has 3" in inputs.records[2].error
    assert "no SMILES" in inputs.records[4].error


def test_csv_columns_named_explicitly(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("structure\tcode\nCCO\tA1\n")
    with pytest.raises(InputError, match="no SMILES column among"):
        read_molecule_inputs(path)
    inputs = read_molecule_inputs(path, smiles_column="structure", id_column="code")
    assert [(r.id, r.smiles, r.ok) for r in inputs.records] == [("A1", "CCO", True)]
    with pytest.raises(InputError, match="no column 'smiles_x'"):
        read_molecule_inputs(path, smiles_column="smiles_x")


def test_csv_without_id_column(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("smiles\nCCO\n")
    inputs = read_molecule_inputs(path)
    assert "no id column" in inputs.description
    assert inputs.records[0].id == "line-2"


@pytest.mark.parametrize("name, content, message", [
    ("in.sdf", "x", "unknown file kind"),
    ("missing.smi", None, "does not exist"),
    ("empty.csv", "", "empty"),
])
def test_unusable_files_are_clear_errors(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_molecule_inputs(path)


def test_repeated_ids_get_unique_ids_even_when_line_ids_are_taken(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("CCO a\nCCN line-3\nCCC a\nCCCC a\nC line-3\n")
    records = read_molecule_inputs(path).records
    assert [(r.id, r.key, r.ok) for r in records] == [
        ("a", "a", True), ("line-3", "line-3", True), ("line-3.2", "a", False), ("line-4", "a", False),
        ("line-5", "line-3", False),
    ]
    assert len({r.id for r in records}) == len(records)
