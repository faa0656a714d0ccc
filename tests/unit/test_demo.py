"""`inferlab demo` end to end on CPU with small settings: the checkpoint is built once and reused, the
SDF holds one valid conformer per row of the input molecules (read back with RDKit here), the printed
validity and speed figures are the run's own, and the bar names the run's phase before its first row."""

from __future__ import annotations

import json
import re

import pytest
from rdkit import Chem

from inferlab.cli import main
from inferlab.workloads.conformers.chemistry.sdf import read_sdf


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.mark.slow
def test_demo_runs_and_reuses_its_checkpoint(tmp_path, capsys):
    work = tmp_path / "demo"
    args = ["demo", "--work-dir", str(work), "--max-atoms", "5", "--device", "cpu"]
    assert main([*args, "--num-molecules", "3", "--num-conformers", "2"]) == 0
    out, bar = capsys.readouterr()
    assert "(built; random weights, qwen3-chem tokenizer)" in out
    # until its first row the bar says what the run is doing, not only 0/6
    assert "conformers (starting the engine)" in bar and "conformers (generating)" in bar
    assert "valid: 6 of 6 conformers passed the strict decoder" in out
    assert "graph: 6 of 6 decode with RDKit" in out
    tokens, seconds, rate = re.search(r"speed: ([\d,]+) tokens in ([\d.]+) s of generation on cpu = ([\d,]+) tokens/s",
                                      out).groups()
    rows = [json.loads(line) for line in (work / "conformers.jsonl").read_text().splitlines()]
    assert int(tokens.replace(",", "")) == sum(r["output_tokens"] for r in rows)
    assert float(rate.replace(",", "")) == pytest.approx(int(tokens.replace(",", "")) / float(seconds), rel=0.05)

    molecules = dict(line.split()[::-1] for line in (work / "molecules.smi").read_text().splitlines())
    assert len(molecules) == 3
    records = list(read_sdf(work / "conformers.sdf"))
    assert len(records) == 6 and {r["status"] for r in rows} == {"ok"}
    for record in records:
        want = Chem.MolFromSmiles(molecules[record.prop("input_id")])
        assert Chem.MolToSmiles(record.mol, isomericSmiles=False) == Chem.MolToSmiles(want, isomericSmiles=False)
        assert 4 <= record.mol.GetNumAtoms() <= 5

    checkpoint = work / "tiny-qwen3-float32" / "model.safetensors"
    built_at = checkpoint.stat().st_mtime_ns
    assert main([*args, "--num-molecules", "1", "--num-conformers", "1", "--sampling", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "(reused;" in out and "valid: 1 of 1" in out
    assert checkpoint.stat().st_mtime_ns == built_at
    assert len(list(read_sdf(work / "conformers.sdf"))) == 1  # a demo run starts afresh


def test_without_the_qwen3_chem_tokenizer_the_demo_uses_the_built_in_one(tmp_path, capsys, monkeypatch):
    from inferlab.models import shared_assets

    monkeypatch.setattr(shared_assets, "_REPO_ROOT", tmp_path / "nowhere")
    monkeypatch.delenv(shared_assets.ENV_VAR, raising=False)
    work = tmp_path / "demo"
    assert main(["demo", "--work-dir", str(work), "--max-atoms", "5", "--device", "cpu", "--num-molecules", "2",
                 "--num-conformers", "1"]) == 0
    out = capsys.readouterr().out
    assert "(built; random weights, built-in tokenizer)" in out and "valid: 2 of 2" in out
    assert (work / "tiny-float32" / "model.safetensors").exists()

