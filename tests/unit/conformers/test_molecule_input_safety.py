"""Hostile molecule input lines: each becomes one error record and the reading goes on (RDKit never sees
a SMILES too large for it, so a 30,000-atom line cannot crash the process); ids keep no two records alike."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inferlab.workloads.conformers.chemistry.input_bounds import InputBounds
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs


def test_a_huge_smiles_is_an_error_row_not_a_crash(tmp_path):
    """RDKit's canonicalisation overflows its stack near 20,000 atoms (exit 139); the reader refuses the line
    by counting atoms in the text. Run in a child so a crash fails this test, not the session."""
    path = tmp_path / "in.smi"
    path.write_text("CCO ethanol\n" + "C" * 30_000 + " giant\nc1ccccc1 benzene\n")
    code = ("import sys; from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs\n"
            "from inferlab.workloads.conformers.chemistry.smiles import canonicalize_smiles\n"
            "for r in read_molecule_inputs(sys.argv[1]).records:\n"
            "    r.ok and canonicalize_smiles(r.smiles)\n"
            "    print(r.id, r.ok, (r.error or '')[:200])\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["ethanol", "True"], ["giant", "False"], ["benzene", "True"]]
    assert "has 30,000 atoms, over the limit of 1,000" in lines[1] and "--max-atoms" in lines[1]


def test_the_atom_bound_is_configurable(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("CCCCCC hexane\n")
    assert not read_molecule_inputs(path, bounds=InputBounds(max_atoms=5)).records[0].ok
    assert read_molecule_inputs(path).records[0].ok


def test_bad_bytes_and_long_lines_are_error_rows_in_smi_and_csv(tmp_path):
    smi = tmp_path / "in.smi"
    smi.write_bytes(b"CCO a\nC\xff\xfeC b\n" + b"C" * 3000 + b" long\nCCN c\n")
    records = read_molecule_inputs(smi, bounds=InputBounds(max_line_chars=1000)).records
    assert [(r.id, r.ok) for r in records] == [("a", True), ("line-2", False), ("line-3", False), ("c", True)]
    assert "not UTF-8" in records[1].error and "longer than 1,000 characters" in records[2].error
    csv_path = tmp_path / "in.csv"
    csv_path.write_bytes(b"id,smiles\na,CCO\nb,C\xe9C\nc," + b"C" * 200_000 + b"\nd,CCN\n")
    records = read_molecule_inputs(csv_path).records  # the 200,000-character field is over Python's csv limit
    assert [(r.id, r.ok) for r in records] == [("a", True), ("line-3", False), ("line-4", False), ("d", True)]
    assert "not UTF-8" in records[1].error
    assert "not a readable CSV row (field larger than field limit" in records[2].error


def test_whitespace_inside_a_csv_smiles_is_an_error_not_a_cut(tmp_path):
    """RDKit stops reading a SMILES at whitespace: "C\\nC" would have become methane, reported ok."""
    path = tmp_path / "in.csv"
    path.write_text('id,smiles\nm1,"C\nC"\nm2,"CC O"\nm3,CCO\n')
    records = read_molecule_inputs(path).records
    assert [(r.id, r.ok) for r in records] == [("m1", False), ("m2", False), ("m3", True)]
    assert "holds whitespace ('\\n')" in records[0].error and "quoting" in records[0].error


def test_a_missing_id_is_never_an_error_for_a_taken_line_id(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("CCO line-2\nCCN\nCCC\n")  # line 2 has no id, but line 1 took `line-2`
    records = read_molecule_inputs(path).records
    assert [(r.id, r.ok) for r in records] == [("line-2", True), ("line-2.2", True), ("line-3", True)]


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t")])
def test_a_stray_quote_is_one_error_row_and_the_next_lines_are_read(tmp_path, suffix, sep):
    """`"CCN,stray` on line 3 once opened a quoted field that swallowed the next ~13,000 lines until the
    field limit; a record now ends within MAX_RECORD_LINES lines, so the quote costs its own line only."""
    path = tmp_path / f"in{suffix}"
    lines = [f"id{sep}smiles"] + [f"m{i}{sep}CCO" for i in range(300)]
    lines.insert(2, f'"CCN{sep}stray')
    lines.insert(200, f'm-quoted{sep}"C\nC"')  # a quoted line break, closed on the next line: still one record
    path.write_text("\n".join(lines) + "\n")
    records = read_molecule_inputs(path).records
    assert len(records) == 302 and [r.id for r in records if r.ok] == [f"m{i}" for i in range(300)]
    stray, quoted = [r for r in records if not r.ok]
    assert stray.line_no == 3 and "opens a quoted field that no line within 8 closes" in stray.error
    assert quoted.id == "m-quoted" and "holds whitespace" in quoted.error
