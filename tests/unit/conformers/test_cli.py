"""`inferlab conformers reference` and `evaluate` end to end through the CLI entry point."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import main


def test_reference_then_evaluate(tmp_path, capsys):
    smi = tmp_path / "mols.smi"
    smi.write_text("CCO ethanol\nc1ccccc1CCN phenethylamine\nC1CC broken\nCC(C)O ipa\n"
                   "C1C[N+]2=CC3=CC=CC=C3O[Zn]24OC5=CC=CC=C5C=[N+]14 zinc\n")  # RDKit's embedder raises on it
    ref, gen, summary = tmp_path / "ref.sdf", tmp_path / "gen.sdf", tmp_path / "summary.json"
    assert main(["conformers", "reference", "--input", str(smi), "--num-conformers", "3", "--output", str(ref)]) == 0
    out = capsys.readouterr().out
    assert "wrote 9 conformers of 3 molecules" in out and "broken: SMILES 'C1CC'" in out
    assert "zinc: RDKit could not embed" in out
    assert main(["conformers", "reference", "--input", str(smi), "--num-conformers", "2", "--seed", "5",
                 "--output", str(gen)]) == 0
    capsys.readouterr()
    code = main(["conformers", "evaluate", "--generated", str(gen), "--reference", str(ref), "--workers", "1",
                 "--output", str(summary), "--matrices", "--threshold", "0.5,1.25", "--threshold", "2"])
    assert code == 0
    out = capsys.readouterr().out
    assert "molecules evaluated: 3" in out and "coverage recall" in out and "matching precision (AMR-P)" in out
    assert "thresholds: 0.5, 1.25, 2 A" in out
    data = json.loads(summary.read_text())
    assert data["summary"]["references"] == 9 and data["summary"]["generated"] == 6
    assert set(data["summary"]["coverage_precision"]) == {"0.5", "1.25", "2"}
    assert all(len(m["rmsd"]) == 3 and len(m["rmsd"][0]) == 2 for m in data["molecules"])


def test_a_bad_threshold_is_refused_by_name(tmp_path, capsys):
    sdf = tmp_path / "a.sdf"
    sdf.write_text("")
    with pytest.raises(SystemExit) as exit:
        main(["conformers", "evaluate", "--generated", str(sdf), "--reference", str(sdf), "--threshold", "0.75,x"])
    assert exit.value.code == 2
    assert "--threshold" in capsys.readouterr().err


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    code = main(["conformers", "evaluate", "--generated", str(tmp_path / "nope.sdf"), "--reference",
                 str(tmp_path / "nope.sdf")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
