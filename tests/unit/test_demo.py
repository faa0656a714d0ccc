"""`inferlab demo` end to end on the CPU with small settings: on the reference model, molecules its split held
out, every conformer valid, the printed figures the run's own (the coverage and matching lines equal the
evaluation of the files it wrote, the token count the rows'), the picture a PNG at the printed path, the
bar naming the run's phase before its first row; without the reference model, a random checkpoint built
once and reused, with the reason said."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from inferlab.cli import main
from inferlab.errors import InputError
from inferlab.workloads.conformers import reference_model
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.evaluation.evaluate import EvaluationConfig, evaluate_files
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, read_split

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(exit code, stdout, stderr, work folder) of one small demo on the reference model."""
    import torch

    work = tmp_path_factory.mktemp("demo")
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as one_cpu_thread, for a module's fixture
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["demo", "--work-dir", str(work), "--device", "cpu", "--num-molecules", "2",
                         "--num-conformers", "2", "--max-atoms", "16"])
    finally:
        torch.set_num_threads(threads)
    return code, out.getvalue(), err.getvalue(), work


@pytest.mark.slow
def test_the_demo_generates_held_out_molecules_conformers_with_the_reference_model(demo):
    code, out, bar, work = demo
    assert code == 0, out
    assert f"model: {reference_model.FOLDER} (the trained reference conformer model" in out
    held_out = {row.id for row in read_split(reference_model.SPLIT_FILE) if row.split == HELD_OUT}
    molecules = dict(line.split()[::-1] for line in (work / "molecules.smi").read_text().splitlines())
    assert len(molecules) == 2 and set(molecules) <= held_out
    assert "molecules (2, held out from the reference model's training (split.tsv); 1 specify stereo): " in out
    assert "conformers (starting the engine)" in bar and "conformers (generating)" in bar
    assert "valid: 4 of 4 conformers passed the strict decoder" in out and "graph: 4 of 4 decode with RDKit" in out
    assert re.search(r"stereo: \d of 2 conformers of molecules with specified stereo", out)
    rows = [json.loads(line) for line in (work / "conformers.jsonl").read_text().splitlines()]
    assert {r["status"] for r in rows} == {"ok"} and len(list(read_sdf(work / "conformers.sdf"))) == 4
    tokens = re.search(r"speed: ([\d,]+) tokens in [\d.]+ s of generation on cpu", out).group(1)
    assert int(tokens.replace(",", "")) == sum(r["output_tokens"] for r in rows)
    assert "constraint pressure (the model's probability the constraint took away, per token): mean " in out
    assert re.search(r"time: [\d.]+ s in all", out)


@pytest.mark.slow
def test_the_demos_figures_against_etkdg_are_the_evaluations_of_its_files(demo):
    _, out, _, work = demo
    line = re.search(r"against ETKDG \(1 reference per molecule, seed \d+; 2 generated; means over 2 molecules, "
                     r"coverage at 0.75 / 1.25 A\): (.*)", out).group(1)
    report = evaluate_files(work / "conformers.sdf", work / "references.sdf", EvaluationConfig(workers=1)).summary()
    percent = lambda name, key: f"{100 * report[name][key]['mean']:.0f}%"  # noqa: E731
    assert line == (f"COV-R {percent('coverage_recall', '0.75')} / {percent('coverage_recall', '1.25')}, "
                    f"COV-P {percent('coverage_precision', '0.75')} / {percent('coverage_precision', '1.25')}, "
                    f"AMR-R {report['matching_recall']['mean']:.2f} A, AMR-P {report['matching_precision']['mean']:.2f} A")
    assert len(list(read_sdf(work / "references.sdf"))) == 2  # K = 1 reference per molecule, half the 2 generated


@pytest.mark.slow
def test_the_demo_writes_its_picture_where_it_says(demo):
    from PIL import Image

    _, out, _, work = demo
    path, featured, rmsd = re.search(r"picture: (\S+) \((\S+) in 2D beside a generated conformer on its nearest "
                                     r"ETKDG reference, RMSD ([\d.]+) A\)", out).groups()
    assert path == str(work / "conformer.png")
    data = (work / "conformer.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert Image.open(io.BytesIO(data)).size == (1100, 500)
    # the molecule with specified stereo is the one pictured, at its best pair's RMSD
    report = evaluate_files(work / "conformers.sdf", work / "references.sdf", EvaluationConfig(workers=1),
                            keep_matrices=True)
    smiles = dict(line.split()[::-1] for line in (work / "molecules.smi").read_text().splitlines())[featured]
    assert "@" in smiles
    best = min(v for m in report.molecules if m.smiles == _canonical(smiles) for row in m.rmsd for v in row)
    assert float(rmsd) == pytest.approx(best, abs=0.005)


def _canonical(smiles: str) -> str:
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles

    return canonical_smiles(smiles)


@pytest.mark.slow
def test_without_the_reference_model_the_demo_says_so_and_runs_a_random_one(tmp_path, capsys, monkeypatch):
    """Without the qwen3-chem tokenizer too: the random checkpoint carries the built-in one."""
    from inferlab.models import shared_assets

    def missing():
        raise InputError("the reference conformer model is not in FOLDER (no model.safetensors)")

    monkeypatch.setattr(reference_model, "reference_model_dir", missing)
    monkeypatch.setattr(shared_assets, "_REPO_ROOT", tmp_path / "nowhere")
    monkeypatch.delenv(shared_assets.ENV_VAR, raising=False)
    work = tmp_path / "demo"
    args = ["demo", "--work-dir", str(work), "--device", "cpu", "--num-molecules", "1", "--num-conformers", "1",
            "--min-atoms", "4", "--max-atoms", "6"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "reference model not found: the reference conformer model is not in FOLDER" in out
    assert "(built; random weights, built-in tokenizer): its conformers are valid by construction" in out
    assert "valid: 1 of 1" in out and (work / "conformer.png").read_bytes().startswith(PNG_SIGNATURE)
    checkpoint = work / "tiny-float32" / "model.safetensors"
    built_at = checkpoint.stat().st_mtime_ns
    assert main([*args, "--sampling", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "(reused; random weights" in out and "valid: 1 of 1" in out
    assert checkpoint.stat().st_mtime_ns == built_at
    assert len(list(read_sdf(work / "conformers.sdf"))) == 1  # a demo run starts afresh
